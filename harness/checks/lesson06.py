"""Checks of lesson 06, gradient clipping: the total norm, clipping a step, under AMP, with accumulation.

Each check reads the gradients the optimizer actually sees, through a step pre-hook
(`harness.checks.probes.StepRecorder`), and compares them with the gradients a reference computes on a
copy of the same model: norm, direction (norm clipping keeps it, value clipping does not) and scale.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import nn

from harness.checks.core import fail, register
from harness.checks.lesson05 import (
    RecordingScaler,
    inject_inf,
    make_batch,
    make_mlp,
    run_amp_step,
    scaler_failures,
    scope_failures,
)
from harness.checks.probes import StepRecorder

Batch = tuple[torch.Tensor, torch.Tensor]


def _flat(grads: Sequence[torch.Tensor | None]) -> torch.Tensor:
    return torch.cat([g.reshape(-1).float() for g in grads if g is not None])


def _close(a: torch.Tensor, b: torch.Tensor, rtol: float = 2e-3) -> bool:
    return float((a - b).norm()) <= rtol * float(b.norm()) + 1e-7


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a, b, dim=0))


def reference_grads(model: nn.Module, batches: Sequence[Batch], autocast_dtype: torch.dtype | None = None) -> torch.Tensor:
    """The flat gradient of the mean MSE loss over `batches` (averaged), computed on a copy of `model`."""
    twin = copy.deepcopy(model)
    twin.zero_grad(set_to_none=True)
    for inputs, targets in batches:
        with torch.autocast("cpu", dtype=autocast_dtype or torch.bfloat16, enabled=autocast_dtype is not None):
            loss = nn.functional.mse_loss(twin(inputs), targets)
        (loss / len(batches)).backward()
    return _flat([p.grad for p in twin.parameters()])


def _only_step(steps: StepRecorder, what: str, count_code: str = "wrong-step-count") -> torch.Tensor:
    if len(steps.records) != 1:
        fail(
            count_code,
            observed=f"optimizer.step() ran {len(steps.records)} time(s) in one call of {what}",
            expected="exactly one optimizer step per call",
            cause="the step is missing, or it runs inside a loop",
            where=f"the optimizer.step() line of {what}",
        )
    return _flat(steps.records[0].grads)


def _returned_norm(got: Any, raw_norm: float, clipped_to: float | None, what: str, scale: float = 1.0) -> None:
    if not isinstance(got, torch.Tensor):
        fail(
            "not-a-tensor",
            observed=f"{what} returned {type(got).__name__}",
            expected="the total norm as a tensor (what clip_grad_norm_ returns), so no host sync is forced",
            cause="the norm was turned into a Python number (.item() or float()), or nothing is returned",
            where=f"the return statement of {what}",
        )
    value = float(got.detach())
    if abs(value - raw_norm) <= 2e-3 * raw_norm:
        return
    if clipped_to is not None and abs(value - clipped_to) <= 2e-3 * clipped_to:
        cause = "the norm was measured after clipping; return the value clip_grad_norm_ returns (the norm before)"
    elif scale != 1.0 and abs(value - raw_norm * scale) <= 2e-3 * raw_norm * scale:
        cause = f"the norm of the still-scaled gradients (times the scale {scale:g}) was returned: unscale_ first"
    else:
        cause = "a different quantity was returned"
    fail(
        "wrong-return",
        observed=f"{what} returned {value:.5g}",
        expected=f"the total gradient norm before clipping, {raw_norm:.5g}",
        cause=cause,
        where=f"the return statement of {what}",
    )


# --------------------------------------------------------------------------------------------------
# 06-grad-norm
# --------------------------------------------------------------------------------------------------
def _norm_cases(hidden: bool) -> list[tuple[str, list[nn.Parameter], bool]]:
    generator = torch.Generator().manual_seed(61 if hidden else 60)
    shapes = [(4, 3), (3,), (2, 5), (7,)] if hidden else [(4, 3), (3,)]
    params = [nn.Parameter(torch.randn(s, generator=generator)) for s in shapes]
    for i, p in enumerate(params):
        p.grad = torch.randn(p.shape, generator=generator) * (10.0**i)
    cases = [("a list of parameters", params, False)]
    if hidden:
        holey = [nn.Parameter(torch.zeros(3)), *params, nn.Parameter(torch.zeros(2, 2))]
        cases += [("parameters some of which have no .grad", holey, False),
                  ("a generator (it can be iterated only once)", params, True)]
    return cases


@register(
    "06-grad-norm",
    hints=(
        "The total norm treats all gradients as one long vector: it is the square root of the sum of every "
        "gradient entry squared, not a sum of per-parameter norms. Skip parameters whose .grad is None.",
        "grads = [p.grad for p in parameters if p.grad is not None]  (a list: a generator can be read once); "
        "return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))",
    ),
)
def check_grad_norm(total_grad_norm: Callable[[Iterable[nn.Parameter]], torch.Tensor], *, hidden: bool) -> str:
    for description, params, as_generator in _norm_cases(hidden):
        before = [None if p.grad is None else p.grad.clone() for p in params]
        got = total_grad_norm(p for p in params) if as_generator else total_grad_norm(list(params))
        want = float(_flat([p.grad for p in params]).norm())
        if any(b is not None and not torch.equal(b, p.grad) for b, p in zip(before, params)):
            fail("grads-modified", observed="the gradients changed during the call", expected="gradients left as they were",
                 cause="an in-place operation on p.grad (mul_, pow_, clamp_)", where="the body of total_grad_norm")
        if not isinstance(got, torch.Tensor):
            fail(
                "not-a-tensor",
                observed=f"returned {type(got).__name__}",
                expected="a 0-dim tensor (torch.nn.utils.clip_grad_norm_ returns one too): no host sync",
                cause=".item() or float() at the end, which waits for the device every step",
                where="the return statement of total_grad_norm",
            )
        value = float(got)
        if abs(value - want) > 1e-4 * want:
            per_param = sum(float(p.grad.norm()) for p in params if p.grad is not None)
            cause = (
                "the per-parameter norms were added; the total norm is the norm of all entries together"
                if abs(value - per_param) < 1e-4 * per_param
                else "the generator was consumed by a first pass, so a second pass saw no parameters"
                if as_generator and value == 0.0
                else "a different formula (mean instead of sum of squares, max, or a missing square root)"
            )
            fail(
                "generator-consumed" if as_generator and value == 0.0 else "wrong-norm",
                observed=f"total norm {value:.6g} for {description}",
                expected=f"{want:.6g}",
                cause=cause,
                where="the computation in total_grad_norm",
            )
    return "the total L2 norm over all gradients, parameters without .grad skipped" + (
        ", generators read once" if hidden else ""
    )


# --------------------------------------------------------------------------------------------------
# 06-clip-step
# --------------------------------------------------------------------------------------------------
def _check_clipped(seen: torch.Tensor, raw: torch.Tensor, max_norm: float, what: str) -> None:
    """`seen` must be `raw` rescaled to norm max_norm when raw is longer, and `raw` itself otherwise."""
    raw_norm, seen_norm = float(raw.norm()), float(seen.norm())
    if raw_norm <= max_norm:
        if not _close(seen, raw):
            fail(
                "clipped-below-threshold",
                observed=f"gradient norm {raw_norm:.4g} is below max_norm={max_norm:g}, yet the optimizer saw norm {seen_norm:.4g}",
                expected="the gradients unchanged: clipping only shrinks gradients longer than max_norm",
                cause="the gradients are always rescaled to max_norm, or stale gradients were added",
                where=f"the clipping line of {what}",
            )
        return
    if abs(seen_norm - raw_norm) <= 1e-3 * raw_norm:
        fail(
            "not-clipped",
            observed=f"the optimizer saw gradient norm {seen_norm:.4g} with max_norm={max_norm:g}",
            expected=f"norm {max_norm:g}: the gradients rescaled by max_norm / {raw_norm:.4g}",
            cause="clipping is missing, or it runs after optimizer.step()",
            where=f"between backward() and optimizer.step() in {what}",
        )
    if _cosine(seen, raw) < 0.9999:
        fail(
            "value-not-norm",
            observed=f"the clipped gradient points in another direction (cosine {_cosine(seen, raw):.4f} with the raw one)",
            expected="the same direction, shorter: clip_grad_norm_ multiplies every gradient by one factor",
            cause="clip_grad_value_ clamps each entry separately, which changes the direction of the update",
            where=f"use torch.nn.utils.clip_grad_norm_ in {what}",
        )
    if abs(seen_norm - max_norm) > 2e-3 * max_norm:
        fail(
            "wrong-threshold",
            observed=f"the optimizer saw gradient norm {seen_norm:.4g}",
            expected=f"max_norm = {max_norm:g}",
            cause="clipped with another threshold than max_norm, or clipped before the gradients were complete",
            where=f"the max_norm argument of the clipping call in {what}",
        )


def _stale_added(seen: torch.Tensor, raw: torch.Tensor, previous: torch.Tensor | None) -> bool:
    return previous is not None and _close(seen, raw + previous)


def _fail_stale(what: str) -> None:
    fail(
        "missing-zero-grad",
        observed="in the second call the optimizer saw this batch's gradients plus the previous step's",
        expected="only this batch's gradients",
        cause="backward() adds into .grad; without optimizer.zero_grad(set_to_none=True) old gradients stay",
        where=f"the start of {what}",
    )


def _clip_plan(hidden: bool) -> tuple[int, list[tuple[int, float]]]:
    """(seed, [(batch seed, max_norm as a fraction of the raw norm)]): clipping on, then off."""
    if hidden:
        return 62, [(1, 4.0), (2, 0.3), (3, 0.05), (4, 10.0)]
    return 61, [(1, 0.25), (2, 4.0)]


@register(
    "06-clip-step",
    hints=(
        "Clip between backward() and optimizer.step(): the gradients must be complete, and the optimizer must see "
        "the clipped ones. Clip by the total norm (one factor for all gradients), and return the norm it reports.",
        "optimizer.zero_grad(set_to_none=True); loss = loss_fn(model(x), y); loss.backward(); "
        "norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm); optimizer.step(); return norm",
    ),
)
def check_clip_step(clip_train_step: Callable[..., torch.Tensor], *, hidden: bool) -> str:
    seed, plan = _clip_plan(hidden)
    model = make_mlp(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    previous = None
    for batch_seed, fraction in plan:
        batch = make_batch(seed + batch_seed, scale=5.0)
        raw = reference_grads(model, [batch])
        max_norm = fraction * float(raw.norm())
        with StepRecorder(optimizer) as steps:
            got = clip_train_step(model, batch, nn.functional.mse_loss, optimizer, max_norm)
        seen = _only_step(steps, "clip_train_step")
        if _stale_added(seen, raw, previous) and not _close(seen, raw):
            _fail_stale("clip_train_step")
        _check_clipped(seen, raw, max_norm, "clip_train_step")
        _returned_norm(got, float(raw.norm()), max_norm, "clip_train_step")
        previous = seen
    return f"{len(plan)} steps: gradients clipped by total norm only when longer than max_norm, pre-clip norm returned"


# --------------------------------------------------------------------------------------------------
# 06-amp-clip
# --------------------------------------------------------------------------------------------------
_AMP_SCALE = 2.0**12


@register(
    "06-amp-clip",
    hints=(
        "The gradients after scaler.scale(loss).backward() are multiplied by the scale (thousands). Bring them back "
        "to their true size before measuring or clipping them, then let the scaler step.",
        "with autocast: loss = ...; scaler.scale(loss).backward(); scaler.unscale_(optimizer); norm = "
        "clip_grad_norm_(model.parameters(), max_norm); scaler.step(optimizer); scaler.update(); return norm",
    ),
)
def check_amp_clip(amp_clip_step: Callable[..., torch.Tensor], *, hidden: bool) -> str:
    cases = [(64, torch.bfloat16, 0.3), (65, torch.float16, 0.1), (66, torch.float16, 3.0)] if hidden else [(63, torch.bfloat16, 0.25)]
    for seed, dtype, fraction in cases:
        _amp_clip_case(amp_clip_step, seed, dtype, fraction)
        _amp_clip_skip(amp_clip_step, seed, dtype)
    return "unscaled before clipping: the optimizer saw the true gradients clipped to max_norm; overflow steps skipped"


def _amp_clip_case(amp_clip_step: Callable[..., torch.Tensor], seed: int, dtype: torch.dtype, fraction: float) -> None:
    model = make_mlp(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = RecordingScaler("cpu", init_scale=_AMP_SCALE, growth_interval=10_000)
    batch = make_batch(seed, scale=5.0)
    raw = reference_grads(model, [batch], autocast_dtype=dtype)
    max_norm = fraction * float(raw.norm())
    with StepRecorder(optimizer) as steps:
        trace = run_amp_step(amp_clip_step, model, batch, optimizer, scaler, dtype, extra=(max_norm,))
    scope_failures(trace)
    scaler_failures(trace)
    if trace.error is not None:
        raise trace.error
    seen = _only_step(steps, "amp_clip_step")
    seen_norm = float(seen.norm())
    if raw.norm() > max_norm and seen_norm < max_norm / 10:
        fail(
            "clip-before-unscale",
            observed=f"the optimizer saw gradient norm {seen_norm:.3g} with max_norm={max_norm:.3g} (scale {_AMP_SCALE:g})",
            expected=f"norm {max_norm:.3g}",
            cause="the gradients were clipped while still multiplied by the scale, then scaler.step divided them "
            f"by it: the effective threshold became max_norm / {_AMP_SCALE:g}",
            where="call scaler.unscale_(optimizer) before clip_grad_norm_",
        )
    _check_clipped(seen, raw, max_norm, "amp_clip_step")
    _returned_norm(trace.returned, float(raw.norm()), max_norm, "amp_clip_step", scale=_AMP_SCALE)


def _amp_clip_skip(amp_clip_step: Callable[..., torch.Tensor], seed: int, dtype: torch.dtype) -> None:
    model = make_mlp(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = RecordingScaler("cpu", init_scale=_AMP_SCALE, growth_interval=10_000)
    before = [p.detach().clone() for p in model.parameters()]
    handle = inject_inf(model)
    with StepRecorder(optimizer) as steps:
        trace = run_amp_step(amp_clip_step, model, make_batch(seed), optimizer, scaler, dtype, extra=(1.0,))
    handle.remove()
    if trace.error is not None:
        raise trace.error
    unchanged = all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    if steps.records or not unchanged or scaler.get_scale() >= _AMP_SCALE:
        fail(
            "inf-step-not-skipped",
            observed=f"with an inf gradient: {len(steps.records)} optimizer step(s), parameters "
            f"{'unchanged' if unchanged else 'changed'}, scale {scaler.get_scale():g}",
            expected=f"no optimizer step, parameters unchanged, scale lowered to {_AMP_SCALE / 2:g}",
            cause="the step bypasses scaler.step / scaler.update (clipping an inf gradient gives NaN, which "
            "scaler.step must see and skip)",
            where="the scaler.step(optimizer) and scaler.update() lines",
        )


# --------------------------------------------------------------------------------------------------
# 06-accum-clip
# --------------------------------------------------------------------------------------------------
def _micro_batches(seed: int, count: int) -> list[Batch]:
    # different input scales give micro-batch gradients of different lengths: clipping each one separately
    # then changes the direction of their sum, which is what lets the check see it
    scales = [1.0, 4.0, 0.5, 2.0, 8.0, 1.5]
    return [make_batch(seed + i, n=8, scale=scales[i % len(scales)]) for i in range(count)]


def _clipped_in_loop(model: nn.Module, batches: Sequence[Batch], max_norm: float) -> torch.Tensor:
    """The gradient a loop that calls clip_grad_norm_ after every micro-batch's backward leaves behind."""
    running = torch.zeros(())
    for batch in batches:
        running = running + reference_grads(model, [batch]) / len(batches)
        running = running * min(1.0, max_norm / (float(running.norm()) + 1e-6))
    return running


def _accum_plan(hidden: bool) -> tuple[int, list[tuple[int, float]]]:
    """(seed, [(micro-batch count, max_norm as a fraction of the raw norm)]), clipping on then off."""
    if hidden:
        return 71, [(3, 0.2), (5, 6.0), (2, 0.5)]
    return 70, [(4, 0.2), (4, 6.0)]


@register(
    "06-accum-clip",
    hints=(
        "Accumulate first, clip once: backward every micro-batch (each loss divided by the number of micro-batches), "
        "then clip the complete gradient, then take one optimizer step.",
        "optimizer.zero_grad(set_to_none=True); for x, y in micro_batches: (loss_fn(model(x), y) / "
        "len(micro_batches)).backward()  -- after the loop: norm = clip_grad_norm_(model.parameters(), max_norm); "
        "optimizer.step(); return norm",
    ),
)
def check_accum_clip(accumulate_clip_step: Callable[..., torch.Tensor], *, hidden: bool) -> str:
    seed, plan = _accum_plan(hidden)
    model = make_mlp(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    previous = None
    for round_, (count, fraction) in enumerate(plan):
        batches = _micro_batches(seed + 10 * round_, count)
        raw = reference_grads(model, batches)
        max_norm = fraction * float(raw.norm())
        per_micro = _clipped_in_loop(model, batches, max_norm)
        with StepRecorder(optimizer) as steps:
            got = accumulate_clip_step(model, batches, nn.functional.mse_loss, optimizer, max_norm)
        seen = _only_step(steps, "accumulate_clip_step", count_code="steps-per-micro-batch")
        _accum_failures(seen, raw, previous, per_micro, max_norm, count, got)
        _returned_norm(got, float(raw.norm()), max_norm, "accumulate_clip_step")
        previous = seen
    return "one optimizer step per call, the averaged gradient clipped once after the last micro-batch"


def _accum_failures(seen: torch.Tensor, raw: torch.Tensor, previous: torch.Tensor | None, per_micro: torch.Tensor,
                    max_norm: float, count: int, returned: Any) -> None:
    if _stale_added(seen, raw, previous) and not _close(seen, raw):
        _fail_stale("accumulate_clip_step")
    summed_norm = count * float(raw.norm())
    returned_summed = isinstance(returned, torch.Tensor) and abs(float(returned.detach()) - summed_norm) <= 1e-3 * summed_norm
    if returned_summed or (float(raw.norm()) <= max_norm and _close(seen, raw * count)):
        fail(
            "loss-not-averaged",
            observed=f"the optimizer saw {count} times the mean gradient",
            expected="the gradient of the mean loss over the micro-batches (as one big batch would give)",
            cause="each micro-batch loss is backpropagated as is; divide it by len(micro_batches) first",
            where="the backward line inside the micro-batch loop",
        )
    if float(raw.norm()) > max_norm and _close(seen, per_micro) and not _close(per_micro, raw * (max_norm / float(raw.norm()))):
        fail(
            "clipped-per-micro-batch",
            observed="the optimizer saw a gradient clipped after each micro-batch "
            f"(cosine {_cosine(seen, raw):.4f} with the true gradient)",
            expected="the accumulated gradient, clipped once to max_norm",
            cause="clip_grad_norm_ runs inside the micro-batch loop: it clips partial sums, so the threshold and "
            "the direction both depend on how the batch was split",
            where="move the clipping after the loop, right before optimizer.step()",
        )
    _check_clipped(seen, raw, max_norm, "accumulate_clip_step")
