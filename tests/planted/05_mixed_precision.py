"""Planted bugs in 05_mixed_precision: each replaces one solution cell; the pipeline test expects that exercise alone
to fail."""

PLANTED = {
    "05-cast-report": (
        # the relative error is computed in 16 bits, where the difference is rounded away
        "def cast_report(x, dtype):\n"
        "    y = x.to(dtype)\n"
        "    kept = torch.isfinite(y) & (y != 0) & (x != 0)\n"
        "    rel = ((y - x.to(dtype)).abs() / x.to(dtype).abs())[kept]\n"
        "    return {'overflow': int((torch.isfinite(x) & torch.isinf(y)).sum()),\n"
        "            'underflow': int(((x != 0) & (y == 0)).sum()),\n"
        "            'max_rel_error': float(rel.max()) if rel.numel() else 0.0}\n",
        "wrong-rel-error",
    ),
    "05-choose-precision": (
        # fp16 chosen without a GradScaler
        "def choose_precision(device_type, bf16_supported):\n"
        "    if device_type not in ('cpu', 'cuda', 'mps', 'xpu'):\n"
        "        raise ValueError(device_type)\n"
        "    return (torch.bfloat16, False) if bf16_supported else (torch.float16, False)\n",
        "fp16-without-scaler",
    ),
    "05-output-dtypes": (
        # the hooks are never removed
        "def output_dtypes(model, x, device_type, dtype):\n"
        "    seen = {}\n"
        "    for name, module in model.named_modules():\n"
        "        if not any(module.children()):\n"
        "            module.register_forward_hook(lambda m, i, o, name=name: seen.__setitem__(name, o.dtype))\n"
        "    with torch.no_grad(), torch.autocast(device_type, dtype=dtype):\n"
        "        model(x)\n"
        "    return seen\n",
        "hooks-left",
    ),
    "05-scale-trace": (
        # the count of clean steps is not restarted by an overflow
        "def scale_trace(overflows, *, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, "
        "growth_interval=2000):\n"
        "    scale, clean, trace = init_scale, 0, []\n"
        "    for overflow in overflows:\n"
        "        if overflow:\n"
        "            scale *= backoff_factor\n"
        "        else:\n"
        "            clean += 1\n"
        "            if clean == growth_interval:\n"
        "                scale, clean = scale * growth_factor, 0\n"
        "        trace.append(scale)\n"
        "    return trace\n",
        "tracker-not-reset",
    ),
    "05-amp-step": (
        # scaler.update() is missing: the scale never adapts
        "def amp_train_step(model, batch, loss_fn, optimizer, scaler, device_type, dtype):\n"
        "    inputs, targets = batch\n"
        "    model.train()\n"
        "    optimizer.zero_grad(set_to_none=True)\n"
        "    with torch.autocast(device_type, dtype=dtype):\n"
        "        loss = loss_fn(model(inputs), targets)\n"
        "    scaler.scale(loss).backward()\n"
        "    scaler.step(optimizer)\n"
        "    return loss.detach()\n",
        "missing-update",
    ),
}
