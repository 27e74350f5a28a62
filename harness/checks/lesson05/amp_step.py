"""05-amp-step, the probe.

Run the student's step instrumented: a plain step, a step with an inf gradient, two steps, a stale start.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from harness.checks.lesson05.common import (
    fail_on_trace,
    inject_inf,
    make_batch,
    make_mlp,
    run_amp_step,
)
from harness.contract.case import Case
from harness.contract.failure import fail
from harness.contract.instruments import RecordingScaler, collect, snapshot
from harness.contract.registry import register


def amp_setup(seed: int, init_scale: float) -> tuple[nn.Module, torch.optim.Optimizer, RecordingScaler]:
    """The model, SGD optimizer and recording GradScaler of one AMP step case."""
    model = make_mlp(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return model, optimizer, RecordingScaler("cpu", init_scale=init_scale, growth_interval=1)


def amp_cases(case: Case) -> tuple[tuple[int, torch.dtype], ...]:
    """(seed, autocast dtype) of each AMP step case."""
    if case.hidden:
        return (case.seeded(7), torch.bfloat16), (case.seeded(8), torch.float16)
    return (case.seeded(3), torch.bfloat16), (case.seeded(4), torch.float16)


def two_batches(seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The two (x, y) batches of the two-step run."""
    return [make_batch(seed), make_batch(seed + 1)]


# A small initial scale for the two-step run: stale gradients left from step 1 are divided by it in step 2
# and must stay visible.
TWO_STEP_SCALE = 2.0


def amp_parts(case: Case) -> list[tuple[int, torch.dtype, str]]:
    """The probe's units, in the order a check stopping at the first difference sees them."""
    return [(seed, dtype, part) for seed, dtype in amp_cases(case) for part in ("skip", "two_steps")]


def _probe_skip(step_fn: Callable[..., Any], seed: int, dtype: torch.dtype) -> dict:
    """A plain step (its autocast scopes and scaler calls checked here), then one with an injected inf gradient.

    Records the optimizer steps taken, the parameters and the scale after the inf step.
    """
    model, optimizer, scaler = amp_setup(seed, init_scale=256.0)
    model.eval()  # the step must switch it to training mode itself
    trace = run_amp_step(step_fn, model, make_batch(seed), optimizer, scaler, dtype)
    fail_on_trace(trace)
    if not all(trace.forward_training):
        fail("eval-mode", observed="the model ran its forward in eval mode (the check hands the step a model in "
             "eval mode)", expected="model.train() before the forward: dropout and batch norm behave differently "
             "in training", cause="amp_train_step does not put the model in training mode",
             where="the first lines of amp_train_step")
    model, optimizer, scaler = amp_setup(seed, init_scale=1024.0)
    handle = inject_inf(model)
    trace = run_amp_step(step_fn, model, make_batch(seed), optimizer, scaler, dtype)
    handle.remove()
    fail_on_trace(trace)
    return {"steps_taken": trace.steps_taken, "params_after_inf": snapshot(model), "scale": float(scaler.get_scale())}


def _probe_two_steps(step_fn: Callable[..., Any], seed: int, dtype: torch.dtype) -> dict:
    """Two steps from the seeded start: what each returned, and the parameters after both."""
    model, optimizer, scaler = amp_setup(seed, init_scale=TWO_STEP_SCALE)
    traces = [run_amp_step(step_fn, model, batch, optimizer, scaler, dtype) for batch in two_batches(seed)]
    for trace in traces:
        if trace.error is not None:
            raise trace.error
    return {"returned": [trace.returned for trace in traces], "params": snapshot(model)}


def _probe_stale(step_fn: Callable[..., Any], seed: int, dtype: torch.dtype) -> list[torch.Tensor]:
    """The parameters after one step that starts with a stale gradient of 1e3 on every parameter."""
    model, optimizer, scaler = amp_setup(seed, init_scale=1.0)
    for p in model.parameters():
        p.grad = torch.full_like(p, 1e3)  # a stale gradient: 50 per parameter at lr 0.05 if it is not cleared
    run_amp_step(step_fn, model, make_batch(seed), optimizer, scaler, dtype)  # an exception here changes nothing
    return snapshot(model)


@register("05-amp-step")
def probe_amp_step(amp_train_step: Callable[..., Any], *, case: Case) -> dict:
    """Run the student's step instrumented: a plain step, a step with an inf gradient, two steps, a stale start.

    Fails here on what only the kernel sees (autocast state, scaler calls, a direct optimizer.step);
    records the rest (steps taken, scale, parameters, returned losses) for the judge.
    """
    def record(part: tuple[int, torch.dtype, str]) -> dict:
        seed, dtype, name = part
        if name == "skip":
            return _probe_skip(amp_train_step, seed, dtype)
        return {**_probe_two_steps(amp_train_step, seed, dtype), "stale": _probe_stale(amp_train_step, seed, dtype)}

    return {"runs": collect(amp_parts(case), record)}
