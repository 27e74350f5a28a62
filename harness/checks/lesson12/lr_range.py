"""12-lr-range, the probe.

Run the student's sweep on each case; record every optimizer step, what it returned, and the state after.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from harness.checks.lesson12.common import Batch
from harness.contract.case import Case
from harness.contract.instruments import StepRecorder, collect, snapshot
from harness.contract.registry import register

BASE_LR, MOMENTUM = 0.05, 0.9


def sweeps(case: Case) -> list[dict[str, Any]]:
    """(seed, batches, start_lr, end_lr, num_steps, diverge, poisoned) of each sweep: one that diverges, one that
    does not, and one whose batch `poisoned` holds an inf (as a division by a zero std leaves one): the loss of
    that step is NaN while every loss before it is far below diverge times the best, so only a test for
    non-finite losses stops there (NaN > anything is False)."""
    if case.hidden:
        plan = [(3, 1e-3, 40.0, 28, 4.0, None), (3, 1e-4, 3e-3, 6, 3.0, None), (4, 1e-4, 1e-2, 12, 4.0, 3)]
    else:
        plan = [(4, 1e-3, 30.0, 30, 4.0, None), (3, 1e-4, 1e-2, 8, 4.0, None), (3, 1e-4, 1e-2, 8, 4.0, 2)]
    return [{"seed": case.seeded((1250 if case.hidden else 1240) + i), "batches": b, "start_lr": s, "end_lr": e,
             "num_steps": n, "diverge": d, "poisoned": p} for i, (b, s, e, n, d, p) in enumerate(plan)]


def sweep_setup(item: dict[str, Any]) -> tuple[nn.Module, torch.optim.Optimizer, list[Batch]]:
    """The model after one warm-up step (so momentum buffers exist), its optimizer (two groups), the batches."""
    seed = item["seed"]
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 6))
    generator = torch.Generator().manual_seed(seed + 1)
    centres = torch.randn(6, 12, generator=generator) * 0.6  # overlapping classes: the loss flattens above 0
    batches = []
    for _ in range(item["batches"]):
        targets = torch.randint(0, 6, (32,), generator=generator)
        batches.append((centres[targets] + torch.randn(32, 12, generator=generator), targets))
    weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
    biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
    optimizer = torch.optim.SGD([{"params": weights}, {"params": biases}], lr=BASE_LR, momentum=MOMENTUM)
    warm_x = torch.randn(32, 12, generator=generator)
    warm_y = torch.randint(0, 6, (32,), generator=generator)
    optimizer.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(model(warm_x), warm_y).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if item["poisoned"] is not None:
        batches[item["poisoned"]][0][0, 0] = math.inf
    return model, optimizer, batches


def momentum_buffers(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[torch.Tensor | None]:
    """Each parameter's SGD momentum buffer (None where the optimizer holds none)."""
    return [optimizer.state.get(p, {}).get("momentum_buffer") for p in model.parameters()]


@register("12-lr-range")
def probe_lr_range(lr_range_test: Callable[..., Any], *, case: Case) -> dict:
    """Run the student's sweep on each case; record every optimizer step, what it returned, and the state after."""
    def record(item: dict[str, Any]) -> dict:
        model, optimizer, batches = sweep_setup(item)
        with StepRecorder(optimizer) as steps:
            got = lr_range_test(model, optimizer, nn.functional.cross_entropy, batches, item["start_lr"],
                                item["end_lr"], item["num_steps"], item["diverge"])
        got = tuple(got) if isinstance(got, (tuple, list)) else got
        if isinstance(got, tuple):
            got = tuple(list(v) if isinstance(v, (list, tuple)) else v for v in got)
        flat = [p for group in optimizer.param_groups for p in group["params"]]
        order = [next(i for i, q in enumerate(flat) if q is p) for p in model.parameters()]  # groups -> model order
        return {"returned": got,
                "steps": [{"params": [r.params[i] for i in order], "grads": [r.grads[i] for i in order],
                           "lrs": r.lrs} for r in steps.records],
                "params_after": snapshot(model), "buffers_after": momentum_buffers(model, optimizer),
                "lrs_after": [float(g["lr"]) for g in optimizer.param_groups]}

    return {"calls": collect(sweeps(case), record)}
