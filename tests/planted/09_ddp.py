"""Planted bugs in 09_ddp: each replaces one solution cell; the pipeline test expects that exercise alone to fail."""

PLANTED = {
    "09-ddp-mean": (
        # the metric is reported from each rank's own shard: no communication
        "def ddp_mean(value: torch.Tensor) -> torch.Tensor:\n"
        "    return value.detach().clone()\n",
        "not-averaged",
    ),
    "09-shard-loader": (
        # every rank shuffles the whole dataset: the ranks train on the same samples
        "def make_ddp_loader(dataset, batch_size, *, rank, world_size, seed):\n"
        "    return DataLoader(dataset, batch_size=batch_size, shuffle=True, "
        "generator=torch.Generator().manual_seed(seed))\n",
        "overlapping-shards",
    ),
    "09-train-ddp": (
        # no set_epoch: every epoch repeats the first epoch's order
        "def train_ddp(make_model, dataset, loss_fn, *, epochs, batch_size, lr, seed):\n"
        "    loader = DataLoader(dataset, batch_size=batch_size, sampler=DistributedSampler(dataset, seed=seed))\n"
        "    model = DDP(make_model())\n"
        "    optimizer = torch.optim.SGD(model.parameters(), lr=lr)\n"
        "    for epoch in range(epochs):\n"
        "        for inputs, targets in loader:\n"
        "            optimizer.zero_grad(set_to_none=True)\n"
        "            loss_fn(model(inputs), targets).backward()\n"
        "            optimizer.step()\n"
        "    return model.module.state_dict()\n",
        "missing-set-epoch",
    ),
    "09-save-rank0": (
        # every rank writes the checkpoint
        "def save_checkpoint_ddp(model, optimizer, epoch, path):\n"
        "    torch.save({'model': model.module.state_dict(), 'optimizer': optimizer.state_dict(), "
        "'epoch': epoch}, path)\n"
        "    dist.barrier()\n",
        "saved-on-every-rank",
    ),
    "09-no-sync": (
        # every micro-batch's backward all-reduces
        "def accumulate_step(model, optimizer, micro_batches, loss_fn):\n"
        "    for inputs, targets in micro_batches:\n"
        "        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()\n"
        "    optimizer.step()\n"
        "    optimizer.zero_grad(set_to_none=True)\n",
        "missing-no-sync",
    ),
}
