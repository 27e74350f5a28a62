"""Planted bugs in 12_debugging: each replaces one solution cell; the pipeline test expects that exercise alone
to fail."""

PLANTED = {
    "12-init-loss": (
        # measured in the mode the model came in: dropout is on in training mode
        "def loss_at_init(model, inputs, targets, num_classes):\n"
        "    with torch.no_grad():\n"
        "        measured = F.cross_entropy(model(inputs), targets)\n"
        "    return measured, math.log(num_classes)\n",
        "train-mode",
    ),
    "12-grad-norms": (
        # .item() per parameter: one host sync per layer
        "def grad_norms_per_layer(model):\n"
        "    return {name: p.grad.norm().item() for name, p in model.named_parameters() if p.grad is not None}\n",
        "not-a-tensor",
    ),
    "12-first-nonfinite": (
        # torch.isnan misses an overflow to inf
        "def first_nonfinite_module(model, inputs):\n"
        "    found = []\n"
        "    def make_hook(name):\n"
        "        def hook(module, args, output):\n"
        "            if not found and torch.isnan(output).any():\n"
        "                found.append(name)\n"
        "        return hook\n"
        "    handles = [m.register_forward_hook(make_hook(n)) for n, m in model.named_modules()]\n"
        "    try:\n"
        "        with torch.no_grad():\n"
        "            model(inputs)\n"
        "    finally:\n"
        "        for handle in handles:\n"
        "            handle.remove()\n"
        "    return found[0] if found else None\n",
        "missed-inf",
    ),
    "12-lr-range": (
        # saved without deep copies: state_dict() holds the live tensors, so nothing is restored
        "def lr_range_test(model, optimizer, loss_fn, batches, start_lr, end_lr, num_steps, diverge=4.0):\n"
        "    saved_model, saved_optimizer = model.state_dict(), optimizer.state_dict()\n"
        "    lrs, losses, best = [], [], math.inf\n"
        "    model.train()\n"
        "    for i in range(num_steps):\n"
        "        lr = start_lr * (end_lr / start_lr) ** (i / (num_steps - 1))\n"
        "        for group in optimizer.param_groups:\n"
        "            group['lr'] = lr\n"
        "        inputs, targets = batches[i % len(batches)]\n"
        "        optimizer.zero_grad(set_to_none=True)\n"
        "        loss = loss_fn(model(inputs), targets)\n"
        "        loss.backward()\n"
        "        optimizer.step()\n"
        "        lrs.append(lr)\n"
        "        losses.append(loss.item())\n"
        "        best = min(best, losses[-1])\n"
        "        if not math.isfinite(losses[-1]) or losses[-1] > diverge * best:\n"
        "            break\n"
        "    model.load_state_dict(saved_model)\n"
        "    optimizer.load_state_dict(saved_optimizer)\n"
        "    return lrs, losses\n",
        "model-not-restored",
    ),
    "12-dead-units": (
        # the hook overwrites its record at each batch: only the last batch decides
        "def dead_units(model, batches):\n"
        "    alive = {}\n"
        "    def make_hook(name):\n"
        "        def hook(module, args, output):\n"
        "            alive[name] = (output > 0).any(dim=0)\n"
        "        return hook\n"
        "    handles = [m.register_forward_hook(make_hook(n)) for n, m in model.named_modules()\n"
        "               if isinstance(m, nn.ReLU)]\n"
        "    try:\n"
        "        with torch.no_grad():\n"
        "            for inputs in batches:\n"
        "                model(inputs)\n"
        "    finally:\n"
        "        for handle in handles:\n"
        "            handle.remove()\n"
        "    return {name: 1 - mask.float().mean() for name, mask in alive.items()}\n",
        "last-batch-only",
    ),
}
