"""08-early-stopping, the probe.

Replay each metric sequence straight through, and stopped and resumed after every epoch.
"""

from __future__ import annotations

import io
from typing import Any, Callable

import torch

from harness.contract.case import Case
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


@register("08-early-stopping")
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
