"""06-amp-clip, the probe.

Run the student's AMP step once per case, then once with an inf gradient; record grads, steps, scale.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from harness.checks.lesson05.common import (
    fail_on_trace,
    inject_inf,
    make_batch,
    make_mlp,
    run_amp_step,
)
from harness.checks.lesson06.common import Batch, _recorded, _sgd, clip_threshold
from harness.contract.case import Case
from harness.contract.instruments import RecordingScaler, StepRecorder, collect, snapshot
from harness.contract.registry import register

# The scaler's scale in the checks: large enough that clipping before unscale_ shows (the threshold divided by
# it), small enough that gradients left from the previous call (divided by it at unscale_) still show.
AMP_SCALE = 2.0**4


# The second call of each AMP case: a fresh batch, max_norm four times its gradient norm (no clipping), so the
# optimizer must see exactly that batch's gradient.
_SECOND_CALL = 4.0


def _amp_clip_cases(case: Case) -> list[tuple[int, torch.dtype, float]]:
    """(seed, autocast dtype, max_norm as a fraction of the raw norm) of each case: both dtypes, clipping on
    and off, visible and hidden alike."""
    if case.hidden:
        return [(case.seeded(64), torch.bfloat16, 0.3), (case.seeded(65), torch.float16, 0.1),
                (case.seeded(66), torch.float16, 3.0)]
    return [(case.seeded(63), torch.bfloat16, 0.25), (case.seeded(67), torch.float16, 3.0)]


def amp_clip_parts(case: Case) -> list[tuple[int, torch.dtype, float, str]]:
    """The probe's units, in the order a check stopping at the first difference sees them."""
    return [(*params, part) for params in _amp_clip_cases(case) for part in ("clip", "skip")]


def _amp_clip_setup(seed: int) -> tuple[nn.Module, torch.optim.Optimizer, RecordingScaler]:
    model = make_mlp(seed)
    return model, _sgd(model), RecordingScaler("cpu", init_scale=AMP_SCALE, growth_interval=10_000)


@register("06-amp-clip")
def probe_amp_clip(amp_clip_step: Callable[..., torch.Tensor], *, case: Case) -> dict:
    """Run the student's AMP step once per case, then once with an inf gradient; record grads, steps, scale.

    Fails here on what only the kernel sees (autocast state, scaler calls, a direct optimizer.step).
    """
    def record(part: tuple[int, torch.dtype, float, str]) -> dict:
        seed, dtype, fraction, name = part
        if name == "clip":
            return _probe_amp_clip(amp_clip_step, seed, dtype, fraction)
        return _probe_amp_clip_skip(amp_clip_step, seed, dtype)

    return {"runs": collect(amp_clip_parts(case), record)}


def amp_clip_calls(seed: int, fraction: float) -> list[tuple[Batch, float]]:
    """The two (batch, max_norm as a fraction of the raw norm) calls of a case, on one model, optimizer and scaler."""
    return [(make_batch(seed, scale=5.0), fraction), (make_batch(seed + 1, scale=5.0), _SECOND_CALL)]


def _probe_amp_clip(amp_clip_step: Callable[..., torch.Tensor], seed: int, dtype: torch.dtype, fraction: float) -> dict:
    """Two calls on one model: record each call's start, threshold, return and the gradients each step saw."""
    model, optimizer, scaler = _amp_clip_setup(seed)
    calls = []
    for batch, call_fraction in amp_clip_calls(seed, fraction):
        start, max_norm = snapshot(model), clip_threshold(model, [batch], call_fraction, dtype)
        with StepRecorder(optimizer) as steps:
            trace = run_amp_step(amp_clip_step, model, batch, optimizer, scaler, dtype, extra=(max_norm,))
        fail_on_trace(trace)
        calls.append({"params": start, "max_norm": max_norm, "returned": trace.returned, "steps": _recorded(steps)})
    return {"calls": calls}


def _probe_amp_clip_skip(amp_clip_step: Callable[..., torch.Tensor], seed: int, dtype: torch.dtype) -> dict:
    model, optimizer, scaler = _amp_clip_setup(seed)
    handle = inject_inf(model)
    with StepRecorder(optimizer) as steps:
        trace = run_amp_step(amp_clip_step, model, make_batch(seed), optimizer, scaler, dtype, extra=(1.0,))
    handle.remove()
    if trace.error is not None:
        raise trace.error
    return {"steps_taken": len(steps.records), "params_after_inf": snapshot(model), "scale": float(scaler.get_scale())}
