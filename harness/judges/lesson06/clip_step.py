"""06-clip-step, the judge.

The optimizer saw the batch's gradient, clipped by total norm only when longer; the pre-clip norm returned.
"""

from __future__ import annotations

from typing import Any

from harness.checks.lesson05.common import make_mlp
from harness.checks.lesson06.clip_step import clip_plan
from harness.checks.lesson06.common import clip_threshold, reference_grads
from harness.contract.case import Case
from harness.contract.compare import close_norm, judged
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import WireError
from harness.judges.lesson06.common import (
    _CLIPPING_REQUIREMENTS,
    _check_clipped,
    _clip_to,
    _fail_stale,
    _only_step,
    _returned_norm,
    _same_input,
    _stale_added,
    _start_at,
)


def _fail_eval_mode(what: str) -> None:
    fail(
        "eval-mode",
        observed=f"the model ran its forward in eval mode (the check hands {what} a model in eval mode)",
        expected="model.train() before the forward: dropout and batch norm behave differently in training",
        cause=f"{what} does not put the model in training mode",
        where=f"the first lines of {what}",
    )


def _judge_training(training: Any, what: str) -> None:
    """Fail when a recorded forward ran in eval mode."""
    if not isinstance(training, list) or not all(isinstance(t, bool) for t in training):
        raise WireError("malformed observation: training is not a list of booleans")
    if not all(training):
        _fail_eval_mode(what)


@judges(
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
def judge_clip_step(seen: dict, *, case: Case) -> str:
    """The optimizer saw the batch's gradient, clipped by total norm only when longer; the pre-clip norm returned."""
    seed, plan = clip_plan(case)
    model = make_mlp(seed)
    previous = None
    for i, ((batch, fraction), call) in enumerate(judged(plan, seen["calls"])):
        _start_at(model, call["params"], first=i == 0)
        raw = reference_grads(model, [batch])
        max_norm = clip_threshold(model, [batch], fraction)
        _same_input(call["max_norm"], max_norm)
        _judge_training(call["training"], "clip_train_step")
        grads = _only_step(call["steps"], model, "clip_train_step")
        if _stale_added(grads, raw, previous, max_norm) and not close_norm(
                grads, _clip_to(raw, max_norm), rel=2e-3, floor=1e-7):
            _fail_stale("clip_train_step")
        _check_clipped(grads, raw, max_norm, "clip_train_step")
        _returned_norm(call["returned"], float(raw.norm()), max_norm, "clip_train_step")
        previous = grads
    return f"{len(plan)} steps in training mode: gradients clipped by total norm only when longer than max_norm, " \
        "pre-clip norm returned"
