"""13-accumulate, the probe.

Two calls of the student's step per run, the model left in eval mode before each; record the forward
batch sizes and modes, the steps the optimizer took and what each call returned.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from harness.contract.case import Case
from harness.contract.instruments import ForwardRecorder, StepRecorder, collect, snapshot
from harness.contract.registry import register

Batch = tuple[torch.Tensor, torch.Tensor]


def accum_cases(case: Case) -> list[tuple[int, int, int]]:
    """(seed, batch size, micro-batch size) of each run: uneven splits, and (hidden) one micro-batch."""
    if case.hidden:
        # 11 rows in 3s: chunk(3) gives 4-row pieces, as the visible case's 10 rows do
        return [(case.seeded(131), 13, 5), (case.seeded(132), 6, 8), (case.seeded(133), 12, 4),
                (case.seeded(135), 11, 3)]
    return [(case.seeded(130), 10, 4), (case.seeded(134), 10, 3)]  # 10 rows in 3s: chunk(3) gives a 4-row piece


def accum_setup(seed: int, size: int) -> tuple[nn.Module, torch.optim.Optimizer, list[Batch]]:
    """A seeded MLP, its SGD optimizer and two batches of `size` rows."""
    generator = torch.Generator().manual_seed(seed)
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 2))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.5)
    batches = [(torch.randn(size, 5, generator=generator), torch.randn(size, 2, generator=generator))
               for _ in range(2)]
    return model, torch.optim.SGD(model.parameters(), lr=0.1), batches


@register("13-accumulate")
def probe_accumulate(accumulation_step: Callable[..., Any], *, case: Case) -> dict:
    """Two calls of the student's step per run, the model left in eval mode before each; record the forward
    batch sizes and modes, the steps the optimizer took and what each call returned."""
    def record(item: tuple[int, int, int]) -> dict:
        seed, size, micro = item
        model, optimizer, batches = accum_setup(seed, size)
        calls = []
        for batch in batches:
            model.eval()  # as after a validation pass: the step must switch back
            with ForwardRecorder(model) as forwards, StepRecorder(optimizer) as steps:
                returned = accumulation_step(model, batch, nn.functional.mse_loss, optimizer, micro)
            calls.append({"returned": returned, "sizes": [r.batch_size for r in forwards.records],
                          "training": [r.training for r in forwards.records],
                          "steps": [{"grads": r.grads, "params": r.params} for r in steps.records],
                          "after": snapshot(model)})
        return {"calls": calls}

    return {"results": collect(accum_cases(case), record)}
