"""08-early-stopping, the judge.

Decisions match the reference; the state round-trips through weights_only loading at every epoch.
"""

from __future__ import annotations

import math
from typing import Any

from harness.checks.lesson08.early_stopping import _early_stopping_cases
from harness.contract.case import Case
from harness.contract.failure import fail
from harness.contract.registry import judges
from harness.contract.wire import Opaque, describe
from harness.judges.lesson08.common import _as_number


def _as_flag(value: Any) -> bool | None:
    """A returned bool (or number, one-element tensor, numpy bool) as a bool; None for anything else."""
    if isinstance(value, bool):
        return value
    if isinstance(value, Opaque) and value.type_name == "bool_" and value.text in ("True", "False"):
        return value.text == "True"
    number = _as_number(value)
    return None if number is None else bool(number)


def _early_stopping_reference(
    metrics: list[float], patience: int, mode: str, min_delta: float
) -> list[tuple[bool, float]]:
    best, bad, out = None, 0, []
    for value in metrics:
        better = best is None or (value < best - min_delta if mode == "min" else value > best + min_delta)
        best, bad = (value, 0) if better else (best, bad + 1)
        out.append((bad >= patience, best))
    return out


def _judge_straight(steps: list[Any], metrics: list[float], patience: int, mode: str, min_delta: float) -> None:
    expected = _early_stopping_reference(metrics, patience, mode, min_delta)
    for epoch, ((said, held), (stop, best)) in enumerate(zip(steps, expected, strict=True)):
        setting = f"patience={patience}, mode={mode!r}, min_delta={min_delta}, metrics {metrics[: epoch + 1]}"
        held_number = _as_number(held)
        if held_number is None or not math.isclose(held_number, best):
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
            fail(
                "wrong-stop",
                observed=f"step() returned {said} after {setting}",
                expected=f"{stop}: stop once {patience} epochs in a row did not improve",
                cause="the counter of bad epochs is not reset on improvement, grows on improvement too, or is "
                "compared with > instead of >=",
                where="bad_epochs in step()",
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
        held_number = _as_number(held)
        if _as_flag(said) != stop or held_number is None or not math.isclose(held_number, best):
            fail(
                "state-not-restored",
                observed=f"after load_state_dict and {epoch - cut + 1} more epochs: step() returned {said}, best "
                f"= {held}",
                expected=f"{stop} and best = {best}, as if the run had never stopped",
                cause="state_dict() or load_state_dict() leaves out the best value or the bad-epoch counter",
                where="state_dict and load_state_dict: both 'best' and 'bad_epochs'",
            )


@judges("08-early-stopping")
def judge_early_stopping(seen: dict, *, case: Case) -> str:
    """Decisions match the reference; the state round-trips through weights_only loading at every epoch."""
    cases = _early_stopping_cases(case)
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
            raise ValueError("the observation does not resume after every epoch")
    return f"right decisions on {len(cases)} metric sequences; the state resumes exactly at every epoch"
