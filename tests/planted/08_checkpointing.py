"""Planted bugs in 08_checkpointing: each replaces one solution cell; the pipeline test expects that exercise alone
to fail."""

PLANTED = {
    "08-portable": (
        # str.replace also removes 'module.' inside real names such as 'head.module.weight'
        "def portable_state_dict(state_dict):\n"
        "    return {k.replace('module.', '').replace('_orig_mod.', ''): v for k, v in state_dict.items()}\n",
        "over-stripped",
    ),
    "08-early-stopping": (
        # the bad-epoch counter is not part of the state: a resumed run waits `patience` epochs again
        "class EarlyStopping:\n"
        "    def __init__(self, patience, mode='min', min_delta=0.0):\n"
        "        self.patience, self.mode, self.min_delta = patience, mode, min_delta\n"
        "        self.best, self.bad_epochs = None, 0\n"
        "\n"
        "    def step(self, metric):\n"
        "        better = self.best is None or (\n"
        "            metric < self.best - self.min_delta if self.mode == 'min' "
        "else metric > self.best + self.min_delta\n"
        "        )\n"
        "        self.best, self.bad_epochs = (metric, 0) if better else (self.best, self.bad_epochs + 1)\n"
        "        return self.bad_epochs >= self.patience\n"
        "\n"
        "    def state_dict(self):\n"
        "        return {'best': self.best}\n"
        "\n"
        "    def load_state_dict(self, state):\n"
        "        self.best = state['best']\n",
        "state-not-restored",
    ),
    "08-atomic-save": (
        # a plain torch.save: a crash half way through destroys the previous checkpoint
        "def atomic_save(obj, path):\n"
        "    torch.save(obj, path)\n",
        "not-atomic",
    ),
    "08-best-last": (
        # best.pt written every epoch, whether the metric improved or not
        "def save_best_and_last(state, directory, metric, best_metric, mode='min'):\n"
        "    directory = Path(directory)\n"
        "    atomic_save(state, directory / 'last.pt')\n"
        "    atomic_save(state, directory / 'best.pt')\n"
        "    if best_metric is None:\n"
        "        return metric\n"
        "    return min(metric, best_metric) if mode == 'min' else max(metric, best_metric)\n",
        "best-overwritten",
    ),
    "08-resume": (
        # the optimizer state is left out: Adam's moments restart at zero and the weights diverge
        "def save_checkpoint(path, *, model, optimizer, scheduler, scaler, generator, epoch, best_metric):\n"
        "    atomic_save({\n"
        "        'model': model.state_dict(),\n"
        "        'scheduler': scheduler.state_dict(),\n"
        "        'scaler': scaler.state_dict(),\n"
        "        'rng': capture_rng_state(),\n"
        "        'data_generator': generator.get_state(),\n"
        "        'epoch': epoch,\n"
        "        'best_metric': best_metric,\n"
        "    }, path)\n"
        "\n"
        "\n"
        "def load_checkpoint(path, *, model, optimizer, scheduler, scaler, generator):\n"
        "    checkpoint = torch.load(path, weights_only=True)\n"
        "    model.load_state_dict(checkpoint['model'])\n"
        "    scheduler.load_state_dict(checkpoint['scheduler'])\n"
        "    scaler.load_state_dict(checkpoint['scaler'])\n"
        "    restore_rng_state(checkpoint['rng'])\n"
        "    generator.set_state(checkpoint['data_generator'])\n"
        "    return {'epoch': checkpoint['epoch'], 'best_metric': checkpoint['best_metric']}\n",
        "optimizer-not-restored",
    ),
}
