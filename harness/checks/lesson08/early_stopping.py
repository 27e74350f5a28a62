"""08-early-stopping, the probe.

Replay each metric sequence straight through, and stopped and resumed after every epoch.
"""

from __future__ import annotations

import io
from typing import Any, Callable

import torch

from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
from harness.contract.registry import register

EarlyStoppingCase = tuple[list[float], int, str, float]


def early_stopping_cases(case: Case) -> list[EarlyStoppingCase]:
    """Fixed metric sequences (both modes, min_delta, ties, patience 1 to 3); the hidden ones add a seeded
    random walk.

    Every metric and min_delta is a multiple of a power of two (exact in binary), so `metric < best -
    min_delta`, `best - metric > min_delta` and their 'max' mirrors agree on every value, the boundary
    `best - metric == min_delta` (not an improvement) included: no verdict depends on float rounding.
    """
    cases = [
        ([1.0, 0.8, 0.9, 0.85, 0.7, 0.75, 0.72, 0.71, 0.9], 2, "min", 0.0),
        ([0.5, 0.6, 0.6, 0.55, 0.7, 0.69, 0.68, 0.7], 2, "max", 0.0),
        # 0.875 and 0.5 sit exactly min_delta below best: not improvements
        ([1.0, 0.875, 0.84375, 0.75, 0.625, 0.5625, 0.5, 0.25], 2, "min", 0.125),
        # 0.3125 and 0.5625 sit exactly min_delta above best: not improvements
        ([0.125, 0.25, 0.3125, 0.34375, 0.5, 0.5, 0.46875, 0.5625, 0.25], 3, "max", 0.0625),
        ([3.0, 3.0, 3.0, 2.0], 1, "min", 0.0),
    ]
    if case.hidden:
        generator = torch.Generator().manual_seed(case.seeded(6))
        walk = 1.0 + torch.randn(10, generator=generator).mul(0.05).cumsum(0)
        walk = (walk * 256).round() / 256  # multiples of 1/256: exact in binary, ties with min_delta possible
        cases.append((walk.tolist(), 2, ("min", "max")[case.seed % 2], 1 / 64))
    return cases


def _replay_stopper(stopper: Any, metrics: list[float]) -> list[tuple[Any, Any]]:
    """What step() returned and what `best` held after each metric."""
    return [(stopper.step(value), stopper.best) for value in metrics]


def _probe_resumed_stopper(
    make: Callable[..., Any], metrics: list[float], patience: int, mode: str, min_delta: float, cut: int
) -> dict[str, Any]:
    """Stop after `cut` metrics, save the state through torch.save and a weights_only load, resume in a new one."""
    first = make(patience=patience, mode=mode, min_delta=min_delta)
    _replay_stopper(first, metrics[:cut])
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    try:
        state = torch.load(buffer, weights_only=True)
    except Exception as error:  # noqa: BLE001 -- any refusal means the same thing here
        return {"refused": str(error)[:160], "steps": None}
    second = make(patience=patience, mode=mode, min_delta=min_delta)
    second.load_state_dict(state)
    return {"refused": None, "steps": _replay_stopper(second, metrics[cut:])}


@register(
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
def probe_early_stopping(early_stopping_class: Callable[..., Any], *, case: Case) -> dict:
    """Replay each metric sequence straight through, and stopped and resumed after every epoch."""
    runs = []
    for metrics, patience, mode, min_delta in early_stopping_cases(case):
        initial = early_stopping_class(patience=patience, mode=mode, min_delta=min_delta).best
        straight = _replay_stopper(early_stopping_class(patience=patience, mode=mode, min_delta=min_delta), metrics)
        resumed = [
            _probe_resumed_stopper(early_stopping_class, metrics, patience, mode, min_delta, cut)
            for cut in range(1, len(metrics))
        ]
        runs.append({"initial": initial, "straight": straight, "resumed": resumed})
    return {"runs": runs}
