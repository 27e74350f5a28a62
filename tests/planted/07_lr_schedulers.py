"""Planted bugs in 07_lr_schedulers: each replaces one solution cell; the pipeline test expects that exercise alone
to fail."""

PLANTED = {
    "07-warmup-cosine": (
        # the ramp starts at 0: the first optimizer step trains with lr 0 and the peak comes a step late
        "def warmup_cosine(step, warmup_steps, total_steps):\n"
        "    if step < warmup_steps:\n"
        "        return step / warmup_steps\n"
        "    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))\n"
        "    return 0.5 * (1.0 + math.cos(math.pi * progress))\n",
        "warmup-starts-at-zero",
    ),
    "07-per-step": (
        # scheduler.step() before optimizer.step(): every update uses the next lr of the schedule
        "def train_per_step(model, loader, loss_fn, optimizer, scheduler, epochs):\n"
        "    device = next(model.parameters()).device\n"
        "    for _ in range(epochs):\n"
        "        model.train()\n"
        "        for inputs, targets in loader:\n"
        "            inputs, targets = inputs.to(device), targets.to(device)\n"
        "            optimizer.zero_grad(set_to_none=True)\n"
        "            loss = loss_fn(model(inputs), targets)\n"
        "            loss.backward()\n"
        "            scheduler.step()\n"
        "            optimizer.step()\n",
        "scheduler-before-optimizer",
    ),
    "07-per-epoch": (
        # an epoch-sized StepLR stepped every batch: it decays len(loader) times too fast
        "def train_per_epoch(model, loader, loss_fn, optimizer, scheduler, epochs):\n"
        "    device = next(model.parameters()).device\n"
        "    for _ in range(epochs):\n"
        "        model.train()\n"
        "        for inputs, targets in loader:\n"
        "            inputs, targets = inputs.to(device), targets.to(device)\n"
        "            optimizer.zero_grad(set_to_none=True)\n"
        "            loss_fn(model(inputs), targets).backward()\n"
        "            optimizer.step()\n"
        "            scheduler.step()\n",
        "stepped-per-batch",
    ),
    "07-plateau": (
        # ReduceLROnPlateau fed the training loss, which keeps falling while the validation loss rises
        "def train_with_plateau(model, train_loader, val_loader, loss_fn, optimizer, scheduler, epochs):\n"
        "    device = next(model.parameters()).device\n"
        "    val_losses = []\n"
        "    for _ in range(epochs):\n"
        "        model.train()\n"
        "        total, batches = 0.0, 0\n"
        "        for inputs, targets in train_loader:\n"
        "            inputs, targets = inputs.to(device), targets.to(device)\n"
        "            optimizer.zero_grad(set_to_none=True)\n"
        "            loss = loss_fn(model(inputs), targets)\n"
        "            loss.backward()\n"
        "            optimizer.step()\n"
        "            total, batches = total + loss.item(), batches + 1\n"
        "        val_loss, _ = evaluate(model, val_loader, loss_fn)\n"
        "        scheduler.step(total / batches)\n"
        "        val_losses.append(val_loss)\n"
        "    return val_losses\n",
        "plateau-train-metric",
    ),
    "07-amp-skip": (
        # the scheduler advances even when the GradScaler skipped the optimizer step
        "def amp_step(model, inputs, targets, loss_fn, optimizer, scaler, scheduler):\n"
        "    loss = loss_fn(model(inputs), targets)\n"
        "    scaler.scale(loss).backward()\n"
        "    scale_before = scaler.get_scale()\n"
        "    scaler.step(optimizer)\n"
        "    scaler.update()\n"
        "    scheduler.step()\n"
        "    optimizer.zero_grad(set_to_none=True)\n"
        "    return scaler.get_scale() >= scale_before\n",
        "scheduler-advanced-on-skip",
    ),
}
