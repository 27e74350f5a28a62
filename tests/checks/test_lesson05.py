"""Lesson 05 checks reject planted bugs with the right code and accept different correct solutions."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.checks import check
from harness.checks.lesson05 import real_scale_trace
from harness.checks.testing import assert_check_fails, assert_check_passes


# ---------------------------------------------------------------- 05-choose-precision
def choose_if(device_type: str, bf16_supported: bool) -> tuple[torch.dtype, bool]:
    if device_type not in {"cpu", "cuda", "mps", "xpu"}:
        raise ValueError(f"unknown device type {device_type}")
    if bf16_supported:
        return torch.bfloat16, False
    return torch.float16, True


def choose_table(device_type: str, bf16_supported: bool) -> tuple[torch.dtype, bool]:
    known = ("cpu", "cuda", "mps", "xpu")
    if device_type not in known:
        raise ValueError(f"{device_type!r} is not one of {known}")
    dtype = (torch.float16, torch.bfloat16)[bf16_supported]
    return dtype, dtype == torch.float16


def test_choose_precision_accepts_correct_solutions():
    assert_check_passes("05-choose-precision", choose_if)
    assert_check_passes("05-choose-precision", choose_table)


@pytest.mark.parametrize(
    "bad, code, phrase",
    [
        (lambda d, b: torch.bfloat16 if b else torch.float16, "not-a-pair", "tuple"),
        (lambda d, b: (torch.float16, True) if d in ("cpu", "cuda") else 1 / 0, "bf16-not-preferred", "no loss scaling"),
        (lambda d, b: (torch.bfloat16, False) if d in ("cpu", "cuda") else 1 / 0, "bf16-without-support", "fp16"),
        (lambda d, b: ((torch.bfloat16, False) if b else (torch.float16, False)) if d != "tpu" else 1 / 0,
         "fp16-without-scaler", "underflow"),
        (lambda d, b: ((torch.bfloat16, True) if b else (torch.float16, True)) if d != "tpu" else 1 / 0,
         "needless-scaler", "scaling buys nothing"),
        (lambda d, b: (torch.float32, False), "fp32-chosen", "float32"),
        (lambda d, b: (torch.bfloat16, False) if b else (torch.float16, True), "unknown-device-accepted", "ValueError"),
    ],
)
def test_choose_precision_rejects_bugs(bad, code, phrase):
    assert_check_fails("05-choose-precision", bad, code=code, phrase=phrase)


def test_choose_precision_hidden_tries_more_unknown_devices():
    def accepts_empty(device_type: str, bf16_supported: bool) -> tuple[torch.dtype, bool]:
        if device_type == "tpu":
            raise ValueError("tpu")
        return choose_if("cpu", bf16_supported)

    check("05-choose-precision", accepts_empty)
    assert_check_fails("05-choose-precision", accepts_empty, code="unknown-device-accepted", phrase="ValueError", hidden=True)


# ---------------------------------------------------------------- 05-cast-report
def report_masks(x: torch.Tensor, dtype: torch.dtype) -> dict:
    y = x.to(dtype).float()
    kept = torch.isfinite(y) & (y != 0) & (x != 0)
    rel = ((y - x).abs() / x.abs())[kept]
    return {
        "overflow": int((torch.isfinite(x) & torch.isinf(y)).sum()),
        "underflow": int(((x != 0) & (y == 0)).sum()),
        "max_rel_error": float(rel.max()) if rel.numel() else 0.0,
    }


def report_finfo(x: torch.Tensor, dtype: torch.dtype) -> dict:
    x64 = x.double()
    y = x.to(dtype).double()
    overflow = (y.abs() == float("inf")) & (x64.abs() < float("inf"))
    underflow = (y == 0) & (x64 != 0)
    ok = ~overflow & ~underflow & (x64 != 0)
    rel = torch.where(ok, (y - x64).abs() / x64.abs().clamp_min(1e-300), torch.zeros_like(x64))
    return {"overflow": overflow.sum().item(), "underflow": underflow.sum().item(), "max_rel_error": rel.max().item()}


def test_cast_report_accepts_correct_solutions():
    assert_check_passes("05-cast-report", report_masks)
    assert_check_passes("05-cast-report", report_finfo)


def _rel_in_half(x, dtype):
    out = report_masks(x, dtype)
    y = x.to(dtype)
    kept = torch.isfinite(y) & (y != 0) & (x != 0)
    out["max_rel_error"] = float(((y - x.to(dtype)).abs() / x.to(dtype).abs())[kept].max())
    return out


def _in_place(x, dtype):
    out = report_masks(x, dtype)
    x.abs_()
    return out


@pytest.mark.parametrize(
    "bad, code, phrase",
    [
        (lambda x, d: {**report_masks(x, d), "overflow": int(torch.isinf(x.to(d)).sum()) + 1}, "wrong-overflow", "65504"),
        (lambda x, d: {**report_masks(x, d), "underflow": int((x.to(d) == 0).sum()) + 1}, "wrong-underflow", "exactly 0"),
        (_rel_in_half, "wrong-rel-error", "16 bits"),
        (lambda x, d: {"overflow": 0}, "missing-key", "max_rel_error"),
        (_in_place, "input-modified", "in-place"),
    ],
)
def test_cast_report_rejects_bugs(bad, code, phrase):
    assert_check_fails("05-cast-report", bad, code=code, phrase=phrase)


def test_cast_report_hidden_counts_zeros_correctly():
    def zeros_underflow(x, dtype):
        out = report_masks(x, dtype)
        out["underflow"] = int((x.to(dtype) == 0).sum())  # counts inputs that were already 0
        return out

    check("05-cast-report", zeros_underflow)  # the visible inputs have no zeros
    assert_check_fails("05-cast-report", zeros_underflow, code="wrong-underflow", phrase="were 0", hidden=True)


# ---------------------------------------------------------------- 05-output-dtypes
def dtypes_hooks(model, x, device_type, dtype):
    seen, handles = {}, []
    for name, module in model.named_modules():
        if not list(module.children()):
            def record(mod, inputs, output, name=name):
                seen[name] = (output[0] if isinstance(output, tuple) else output).dtype
            handles.append(module.register_forward_hook(record))
    try:
        with torch.no_grad(), torch.autocast(device_type, dtype=dtype):
            model(x)
    finally:
        for handle in handles:
            handle.remove()
    return seen


def dtypes_global_hook(model, x, device_type, dtype):
    leaves = {module: name for name, module in model.named_modules() if not any(True for _ in module.children())}
    seen = {}

    def record(module, inputs, output):
        if module in leaves:
            while isinstance(output, tuple):
                output = output[0]
            seen[leaves[module]] = output.dtype

    handle = torch.nn.modules.module.register_module_forward_hook(record)
    try:
        with torch.autocast(device_type, dtype=dtype), torch.inference_mode():
            model(x)
    finally:
        handle.remove()
    return seen


def test_output_dtypes_accepts_correct_solutions():
    assert_check_passes("05-output-dtypes", dtypes_hooks)
    assert_check_passes("05-output-dtypes", dtypes_global_hook)


def _plain_outputs(model, x, device_type, dtype):
    seen = {}
    handles = [m.register_forward_hook(lambda mod, i, o, n=n: seen.__setitem__(n, o.dtype))
               for n, m in model.named_modules() if not list(m.children())]
    model(x)
    for h in handles:
        h.remove()
    return seen


def _keep_hooks(model, x, device_type, dtype):
    seen = {}
    for n, m in model.named_modules():
        if not list(m.children()):
            m.register_forward_hook(lambda mod, i, o, n=n: seen.__setitem__(n, o.dtype))
    with torch.autocast(device_type, dtype=dtype):
        model(x)
    return seen


def _all_modules(model, x, device_type, dtype):
    seen = {}
    handles = [m.register_forward_hook(lambda mod, i, o, n=n: seen.__setitem__(n, o.dtype)) for n, m in model.named_modules()]
    with torch.autocast(device_type, dtype=dtype):
        model(x)
    for h in handles:
        h.remove()
    return seen


def _input_dtype(model, x, device_type, dtype):
    seen = {}
    handles = [m.register_forward_hook(lambda mod, i, o, n=n: seen.__setitem__(n, i[0].dtype))
               for n, m in model.named_modules() if not list(m.children())]
    with torch.autocast(device_type, dtype=dtype):
        model(x)
    for h in handles:
        h.remove()
    return seen


@pytest.mark.parametrize(
    "bad, code, phrase",
    [
        (_plain_outputs, "no-autocast", "outside torch.autocast"),
        (_keep_hooks, "hooks-left", "handle.remove()"),
        (_all_modules, "wrong-modules", "leaf module"),
        (_input_dtype, "wrong-dtype", "output.dtype"),
    ],
)
def test_output_dtypes_rejects_bugs(bad, code, phrase):
    assert_check_fails("05-output-dtypes", bad, code=code, phrase=phrase)


# ---------------------------------------------------------------- 05-scale-trace
def trace_loop(overflows, *, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
    scale, tracker, out = init_scale, 0, []
    for overflow in overflows:
        if overflow:
            scale, tracker = scale * backoff_factor, 0
        else:
            tracker += 1
            if tracker == growth_interval:
                scale, tracker = scale * growth_factor, 0
        out.append(scale)
    return out


def trace_streak(overflows, *, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
    out, scale, since = [], init_scale, 0
    for overflow in overflows:
        since = 0 if overflow else since + 1
        scale = scale * backoff_factor if overflow else scale * (growth_factor if since % growth_interval == 0 else 1)
        out.append(scale)
    return out


def test_scale_trace_accepts_correct_solutions():
    assert_check_passes("05-scale-trace", trace_loop)
    assert_check_passes("05-scale-trace", trace_streak)


def test_reference_trace_is_the_real_scaler():
    assert real_scale_trace([False, True, False, False], init_scale=8.0, growth_factor=2.0, backoff_factor=0.5,
                            growth_interval=2) == [8.0, 4.0, 4.0, 8.0]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.booleans(), max_size=30), st.integers(1, 4), st.sampled_from([2.0, 4.0]), st.sampled_from([0.5, 0.25]))
def test_the_scaler_rule_matches_torch_on_any_overflow_sequence(overflows, interval, growth, backoff):
    settings_ = dict(init_scale=1024.0, growth_factor=growth, backoff_factor=backoff, growth_interval=interval)
    assert trace_loop(overflows, **settings_) == real_scale_trace(overflows, **settings_)


def _no_backoff(overflows, **kw):
    return trace_loop([False] * len(overflows), **kw)


def _no_reset(overflows, *, init_scale, growth_factor, backoff_factor, growth_interval):
    scale, tracker, out = init_scale, 0, []
    for overflow in overflows:
        if overflow:
            scale *= backoff_factor
        else:
            tracker += 1
            if tracker == growth_interval:
                scale, tracker = scale * growth_factor, 0
        out.append(scale)
    return out


def _early_growth(overflows, *, init_scale, growth_factor, backoff_factor, growth_interval):
    return trace_loop(overflows, init_scale=init_scale, growth_factor=growth_factor, backoff_factor=backoff_factor,
                      growth_interval=max(1, growth_interval - 1))


@pytest.mark.parametrize(
    "bad, code, phrase",
    [
        (_no_backoff, "no-backoff", "backoff_factor"),
        (_no_reset, "tracker-not-reset", "restart the count"),
        (_early_growth, "wrong-growth", "growth_interval finite steps"),
        (lambda overflows, **kw: [kw["init_scale"]] + trace_loop(overflows, **kw), "wrong-length", "one scale per step"),
    ],
)
def test_scale_trace_rejects_bugs(bad, code, phrase):
    assert_check_fails("05-scale-trace", bad, code=code, phrase=phrase)


# ---------------------------------------------------------------- 05-amp-step
def amp_step(model, batch, loss_fn, optimizer, scaler, device_type, dtype):
    inputs, targets = batch
    model.train()
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(inputs), targets)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


def amp_step_zero_at_end(model, batch, loss_fn, optimizer, scaler, device_type, dtype):
    x, y = batch
    with torch.autocast(device_type=device_type, dtype=dtype, enabled=True):
        out = model(x)
        loss = loss_fn(out, y)
    scaled = scaler.scale(loss)
    scaled.backward()
    scaler.unscale_(optimizer)  # an explicit unscale_ is allowed (clipping would go here)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
    return loss.detach().float()


def test_amp_step_accepts_correct_solutions():
    assert_check_passes("05-amp-step", amp_step)
    assert_check_passes("05-amp-step", amp_step_zero_at_end)


def _missing_update(model, batch, loss_fn, optimizer, scaler, device_type, dtype):
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(batch[0]), batch[1])
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    return loss.detach()


def _backward_inside(model, batch, loss_fn, optimizer, scaler, device_type, dtype):
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(batch[0]), batch[1])
        scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


def _no_autocast(model, batch, loss_fn, optimizer, scaler, device_type, dtype):
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(batch[0]), batch[1])
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


def _direct_step(model, batch, loss_fn, optimizer, scaler, device_type, dtype):
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(batch[0]), batch[1])
    scaler.scale(loss).backward()
    optimizer.step()
    scaler.update()  # raises: no inf checks were recorded; the check reports the direct step first
    return loss.detach()


def _loss_outside(model, batch, loss_fn, optimizer, scaler, device_type, dtype):
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type, dtype=dtype):
        out = model(batch[0])
    loss = loss_fn(out, batch[1])
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


def _no_scale(model, batch, loss_fn, optimizer, scaler, device_type, dtype):
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(batch[0]), batch[1])
    loss.backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


def _no_zero_grad(model, batch, loss_fn, optimizer, scaler, device_type, dtype):
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(batch[0]), batch[1])
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


def _returns_scaled(model, batch, loss_fn, optimizer, scaler, device_type, dtype):
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(batch[0]), batch[1])
    scaled = scaler.scale(loss)
    scaled.backward()
    scaler.step(optimizer)
    scaler.update()
    return scaled.detach()


def _loss_with_graph(model, batch, loss_fn, optimizer, scaler, device_type, dtype):
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(batch[0]), batch[1])
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss


def _skips_nothing(model, batch, loss_fn, optimizer, scaler, device_type, dtype):
    loss = amp_step(model, batch, loss_fn, optimizer, scaler, device_type, dtype)
    if all(torch.isfinite(p).all() for p in model.parameters()) and scaler.get_scale() < 1000:
        scaler.update(1024.0)  # undoes the backoff
    return loss


@pytest.mark.parametrize(
    "bad, code, phrase",
    [
        (_missing_update, "missing-update", "scaler.update()"),
        (_backward_inside, "backward-in-autocast", "indentation"),
        (_no_autocast, "no-autocast", "autocast off"),
        (_direct_step, "step-bypasses-scaler", "optimizer.step() was called directly"),
        (_loss_outside, "loss-outside-autocast", "loss function ran with autocast off"),
        (_no_scale, "missing-scale", "scaler.scale(loss)"),
        (_no_zero_grad, "missing-zero-grad", "zero_grad"),
        (_returns_scaled, "wrong-return", "scaled loss"),
        (_loss_with_graph, "returns-graph", "detach"),
        (_skips_nothing, "scale-not-reduced", "512"),
    ],
)
def test_amp_step_rejects_bugs(bad, code, phrase):
    assert_check_fails("05-amp-step", bad, code=code, phrase=phrase)


def test_amp_step_inf_gradient_must_not_reach_the_optimizer():
    def steps_anyway(model, batch, loss_fn, optimizer, scaler, device_type, dtype):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type, dtype=dtype):
            loss = loss_fn(model(batch[0]), batch[1])
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        with torch.no_grad():
            for p in model.parameters():  # a hand-made update that ignores the scaler's inf check
                p.add_(p.grad, alpha=-0.05)
        scaler.step(optimizer)
        scaler.update()
        return loss.detach()

    assert_check_fails("05-amp-step", steps_anyway, code="inf-step-not-skipped", phrase="parameters")


def test_amp_step_stub_reports_the_exception_not_a_missing_call():
    def stub(model, batch, loss_fn, optimizer, scaler, device_type, dtype):
        raise NotImplementedError()

    assert_check_fails("05-amp-step", stub, code="raised", phrase="NotImplementedError")
