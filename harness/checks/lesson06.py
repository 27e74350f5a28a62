"""Checks of lesson 06, gradient clipping: the total norm, clipping a step, under AMP, with accumulation.

Each probe runs the student's step on a seeded model and records, through a step pre-hook
(`harness.checks.probes.StepRecorder`), the gradients the optimizer actually sees, with the parameters the
call started from, what it returned, and (under AMP) the steps taken and the scale after an overflow. Each
judge rebuilds the model at those parameters, computes the reference gradient itself, and compares: norm,
direction (norm clipping keeps it, value clipping does not) and scale. The threshold max_norm is a fraction
of the true gradient norm: the probe derives it to call the student's code, the judge recomputes it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import nn

from harness.checks.core import Case, fail, judges, register
from harness.checks.lesson05 import (
    RecordingScaler,
    collect,
    fail_on_trace,
    inject_inf,
    judged,
    make_batch,
    make_mlp,
    matching_tensors,
    run_amp_step,
    snapshot,
    type_name,
)
from harness.checks.probes import StepRecorder
from harness.checks.wire import WireError

Batch = tuple[torch.Tensor, torch.Tensor]


def _flat(grads: Sequence[torch.Tensor | None]) -> torch.Tensor:
    return torch.cat([g.reshape(-1).float() for g in grads if g is not None])


def _close(a: torch.Tensor, b: torch.Tensor, rtol: float = 2e-3) -> bool:
    return float((a - b).norm()) <= rtol * float(b.norm()) + 1e-7


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a, b, dim=0))


def reference_grads(model: nn.Module, batches: Sequence[Batch],
                    autocast_dtype: torch.dtype | None = None) -> torch.Tensor:
    """The flat gradient of the mean MSE loss over `batches` (averaged), computed on a copy of `model`."""
    twin = copy.deepcopy(model)
    twin.zero_grad(set_to_none=True)
    for inputs, targets in batches:
        with torch.autocast("cpu", dtype=autocast_dtype or torch.bfloat16, enabled=autocast_dtype is not None):
            loss = nn.functional.mse_loss(twin(inputs), targets)
        (loss / len(batches)).backward()
    return _flat([p.grad for p in twin.parameters()])


def _max_norm(model: nn.Module, batches: Sequence[Batch], fraction: float, dtype: torch.dtype | None = None) -> float:
    """The threshold of a call: `fraction` of the true gradient norm (an input, derived alike by probe and judge)."""
    return fraction * float(reference_grads(model, batches, autocast_dtype=dtype).norm())


def _recorded(steps: StepRecorder) -> list[list[torch.Tensor | None]]:
    """Probe side: the gradients the optimizer saw at each step."""
    return [record.grads for record in steps.records]


def _start_at(model: nn.Module, params: Any, first: bool) -> None:
    """Judge side: set `model` to the parameters a call started from (the first call: the case's own start)."""
    tensors = matching_tensors(params, snapshot(model), "params")
    if first and not all(torch.equal(a, b) for a, b in zip(tensors, model.parameters())):
        raise WireError("malformed observation: the first call did not start from the case's model")
    with torch.no_grad():
        for p, value in zip(model.parameters(), tensors):
            p.copy_(value)


def _same_input(recorded: Any, max_norm: float) -> None:
    """Judge side: the threshold the probe passed is the one the judge derives (else the data is forged)."""
    if not isinstance(recorded, float) or abs(recorded - max_norm) > 1e-5 * max_norm:
        raise WireError("malformed observation: max_norm is not the case's threshold")


def _only_step(steps: Any, model: nn.Module, what: str, count_code: str = "wrong-step-count") -> torch.Tensor:
    """The flat gradient of the one optimizer step of a call (a parameter without .grad counts as zeros)."""
    if not isinstance(steps, list):
        raise WireError("malformed observation: steps is not a list")
    if len(steps) != 1:
        fail(
            count_code,
            observed=f"optimizer.step() ran {len(steps)} time(s) in one call of {what}",
            expected="exactly one optimizer step per call",
            cause="the step is missing, or it runs inside a loop",
            where=f"the optimizer.step() line of {what}",
        )
    params = list(model.parameters())
    grads = steps[0]
    if not isinstance(grads, list) or len(grads) != len(params) or not all(
        g is None or (isinstance(g, torch.Tensor) and g.shape == p.shape) for g, p in zip(grads, params)
    ):
        raise WireError("malformed observation: the recorded gradients do not match the model's parameters")
    return _flat([torch.zeros_like(p) if g is None else g for g, p in zip(grads, params)])


def _returned_norm(got: Any, raw_norm: float, clipped_to: float | None, what: str, scale: float = 1.0) -> None:
    if not isinstance(got, torch.Tensor):
        fail(
            "not-a-tensor",
            observed=f"{what} returned {type_name(got)}",
            expected="the total norm as a tensor (what clip_grad_norm_ returns), so no host sync is forced",
            cause="the norm was turned into a Python number (.item() or float()), or nothing is returned",
            where=f"the return statement of {what}",
        )
    value = float(got.detach()) if got.numel() == 1 else float("nan")
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
        observed=f"{what} returned {value:.5g}" if got.numel() == 1 else f"{what} returned a tensor of shape "
        f"{tuple(got.shape)}",
        expected=f"the total gradient norm before clipping, {raw_norm:.5g}",
        cause=cause,
        where=f"the return statement of {what}",
    )


# --------------------------------------------------------------------------------------------------
# 06-grad-norm
# --------------------------------------------------------------------------------------------------
def _norm_cases(case: Case) -> list[tuple[str, list[nn.Parameter], bool]]:
    generator = torch.Generator().manual_seed(case.seeded(61 if case.hidden else 60))
    shapes = [(4, 3), (3,), (2, 5), (7,)] if case.hidden else [(4, 3), (3,)]
    params = [nn.Parameter(torch.randn(s, generator=generator)) for s in shapes]
    for i, p in enumerate(params):
        p.grad = torch.randn(p.shape, generator=generator) * (10.0**i)
    cases = [("a list of parameters", params, False)]
    if case.hidden:
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
def probe_grad_norm(total_grad_norm: Callable[[Iterable[nn.Parameter]], torch.Tensor], *, case: Case) -> dict:
    """Call `total_grad_norm` on each set of parameters; record what it returned and the gradients after."""
    def record(item: tuple[str, list[nn.Parameter], bool]) -> dict:
        _, params, as_generator = item
        got = total_grad_norm(p for p in params) if as_generator else total_grad_norm(list(params))
        return {"returned": got, "grads_after": [None if p.grad is None else p.grad.detach().clone() for p in params]}

    return {"results": collect(_norm_cases(case), record)}


@judges("06-grad-norm")
def judge_grad_norm(seen: dict, *, case: Case) -> str:
    """`total_grad_norm(parameters)` is the L2 norm of all gradients together, a tensor; gradients kept."""
    for (description, params, as_generator), result in judged(_norm_cases(case), seen["results"]):
        got, after = result["returned"], result["grads_after"]
        before = [p.grad for p in params]
        if not isinstance(after, list) or len(after) != len(before):
            raise WireError("malformed observation: grads_after does not match the parameters")
        if any(b is not None and not (isinstance(a, torch.Tensor) and a.shape == b.shape and torch.equal(a, b))
               for a, b in zip(after, before)):
            fail("grads-modified", observed="the gradients changed during the call",
                 expected="gradients left as they were",
                 cause="an in-place operation on p.grad (mul_, pow_, clamp_)", where="the body of total_grad_norm")
        if not isinstance(got, torch.Tensor):
            fail(
                "not-a-tensor",
                observed=f"returned {type_name(got)}",
                expected="a 0-dim tensor (torch.nn.utils.clip_grad_norm_ returns one too): no host sync",
                cause=".item() or float() at the end, which waits for the device every step",
                where="the return statement of total_grad_norm",
            )
        want = float(_flat(before).norm())
        value = float(got) if got.numel() == 1 else float("nan")
        if not abs(value - want) <= 1e-4 * want:
            per_param = sum(float(g.norm()) for g in before if g is not None)
            cause = (
                "the per-parameter norms were added; the total norm is the norm of all entries together"
                if abs(value - per_param) < 1e-4 * per_param
                else "the generator was consumed by a first pass, so a second pass saw no parameters"
                if as_generator and value == 0.0
                else "a different formula (mean instead of sum of squares, max, or a missing square root)"
            )
            fail(
                "generator-consumed" if as_generator and value == 0.0 else "wrong-norm",
                observed=f"total norm {value:.6g} for {description}" if got.numel() == 1
                else f"a tensor of shape {tuple(got.shape)} for {description}",
                expected=f"{want:.6g}",
                cause=cause,
                where="the computation in total_grad_norm",
            )
    return "the total L2 norm over all gradients, parameters without .grad skipped" + (
        ", generators read once" if case.hidden else ""
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
                observed=f"gradient norm {raw_norm:.4g} is below max_norm={max_norm:g}, yet the optimizer saw norm "
                f"{seen_norm:.4g}",
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
    if not _cosine(seen, raw) >= 0.9999:
        fail(
            "value-not-norm",
            observed="the clipped gradient points in another direction "
            f"(cosine {_cosine(seen, raw):.4f} with the raw one)",
            expected="the same direction, shorter: clip_grad_norm_ multiplies every gradient by one factor",
            cause="clip_grad_value_ clamps each entry separately, which changes the direction of the update",
            where=f"use torch.nn.utils.clip_grad_norm_ in {what}",
        )
    if not abs(seen_norm - max_norm) <= 2e-3 * max_norm:
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


def _clip_plan(case: Case) -> tuple[int, list[tuple[Batch, float]]]:
    """(model seed, [(batch, max_norm as a fraction of the raw norm)]): clipping on, then off."""
    seed, plan = (case.seeded(62), [(1, 4.0), (2, 0.3), (3, 0.05), (4, 10.0)]) if case.hidden else (
        case.seeded(61), [(1, 0.25), (2, 4.0)])
    return seed, [(make_batch(seed + batch_seed, scale=5.0), fraction) for batch_seed, fraction in plan]


def _sgd(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.01)


@register(
    "06-clip-step",
    hints=(
        "Clip between backward() and optimizer.step(): the gradients must be complete, and the optimizer must see "
        "the clipped ones. Clip by the total norm (one factor for all gradients), and return the norm it reports.",
        "optimizer.zero_grad(set_to_none=True); loss = loss_fn(model(x), y); loss.backward(); "
        "norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm); optimizer.step(); return norm",
    ),
)
def probe_clip_step(clip_train_step: Callable[..., torch.Tensor], *, case: Case) -> dict:
    """Call the student's step on each batch of the plan; record the start, the threshold, the step's grads."""
    seed, plan = _clip_plan(case)
    model = make_mlp(seed)
    optimizer = _sgd(model)
    def record(item: tuple[Batch, float]) -> dict:
        batch, fraction = item
        start, max_norm = snapshot(model), _max_norm(model, [batch], fraction)
        with StepRecorder(optimizer) as steps:
            got = clip_train_step(model, batch, nn.functional.mse_loss, optimizer, max_norm)
        return {"params": start, "max_norm": max_norm, "returned": got, "steps": _recorded(steps)}

    return {"calls": collect(plan, record)}


@judges("06-clip-step")
def judge_clip_step(seen: dict, *, case: Case) -> str:
    """The optimizer saw the batch's gradient, clipped by total norm only when longer; the pre-clip norm returned."""
    seed, plan = _clip_plan(case)
    model = make_mlp(seed)
    previous = None
    for i, ((batch, fraction), call) in enumerate(judged(plan, seen["calls"])):
        _start_at(model, call["params"], first=i == 0)
        raw = reference_grads(model, [batch])
        max_norm = _max_norm(model, [batch], fraction)
        _same_input(call["max_norm"], max_norm)
        grads = _only_step(call["steps"], model, "clip_train_step")
        if _stale_added(grads, raw, previous) and not _close(grads, raw):
            _fail_stale("clip_train_step")
        _check_clipped(grads, raw, max_norm, "clip_train_step")
        _returned_norm(call["returned"], float(raw.norm()), max_norm, "clip_train_step")
        previous = grads
    return f"{len(plan)} steps: gradients clipped by total norm only when longer than max_norm, pre-clip norm returned"


# --------------------------------------------------------------------------------------------------
# 06-amp-clip
# --------------------------------------------------------------------------------------------------
_AMP_SCALE = 2.0**12


def _amp_clip_cases(case: Case) -> list[tuple[int, torch.dtype, float]]:
    """(seed, autocast dtype, max_norm as a fraction of the raw norm) of each case."""
    if case.hidden:
        return [(case.seeded(64), torch.bfloat16, 0.3), (case.seeded(65), torch.float16, 0.1),
                (case.seeded(66), torch.float16, 3.0)]
    return [(case.seeded(63), torch.bfloat16, 0.25)]


def _amp_clip_parts(case: Case) -> list[tuple[int, torch.dtype, float, str]]:
    """The probe's units, in the order a check stopping at the first difference sees them."""
    return [(*params, part) for params in _amp_clip_cases(case) for part in ("clip", "skip")]


def _amp_clip_setup(seed: int) -> tuple[nn.Module, torch.optim.Optimizer, RecordingScaler]:
    model = make_mlp(seed)
    return model, _sgd(model), RecordingScaler("cpu", init_scale=_AMP_SCALE, growth_interval=10_000)


@register(
    "06-amp-clip",
    hints=(
        "The gradients after scaler.scale(loss).backward() are multiplied by the scale (thousands). Bring them back "
        "to their true size before measuring or clipping them, then let the scaler step.",
        "with autocast: loss = ...; scaler.scale(loss).backward(); scaler.unscale_(optimizer); norm = "
        "clip_grad_norm_(model.parameters(), max_norm); scaler.step(optimizer); scaler.update(); return norm",
    ),
)
def probe_amp_clip(amp_clip_step: Callable[..., torch.Tensor], *, case: Case) -> dict:
    """Run the student's AMP step once per case, then once with an inf gradient; record grads, steps, scale.

    Fails here on what only the kernel sees (autocast state, scaler calls, a direct optimizer.step).
    """
    def record(part: tuple[int, torch.dtype, float, str]) -> dict:
        seed, dtype, fraction, name = part
        if name == "clip":
            return _probe_amp_clip(amp_clip_step, seed, dtype, fraction)
        return _probe_amp_clip_skip(amp_clip_step, seed, dtype)

    return {"runs": collect(_amp_clip_parts(case), record)}


def _probe_amp_clip(amp_clip_step: Callable[..., torch.Tensor], seed: int, dtype: torch.dtype, fraction: float) -> dict:
    model, optimizer, scaler = _amp_clip_setup(seed)
    batch = make_batch(seed, scale=5.0)
    max_norm = _max_norm(model, [batch], fraction, dtype)
    with StepRecorder(optimizer) as steps:
        trace = run_amp_step(amp_clip_step, model, batch, optimizer, scaler, dtype, extra=(max_norm,))
    fail_on_trace(trace)
    return {"returned": trace.returned, "steps": _recorded(steps)}


def _probe_amp_clip_skip(amp_clip_step: Callable[..., torch.Tensor], seed: int, dtype: torch.dtype) -> dict:
    model, optimizer, scaler = _amp_clip_setup(seed)
    handle = inject_inf(model)
    with StepRecorder(optimizer) as steps:
        trace = run_amp_step(amp_clip_step, model, make_batch(seed), optimizer, scaler, dtype, extra=(1.0,))
    handle.remove()
    if trace.error is not None:
        raise trace.error
    return {"steps_taken": len(steps.records), "params": snapshot(model), "scale": float(scaler.get_scale())}


@judges("06-amp-clip")
def judge_amp_clip(seen: dict, *, case: Case) -> str:
    """The optimizer saw the true (unscaled) gradient clipped to max_norm; an overflow step is skipped."""
    for (seed, dtype, fraction, part), run in judged(_amp_clip_parts(case), seen["runs"]):
        if part == "clip":
            _judge_amp_clip(run, seed, dtype, fraction)
        else:
            _judge_amp_clip_skip(run, seed)
    return "unscaled before clipping: the optimizer saw the true gradients clipped to max_norm; overflow steps skipped"


def _judge_amp_clip(run: dict, seed: int, dtype: torch.dtype, fraction: float) -> None:
    model = make_mlp(seed)
    batch = make_batch(seed, scale=5.0)
    raw = reference_grads(model, [batch], autocast_dtype=dtype)
    max_norm = _max_norm(model, [batch], fraction, dtype)
    grads = _only_step(run["steps"], model, "amp_clip_step")
    seen_norm = float(grads.norm())
    if raw.norm() > max_norm and seen_norm < max_norm / 10:
        fail(
            "clip-before-unscale",
            observed=f"the optimizer saw gradient norm {seen_norm:.3g} with max_norm={max_norm:.3g} "
            f"(scale {_AMP_SCALE:g})",
            expected=f"norm {max_norm:.3g}",
            cause="the gradients were clipped while still multiplied by the scale, then scaler.step divided them "
            f"by it: the effective threshold became max_norm / {_AMP_SCALE:g}",
            where="call scaler.unscale_(optimizer) before clip_grad_norm_",
        )
    _check_clipped(grads, raw, max_norm, "amp_clip_step")
    _returned_norm(run["returned"], float(raw.norm()), max_norm, "amp_clip_step", scale=_AMP_SCALE)


def _judge_amp_clip_skip(run: dict, seed: int) -> None:
    start = snapshot(make_mlp(seed))
    steps_taken, scale = run["steps_taken"], run["scale"]
    if not isinstance(steps_taken, int) or not isinstance(scale, float):
        raise WireError("malformed observation: steps_taken or scale")
    unchanged = all(torch.equal(a, b) for a, b in zip(matching_tensors(run["params"], start, "params"), start))
    if steps_taken or not unchanged or not scale < _AMP_SCALE:
        fail(
            "inf-step-not-skipped",
            observed=f"with an inf gradient: {steps_taken} optimizer step(s), parameters "
            f"{'unchanged' if unchanged else 'changed'}, scale {scale:g}",
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


def _accum_plan(case: Case) -> tuple[int, list[tuple[list[Batch], float]]]:
    """(model seed, [(micro-batches, max_norm as a fraction of the raw norm)]), clipping on then off."""
    seed, plan = (case.seeded(71), [(3, 0.2), (5, 6.0), (2, 0.5)]) if case.hidden else (
        case.seeded(70), [(4, 0.2), (4, 6.0)])
    return seed, [(_micro_batches(seed + 10 * round_, count), fraction)
                  for round_, (count, fraction) in enumerate(plan)]


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
def probe_accum_clip(accumulate_clip_step: Callable[..., torch.Tensor], *, case: Case) -> dict:
    """Call the student's step on each round of micro-batches; record the start, threshold, steps' grads."""
    seed, plan = _accum_plan(case)
    model = make_mlp(seed)
    optimizer = _sgd(model)
    def record(item: tuple[list[Batch], float]) -> dict:
        batches, fraction = item
        start, max_norm = snapshot(model), _max_norm(model, batches, fraction)
        with StepRecorder(optimizer) as steps:
            got = accumulate_clip_step(model, batches, nn.functional.mse_loss, optimizer, max_norm)
        return {"params": start, "max_norm": max_norm, "returned": got, "steps": _recorded(steps)}

    return {"calls": collect(plan, record)}


@judges("06-accum-clip")
def judge_accum_clip(seen: dict, *, case: Case) -> str:
    """One optimizer step per call, on the averaged gradient clipped once after the last micro-batch."""
    seed, plan = _accum_plan(case)
    model = make_mlp(seed)
    previous = None
    for i, ((batches, fraction), call) in enumerate(judged(plan, seen["calls"])):
        _start_at(model, call["params"], first=i == 0)
        raw = reference_grads(model, batches)
        max_norm = _max_norm(model, batches, fraction)
        _same_input(call["max_norm"], max_norm)
        per_micro = _clipped_in_loop(model, batches, max_norm)
        grads = _only_step(call["steps"], model, "accumulate_clip_step", count_code="steps-per-micro-batch")
        _accum_failures(grads, raw, previous, per_micro, max_norm, len(batches), call["returned"])
        _returned_norm(call["returned"], float(raw.norm()), max_norm, "accumulate_clip_step")
        previous = grads
    return "one optimizer step per call, the averaged gradient clipped once after the last micro-batch"


def _accum_failures(seen: torch.Tensor, raw: torch.Tensor, previous: torch.Tensor | None, per_micro: torch.Tensor,
                    max_norm: float, count: int, returned: Any) -> None:
    if _stale_added(seen, raw, previous) and not _close(seen, raw):
        _fail_stale("accumulate_clip_step")
    summed_norm = count * float(raw.norm())
    returned_summed = (isinstance(returned, torch.Tensor) and returned.numel() == 1
                       and abs(float(returned.detach()) - summed_norm) <= 1e-3 * summed_norm)
    if returned_summed or (float(raw.norm()) <= max_norm and _close(seen, raw * count)):
        fail(
            "loss-not-averaged",
            observed=f"the optimizer saw {count} times the mean gradient",
            expected="the gradient of the mean loss over the micro-batches (as one big batch would give)",
            cause="each micro-batch loss is backpropagated as is; divide it by len(micro_batches) first",
            where="the backward line inside the micro-batch loop",
        )
    clipped_once = raw * (max_norm / float(raw.norm()))
    if float(raw.norm()) > max_norm and _close(seen, per_micro) and not _close(per_micro, clipped_once):
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
