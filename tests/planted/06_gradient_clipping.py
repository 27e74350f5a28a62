"""Planted bugs in 06_gradient_clipping: each replaces one solution cell; the pipeline test expects that exercise alone
to fail."""

PLANTED = {
    "06-grad-norm": (
        # the per-parameter norms are added instead of taking the norm of all entries together
        "def total_grad_norm(parameters):\n"
        "    return sum(p.grad.norm() for p in parameters if p.grad is not None)\n",
        "wrong-norm",
    ),
    "06-clip-step": (
        # clip_grad_value_ where clipping by norm was asked: the direction of the update changes
        "def clip_train_step(model, batch, loss_fn, optimizer, max_norm):\n"
        "    inputs, targets = batch\n"
        "    model.train()\n"
        "    optimizer.zero_grad(set_to_none=True)\n"
        "    loss_fn(model(inputs), targets).backward()\n"
        "    norm = get_total_norm([p.grad for p in model.parameters()])\n"
        "    clip_grad_value_(model.parameters(), max_norm / 10)\n"
        "    optimizer.step()\n"
        "    return norm\n",
        "value-not-norm",
    ),
    "06-amp-clip": (
        # clipping before scaler.unscale_: the threshold applies to the scaled gradients
        "def amp_clip_step(model, batch, loss_fn, optimizer, scaler, max_norm, device_type, dtype):\n"
        "    inputs, targets = batch\n"
        "    model.train()\n"
        "    optimizer.zero_grad(set_to_none=True)\n"
        "    with torch.autocast(device_type, dtype=dtype):\n"
        "        loss = loss_fn(model(inputs), targets)\n"
        "    scaler.scale(loss).backward()\n"
        "    norm = clip_grad_norm_(model.parameters(), max_norm)\n"
        "    scaler.unscale_(optimizer)\n"
        "    scaler.step(optimizer)\n"
        "    scaler.update()\n"
        "    return norm\n",
        "clip-before-unscale",
    ),
    "06-accum-clip": (
        # clipping inside the micro-batch loop instead of once after it
        "def accumulate_clip_step(model, micro_batches, loss_fn, optimizer, max_norm):\n"
        "    model.train()\n"
        "    optimizer.zero_grad(set_to_none=True)\n"
        "    for inputs, targets in micro_batches:\n"
        "        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()\n"
        "        norm = clip_grad_norm_(model.parameters(), max_norm)\n"
        "    optimizer.step()\n"
        "    return norm\n",
        "clipped-per-micro-batch",
    ),
}
