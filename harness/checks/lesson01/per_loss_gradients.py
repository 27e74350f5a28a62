"""01-per-loss-gradients, the probe.

Record the returned gradients, how many distinct storages they use, whether w.grad was left set, and
the torch calls the student's code made (to name an in-place reset, if there was one).
"""

from __future__ import annotations

from typing import Callable

import torch

from harness.checks.lesson01.common import _randn
from harness.contract.case import Case
from harness.contract.forbidden import CallRecorder
from harness.contract.registry import register


def _loss_family(w: torch.Tensor, count: int, seed: int) -> list[Callable[[torch.Tensor], torch.Tensor]]:
    targets = [_randn(*w.shape, seed=seed + i) for i in range(count)]
    scales = [0.5 + i for i in range(count)]

    def make(target: torch.Tensor, scale: float, kind: int) -> Callable[[torch.Tensor], torch.Tensor]:
        if kind % 2 == 0:
            return lambda v: scale * (v - target).pow(2).sum()
        return lambda v: scale * torch.sin(v * target).sum()

    return [make(t, s, i) for i, (t, s) in enumerate(zip(targets, scales, strict=True))]


def gradient_problems(case: Case) -> list[tuple[torch.Tensor, list[Callable[[torch.Tensor], torch.Tensor]]]]:
    """(w, losses) pairs: a vector with three losses and a matrix with two; other shapes, a single loss and 3-d
    weights hidden."""
    settings = [((5,), 3, 0), ((4, 3), 2, 10)] if not case.hidden else [((4, 3), 4, 10), ((7,), 1, 20),
                                                                         ((2, 2, 2), 2, 30)]
    problems = []
    for shape, count, seed in settings:
        w = _randn(*shape, seed=case.seeded(seed + 99)).requires_grad_()
        problems.append((w, _loss_family(w, count, case.seeded(seed))))
    return problems


@register("01-per-loss-gradients")
def probe_per_loss_gradients(per_loss_gradients: Callable[..., list[torch.Tensor]], *, case: Case) -> dict:
    """Record the returned gradients, how many distinct storages they use, whether w.grad was left set, and
    the torch calls the student's code made (to name an in-place reset, if there was one)."""
    runs = []
    with CallRecorder() as calls:
        for w, losses in gradient_problems(case):
            result = per_loss_gradients(w, losses)
            tensors = isinstance(result, (list, tuple)) and all(isinstance(g, torch.Tensor) for g in result)
            runs.append({"result": result, "storages": len({g.data_ptr() for g in result}) if tensors else None,
                         "grad_left_behind": w.grad is not None})
    return {"runs": runs, "calls": calls.seen}
