"""Lesson 06: what several of its tasks share on the judge side (references)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from harness.checks.lesson06.common import flat_grads
from harness.contract.compare import close_norm, matching_tensors, same_values, type_name
from harness.contract.failure import Requirement, fail
from harness.contract.instruments import snapshot
from harness.contract.wire import WireError


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a, b, dim=0))


def _start_at(model: nn.Module, params: Any, first: bool) -> None:
    """Judge side: set `model` to the parameters a call started from (the first call: the case's own start)."""
    tensors = matching_tensors(params, snapshot(model), "params")
    if first and not all(same_values(a, b, dtype=False) for a, b in zip(tensors, model.parameters(), strict=True)):
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
    return flat_grads([torch.zeros_like(p) if g is None else g for g, p in zip(grads, params, strict=True)])


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


def _clamp_bound(seen: torch.Tensor, raw: torch.Tensor) -> float | None:
    """The bound c when `seen` is `raw` with every entry clamped to [-c, c] (what clipping by value does)."""
    bound = float(seen.abs().max())
    if 0 < bound < float(raw.abs().max()) and close_norm(seen, raw.clamp(-bound, bound), rel=2e-3, floor=1e-7):
        return bound
    return None


def _fail_if_clamped(seen: torch.Tensor, raw: torch.Tensor, what: str) -> None:
    """Fail [value-not-norm] when the optimizer saw the raw gradient with every entry clamped to one bound: the
    mark of clipping by value, whether or not the gradient was longer than max_norm."""
    bound = _clamp_bound(seen, raw)
    if bound is not None:
        fail(
            "value-not-norm",
            observed=f"every gradient entry was cut to at most {bound:.3g} in absolute value, the others kept "
            f"(cosine {_cosine(seen, raw):.4f} with the raw gradient)",
            expected="the same direction, shorter, and only when the total norm exceeds max_norm: clip_grad_norm_ "
            "multiplies every gradient by one factor",
            cause="clipping by value (clip_grad_value_, or a clamp of each entry), which changes the direction",
            where=f"use torch.nn.utils.clip_grad_norm_ in {what}",
        )


def _check_clipped(seen: torch.Tensor, raw: torch.Tensor, max_norm: float, what: str) -> None:
    """`seen` must be `raw` rescaled to norm max_norm when raw is longer, and `raw` itself otherwise."""
    raw_norm, seen_norm = float(raw.norm()), float(seen.norm())
    if raw_norm <= max_norm:
        if not close_norm(seen, raw, rel=2e-3, floor=1e-7):
            _fail_if_clamped(seen, raw, what)
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
    if abs(seen_norm - raw_norm) <= 1e-3 * raw_norm and close_norm(seen, raw, rel=2e-3, floor=1e-7):
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
        _fail_if_clamped(seen, raw, what)
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


def _stale_added(seen: torch.Tensor, raw: torch.Tensor, previous: torch.Tensor | None,
                 max_norm: float | None = None) -> bool:
    """Whether the optimizer saw this batch's gradient plus the previous step's (left in .grad), as it is or,
    given `max_norm`, clipped by total norm to it."""
    if previous is None:
        return False
    stale = raw + previous
    return close_norm(seen, stale, rel=2e-3, floor=1e-7) or (
        max_norm is not None and close_norm(seen, _clip_to(stale, max_norm), rel=2e-3, floor=1e-7))


def _fail_stale(what: str) -> None:
    fail(
        "missing-zero-grad",
        observed="in the second call the optimizer saw this batch's gradients plus the previous step's",
        expected="only this batch's gradients",
        cause="backward() adds into .grad, and nothing cleared the previous step's gradients: "
        "optimizer.zero_grad(set_to_none=True) is missing (or clears another optimizer's parameters)",
        where=f"the start of {what}",
    )


def _clip_to(grad: torch.Tensor, max_norm: float) -> torch.Tensor:
    return grad * min(1.0, max_norm / float(grad.norm()))


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
