"""08-early-stopping, the judge.

Decisions match the reference; the state round-trips through weights_only loading at every epoch.
"""

from __future__ import annotations

from typing import Any

from harness.checks.lesson08.early_stopping import early_stopping_cases
from harness.contract.case import Case
from harness.contract.compare import malformed, real, same_number
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import Opaque, describe


def _as_flag(value: Any) -> bool | None:
    """A returned bool (or number, one-element tensor, numpy bool) as a bool; None for anything else."""
    if isinstance(value, bool):
        return value
    if isinstance(value, Opaque) and value.type_name == "bool_" and value.text in ("True", "False"):
        return value.text == "True"
    number = real(value)
    return None if number is None else bool(number)


def _early_stopping_reference(
    metrics: list[float], patience: int, mode: str, min_delta: float, *, slip: str = ""
) -> list[tuple[bool, float]]:
    """(step()'s return, best) after each metric; `slip` replays one known mistake instead: 'tie' (a metric
    equal to best + or - min_delta improves), 'no-reset' (the counter is never reset), 'late' (> patience)."""
    best, bad, out = None, 0, []
    for value in metrics:
        edge = None if best is None else (best - min_delta if mode == "min" else best + min_delta)
        better = edge is None or (value < edge if mode == "min" else value > edge) or (slip == "tie" and value == edge)
        best, bad = (value, 0 if slip != "no-reset" else bad) if better else (best, bad + 1)
        out.append((bad > patience if slip == "late" else bad >= patience, best))
    return out


# What the decisions show when they match a known mistake's replay: (cause, hint 1 for that cause).
_STOP_SLIPS = {
    "tie": (
        "a metric equal to best counted as an improvement and reset the counter (<= or >= where the text says "
        "strictly better): only a metric that beats best by more than min_delta is an improvement",
        "With mode='max' and patience 2, step through 0.5, 0.6, 0.6, 0.55: is the second 0.6 better than best, "
        "or only equal to it? What should the counter hold after 0.55?",
    ),
    "no-reset": (
        "the counter of bad epochs is not reset on improvement: it counts every bad epoch since the start, so a "
        "run that improved still stops",
        "Print bad_epochs after each step of 1.0, 0.8, 0.9, 0.85, 0.7 with patience 2: what should it hold "
        "right after the improvement to 0.7?",
    ),
    "late": (
        "step() returns True one epoch late: the counter is compared with > instead of >= patience",
        "With patience 2, after exactly two epochs in a row without improvement, what does your comparison of "
        "the counter with patience give?",
    ),
}


def _stop_slip(decisions: list[bool | None], metrics: list[float], patience: int, mode: str,
               min_delta: float) -> tuple[str, str | None]:
    """The cause (and hint 1) of decisions that went wrong at their last epoch: a known mistake when its replay
    makes exactly these decisions, else what the decisions alone show."""
    for slip, (cause, hint) in _STOP_SLIPS.items():
        replay = _early_stopping_reference(metrics, patience, mode, min_delta, slip=slip)
        if [stop for stop, _ in replay[: len(decisions)]] == decisions:
            return cause, hint
    return ("the counter of bad epochs is not reset on improvement, grows on improvement too, or is compared with "
            "> instead of >=", None)


def _judge_straight(steps: list[Any], metrics: list[float], patience: int, mode: str, min_delta: float) -> None:
    expected = _early_stopping_reference(metrics, patience, mode, min_delta)
    for epoch, ((said, held), (stop, best)) in enumerate(zip(steps, expected, strict=True)):
        setting = f"patience={patience}, mode={mode!r}, min_delta={min_delta}, metrics {metrics[: epoch + 1]}"
        held_number = real(held)
        if not same_number(held_number, best):
            code = "min-delta-ignored" if min_delta else "mode-ignored" if mode == "max" else "wrong-best"
            fail(
                code,
                observed=f"best = {held} after {setting}",
                expected=f"best = {best}",
                cause={
                    "min-delta-ignored": "the comparison ignores min_delta, applies it the wrong way, or counts a "
                    "change of exactly min_delta as an improvement (<= instead of <): an improvement beats best by "
                    "more than min_delta",
                    "mode-ignored": "mode='max' compared like 'min' (lower taken as better)",
                    "wrong-best": "best replaced by a value that did not improve (every metric stored), or not "
                    "replaced when one did",
                }[code],
                where="the comparison in step()",
            )
        if _as_flag(said) != stop:
            cause, hint = _stop_slip([_as_flag(s) for s, _ in steps[: epoch + 1]], metrics, patience, mode,
                                     min_delta)
            fail(
                "wrong-stop",
                observed=f"step() returned {said} after {setting}",
                expected=f"{stop}: stop once {patience} epochs in a row did not improve",
                cause=cause,
                where="bad_epochs in step()",
                hint=hint,
            )


def _judge_resumed(
    resumed: dict[str, Any], metrics: list[float], patience: int, mode: str, min_delta: float, cut: int
) -> None:
    if resumed["refused"] is not None:
        fail(
            "not-weights-only",
            observed=f"torch.load(..., weights_only=True) refused the state dict: {resumed['refused']}",
            expected="plain values only (numbers, None, lists, dicts)",
            cause="state_dict() returns an object (self, or a custom class) instead of plain values",
            where="state_dict()",
        )
    expected = _early_stopping_reference(metrics, patience, mode, min_delta)[cut:]
    for epoch, ((said, held), (stop, best)) in enumerate(zip(resumed["steps"], expected, strict=True), start=cut):
        held_number = real(held)
        if _as_flag(said) != stop or not same_number(held_number, best):
            fail(
                "state-not-restored",
                observed=f"after load_state_dict and {epoch - cut + 1} more epochs: step() returned {said}, best "
                f"= {held}",
                expected=f"{stop} and best = {best}, as if the run had never stopped",
                cause="state_dict() or load_state_dict() leaves out the best value or the bad-epoch counter",
                where="state_dict and load_state_dict: both 'best' and 'bad_epochs'",
            )


@judges(
    "08-early-stopping", nonfinite=('runs/*/initial',),
    hints=Hints(
        nudge="Early stopping has two pieces of memory: the best value so far and how many epochs in a row did "
        "not beat it. A resumed run needs both, or it waits `patience` epochs all over again.",
        concept="An improvement beats best by more than min_delta in the direction of mode; it resets the "
        "counter, anything else adds 1; stop once the counter reaches patience. state_dict holds both pieces of "
        "memory as plain values.",
        solution="improved = self.best is None or (metric < self.best - self.min_delta if self.mode == 'min' "
        "else metric > self.best + self.min_delta); state_dict: return {'best': self.best, 'bad_epochs': "
        "self.bad_epochs}",
        section="3. Early stopping must resume too",
    ),
    requires={
        "initial-best": Requirement(
            "best is None before the first step",
            hint="Print EarlyStopping(2).best before any step: the text asks for None, not a sentinel."),
        "wrong-best": Requirement(
            "best holds the best value so far (mode 'min': the lowest)",
            hint="After the metrics 1.0, 0.8, 0.9, what should best hold? Is best only replaced on improvement?"),
        "mode-ignored": Requirement(
            "mode='max' means higher is better",
            hint="Run it with mode='max' on 0.5, 0.6: does 0.6 count as an improvement?"),
        "min-delta-ignored": Requirement(
            "an improvement must beat best by more than min_delta",
            hint="With min_delta=0.125, does 0.875 improve on 1.0? Does 0.84375?"),
        "wrong-stop": Requirement(
            "step() returns True once `patience` epochs in a row did not improve",
            hint="With patience 2: after two epochs without improvement, what does step() return? Is the "
            "counter reset on improvement?"),
        "not-weights-only": Requirement(
            "state_dict() returns plain values (loadable with weights_only=True)",
            hint="What does your state_dict() put in the dict: numbers, or objects?"),
        "state-not-restored": Requirement(
            "load_state_dict restores every piece of memory, so a resumed run decides the same",
            hint="Which attributes change in step()? Are all of them in state_dict() and restored by "
            "load_state_dict()?"),
    },
)
def judge_early_stopping(seen: dict, *, case: Case) -> str:
    """Decisions match the reference; the state round-trips through weights_only loading at every epoch."""
    cases = early_stopping_cases(case)
    for (metrics, patience, mode, min_delta), run in zip(cases, seen["runs"], strict=True):
        if run["initial"] is not None:
            fail(
                "initial-best",
                observed=f"best = {describe(run['initial'])} before the first step",
                expected="None: there is no best value before the first metric",
                cause="best initialised to a sentinel (inf, -inf, 0) instead of None",
                where="__init__: self.best = None",
            )
        _judge_straight(run["straight"], metrics, patience, mode, min_delta)
        for cut, resumed in enumerate(run["resumed"], start=1):
            _judge_resumed(resumed, metrics, patience, mode, min_delta, cut)
        if len(run["resumed"]) != len(metrics) - 1:
            malformed("not one resumed run after every epoch")
    return f"right decisions on {len(cases)} metric sequences; the state resumes exactly at every epoch"
