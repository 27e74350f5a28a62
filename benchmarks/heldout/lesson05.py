"""Lesson 05 held-out entries (written from the exercise text only)."""

from entry import Entry

PRELUDE = '''
import math
import torch
from torch import nn
from harness.checks import check, hint
from harness.env import select_device, supported_precisions
device = select_device()
'''

AMP_HEAD = '''
def amp_train_step(model, batch, loss_fn, optimizer, scaler, device_type, dtype):
    inputs, targets = batch
    model.train()
    optimizer.zero_grad(set_to_none=True)
'''

ENTRIES = [
    Entry("05-cast-report", "mistake", "relative error without abs()",
          "signed relative error: max of (y - x) / x misses errors where the cast rounded down or x < 0",
          '''
def cast_report(x, dtype):
    y = x.to(dtype).float()
    kept = torch.isfinite(y) & (y != 0) & (x != 0)
    relative = (y[kept] - x[kept]) / x[kept]
    return {"overflow": int((torch.isfinite(x) & torch.isinf(y)).sum()),
            "underflow": int(((x != 0) & (y == 0)).sum()),
            "max_rel_error": float(relative.max()) if relative.numel() else 0.0}
''', ("cast_report",)),
    Entry("05-cast-report", "mistake", "counted every zero after the cast as underflow",
          "underflow counts values that were already exactly zero in x",
          '''
def cast_report(x, dtype):
    y = x.to(dtype).float()
    kept = torch.isfinite(y) & (y != 0) & (x != 0)
    relative = (y[kept] - x[kept]).abs() / x[kept].abs()
    return {"overflow": int((torch.isfinite(x) & torch.isinf(y)).sum()),
            "underflow": int((y == 0).sum()),
            "max_rel_error": float(relative.max()) if relative.numel() else 0.0}
''', ("cast_report",)),
    Entry("05-cast-report", "mistake", "counted every inf after the cast as overflow",
          "overflow counts values of x that were already infinite",
          '''
def cast_report(x, dtype):
    y = x.to(dtype).float()
    kept = torch.isfinite(y) & (y != 0) & (x != 0)
    relative = (y[kept] - x[kept]).abs() / x[kept].abs()
    return {"overflow": int(torch.isinf(y).sum()),
            "underflow": int(((x != 0) & (y == 0)).sum()),
            "max_rel_error": float(relative.max()) if relative.numel() else 0.0}
''', ("cast_report",)),
    Entry("05-cast-report", "mistake", "returned the tensors sum() gives",
          "the counts and the error are 0-dim tensors, not int / float",
          '''
def cast_report(x, dtype):
    y = x.to(dtype).float()
    kept = torch.isfinite(y) & (y != 0) & (x != 0)
    relative = (y[kept] - x[kept]).abs() / x[kept].abs()
    return {"overflow": (torch.isfinite(x) & torch.isinf(y)).sum(),
            "underflow": ((x != 0) & (y == 0)).sum(),
            "max_rel_error": relative.max() if relative.numel() else 0.0}
''', ("cast_report",)),
    Entry("05-cast-report", "mistake", "relative error computed in the low precision",
          "the difference and division are done in dtype (y not cast back to float32): the error itself is rounded",
          '''
def cast_report(x, dtype):
    y = x.to(dtype)
    kept = torch.isfinite(y) & (y != 0) & (x != 0)
    relative = (y[kept] - x[kept].to(dtype)).abs() / x[kept].to(dtype).abs()
    return {"overflow": int((torch.isfinite(x) & torch.isinf(y)).sum()),
            "underflow": int(((x != 0) & (y == 0)).sum()),
            "max_rel_error": float(relative.max()) if relative.numel() else 0.0}
''', ("cast_report",)),
    Entry("05-choose-precision", "mistake", "kept the scaler on for bf16 too",
          "use_scaler is True for bf16, which needs no GradScaler",
          '''
def choose_precision(device_type, bf16_supported):
    if device_type not in ("cpu", "cuda", "mps", "xpu"):
        raise ValueError(f"unknown device type {device_type!r}")
    return (torch.bfloat16 if bf16_supported else torch.float16), True
''', ("choose_precision",)),
    Entry("05-choose-precision", "mistake", "fell back to fp16 for unknown devices",
          "an unknown device type returns fp16 instead of raising ValueError",
          '''
def choose_precision(device_type, bf16_supported):
    if bf16_supported:
        return torch.bfloat16, False
    return torch.float16, True
''', ("choose_precision",)),
    Entry("05-choose-precision", "mistake", "listed only cpu and cuda as known devices",
          "mps and xpu raise ValueError though they are valid device types",
          '''
def choose_precision(device_type, bf16_supported):
    if device_type not in ("cpu", "cuda"):
        raise ValueError(f"unknown device type {device_type!r}")
    return (torch.bfloat16, False) if bf16_supported else (torch.float16, True)
''', ("choose_precision",)),
    Entry("05-output-dtypes", "mistake", "never removed the hooks",
          "forward hooks stay registered after returning",
          '''
def output_dtypes(model, x, device_type, dtype):
    seen = {}
    for name, module in model.named_modules():
        if not any(module.children()):
            module.register_forward_hook(lambda m, a, out, name=name: seen.__setitem__(
                name, (out[0] if isinstance(out, tuple) else out).dtype))
    with torch.no_grad(), torch.autocast(device_type, dtype=dtype):
        model(x)
    return seen
''', ("output_dtypes",)),
    Entry("05-output-dtypes", "mistake", "hooked every module, containers too",
          "non-leaf modules (the root '' and containers) are included",
          '''
def output_dtypes(model, x, device_type, dtype):
    seen = {}
    handles = [module.register_forward_hook(lambda m, a, out, name=name: seen.__setitem__(
        name, (out[0] if isinstance(out, tuple) else out).dtype)) for name, module in model.named_modules()]
    try:
        with torch.no_grad(), torch.autocast(device_type, dtype=dtype):
            model(x)
    finally:
        for h in handles:
            h.remove()
    return seen
''', ("output_dtypes",)),
    Entry("05-output-dtypes", "mistake", "hook closure over the loop variable",
          "late binding: every hook's lambda reads the loop's last `name`, so all dtypes land under one key",
          '''
def output_dtypes(model, x, device_type, dtype):
    seen, handles = {}, []
    for name, module in model.named_modules():
        if not any(module.children()):
            handles.append(module.register_forward_hook(
                lambda m, a, out: seen.__setitem__(name, (out[0] if isinstance(out, tuple) else out).dtype)))
    try:
        with torch.no_grad(), torch.autocast(device_type, dtype=dtype):
            model(x)
    finally:
        for h in handles:
            h.remove()
    return seen
''', ("output_dtypes",)),
    Entry("05-scale-trace", "mistake", "grew the scale one clean step late",
          "off-by-one: grows when the clean count exceeds growth_interval instead of reaching it",
          '''
def scale_trace(overflows, *, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
    scale, clean, trace = init_scale, 0, []
    for overflow in overflows:
        if overflow:
            scale, clean = scale * backoff_factor, 0
        else:
            clean += 1
            if clean > growth_interval:
                scale, clean = scale * growth_factor, 0
        trace.append(scale)
    return trace
''', ("scale_trace",)),
    Entry("05-scale-trace", "mistake", "did not restart the clean count on overflow",
          "the clean-step counter is not reset after an overflow",
          '''
def scale_trace(overflows, *, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
    scale, clean, trace = init_scale, 0, []
    for overflow in overflows:
        if overflow:
            scale = scale * backoff_factor
        else:
            clean += 1
            if clean == growth_interval:
                scale, clean = scale * growth_factor, 0
        trace.append(scale)
    return trace
''', ("scale_trace",)),
    Entry("05-scale-trace", "mistake", "counted total clean steps with modulo",
          "uses the step index modulo growth_interval (total steps), not consecutive clean steps",
          '''
def scale_trace(overflows, *, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
    scale, trace = init_scale, []
    for i, overflow in enumerate(overflows, 1):
        if overflow:
            scale *= backoff_factor
        elif i % growth_interval == 0:
            scale *= growth_factor
        trace.append(scale)
    return trace
''', ("scale_trace",)),
    Entry("05-amp-step", "mistake", "backward inside the autocast block",
          "backward() runs under autocast",
          AMP_HEAD + '''
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(inputs), targets)
        scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()
''', ("amp_train_step",)),
    Entry("05-amp-step", "mistake", "called optimizer.step() directly",
          "bypasses scaler.step: steps with scaled gradients and does not skip an overflowing step",
          AMP_HEAD + '''
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(inputs), targets)
    scaler.scale(loss).backward()
    optimizer.step()
    scaler.update()
    return loss.detach()
''', ("amp_train_step",)),
    Entry("05-amp-step", "mistake", "forgot scaler.update()",
          "the scale is never updated: not lowered after an overflow",
          AMP_HEAD + '''
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(inputs), targets)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    return loss.detach()
''', ("amp_train_step",)),
    Entry("05-amp-step", "mistake", "only the forward under autocast, loss outside",
          "the loss is computed outside autocast on low-precision outputs: no float32 upcast for the loss",
          AMP_HEAD + '''
    with torch.autocast(device_type, dtype=dtype):
        outputs = model(inputs)
    loss = loss_fn(outputs, targets)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()
''', ("amp_train_step",)),
    Entry("05-scale-trace", "correct", "exponent bookkeeping with a countdown", "",
          '''
def scale_trace(overflows, *, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
    out, scale, left = [], float(init_scale), growth_interval
    for bad in overflows:
        if bad:
            scale, left = scale * backoff_factor, growth_interval
        else:
            left -= 1
            if not left:
                scale, left = scale * growth_factor, growth_interval
        out.append(scale)
    return out
''', ("scale_trace",)),
    Entry("05-choose-precision", "correct", "dict lookup with KeyError turned into ValueError", "",
          '''
_KNOWN = frozenset({"cpu", "cuda", "mps", "xpu"})
choose_precision = lambda device_type, bf16_supported: (
    (torch.bfloat16, False) if bf16_supported else (torch.float16, True)
) if device_type in _KNOWN else (_ for _ in ()).throw(ValueError(f"device type {device_type} unknown"))
''', ("choose_precision",)),
    Entry("05-cast-report", "correct", "torch.where and nan-aware max", "",
          '''
def cast_report(x, dtype):
    back = x.clone().to(dtype).to(torch.float32)
    ok = back.isfinite() & back.ne(0) & x.ne(0)
    err = torch.where(ok, (back - x).abs() / x.abs(), torch.zeros_like(x))
    return dict(overflow=int((x.isfinite() & back.isinf()).sum().item()),
                underflow=int((x.ne(0) & back.eq(0)).sum().item()),
                max_rel_error=float(err.max().item()) if err.numel() else 0.0)
''', ("cast_report",)),
]
