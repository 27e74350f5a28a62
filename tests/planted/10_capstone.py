"""Planted bugs in 10_capstone: each replaces one solution cell; the pipeline test expects that exercise alone
to fail."""

PLANTED = {
    "10-precision": (
        # bf16 on every GPU: a T4 or V100 has no native bf16 (it should get fp16 with a GradScaler)
        "def choose_precision(device_type, precisions):\n"
        "    if device_type == 'cpu':\n"
        "        return 'fp32'\n"
        "    if device_type == 'cuda' or precisions['bf16_autocast']:\n"
        "        return 'bf16'\n"
        "    return 'fp32'\n",
        "bf16-unsupported",
    ),
    "10-optimizer": (
        # biases found by name, so BatchNorm's scales are decayed
        "def make_optimizer(model, *, lr, weight_decay, warmup_steps, total_steps):\n"
        "    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]\n"
        "    decay = [p for n, p in named if not n.endswith('bias')]\n"
        "    no_decay = [p for n, p in named if n.endswith('bias')]\n"
        "    optimizer = torch.optim.AdamW([{'params': decay, 'weight_decay': weight_decay},\n"
        "                                   {'params': no_decay, 'weight_decay': 0.0}], lr=lr)\n"
        "\n"
        "    def factor(step):\n"
        "        if step < warmup_steps:\n"
        "            return (step + 1) / warmup_steps\n"
        "        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))\n"
        "        return 0.5 * (1.0 + math.cos(math.pi * progress))\n"
        "\n"
        "    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)\n",
        "decay-on-bias-or-norm",
    ),
    "10-train-loader": (
        # a plain shuffled loader: under DDP every rank reads the whole dataset
        "def train_loader(dataset, batch_size, *, seed):\n"
        "    return DataLoader(dataset, batch_size=batch_size, shuffle=True, drop_last=True,\n"
        "                      generator=torch.Generator().manual_seed(seed))\n",
        "overlapping-shards",
    ),
    "10-train": (
        # resume is never passed to fit: a restarted run trains from scratch
        "def train_capstone(train_set, val_set, out_dir, config, *, resume=False, device=None, on_epoch_end=None,\n"
        "                   progress=False):\n"
        "    device = select_device(device)\n"
        "    seed_everything(config['seed'])\n"
        "    model = nn.Sequential(Standardize(*normalization_stats(train_set.tensors[0])),\n"
        "                          capstone_cnn(len(train_set.classes), config['width'])).to(device)\n"
        "    loader = train_loader(train_set, config['batch_size'], seed=config['seed'])\n"
        "    total_steps = config['epochs'] * len(loader)\n"
        "    optimizer, scheduler = make_optimizer(model, lr=config['lr'], weight_decay=config['weight_decay'],\n"
        "                                          warmup_steps=round(config['warmup_fraction'] * total_steps),\n"
        "                                          total_steps=total_steps)\n"
        "    precision = config['precision']\n"
        "    history = fit(model, loader, distributed_loader(val_set, 256, shuffle=False), "
        "loss_fn=nn.CrossEntropyLoss(),\n"
        "                  optimizer=optimizer, epochs=config['epochs'], precision=precision,\n"
        "                  max_grad_norm=config['max_grad_norm'], scheduler=scheduler, scheduler_interval='step',\n"
        "                  metrics={'accuracy': accuracy},\n"
        "                  early_stopping=EarlyStopping('val_accuracy', mode='max', patience=config['patience']),\n"
        "                  checkpoint_dir=out_dir, on_epoch_end=on_epoch_end, progress=progress)\n"
        "    load_checkpoint(Path(out_dir) / 'best.pt', model=model)\n"
        "    return {'model': model, 'history': history, 'precision': precision, 'checkpoint_dir': Path(out_dir)}\n",
        "resume-ignored",
    ),
    "10-held-out": (
        # a learning rate a thousand times too small: the run never leaves chance level
        "CONFIG = dict(epochs=budget(full=8, grading=6), batch_size=32, lr=1e-5, weight_decay=0.05,\n"
        "              warmup_fraction=0.1, max_grad_norm=1.0, patience=3, width=budget(full=16, grading=8), seed=0,\n"
        "              precision=precision)\n"
        "\n"
        "run = None\n"
        "run_dir = Path(tempfile.mkdtemp(prefix='run-', dir=workdir))\n"
        "run = train_capstone(train_set, val_set, run_dir, CONFIG, progress=not is_grading())\n"
        "plot_history(run['history'], run_dir / 'curves.png')\n",
        "below-threshold",
    ),
    "10-report": (
        # the test metrics are computed but never given to the report
        "def write_capstone_report(run, test_set, out_dir):\n"
        "    out_dir = Path(out_dir)\n"
        "    model, history, precision = run['model'], run['history'], run['precision']\n"
        "    loader = DataLoader(test_set, batch_size=256)\n"
        "    scores = evaluate(model, loader, loss_fn=nn.CrossEntropyLoss(), metrics={'accuracy': accuracy},\n"
        "                      precision=precision)\n"
        "    print('test accuracy', scores['accuracy'])\n"
        "    plot_history(history, out_dir / 'curves.png')\n"
        "    images, labels = next(iter(loader))\n"
        "    op_dtypes = observe_op_dtypes(model, images, precision=precision, targets=labels, "
        "loss_fn=nn.CrossEntropyLoss())\n"
        "    return write_run_report(out_dir / 'report.md', history, "
        "best_checkpoint=Path(run['checkpoint_dir']) / 'best.pt',\n"
        "                            op_dtypes=op_dtypes, "
        "environment=environment_report(next(model.parameters()).device),\n"
        "                            curves=out_dir / 'curves.png')\n",
        "missing-test-metrics",
    ),
}
