"""10-optimizer, the probe.

Call make_optimizer on a small CNN with norms, biases and a buffer; record its groups and every step's lr.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from harness.checks.lesson10.common import _rng_kept
from harness.checks.param_groups import describe_groups
from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
from harness.contract.registry import register


class _Buffered(nn.Module):
    """Holds a buffer and no parameter, as the capstone's normalisation layer does."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(3, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - self.mean


def optimizer_model(case: Case, freeze_first: bool) -> nn.Module:
    """A small CNN with a buffer, a bias-free conv, norms and biases (its first conv frozen if asked)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(case.seeded(0))
        model = nn.Sequential(
            _Buffered(), nn.Conv2d(3, 4, 3, bias=False), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
            nn.Flatten(), nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 5),
        )
    if freeze_first:
        model[1].requires_grad_(False)
    return model


def optimizer_settings(case: Case) -> list[tuple[float, float, int, int, bool]]:
    """(lr, weight_decay, warmup_steps, total_steps, freeze the first conv)."""
    visible = [(1e-2, 0.05, 5, 40, False), (3e-3, 0.1, 0, 25, True)]  # the second: no warm-up, a frozen layer
    if case.hidden:  # other lengths, no weight decay at all
        return [*visible, (2e-2, 0.0, 7, 60, False), (5e-3, 0.02, 3, 30, True)]
    return visible


def _record_optimizer(model: nn.Module, result: Any, total: int) -> dict[str, Any]:
    """What make_optimizer returned, as data: the optimizer's kind and groups, whether the scheduler drives it,
    and the lr of every group at each of total + 3 optimizer steps (no gradients: nothing moves)."""
    if not (isinstance(result, tuple) and len(result) == 2):
        return {"returned": type(result).__name__}
    optimizer, scheduler = result
    record: dict[str, Any] = {"returned": "pair", "optimizer": type(optimizer).__name__,
                              "adamw": isinstance(optimizer, torch.optim.AdamW)}
    if not isinstance(optimizer, torch.optim.Optimizer):
        return record
    record["groups"] = describe_groups(model, optimizer.param_groups)
    record["drives_optimizer"] = getattr(scheduler, "optimizer", None) is optimizer
    if record["drives_optimizer"]:
        record["lrs"] = []
        for _ in range(total + 3):
            record["lrs"].append([group["lr"] for group in optimizer.param_groups])
            optimizer.step()
            scheduler.step()
    return record


@register(
    "10-optimizer", unjudged=("settings/*/groups/*/lr",),  # the schedule's lr at every step is judged instead
    hints=Hints(
        nudge="Two groups of the trainable parameters: matrices and kernels (p.ndim >= 2) with weight decay, biases "
        "and normalisation weights (ndim < 2) without. Then a LambdaLR whose factor is lesson 07's "
        "warm-up-then-cosine.",
        concept="AdamW decays the weights directly (decoupled); decay belongs on matrices and kernels only. The "
        "schedule counts optimizer steps: (step + 1) / warmup_steps during the warm-up, then 0.5 * (1 + cos(pi * "
        "progress)) with progress measured from the end of the warm-up and clamped at 1.",
        solution="decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]; no_decay = [... "
        "p.ndim < 2]; optimizer = torch.optim.AdamW([{'params': decay, 'weight_decay': weight_decay}, {'params': "
        "no_decay, 'weight_decay': 0.0}], lr=lr); factor(step) = (step + 1) / warmup_steps if step < warmup_steps "
        "else 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps)))); "
        "return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)",
        section="3. The optimizer: parameter groups, warm-up, cosine"),
    requires={
        "not-a-pair": Requirement("returns (optimizer, scheduler)",
                                  hint="fit needs both objects: does your return statement give two?"),
        "not-adamw": Requirement("the optimizer is torch.optim.AdamW",
                                 hint="Adam and AdamW differ in how weight_decay acts: which one decouples it?"),
        "frozen-params-included": Requirement(
            "only trainable parameters (requires_grad) in the groups",
            hint="The check freezes a layer: what tells you a parameter will never get a gradient?"),
        "missing-params": Requirement(
            "every trainable parameter is in a group",
            hint="List model.named_parameters(): which kind of parameter did none of your groups take?"),
        "decay-on-bias-or-norm": Requirement(
            "no weight decay on biases and normalisation weights (ndim < 2)",
            hint="A BatchNorm's scale is not called 'bias', but it is 1-D: what property sorts it with the biases?"),
        "no-decay-on-weights": Requirement(
            "weight_decay on every matrix and kernel (ndim >= 2)",
            hint="Print each group's weight_decay: is the decay group's value the weight_decay argument?"),
        "wrong-lr": Requirement("every group at learning rate lr",
                                hint="Does any group set its own 'lr'? Every group trains at the lr argument."),
        "scheduler-other-optimizer": Requirement(
            "the scheduler drives the optimizer returned with it",
            hint="Which optimizer did you give LambdaLR? It must be the very object you return."),
        "warmup-wrong": Requirement(
            "warm-up: lr * (step + 1) / warmup_steps for step < warmup_steps (the first step already trains)",
            hint="Print the factor at steps 0, 1 and warmup_steps - 1: what should step 0 give, and which step "
            "reaches the peak?"),
        "cosine-wrong": Requirement(
            "then lr * 0.5 * (1 + cos(pi * progress)), progress from the end of the warm-up to total_steps",
            hint="At step warmup_steps the factor is 1 and at total_steps it is 0: does your progress start and "
            "end there?"),
        "rises-after-total": Requirement(
            "the lr stays at 0 after total_steps",
            hint="Print the factor at total_steps + 2: the cosine must not come back up."),
        "divides-by-zero": Requirement(
            "no warm-up at all (warmup_steps = 0) is valid: the factor never divides by it",
            hint="Call your factor with warmup_steps = 0: the ramp's division by warmup_steps belongs only in the "
            "`step < warmup_steps` branch, which no step enters then."),
    },
)
def probe_optimizer(make_optimizer: Callable[..., tuple[torch.optim.Optimizer, Any]], *, case: Case) -> dict:
    """Call make_optimizer on a small CNN with norms, biases and a buffer; record its groups and every step's lr."""
    records = []
    with _rng_kept():
        for lr, weight_decay, warmup, total, freeze_first in optimizer_settings(case):
            model = optimizer_model(case, freeze_first)
            try:
                result = make_optimizer(model, lr=lr, weight_decay=weight_decay, warmup_steps=warmup,
                                        total_steps=total)
                records.append(_record_optimizer(model, result, total))
            except ZeroDivisionError as error:
                if warmup:  # no zero in the arguments: raised as is, with its line
                    raise
                line = traceback.extract_tb(error.__traceback__)[-1].line or ""
                records.append({"returned": "zero-division", "line": line[:200]})
            if records[-1]["returned"] != "pair":
                break
    return {"settings": records}
