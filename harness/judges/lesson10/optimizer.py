"""10-optimizer, the judge.

The groups of a small CNN with norms, biases and a buffer; the lr of every step of the schedule.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from harness.checks.lesson10.optimizer import optimizer_model, optimizer_settings
from harness.checks.param_groups import check_weight_decay, group_lr, group_of_each_parameter
from harness.contract.case import Case
from harness.contract.compare import isclose_number, same_number
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.judges.lesson07.common import warmup_cosine_reference


def _check_groups(model: nn.Module, record: dict[str, Any], lr: float, weight_decay: float) -> None:
    if record["adamw"] is not True:
        fail("not-adamw", observed=f"a {record['optimizer']}", expected="torch.optim.AdamW",
             cause="Adam's weight_decay adds an L2 term to the gradient, which Adam's per-weight scaling then "
             "weakens; AdamW decays the weights directly (decoupled), as intended",
             where="torch.optim.AdamW(groups, lr=lr)")
    for name, group in group_of_each_parameter(model, record["groups"]).items():
        check_weight_decay(model, name, group, weight_decay, default=0.01, default_is="AdamW's default")
        peak = group_lr(group, name, initial=True)
        if not same_number(peak, lr):
            fail("wrong-lr", observed=f"{name}'s group has base lr {peak}", expected=f"{lr} in every group",
                 cause="the groups' lr is not the lr argument", where="AdamW(groups, lr=lr)")


def _check_schedule(record: dict[str, Any], lr: float, warmup: int, total: int) -> None:
    if record["drives_optimizer"] is not True:
        fail("scheduler-other-optimizer", observed="the scheduler was not built on the optimizer returned with it",
             expected="scheduler.optimizer is optimizer", cause="a scheduler built on another optimizer changes "
             "nothing that trains", where="build the scheduler from the optimizer you return")
    for step, used in zip(range(total + 3), record["lrs"], strict=True):
        expected = lr * warmup_cosine_reference(step, warmup, total)
        numbers = isinstance(used, list) and all(isinstance(u, (int, float)) and not isinstance(u, bool) for u in used)
        if not (numbers and used):
            raise ValueError(f"the lrs of step {step} are not a list of numbers")
        if all(isclose_number(u, expected) for u in used):
            continue
        where = f"optimizer step {step} of a schedule with warmup_steps={warmup}, total_steps={total}, lr={lr}"
        observed = f"{where} used lr {used[0]:.6g}" if len(set(used)) == 1 else f"{where} used lrs {used}"
        if step < warmup:
            from_zero = step == 0 and all(abs(u) < 1e-12 for u in used)
            fail("warmup-wrong", observed=observed,
                 expected=f"{expected:.6g} = lr * (step + 1) / warmup_steps (lr / warmup_steps at step 0: the first "
                 "step already trains)",
                 cause="the ramp starts at 0: the first step trains with lr 0 (step / warmup_steps where lesson 07's "
                 "factor is (step + 1) / warmup_steps)" if from_zero
                 else "no warm-up, or a ramp that is not (step + 1) / warmup_steps",
                 where="the warm-up branch of the factor")
        if step <= total:
            fail("cosine-wrong", observed=observed, expected=f"{expected:.6g} = lr * 0.5 * (1 + cos(pi * progress)), "
                 f"progress = (step - warmup_steps) / (total_steps - warmup_steps)",
                 cause="the cosine measured from step 0 instead of the end of warm-up, the wrong length, or a "
                 "scheduler stepped by something else", where="the cosine branch of the factor")
        fail("rises-after-total", observed=observed,
             expected="0: past total_steps the lr stays at the end of the cosine",
             cause="progress is not clamped at 1, so the cosine comes back up", where="min(1.0, progress)")


@judges(
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
def judge_optimizer(seen: dict, *, case: Case) -> str:
    """The groups of a small CNN with norms, biases and a buffer; the lr of every step of the schedule."""
    for (lr, weight_decay, warmup, total, freeze_first), record in zip(optimizer_settings(case), seen["settings"],
                                                                       strict=True):
        if record["returned"] == "zero-division" and warmup == 0:
            line = str(record.get("line", "")).strip()
            fail("divides-by-zero",
                 observed=f"make_optimizer(warmup_steps=0, total_steps={total}) raised ZeroDivisionError (building "
                 "or stepping the scheduler)" + (f" at: {line}" if line else ""),
                 expected="a schedule with no warm-up: the cosine from the first step, lr at step 0",
                 cause="a division by warmup_steps, which is 0 here (the text's check runs once with no warm-up)",
                 where="the factor: divide by warmup_steps only inside the `step < warmup_steps` branch",
                 hint="With warmup_steps = 0 no step is a warm-up step: which of your divisions runs anyway?")
        if record["returned"] != "pair":
            fail("not-a-pair", observed=f"make_optimizer returned a {record['returned']}",
                 expected="(optimizer, scheduler)", cause="only one of the two returned, or another object",
                 where="return optimizer, scheduler")
        _check_groups(optimizer_model(case, freeze_first), record, lr, weight_decay)
        _check_schedule(record, lr, warmup, total)
    return "AdamW with decay on weights only, and warm-up then cosine at every optimizer step"
