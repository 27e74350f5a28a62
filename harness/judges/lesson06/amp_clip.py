"""06-amp-clip, the judge.

The optimizer saw the true (unscaled) gradient clipped to max_norm; an overflow step is skipped.
"""

from __future__ import annotations

import torch

from harness.checks.lesson05.common import make_mlp
from harness.checks.lesson06.amp_clip import AMP_SCALE, amp_clip_calls, amp_clip_parts
from harness.checks.lesson06.common import clip_threshold, reference_grads
from harness.contract.case import Case
from harness.contract.compare import close_norm, judged, matching_tensors, same_values
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.instruments import snapshot
from harness.contract.registry import judges
from harness.contract.wire import WireError
from harness.judges.lesson05.common import (
    AMP_SCALER_REQUIREMENTS,
    AMP_SCOPE_REQUIREMENTS,
    fail_autocast_dtype,
    other_dtype,
)
from harness.judges.lesson06.common import (
    _CLIPPING_REQUIREMENTS,
    _check_clipped,
    _clip_to,
    _cosine,
    _only_step,
    _returned_norm,
    _same_input,
    _start_at,
)


@judges(
    "06-amp-clip", nonfinite=('runs/*/params_after_inf/*',),
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
def judge_amp_clip(seen: dict, *, case: Case) -> str:
    """The optimizer saw the true (unscaled) gradient clipped to max_norm; an overflow step is skipped."""
    for (seed, dtype, fraction, part), run in judged(amp_clip_parts(case), seen["runs"]):
        if part == "clip":
            _judge_amp_clip(run, seed, dtype, fraction)
        else:
            _judge_amp_clip_skip(run, seed)
    return "unscaled before clipping: the optimizer saw the true gradients clipped to max_norm (and unchanged " \
        "below it), bf16 and fp16; overflow steps skipped"


def _judge_amp_clip(run: dict, seed: int, dtype: torch.dtype, fraction: float) -> None:
    """Each call's optimizer step saw its batch's true gradient, clipped to max_norm only when longer."""
    model = make_mlp(seed)
    calls, plan = run["calls"], amp_clip_calls(seed, fraction)
    if not isinstance(calls, list) or len(calls) != len(plan):
        raise WireError("malformed observation: not one record per call")
    previous = None
    for i, ((batch, call_fraction), call) in enumerate(zip(plan, calls, strict=True)):
        _start_at(model, call["params"], first=i == 0)
        raw = reference_grads(model, [batch], autocast_dtype=dtype)
        max_norm = clip_threshold(model, [batch], call_fraction, dtype)
        _same_input(call["max_norm"], max_norm)
        grads = _only_step(call["steps"], model, "amp_clip_step", none_code="missing-step")
        other = reference_grads(model, [batch], autocast_dtype=other_dtype(dtype))
        if float((grads - _clip_to(other, max_norm)).norm()) < 0.1 * float((grads - _clip_to(raw, max_norm)).norm()):
            fail_autocast_dtype(dtype, "amp_clip_step")
        if (previous is not None and not close_norm(grads, raw, rel=2e-3, floor=1e-7)
                and close_norm(grads, raw + previous / AMP_SCALE, rel=2e-3, floor=1e-7)):
            fail(
                "missing-zero-grad",
                observed="in the second call the optimizer saw this batch's gradients plus the previous step's "
                f"divided by the scale ({AMP_SCALE:g})",
                expected="only this batch's gradients",
                cause="backward() adds into .grad, and nothing cleared the previous step's gradients (unscale_ then "
                "divided them by the scale): optimizer.zero_grad(set_to_none=True) is missing",
                where="the start of amp_clip_step",
            )
        seen_norm = float(grads.norm())
        if seen_norm < max_norm / 10 and _cosine(grads, raw) >= 0.9999:
            twice = _divided_twice(calls, plan, seed, dtype)
            if twice is not None:
                fail(
                    "clip-before-unscale",
                    observed=f"in a call whose gradient (norm {twice[0]:.3g}) is below max_norm={twice[1]:.3g}, so "
                    f"not clipped, the optimizer saw it divided by the scale ({AMP_SCALE:g}): norm "
                    f"{twice[0] / AMP_SCALE:.3g}",
                    expected=f"norm {twice[0]:.3g}, the true gradient",
                    cause="the gradients were divided by the scale twice: once by hand (p.grad / scale) and again by "
                    "scaler.step, which unscales whatever unscale_ has not (it does not know about the division "
                    "by hand, and cannot skip a step whose gradients you changed)",
                    where="replace the division by hand with scaler.unscale_(optimizer) before clip_grad_norm_",
                    hint="scaler.unscale_(optimizer) divides the gradients and tells scaler.step it has done so: "
                    "a division of your own does not.",
                )
            fail(
                "clip-before-unscale",
                observed=f"the optimizer saw gradient norm {seen_norm:.3g} with max_norm={max_norm:.3g} "
                f"(scale {AMP_SCALE:g})",
                expected=f"norm {min(max_norm, float(raw.norm())):.3g}",
                cause="the gradients were clipped while still multiplied by the scale, then scaler.step divided "
                f"them by it: the effective threshold became max_norm / {AMP_SCALE:g}",
                where="call scaler.unscale_(optimizer) before clip_grad_norm_",
            )
        _check_clipped(grads, raw, max_norm, "amp_clip_step")
        _returned_norm(call["returned"], float(raw.norm()), max_norm, "amp_clip_step", scale=AMP_SCALE)
        previous = grads


def _divided_twice(calls: list, plan: list, seed: int, dtype: torch.dtype) -> tuple[float, float] | None:
    """(true norm, max_norm) of a call of the run whose gradient is below max_norm and reached the optimizer
    divided by the scale: a division twice, which clipping while scaled cannot give there (it gives max_norm /
    scale). None when no call shows it."""
    model = make_mlp(seed)
    for i, ((batch, call_fraction), call) in enumerate(zip(plan, calls, strict=True)):
        _start_at(model, call["params"], first=i == 0)
        raw = reference_grads(model, [batch], autocast_dtype=dtype)
        max_norm = clip_threshold(model, [batch], call_fraction, dtype)
        grads = _only_step(call["steps"], model, "amp_clip_step", none_code="missing-step")
        if float(raw.norm()) < 0.9 * max_norm and close_norm(grads, raw / AMP_SCALE, rel=2e-3, floor=1e-9):
            return float(raw.norm()), max_norm
    return None


def _judge_amp_clip_skip(run: dict, seed: int) -> None:
    start = snapshot(make_mlp(seed))
    steps_taken, scale = run["steps_taken"], run["scale"]
    if not isinstance(steps_taken, int) or not isinstance(scale, float):
        raise WireError("malformed observation: steps_taken or scale")
    after = matching_tensors(run["params_after_inf"], start, "params_after_inf")
    unchanged = all(same_values(a, b, dtype=False) for a, b in zip(after, start, strict=True))
    if steps_taken or not unchanged or not scale == AMP_SCALE / 2:
        fail(
            "inf-step-not-skipped",
            observed=f"with an inf gradient: {steps_taken} optimizer step(s), parameters "
            f"{'unchanged' if unchanged else 'changed'}, scale {scale:g}",
            expected=f"no optimizer step, parameters unchanged, scale lowered to {AMP_SCALE / 2:g}",
            cause="the parameters were changed outside scaler.step (a hand-made update), or the scale was set "
            "outside scaler.update: clipping an inf gradient gives NaN, which only scaler.step checks and skips"
            if steps_taken == 0 else "the optimizer stepped although a gradient held inf: the step bypasses "
            "scaler.step, or the gradients were replaced before it",
            where="the scaler.step(optimizer) and scaler.update() lines, and any update of yours around them",
        )
