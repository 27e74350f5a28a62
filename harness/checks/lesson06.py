"""Checks of lesson 06, gradient clipping: the total norm, clipping a step, under AMP, with accumulation.

Each probe runs the student's step on a seeded model and records, through a step pre-hook
(`harness.contract.instruments.StepRecorder`), the gradients the optimizer actually sees, with the parameters the
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

from harness.checks.lesson05 import (
    AMP_SCALER_REQUIREMENTS,
    AMP_SCOPE_REQUIREMENTS,
    fail_autocast_dtype,
    fail_on_trace,
    inject_inf,
    make_batch,
    make_mlp,
    other_dtype,
    run_amp_step,
)
from harness.contract.case import Case
from harness.contract.compare import judged, matching_tensors, type_name
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.instruments import ForwardRecorder, RecordingScaler, StepRecorder, collect, snapshot
from harness.contract.registry import judges, register
from harness.contract.wire import WireError

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
    if first and not all(torch.equal(a, b) for a, b in zip(tensors, model.parameters(), strict=True)):
        raise WireError("malformed observation: the first call did not start from the case's model")
    with torch.no_grad():
        for p, value in zip(model.parameters(), tensors, strict=True):
            p.copy_(value)


def _same_input(recorded: Any, max_norm: float) -> None:
    """Judge side: the threshold the probe passed is the one the judge derives (else the data is forged)."""
    if not isinstance(recorded, float) or abs(recorded - max_norm) > 1e-5 * max_norm:
        raise WireError("malformed observation: max_norm is not the case's threshold")


def _only_step(steps: Any, model: nn.Module, what: str, *, none_code: str = "no-step",
               many_code: str = "wrong-step-count") -> torch.Tensor:
    """The flat gradient of the one optimizer step of a call (a parameter without .grad counts as zeros).

    Fails with `none_code` when the optimizer never stepped, with `many_code` when it stepped more than once.
    """
    if not isinstance(steps, list):
        raise WireError("malformed observation: steps is not a list")
    if not steps:
        fail(
            none_code,
            observed=f"optimizer.step() never ran in one call of {what}",
            expected="exactly one optimizer step per call",
            cause="the optimizer step is missing (or it is skipped by a condition of yours)",
            where=f"the end of {what}",
        )
    if len(steps) > 1:
        fail(
            many_code,
            observed=f"optimizer.step() ran {len(steps)} times in one call of {what}",
            expected="exactly one optimizer step per call",
            cause="the step runs inside a loop (once per micro-batch or per parameter), or is called twice",
            where=f"the optimizer.step() line of {what}",
        )
    params = list(model.parameters())
    grads = steps[0]
    if not isinstance(grads, list) or len(grads) != len(params) or not all(
        g is None or (isinstance(g, torch.Tensor) and g.shape == p.shape) for g, p in zip(grads, params, strict=True)
    ):
        raise WireError("malformed observation: the recorded gradients do not match the model's parameters")
    return _flat([torch.zeros_like(p) if g is None else g for g, p in zip(grads, params, strict=True)])


def _returned_norm(got: Any, raw_norm: float, clipped_to: float | None, what: str, scale: float = 1.0) -> None:
    """Fail unless `got` is the pre-clip total norm `raw_norm`, as a tensor."""
    if not isinstance(got, torch.Tensor):
        fail(
            "not-a-tensor",
            observed=f"{what} returned {type_name(got)}",
            expected="the total norm as a tensor (what clip_grad_norm_ returns), so no host sync is forced",
            cause="nothing is returned (a missing return statement)" if got is None
            else "the norm was turned into a Python number (.item() or float())" if isinstance(got, (int, float))
            else "something other than the norm is returned",
            where=f"the return statement of {what}",
        )
    value = float(got.detach()) if got.numel() == 1 else float("nan")
    if abs(value - raw_norm) <= 2e-3 * raw_norm:
        return
    if clipped_to is not None and raw_norm > clipped_to and abs(value - clipped_to) <= 2e-3 * clipped_to:
        cause = "the norm was measured after clipping; return the value clip_grad_norm_ returns (the norm before)"
    elif scale != 1.0 and abs(value - raw_norm * scale) <= 2e-3 * raw_norm * scale:
        cause = f"the norm of the still-scaled gradients (times the scale {scale:g}) was returned: unscale_ first"
    else:
        cause = "a different quantity was returned (not the total gradient norm before clipping)"
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
class _Holder(nn.Module):
    """A module that holds the case's parameters, so the check can pass `holder.parameters()` as students will."""

    def __init__(self, params: Sequence[nn.Parameter]) -> None:
        super().__init__()
        self.params = nn.ParameterList(params)


def _norm_cases(case: Case) -> list[tuple[str, list[nn.Parameter], bool]]:
    """(description, parameters, passed as a generator) of each call: a list, model.parameters(), and
    parameters some of which have no .grad, visible and hidden alike (hidden: other shapes and values)."""
    generator = torch.Generator().manual_seed(case.seeded(61 if case.hidden else 60))
    shapes = [(4, 3), (3,), (2, 5), (7,)] if case.hidden else [(4, 3), (3,), (2, 2)]
    params = [nn.Parameter(torch.randn(s, generator=generator)) for s in shapes]
    for i, p in enumerate(params):
        p.grad = torch.randn(p.shape, generator=generator) * (10.0**i)
    holey = [nn.Parameter(torch.zeros(3)), *params, nn.Parameter(torch.zeros(2, 2))]
    return [("a list of parameters", params, False),
            ("model.parameters() (a generator: it can be read only once)", params, True),
            ("model.parameters() where some parameters have no .grad", holey, True)]


@register(
    "06-grad-norm",
    hints=Hints(
        nudge="The total norm treats all gradients as one long vector: the square root of the sum of every "
        "gradient entry squared.",
        concept="Total norm = sqrt(sum over parameters of ||p.grad||^2), skipping parameters whose .grad is None. "
        "model.parameters() is a generator: read it once, into a list, before doing anything else with it.",
        solution="grads = [p.grad for p in parameters if p.grad is not None]\n"
        "return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))",
        section="1. Exploding gradients, seen",
    ),
    requires={
        "wrong-norm": Requirement(
            "returns the L2 norm of all gradient entries together",
            hint="Compare your result with torch.cat([g.flatten() for g in grads]).norm() on two small gradients: "
            "is yours a sum of norms, a mean, or a maximum?"),
        "generator-consumed": Requirement(
            "works when given model.parameters(), a generator that can be read only once",
            hint="Call your function on model.parameters() twice in a row and print the results: a generator is "
            "empty after its first pass. What does your code iterate more than once?"),
        "not-a-tensor": Requirement(
            "returns a tensor, not a Python number (no .item(), no float())",
            hint="Print type(total_grad_norm(model.parameters())): which call turned the tensor into a number?"),
        "not-0-dim": Requirement(
            "returns a 0-dim tensor",
            hint="Print the .shape of what you return: it should be torch.Size([]). Which operation kept a "
            "dimension (keepdim=True, unsqueeze, a reshape)?"),
        "grads-modified": Requirement(
            "leaves the gradients unchanged",
            hint="Which of your operations ends with an underscore, or writes into p.grad? Compute on new "
            "tensors instead."),
    },
)
def probe_grad_norm(total_grad_norm: Callable[[Iterable[nn.Parameter]], torch.Tensor], *, case: Case) -> dict:
    """Call `total_grad_norm` on each set of parameters; record what it returned and the gradients after."""
    def record(item: tuple[str, list[nn.Parameter], bool]) -> dict:
        _, params, as_generator = item
        got = total_grad_norm(_Holder(params).parameters()) if as_generator else total_grad_norm(list(params))
        return {"returned": got, "grads_after": [None if p.grad is None else p.grad.detach().clone() for p in params]}

    return {"results": collect(_norm_cases(case), record)}


def _generator_cause(value: float, grads: Sequence[torch.Tensor | None]) -> str | None:
    """Why a generator call returned `value` when the same parameters as a list gave the right norm; None when
    `value` is not the norm of some trailing part of the parameters (what a partly read generator leaves)."""
    present = [g for g in grads if g is not None]
    for skipped in range(1, len(grads) + 1):
        rest = [g for g in grads[skipped:] if g is not None]
        norm = float(_flat(rest).norm()) if rest else 0.0
        if abs(value - norm) <= 1e-4 * max(norm, 1e-12) + 1e-12:
            saw = f"none of the {len(grads)} parameters" if not rest else \
                f"only the parameters after the first {skipped} of {len(grads)}"
            return (f"your function saw {saw} ({len(rest)} of {len(present)} gradients): the generator was read "
                    "before the pass that adds the squares (a first loop, next(iter(parameters)), "
                    "sum(1 for _ in parameters))")
    return None


@judges("06-grad-norm")
def judge_grad_norm(seen: dict, *, case: Case) -> str:
    """`total_grad_norm(parameters)` is the L2 norm of all gradients together, a 0-dim tensor; gradients kept."""
    for (description, params, as_generator), result in judged(_norm_cases(case), seen["results"]):
        got, after = result["returned"], result["grads_after"]
        before = [p.grad for p in params]
        if not isinstance(after, list) or len(after) != len(before):
            raise WireError("malformed observation: grads_after does not match the parameters")
        if any(b is not None and not (isinstance(a, torch.Tensor) and a.shape == b.shape and torch.equal(a, b))
               for a, b in zip(after, before, strict=True)):
            fail("grads-modified", observed=f"the gradients changed during the call on {description}",
                 expected="gradients left as they were",
                 cause="an in-place operation on p.grad (a method ending in _, such as mul_, pow_, clamp_, or an "
                 "assignment into p.grad)", where="the body of total_grad_norm")
        if not isinstance(got, torch.Tensor):
            fail(
                "not-a-tensor",
                observed=f"returned {type_name(got)} for {description}",
                expected="a 0-dim tensor (torch.nn.utils.clip_grad_norm_ returns one too): no host sync",
                cause="the tensor was turned into a Python number (.item(), float(), or a Python sum of numbers), "
                "which waits for the device every step",
                where="the return statement of total_grad_norm",
            )
        want = float(_flat(before).norm())
        value = float(got.detach()) if got.numel() == 1 else float("nan")
        if not abs(value - want) <= 1e-4 * want:
            per_param = sum(float(g.norm()) for g in before if g is not None)
            generator_cause = _generator_cause(value, before) if as_generator else None
            if generator_cause:
                code, cause = "generator-consumed", generator_cause
            elif abs(value - per_param) < 1e-4 * per_param:
                code, cause = "wrong-norm", "the per-parameter norms were added; the total norm is the norm of all " \
                    "entries together"
            else:
                code, cause = "wrong-norm", "a different formula: a mean instead of a sum of squares, a maximum, a " \
                    "missing square root, or another norm"
            fail(
                code,
                observed=f"total norm {value:.6g} for {description}" if got.numel() == 1
                else f"a tensor of shape {tuple(got.shape)} for {description}",
                expected=f"{want:.6g}" + (" (the same parameters as a list gave it)" if as_generator else ""),
                cause=cause,
                where="the computation in total_grad_norm",
            )
        if got.dim() != 0:
            fail("not-0-dim", observed=f"a tensor of shape {tuple(got.shape)} for {description}",
                 expected="a 0-dim tensor, shape torch.Size([])",
                 cause="an operation kept a dimension (keepdim=True, unsqueeze, reshape, a stack of one value)",
                 where="the last operation of total_grad_norm")
    return "the total L2 norm over all gradients as a 0-dim tensor, from a list or from model.parameters(), " \
        "parameters without .grad skipped, gradients unchanged"


# --------------------------------------------------------------------------------------------------
# 06-clip-step
# --------------------------------------------------------------------------------------------------
def _clamp_bound(seen: torch.Tensor, raw: torch.Tensor) -> float | None:
    """The bound c when `seen` is `raw` with every entry clamped to [-c, c] (what clipping by value does)."""
    bound = float(seen.abs().max())
    if 0 < bound < float(raw.abs().max()) and _close(seen, raw.clamp(-bound, bound)):
        return bound
    return None


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
                cause="the gradients are always rescaled to max_norm (the factor max_norm / norm is not capped at 1)"
                if abs(seen_norm - max_norm) <= 2e-3 * max_norm
                else "the gradients were changed although they were short enough: another threshold, clipping by "
                "value, or another rescaling",
                where=f"the clipping line of {what}",
            )
        return
    if abs(seen_norm - raw_norm) <= 1e-3 * raw_norm and _close(seen, raw):
        fail(
            "not-clipped",
            observed=f"the optimizer saw the unclipped gradient, norm {seen_norm:.4g}, with max_norm={max_norm:g}",
            expected=f"norm {max_norm:g}: the gradients rescaled by max_norm / {raw_norm:.4g}",
            cause="clipping is missing, it runs after optimizer.step(), or it clips by value with a bound no "
            "entry reaches",
            where=f"between backward() and optimizer.step() in {what}",
        )
    cosine = _cosine(seen, raw)
    if not cosine >= 0.9999:
        bound = _clamp_bound(seen, raw)
        if bound is not None:
            fail(
                "value-not-norm",
                observed=f"every gradient entry was cut to at most {bound:.3g} in absolute value, the others kept "
                f"(cosine {cosine:.4f} with the raw gradient)",
                expected="the same direction, shorter: clip_grad_norm_ multiplies every gradient by one factor",
                cause="clipping by value (clip_grad_value_, or a clamp of each entry), which changes the direction",
                where=f"use torch.nn.utils.clip_grad_norm_ in {what}",
            )
        fail(
            "wrong-direction",
            observed=f"the clipped gradient points in another direction (cosine {cosine:.4f} with the raw one)",
            expected="the same direction, shorter: one factor, max_norm / total norm, for every gradient",
            cause="the gradients were rescaled by different factors: each parameter clipped on its own (one "
            "clip_grad_norm_ call per parameter), or only some parameters clipped, or another loss's gradients",
            where=f"the clipping line of {what}: one call on all of model.parameters()",
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
        cause="backward() adds into .grad, and nothing cleared the previous step's gradients: "
        "optimizer.zero_grad(set_to_none=True) is missing (or clears another optimizer's parameters)",
        where=f"the start of {what}",
    )


def _fail_eval_mode(what: str) -> None:
    fail(
        "eval-mode",
        observed=f"the model ran its forward in eval mode (the check hands {what} a model in eval mode)",
        expected="model.train() before the forward: dropout and batch norm behave differently in training",
        cause=f"{what} does not put the model in training mode",
        where=f"the first lines of {what}",
    )


def _clip_plan(case: Case) -> tuple[int, list[tuple[Batch, float]]]:
    """(model seed, [(batch, max_norm as a fraction of the raw norm)]): clipping on, then off."""
    seed, plan = (case.seeded(62), [(1, 4.0), (2, 0.3), (3, 0.05), (4, 10.0)]) if case.hidden else (
        case.seeded(61), [(1, 0.25), (2, 4.0)])
    return seed, [(make_batch(seed + batch_seed, scale=5.0), fraction) for batch_seed, fraction in plan]


def _sgd(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.01)


_CLIPPING_REQUIREMENTS = {
    "clipped-below-threshold": Requirement(
        "leaves gradients shorter than max_norm unchanged",
        hint="Clipping only ever shrinks. What factor does your code apply when the norm is already below "
        "max_norm?"),
    "not-clipped": Requirement(
        "the optimizer steps on gradients clipped to max_norm",
        hint="Print the total gradient norm right before optimizer.step(): is it at most max_norm? Where does "
        "your clipping sit relative to the step?"),
    "value-not-norm": Requirement(
        "clips by the total norm (one factor for every gradient), not entry by entry",
        hint="Compare the direction before and after your clipping: cutting each entry separately changes it. "
        "Which utility rescales all gradients by one factor?"),
    "wrong-direction": Requirement(
        "rescales every gradient by the same factor",
        hint="Is the factor computed once, from the norm of all gradients together, or once per parameter?"),
    "wrong-threshold": Requirement(
        "clips to exactly max_norm",
        hint="After clipping, the total norm should equal max_norm: which threshold does your call receive?"),
    "not-a-tensor": Requirement(
        "returns the pre-clip norm as a tensor",
        hint="Print type() of what you return: clip_grad_norm_ already returns a tensor; is it converted, or not "
        "returned?"),
    "wrong-return": Requirement(
        "returns the total norm before clipping",
        hint="Which norm do you return: the one measured before clipping (clip_grad_norm_'s return value) or one "
        "measured later?"),
}


@register(
    "06-clip-step",
    hints=Hints(
        nudge="Clip between backward() and optimizer.step(): the gradients must be complete, and the optimizer must "
        "see the clipped ones. Clip by the total norm, and return the norm it reports.",
        concept="clip_grad_norm_(parameters, max_norm) rescales all gradients by max_norm / N when their total norm "
        "N exceeds max_norm, and returns N (before clipping).",
        solution="optimizer.zero_grad(set_to_none=True); loss_fn(model(x), y).backward(); "
        "norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm); optimizer.step(); return norm",
        section="2. Clipping by norm, clipping by value",
    ),
    requires={
        "eval-mode": Requirement(
            "puts the model in training mode",
            hint="The check hands you a model in eval mode. Which call switches it to training behaviour?"),
        "no-step": Requirement(
            "takes one optimizer step",
            hint="Does every path of your function reach optimizer.step()?"),
        "wrong-step-count": Requirement(
            "takes exactly one optimizer step per call",
            hint="Count the optimizer.step() calls one call of your function makes: is one inside a loop?"),
        "missing-zero-grad": Requirement(
            "each step uses only its batch's gradients (cleared before backward)",
            hint="backward() adds into .grad. What clears the previous step's gradients before this one's backward?"),
        **_CLIPPING_REQUIREMENTS,
    },
)
def probe_clip_step(clip_train_step: Callable[..., torch.Tensor], *, case: Case) -> dict:
    """Call the student's step on each batch of the plan, the model in eval mode first; record the start, the
    threshold, the forwards' training mode and the gradients each optimizer step saw."""
    seed, plan = _clip_plan(case)
    model = make_mlp(seed)
    optimizer = _sgd(model)
    def record(item: tuple[Batch, float]) -> dict:
        batch, fraction = item
        start, max_norm = snapshot(model), _max_norm(model, [batch], fraction)
        model.eval()
        with StepRecorder(optimizer) as steps, ForwardRecorder(model) as forwards:
            got = clip_train_step(model, batch, nn.functional.mse_loss, optimizer, max_norm)
        return {"params": start, "max_norm": max_norm, "returned": got, "steps": _recorded(steps),
                "training": [r.training for r in forwards.records]}

    return {"calls": collect(plan, record)}


def _judge_training(training: Any, what: str) -> None:
    """Fail when a recorded forward ran in eval mode."""
    if not isinstance(training, list) or not all(isinstance(t, bool) for t in training):
        raise WireError("malformed observation: training is not a list of booleans")
    if not all(training):
        _fail_eval_mode(what)


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
        _judge_training(call["training"], "clip_train_step")
        grads = _only_step(call["steps"], model, "clip_train_step")
        if _stale_added(grads, raw, previous) and not _close(grads, raw):
            _fail_stale("clip_train_step")
        _check_clipped(grads, raw, max_norm, "clip_train_step")
        _returned_norm(call["returned"], float(raw.norm()), max_norm, "clip_train_step")
        previous = grads
    return f"{len(plan)} steps in training mode: gradients clipped by total norm only when longer than max_norm, " \
        "pre-clip norm returned"


# --------------------------------------------------------------------------------------------------
# 06-amp-clip
# --------------------------------------------------------------------------------------------------
# The scaler's scale in the checks: large enough that clipping before unscale_ shows (the threshold divided by
# it), small enough that gradients left from the previous call (divided by it at unscale_) still show.
_AMP_SCALE = 2.0**4
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


def _amp_clip_parts(case: Case) -> list[tuple[int, torch.dtype, float, str]]:
    """The probe's units, in the order a check stopping at the first difference sees them."""
    return [(*params, part) for params in _amp_clip_cases(case) for part in ("clip", "skip")]


def _amp_clip_setup(seed: int) -> tuple[nn.Module, torch.optim.Optimizer, RecordingScaler]:
    model = make_mlp(seed)
    return model, _sgd(model), RecordingScaler("cpu", init_scale=_AMP_SCALE, growth_interval=10_000)


@register(
    "06-amp-clip", nonfinite=('runs/[13579]/params/*',),
    hints=Hints(
        nudge="The gradients after scaler.scale(loss).backward() are multiplied by the scale (thousands). Bring "
        "them back to their true size before measuring or clipping them, then let the scaler step.",
        concept="The fixed order: scale(loss).backward() -> unscale_(optimizer) -> clip_grad_norm_ -> "
        "scaler.step(optimizer) -> scaler.update(). scaler.step does not unscale twice, and still skips a step "
        "whose gradients held inf.",
        solution="with torch.autocast(device_type, dtype=dtype): loss = loss_fn(model(x), y)\n"
        "scaler.scale(loss).backward(); scaler.unscale_(optimizer); "
        "norm = clip_grad_norm_(model.parameters(), max_norm); scaler.step(optimizer); scaler.update(); return norm",
        section="3. Clipping under mixed precision",
    ),
    requires={**AMP_SCOPE_REQUIREMENTS, **AMP_SCALER_REQUIREMENTS,
              "wrong-step-count": Requirement(
                  "takes at most one optimizer step per call",
                  hint="Count the scaler.step(optimizer) calls one call of your function makes."),
              "wrong-autocast-dtype": Requirement(
                  "runs autocast in the dtype it is given",
                  hint="Which dtype does your autocast use: the argument, or one you wrote yourself?"),
              "missing-zero-grad": Requirement(
                  "each call's step uses only its batch's gradients (cleared before backward)",
                  hint="Call your step twice: does the second step's .grad still hold the first one's? What clears "
                  "it?"),
              "clip-before-unscale": Requirement(
                  "clips the unscaled gradients (scaler.unscale_ before clipping)",
                  hint="Print the total gradient norm right after backward: it is multiplied by the scale. What "
                  "must happen before clipping so that max_norm means what it says?"),
              **_CLIPPING_REQUIREMENTS,
              "inf-step-not-skipped": Requirement(
                  "a step whose gradients hold inf is skipped and lowers the scale",
                  hint="What sees the inf and skips the step: does anything of yours change the parameters, or "
                  "the scale, outside scaler.step and scaler.update?")},
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


def _amp_clip_calls(seed: int, fraction: float) -> list[tuple[Batch, float]]:
    """The two (batch, max_norm as a fraction of the raw norm) calls of a case, on one model, optimizer and scaler."""
    return [(make_batch(seed, scale=5.0), fraction), (make_batch(seed + 1, scale=5.0), _SECOND_CALL)]


def _probe_amp_clip(amp_clip_step: Callable[..., torch.Tensor], seed: int, dtype: torch.dtype, fraction: float) -> dict:
    """Two calls on one model: record each call's start, threshold, return and the gradients each step saw."""
    model, optimizer, scaler = _amp_clip_setup(seed)
    calls = []
    for batch, call_fraction in _amp_clip_calls(seed, fraction):
        start, max_norm = snapshot(model), _max_norm(model, [batch], call_fraction, dtype)
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
    return {"steps_taken": len(steps.records), "params": snapshot(model), "scale": float(scaler.get_scale())}


@judges("06-amp-clip")
def judge_amp_clip(seen: dict, *, case: Case) -> str:
    """The optimizer saw the true (unscaled) gradient clipped to max_norm; an overflow step is skipped."""
    for (seed, dtype, fraction, part), run in judged(_amp_clip_parts(case), seen["runs"]):
        if part == "clip":
            _judge_amp_clip(run, seed, dtype, fraction)
        else:
            _judge_amp_clip_skip(run, seed)
    return "unscaled before clipping: the optimizer saw the true gradients clipped to max_norm (and unchanged " \
        "below it), bf16 and fp16; overflow steps skipped"


def _judge_amp_clip(run: dict, seed: int, dtype: torch.dtype, fraction: float) -> None:
    """Each call's optimizer step saw its batch's true gradient, clipped to max_norm only when longer."""
    model = make_mlp(seed)
    calls, plan = run["calls"], _amp_clip_calls(seed, fraction)
    if not isinstance(calls, list) or len(calls) != len(plan):
        raise WireError("malformed observation: not one record per call")
    previous = None
    for i, ((batch, call_fraction), call) in enumerate(zip(plan, calls, strict=True)):
        _start_at(model, call["params"], first=i == 0)
        raw = reference_grads(model, [batch], autocast_dtype=dtype)
        max_norm = _max_norm(model, [batch], call_fraction, dtype)
        _same_input(call["max_norm"], max_norm)
        grads = _only_step(call["steps"], model, "amp_clip_step", none_code="missing-step")
        other = reference_grads(model, [batch], autocast_dtype=other_dtype(dtype))
        if float((grads - _clip_to(other, max_norm)).norm()) < 0.1 * float((grads - _clip_to(raw, max_norm)).norm()):
            fail_autocast_dtype(dtype, "amp_clip_step")
        if previous is not None and not _close(grads, raw) and _close(grads, raw + previous / _AMP_SCALE):
            fail(
                "missing-zero-grad",
                observed="in the second call the optimizer saw this batch's gradients plus the previous step's "
                f"divided by the scale ({_AMP_SCALE:g})",
                expected="only this batch's gradients",
                cause="backward() adds into .grad, and nothing cleared the previous step's gradients (unscale_ then "
                "divided them by the scale): optimizer.zero_grad(set_to_none=True) is missing",
                where="the start of amp_clip_step",
            )
        seen_norm = float(grads.norm())
        if seen_norm < max_norm / 10 and _cosine(grads, raw) >= 0.9999:
            fail(
                "clip-before-unscale",
                observed=f"the optimizer saw gradient norm {seen_norm:.3g} with max_norm={max_norm:.3g} "
                f"(scale {_AMP_SCALE:g})",
                expected=f"norm {min(max_norm, float(raw.norm())):.3g}",
                cause="the gradients were clipped while still multiplied by the scale, then scaler.step divided "
                f"them by it: the effective threshold became max_norm / {_AMP_SCALE:g}",
                where="call scaler.unscale_(optimizer) before clip_grad_norm_",
            )
        _check_clipped(grads, raw, max_norm, "amp_clip_step")
        _returned_norm(call["returned"], float(raw.norm()), max_norm, "amp_clip_step", scale=_AMP_SCALE)
        previous = grads


def _judge_amp_clip_skip(run: dict, seed: int) -> None:
    start = snapshot(make_mlp(seed))
    steps_taken, scale = run["steps_taken"], run["scale"]
    if not isinstance(steps_taken, int) or not isinstance(scale, float):
        raise WireError("malformed observation: steps_taken or scale")
    after = matching_tensors(run["params"], start, "params")
    unchanged = all(torch.equal(a, b) for a, b in zip(after, start, strict=True))
    if steps_taken or not unchanged or not scale < _AMP_SCALE:
        fail(
            "inf-step-not-skipped",
            observed=f"with an inf gradient: {steps_taken} optimizer step(s), parameters "
            f"{'unchanged' if unchanged else 'changed'}, scale {scale:g}",
            expected=f"no optimizer step, parameters unchanged, scale lowered to {_AMP_SCALE / 2:g}",
            cause="the parameters were changed outside scaler.step (a hand-made update), or the scale was set "
            "outside scaler.update: clipping an inf gradient gives NaN, which only scaler.step checks and skips"
            if steps_taken == 0 else "the optimizer stepped although a gradient held inf: the step bypasses "
            "scaler.step, or the gradients were replaced before it",
            where="the scaler.step(optimizer) and scaler.update() lines, and any update of yours around them",
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
    hints=Hints(
        nudge="Accumulate first, clip once: backward every micro-batch (each loss divided by the number of "
        "micro-batches), then clip the complete gradient, then take one optimizer step.",
        concept="With accumulation, .grad adds up over the micro-batches; the optimizer step, and so the clipping, "
        "belongs after the last one. Clipping a partial sum depends on how the batch was split.",
        solution="optimizer.zero_grad(set_to_none=True)\nfor x, y in micro_batches: "
        "(loss_fn(model(x), y) / len(micro_batches)).backward()\n"
        "norm = clip_grad_norm_(model.parameters(), max_norm); optimizer.step(); return norm",
        section="4. Clipping with gradient accumulation",
    ),
    requires={
        "no-step": Requirement(
            "takes one optimizer step per call",
            hint="Does your function reach optimizer.step() after the loop?"),
        "steps-per-micro-batch": Requirement(
            "takes exactly one optimizer step per call, after the last micro-batch",
            hint="Count the optimizer.step() calls one call makes: is the step inside the micro-batch loop?"),
        "missing-zero-grad": Requirement(
            "each call starts from cleared gradients",
            hint="Call your function twice: does the second call's gradient still hold the first call's? What "
            "clears it, and where?"),
        "only-last-micro-batch": Requirement(
            "accumulates every micro-batch's gradient (cleared once, before the loop)",
            hint="Which micro-batches' gradients are in .grad when the loop ends? Where are they cleared, and "
            "where does backward run?"),
        "loss-not-averaged": Requirement(
            "the accumulated gradient is that of the mean loss (each loss divided by the number of micro-batches)",
            hint="With k micro-batches, .grad holds k terms. How do you make their sum the gradient of one big "
            "batch's mean loss?"),
        "clipped-per-micro-batch": Requirement(
            "clips once, after the last micro-batch",
            hint="How many times does your clipping run per optimizer step?"),
        **_CLIPPING_REQUIREMENTS,
    },
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
        grads = _only_step(call["steps"], model, "accumulate_clip_step", many_code="steps-per-micro-batch")
        _accum_failures(grads, raw, previous, model, batches, max_norm, call["returned"])
        _returned_norm(call["returned"], float(raw.norm()), max_norm, "accumulate_clip_step")
        previous = grads
    return "one optimizer step per call, the averaged gradient clipped once after the last micro-batch"


def _clip_to(grad: torch.Tensor, max_norm: float) -> torch.Tensor:
    return grad * min(1.0, max_norm / float(grad.norm()))


def _accum_failures(seen: torch.Tensor, raw: torch.Tensor, previous: torch.Tensor | None, model: nn.Module,
                    batches: Sequence[Batch], max_norm: float, returned: Any) -> None:
    """Fail on an accumulation mistake the optimizer's gradient shows, before judging the clipping itself."""
    count = len(batches)
    if _stale_added(seen, raw, previous) and not _close(seen, raw):
        _fail_stale("accumulate_clip_step")
    last = reference_grads(model, batches[-1:]) / count
    only_last = _close(seen, last) or _close(seen, _clip_to(last, max_norm))
    if only_last and not _close(seen, raw) and not _close(last, raw):
        fail(
            "only-last-micro-batch",
            observed=f"the optimizer saw only the last micro-batch's gradient (of {count})",
            expected="the sum over all micro-batches (each loss divided by their number)",
            cause="either the gradients are cleared inside the micro-batch loop (zero_grad before each backward), so "
            "each backward replaces the previous ones, or backward runs once, after the loop, on the last "
            "micro-batch's loss only",
            where="where optimizer.zero_grad is called (once, before the loop), and the indentation of the backward "
            "line (inside the loop)",
        )
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
    per_micro = _clipped_in_loop(model, batches, max_norm)
    clipped_once = _clip_to(raw, max_norm)
    if float(raw.norm()) > max_norm and _close(seen, per_micro) and not _close(per_micro, clipped_once):
        fail(
            "clipped-per-micro-batch",
            observed="the optimizer saw a gradient clipped after each micro-batch "
            f"(cosine {_cosine(seen, raw):.4f} with the true gradient)",
            expected="the accumulated gradient, clipped once to max_norm",
            cause="clipping runs inside the micro-batch loop: it clips partial sums, so the threshold and "
            "the direction both depend on how the batch was split",
            where="move the clipping after the loop, right before optimizer.step()",
        )
    _check_clipped(seen, raw, max_norm, "accumulate_clip_step")
