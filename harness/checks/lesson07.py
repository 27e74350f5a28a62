"""Checks of lesson 07 (learning-rate schedulers).

Each probe runs the student's code on inputs built from the case and records what it observes: the learning
rate and the weights and gradients of every `optimizer.step()` (an optimizer step pre-hook, `StepRecorder`),
the calls a scheduler receives (with the model's weights at that moment), and the modes the model ran in.
Each judge rebuilds the same inputs, recomputes the schedule, the losses and the optimizer updates itself,
and decides. Nothing reads source.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.instruments import ForwardRecorder, StepRecorder
from harness.contract.registry import judges, register
from harness.contract.wire import Opaque, type_name

SchedulerFactory = Callable[[torch.optim.Optimizer], Any]

_ORDER_WARNING = "lr_scheduler.step()` before `optimizer.step()"


# ----------------------------------------------------------------------------------------------------
# shared helpers
# ----------------------------------------------------------------------------------------------------
def _regression_loader(n: int, batch_size: int, seed: int) -> DataLoader:
    """A small, fixed-order regression loader (no shuffling, so every run sees the same batches)."""
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(n, 4, generator=generator)
    targets = inputs @ torch.randn(4, 1, generator=generator) + 0.1 * torch.randn(n, 1, generator=generator)
    return DataLoader(TensorDataset(inputs, targets), batch_size=batch_size, shuffle=False)


def _scheduler_trace(make_scheduler: SchedulerFactory, lr: float, steps: int) -> list[float]:
    """The learning rate a scheduler gives before each of `steps + 1` consecutive scheduler steps."""
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=lr)
    scheduler = make_scheduler(optimizer)
    lrs = [optimizer.param_groups[0]["lr"]]
    for _ in range(steps):
        optimizer.step()  # keeps PyTorch's order bookkeeping happy: no warning in the reference
        scheduler.step()
        lrs.append(optimizer.param_groups[0]["lr"])
    return lrs


def _is_number(value: Any) -> bool:
    """A real Python number (bool excluded), as a probe sends a float or an int."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _close(a: Sequence[Any], b: Sequence[float], rel: float = 1e-6, abs_: float = 1e-12) -> bool:
    """Two sequences of numbers equal to float precision (False for anything that is not a number)."""
    return len(a) == len(b) and all(
        _is_number(x) and math.isclose(x, y, rel_tol=rel, abs_tol=abs_) for x, y in zip(a, b, strict=True)
    )


def _first_difference(a: Sequence[float], b: Sequence[float]) -> int:
    """The first index where two equally long sequences of numbers differ."""
    return next(i for i, (x, y) in enumerate(zip(a, b, strict=True))
                if not math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-12))


def _fmt(values: Sequence[float], limit: int = 8) -> str:
    shown = ", ".join(f"{v:.4g}" for v in values[:limit])
    return f"[{shown}{', ...' if len(values) > limit else ''}]"




def _order_note(warned: Any) -> str:
    if warned is not True:
        return ""
    return " PyTorch also warned: 'Detected call of `lr_scheduler.step()` before `optimizer.step()`'."


def _record_steps(train: Callable[..., Any], optimizer: torch.optim.Optimizer, *args: Any) -> dict[str, Any]:
    """Run the student's code; what each optimizer.step saw and whether PyTorch warned about the call order."""
    with StepRecorder(optimizer) as steps, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        returned = train(*args)
    return {
        "steps": [{"lr": record.lrs[0], "params": record.params, "grads": record.grads} for record in steps.records],
        "final": [p.detach().clone() for group in optimizer.param_groups for p in group["params"]],
        "warned": any(_ORDER_WARNING in str(w.message) for w in caught),
        "returned": returned,
    }


def _used_lrs(seen: dict[str, Any]) -> list[float]:
    """The learning rate each recorded optimizer step used (validated as numbers)."""
    lrs = [step["lr"] for step in seen["steps"]]
    if not all(_is_number(lr) for lr in lrs):
        raise TypeError("the recorded learning rates are not numbers")
    return [float(lr) for lr in lrs]


def _same_tensors(got: Any, wanted: list[torch.Tensor]) -> bool:
    """A list of tensors equal to `wanted` up to float rounding (False for anything else)."""
    return isinstance(got, list) and len(got) == len(wanted) and all(
        isinstance(g, torch.Tensor) and g.shape == w.shape and g.dtype == w.dtype
        and torch.allclose(g, w, rtol=1e-5, atol=1e-7)
        for g, w in zip(got, wanted, strict=True)
    )


def _replay_steps(model: nn.Module, seen: dict[str, Any], batches: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Verify every recorded SGD step: weights where the previous step left them, gradients of this batch's
    MSE loss at those weights, and the final weights after the last update."""
    expected = [p.detach().clone() for p in model.parameters()]
    for index, (step, (inputs, targets)) in enumerate(zip(seen["steps"], batches, strict=True)):
        params, grads = step["params"], step["grads"]
        fresh = _same_tensors(params, expected)
        if fresh:
            with torch.no_grad():
                for parameter, value in zip(model.parameters(), params, strict=True):
                    parameter.copy_(value)
            model.zero_grad(set_to_none=True)
            nn.functional.mse_loss(model(inputs), targets).backward()
        if not fresh or not _same_tensors(grads, [p.grad for p in model.parameters()]):
            fail(
                "steps-inconsistent",
                observed=f"optimizer step {index} saw weights or gradients that are not those of plain SGD on "
                "this batch after the previous steps",
                expected="each optimizer.step() uses the gradients of the current batch's loss only",
                cause="gradients accumulated across batches (zero_grad missing), gradients changed before the step "
                "(clipped, rescaled), the loss computed on other data, or the weights changed outside "
                "optimizer.step()",
                where="the batch loop: zero_grad, forward, loss, backward, optimizer.step()",
            )
        expected = [p - float(step["lr"]) * g for p, g in zip(params, grads, strict=True)]
    if not _same_tensors(seen["final"], expected):
        fail(
            "steps-inconsistent",
            observed="the final weights are not those the last optimizer step produced",
            expected="the weights change only through optimizer.step()",
            cause="the weights changed after the last optimizer step",
            where="the end of the training function",
        )


# ----------------------------------------------------------------------------------------------------
# 07-warmup-cosine
# ----------------------------------------------------------------------------------------------------
def warmup_cosine_reference(step: int, warmup_steps: int, total_steps: int) -> float:
    """The course's warmup-cosine factor (lessons 07, 10, 11, 15, the drills and the showcase use this convention).

    During warmup (`step < warmup_steps`) the factor is `(step + 1) / warmup_steps`: the first optimizer step
    already trains (at `1 / warmup_steps` of the peak) and the last warmup step reaches the peak. Then a half
    cosine falls from 1 at `step == warmup_steps` to 0 at `total_steps`, with
    `progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)` clamped to 1, and stays at 0 after.
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def _ramps_from_zero(values: Sequence[Any], cases: Sequence[tuple[int, int, int]]) -> bool:
    """Every warmup-phase value is `step / warmup_steps`: the ramp one step behind the course's convention."""
    ramp = [(value, step / warmup) for value, (step, warmup, _) in zip(values, cases, strict=True) if step < warmup]
    return bool(ramp) and all(_is_number(value) and math.isclose(value, want, rel_tol=1e-6, abs_tol=1e-9)
                              for value, want in ramp)


def _warmup_cases(case: Case) -> list[tuple[int, int, int]]:
    """(step, warmup, total) triples: fixed landmarks first, then seeded draws that favour the boundaries."""
    hidden = case.hidden
    # landmarks: the ramp's ends, the peak, the end, past the end, no warmup at all, no decay span at all
    cases = [(0, 5, 50), (4, 5, 50), (5, 5, 50), (50, 5, 50), (80, 5, 50), (0, 0, 10), (3, 0, 10), (5, 5, 5), (9, 5, 5)]
    generator = torch.Generator().manual_seed(case.seeded(23 if hidden else 19))

    def draw(low: int, high: int) -> int:
        return int(torch.randint(low, high + 1, (1,), generator=generator))

    for _ in range(400 if hidden else 150):
        warmup = draw(0 if hidden else 1, 200 if hidden else 20)
        total = draw(warmup + (0 if hidden else 1), warmup + (2000 if hidden else 200))
        anywhere = draw(0, total + (500 if hidden else 50))
        steps = [anywhere] * 3 + [max(0, warmup - 1), warmup, total, total + 1]
        cases.append((steps[draw(0, 6)], warmup, total))
    return cases


def _lambda_lr_setting(case: Case) -> tuple[float, int, int]:
    """Base lr, warmup and total steps of the LambdaLR run."""
    return (0.3, 7, 40) if case.hidden else (0.3, 5, 30)


def _compare_warmup_cosine(value: Any, step: int, warmup: int, total: int, *, ramps_from_zero: bool) -> None:
    """Fail with the code of the first thing wrong with one value; `ramps_from_zero`: every warmup value the
    student gave is `step / warmup_steps`."""
    where = f"warmup_cosine(step={step}, warmup_steps={warmup}, total_steps={total})"
    if not _is_number(value):
        fail(
            "not-a-float",
            observed=f"{where} returned a {type_name(value)}",
            expected="a Python float (LambdaLR multiplies the base lr by it)",
            cause="returning a tensor or numpy value; math.cos and plain arithmetic give a float",
            where="the return statement of warmup_cosine",
        )
    expected = warmup_cosine_reference(step, warmup, total)
    if math.isclose(value, expected, rel_tol=1e-6, abs_tol=1e-9):
        return
    if step < warmup and ramps_from_zero:
        fail(
            "warmup-starts-at-zero",
            observed=f"{where} = {value:.6g}, and every warmup value is step / warmup_steps",
            expected=f"{expected:.6g} = (step + 1) / warmup_steps",
            cause="the ramp starts at 0: the first step trains with lr 0 (LambdaLR's factor at step 0 is the lr of "
            "the first optimizer step), and the peak comes one step after the warmup",
            where="the `step < warmup_steps` branch",
        )
    if step < warmup:
        fail(
            "warmup-wrong",
            observed=f"{where} = {value:.6g}",
            expected=f"{expected:.6g} = (step + 1) / warmup_steps (a linear ramp from 1 / warmup_steps at step 0 "
            f"that reaches 1 at step {warmup - 1}, the last warmup step)",
            cause="integer division ((step + 1) // warmup_steps), dividing by total_steps, or another slope "
            "during warmup",
            where="the `step < warmup_steps` branch",
        )
    if step <= total:
        fail(
            "cosine-wrong",
            observed=f"{where} = {value:.6g}",
            expected=(
                f"{expected:.6g} = 0.5 * (1 + cos(pi * progress)) with progress = (step - warmup_steps) / "
                f"(total_steps - warmup_steps) = {(step - warmup) / max(1, total - warmup):.4g}"
            ),
            cause="progress measured from 0 instead of from the end of warmup, a wrong cosine period, or a "
            "branch boundary off by one (step <= warmup_steps)",
            where="the cosine branch: progress and the cosine",
        )
    fail(
        "rises-after-total",
        observed=f"{where} = {value:.6g} (past the end of the schedule)",
        expected="0.0: once step >= total_steps the factor stays at the end of the cosine",
        cause="progress is not clamped to 1, so the cosine comes back up after total_steps",
        where="clamp progress with min(1.0, ...)",
    )


@register(
    "07-warmup-cosine",
    hints=Hints(
        nudge="Two pieces: a linear ramp while step < warmup_steps that already trains at step 0 and reaches 1 at "
        "the last warmup step, then a half cosine from 1 down to 0 over the remaining total_steps - warmup_steps "
        "steps, and 0 after that.",
        concept="The ramp is (step + 1) / warmup_steps (step counts the optimizer steps already taken, so the step "
        "being taken is step + 1); the cosine is 0.5 * (1 + cos(pi * progress)) where progress goes from 0 at "
        "step warmup_steps to 1 at total_steps and is clamped there.",
        solution="if step < warmup_steps: return (step + 1) / warmup_steps; progress = min(1.0, (step - "
        "warmup_steps) / max(1, total_steps - warmup_steps)); return 0.5 * (1.0 + math.cos(math.pi * progress))",
        section="2. Warmup then cosine, as a `LambdaLR`",
    ),
    requires={
        "not-a-float": Requirement(
            "returns a Python float",
            hint="What type does your return statement produce? torch.cos and torch.tensor give tensors; "
            "math.cos and plain arithmetic give floats."),
        "warmup-starts-at-zero": Requirement(
            "the first step already trains: the factor at step 0 is 1 / warmup_steps, not 0",
            hint="LambdaLR's factor at step 0 is the learning rate of the very first optimizer step. What does your "
            "function give at step 0, and how many steps has the optimizer taken once that step is done?"),
        "warmup-wrong": Requirement(
            "during warmup the factor is (step + 1) / warmup_steps: 1 / warmup_steps at step 0, reaching 1 at step "
            "warmup_steps - 1",
            hint="Print the factors of steps 0 to warmup_steps - 1: do they rise in equal steps of 1 / warmup_steps "
            "and reach 1.0 at the last warmup step? Does Python's // round the ramp down?"),
        "cosine-wrong": Requirement(
            "after warmup the factor is 0.5 * (1 + cos(pi * progress)), progress measured from the end of warmup",
            hint="At step == warmup_steps the factor must be exactly 1: where does your progress start, and "
            "what does it reach at total_steps?"),
        "rises-after-total": Requirement(
            "after total_steps the factor stays at 0",
            hint="Evaluate your function at 2 * total_steps: the cosine comes back up unless progress stops at 1."),
    },
)
def probe_warmup_cosine(factor: Callable[[int, int, int], float], *, case: Case) -> dict:
    """Evaluate the student's factor on the case's triples; if every value is a number, drive LambdaLR with it."""
    values = [factor(step, warmup, total) for step, warmup, total in _warmup_cases(case)]
    if not all(_is_number(value) for value in values):  # LambdaLR would fail on it: the judge names the value
        return {"values": values, "lambda_lrs": None}
    base_lr, warmup, total = _lambda_lr_setting(case)
    make = lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda s: factor(s, warmup, total))  # noqa: E731
    return {"values": values, "lambda_lrs": _scheduler_trace(make, base_lr, total + 3)}


@judges("07-warmup-cosine")
def judge_warmup_cosine(seen: dict, *, case: Case) -> str:
    """The factor matches the closed form on every triple, and LambdaLR gives base lr times the closed form."""
    cases = _warmup_cases(case)
    ramps_from_zero = _ramps_from_zero(seen["values"], cases)
    for value, (step, warmup, total) in zip(seen["values"], cases, strict=True):
        _compare_warmup_cosine(value, step, warmup, total, ramps_from_zero=ramps_from_zero)
    base_lr, warmup, total = _lambda_lr_setting(case)
    lrs = seen["lambda_lrs"]
    expected = [base_lr * warmup_cosine_reference(s, warmup, total) for s in range(total + 4)]
    if not isinstance(lrs, list) or len(lrs) != len(expected):
        raise TypeError("the observation of the LambdaLR run is malformed")
    if not _close(lrs, expected):
        first = next(i for i, lr in enumerate(lrs) if not _close([lr], [expected[i]]))
        fail(
            "cosine-wrong",
            observed=f"LambdaLR with your factor gives lr {lrs[first]!r:.12} at step {first}",
            expected=f"{expected[first]:.6g} (base lr {base_lr} x the closed form)",
            cause="the factor depends on something other than its three arguments (a global, or a state kept "
            "between calls)",
            where="warmup_cosine",
        )
    return f"matches the closed form on {len(cases)} seeded cases (boundaries included) and drives LambdaLR correctly"


# ----------------------------------------------------------------------------------------------------
# 07-per-step and 07-per-epoch: a scheduler stepped at the right place and granularity
# ----------------------------------------------------------------------------------------------------
def _tiny_regressor(seed: int) -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


@dataclass(frozen=True)
class _LoopSetting:
    """One loop check's inputs: epochs, the fixed-order loader, the model's seed, the base lr, the scheduler."""

    epochs: int
    loader: DataLoader
    model_seed: int
    lr: float
    make: SchedulerFactory

    @property
    def batches(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The batches of one epoch, in the loader's (fixed) order."""
        return list(self.loader)


def _per_step_setting(case: Case) -> _LoopSetting:
    epochs, batch_size, n = (4, 6, 36) if case.hidden else (3, 8, 48)
    loader = _regression_loader(n, batch_size, seed=case.seeded(11 if case.hidden else 7))
    total = epochs * len(loader)
    if case.hidden:
        make = lambda opt: torch.optim.lr_scheduler.LinearLR(  # noqa: E731
            opt, start_factor=1.0, end_factor=0.05, total_iters=total
        )
    else:
        # no momentum cycling: every step stays a plain SGD step (p - lr * grad) that the judge can verify
        make = lambda opt: torch.optim.lr_scheduler.OneCycleLR(  # noqa: E731
            opt, max_lr=0.05, total_steps=total, cycle_momentum=False
        )
    return _LoopSetting(epochs, loader, case.seeded(3), 0.05, make)


def _per_epoch_setting(case: Case) -> _LoopSetting:
    epochs, batch_size, n = (6, 5, 25) if case.hidden else (5, 8, 32)
    loader = _regression_loader(n, batch_size, seed=case.seeded(5 if case.hidden else 2))
    if case.hidden:
        make = lambda opt: torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[1, 3, 4], gamma=0.3)  # noqa: E731
    else:
        make = lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)  # noqa: E731
    return _LoopSetting(epochs, loader, case.seeded(4), 0.04, make)


def _probe_loop(train: Callable[..., Any], setting: _LoopSetting) -> dict[str, Any]:
    """Run the student's loop with SGD and the setting's scheduler; record every optimizer step, and the mode of
    every forward that recorded a graph (the model arrives in eval mode, as after an evaluation)."""
    model = _tiny_regressor(setting.model_seed).eval()
    optimizer = torch.optim.SGD(model.parameters(), lr=setting.lr)
    scheduler = setting.make(optimizer)
    with ForwardRecorder(model) as forwards:
        seen = _record_steps(train, optimizer, model, setting.loader, nn.MSELoss(), optimizer, scheduler,
                             setting.epochs)
    seen["train_modes"] = [r.training for r in forwards.records if r.grad_enabled]
    return seen


def _check_train_mode(seen: dict[str, Any]) -> None:
    """Every forward that recorded a graph ran in train mode."""
    modes = seen["train_modes"]
    if not isinstance(modes, list) or not all(isinstance(m, bool) for m in modes):
        raise TypeError("the observation of the forward modes is malformed")
    if not all(modes):
        fail(
            "not-train-mode",
            observed=f"{modes.count(False)} of {len(modes)} training forwards ran with model.training == False "
            "(the check hands the model over in eval mode, as after an evaluation)",
            expected="model.train() before the batch loop: dropout and batch norm behave differently in eval mode",
            cause="model.train() is never called, or called once before the epoch loop and undone by a "
            "model.eval() inside it",
            where="the top of the epoch loop: model.train()",
        )


def _step_count_failure(observed: int, epochs: int, batches: int) -> None:
    fail(
        "wrong-step-count",
        observed=f"{observed} optimizer steps",
        expected=f"{epochs * batches} ({epochs} epochs x {batches} batches, one optimizer.step() per batch)",
        cause=("more epochs or batches than asked, or optimizer.step() called more than once per batch"
               if observed > epochs * batches else "fewer epochs than asked, batches skipped, or an early return"),
        where="the epoch and batch loops",
    )


def _verify_loop_steps(seen: dict[str, Any], setting: _LoopSetting) -> None:
    """Every recorded step is a real SGD step on its batch, from the case's model."""
    _replay_steps(_tiny_regressor(setting.model_seed), seen, setting.batches * setting.epochs)


@register(
    "07-per-step",
    hints=Hints(
        nudge="A per-step scheduler (OneCycleLR, warmup) moves once per batch, right after the optimizer used "
        "the current lr.",
        concept="The lr an update uses is the one in the optimizer when optimizer.step() runs; a schedule sized "
        "in optimizer steps needs exactly one scheduler.step() per optimizer.step(), after it.",
        solution="in the batch loop: optimizer.zero_grad(set_to_none=True); loss_fn(model(inputs), "
        "targets).backward(); optimizer.step(); scheduler.step()",
        section="4. Per step or per epoch?",
    ),
    requires={
        "steps-inconsistent": Requirement(
            "each optimizer.step() uses the gradients of the current batch's loss only",
            hint="Compare the gradients of two consecutive batches: what clears .grad before each backward?"),
        "not-train-mode": Requirement(
            "the loop puts the model in train mode (model.train())",
            hint="The model may arrive in eval mode (after an evaluation): which call switches dropout and "
            "batch norm back to training behaviour?"),
        "wrong-step-count": Requirement(
            "one optimizer.step() per batch, for exactly `epochs` epochs",
            hint="Count your optimizer.step() calls: epochs x len(loader)?"),
        "scheduler-not-stepped": Requirement(
            "the scheduler is stepped",
            hint="Print optimizer.param_groups[0]['lr'] after each epoch: does it ever change?"),
        "scheduler-before-optimizer": Requirement(
            "scheduler.step() comes after optimizer.step()",
            hint="Which lr should the very first update use: the schedule's first value or its second?"),
        "wrong-lr-trace": Requirement(
            "one scheduler.step() per optimizer.step()",
            hint="Count your scheduler.step() calls per batch: exactly one, every batch?"),
        "stepped-per-epoch": Requirement(
            "a per-step scheduler is stepped once per batch, not once per epoch",
            hint="This schedule is sized in optimizer steps: how often does your loop call scheduler.step()?"),
    },
)
def probe_per_step(train_per_step: Callable[..., Any], *, case: Case) -> dict:
    """Run the student's loop with a per-step scheduler; record the lr, weights and gradients of every step."""
    return _probe_loop(train_per_step, _per_step_setting(case))


@judges("07-per-step")
def judge_per_step(seen: dict, *, case: Case) -> str:
    """The lr used by optimizer step i must be the schedule's i-th value, and every step a real SGD step."""
    setting = _per_step_setting(case)
    epochs, batches = setting.epochs, len(setting.loader)
    total = epochs * batches
    used, warned = _used_lrs(seen), seen["warned"]
    expected = _scheduler_trace(setting.make, setting.lr, total)
    if len(used) != total:
        _step_count_failure(len(used), epochs, batches)
    _check_train_mode(seen)
    if _close(used, expected[:total]):
        _verify_loop_steps(seen, setting)
        return f"lr used at each of {total} optimizer steps follows the per-step schedule"
    if len(set(used)) == 1:
        fail(
            "scheduler-not-stepped",
            observed=f"every optimizer step used lr {used[0]:.4g}",
            expected=f"the schedule {_fmt(expected)}",
            cause="scheduler.step() is never called, or only after the last optimizer.step()",
            where="after optimizer.step() inside the batch loop",
        )
    if _close(used, expected[1 : total + 1]):
        fail(
            "scheduler-before-optimizer",
            observed=f"lrs used {_fmt(used)}: the first step already used the second value of the schedule",
            expected=f"{_fmt(expected)}: step 0 uses the initial lr",
            cause="scheduler.step() is called before optimizer.step(), so every step uses the next lr."
            + _order_note(warned),
            where="swap the two calls: optimizer.step() first, then scheduler.step()",
        )
    per_epoch = [expected[e] for e in range(epochs) for _ in range(batches)]
    if _close(used, per_epoch) or all(used[i] == used[i - 1] for i in range(1, total) if i % batches):
        fail(
            "stepped-per-epoch",
            observed=f"the lr changed only between epochs: {_fmt(used, 12)}",
            expected=f"a new lr at every batch: {_fmt(expected, 12)}",
            cause="scheduler.step() sits in the epoch loop; a per-step schedule is sized in optimizer steps",
            where="move scheduler.step() into the batch loop, after optimizer.step()",
        )
    first = _first_difference(used, expected)
    fail(
        "wrong-lr-trace",
        observed=f"optimizer step {first} used lr {used[first]:.6g}",
        expected=f"{expected[first]:.6g}; the whole schedule is {_fmt(expected)}",
        cause="scheduler.step() is called more or less than once per optimizer step." + _order_note(warned),
        where="the batch loop: exactly one scheduler.step() after each optimizer.step()",
    )


@register(
    "07-per-epoch",
    hints=Hints(
        nudge="StepLR, MultiStepLR and ExponentialLR count epochs: the lr stays the same for every batch of an "
        "epoch.",
        concept="A schedule sized in epochs moves once per epoch: after the last optimizer.step() of the epoch, "
        "outside the batch loop.",
        solution="for each epoch: model.train(); the batch loop (zero_grad, forward, loss, backward, "
        "optimizer.step()); then scheduler.step() once, after the batch loop",
        section="4. Per step or per epoch?",
    ),
    requires={
        "steps-inconsistent": Requirement(
            "each optimizer.step() uses the gradients of the current batch's loss only",
            hint="Compare the gradients of two consecutive batches: what clears .grad before each backward?"),
        "not-train-mode": Requirement(
            "the loop puts the model in train mode (model.train())",
            hint="The model may arrive in eval mode (after an evaluation): which call switches dropout and "
            "batch norm back to training behaviour?"),
        "wrong-step-count": Requirement(
            "one optimizer.step() per batch, for exactly `epochs` epochs",
            hint="Count your optimizer.step() calls: epochs x len(loader)?"),
        "scheduler-not-stepped": Requirement(
            "the scheduler is stepped",
            hint="Print optimizer.param_groups[0]['lr'] after each epoch: does it ever change?"),
        "scheduler-before-optimizer": Requirement(
            "scheduler.step() comes after optimizer.step()",
            hint="Which lr should the very first update use: the schedule's first value or its second?"),
        "wrong-lr-trace": Requirement(
            "one scheduler.step() per epoch",
            hint="Count your scheduler.step() calls per epoch: exactly one, every epoch?"),
        "stepped-per-batch": Requirement(
            "an epoch-sized scheduler is stepped once per epoch, after the batch loop",
            hint="Print the lr at each batch of one epoch: should it change within an epoch?"),
    },
)
def probe_per_epoch(train_per_epoch: Callable[..., Any], *, case: Case) -> dict:
    """Run the student's loop with a per-epoch scheduler; record the lr, weights and gradients of every step."""
    return _probe_loop(train_per_epoch, _per_epoch_setting(case))


@judges("07-per-epoch")
def judge_per_epoch(seen: dict, *, case: Case) -> str:
    """Every batch of epoch e must use the schedule's e-th value, and every step be a real SGD step."""
    setting = _per_epoch_setting(case)
    epochs, batches = setting.epochs, len(setting.loader)
    total = epochs * batches
    used, warned = _used_lrs(seen), seen["warned"]
    per_epoch = _scheduler_trace(setting.make, setting.lr, epochs)
    expected = [per_epoch[e] for e in range(epochs) for _ in range(batches)]
    if len(used) != total:
        _step_count_failure(len(used), epochs, batches)
    _check_train_mode(seen)
    if _close(used, expected):
        _verify_loop_steps(seen, setting)
        return f"every batch of each of {epochs} epochs used that epoch's lr"
    if len(set(used)) == 1:
        fail(
            "scheduler-not-stepped",
            observed=f"every optimizer step used lr {used[0]:.4g}",
            expected=f"the lr per epoch {_fmt(per_epoch[:epochs])}",
            cause="scheduler.step() is never called, or only after the last optimizer.step()",
            where="the end of the epoch loop",
        )
    per_batch = _scheduler_trace(setting.make, setting.lr, total)[:total]
    if _close(used, per_batch):
        fail(
            "stepped-per-batch",
            observed=f"the lr changed within an epoch: {_fmt(used, 12)} (it decays {batches}x too fast)",
            expected=f"one lr per epoch ({batches} batches each): {_fmt(expected, 12)}",
            cause="scheduler.step() is inside the batch loop, but this scheduler counts epochs",
            where="move scheduler.step() out of the batch loop, to the end of the epoch",
        )
    shifted = [per_epoch[e + 1] for e in range(epochs) for _ in range(batches)]
    if _close(used, shifted):
        fail(
            "scheduler-before-optimizer",
            observed=f"epoch 0 already used lr {used[0]:.4g}",
            expected=f"epoch 0 uses the initial lr {expected[0]:.4g}",
            cause="scheduler.step() runs at the start of the epoch, before any optimizer.step()."
            + _order_note(warned),
            where="call scheduler.step() at the end of the epoch",
        )
    first = _first_difference(used, expected)
    fail(
        "wrong-lr-trace",
        observed=f"optimizer step {first} (epoch {first // batches}) used lr {used[first]:.6g}",
        expected=f"{expected[first]:.6g}; lr per epoch {_fmt(per_epoch[:epochs])}",
        cause="scheduler.step() is not called exactly once per epoch." + _order_note(warned),
        where="the end of the epoch loop",
    )


# ----------------------------------------------------------------------------------------------------
# 07-plateau: ReduceLROnPlateau fed the validation loss
# ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _PlateauSetting:
    """The plateau check's inputs: random-label data sets, loaders' batch sizes, epochs and seed."""

    seed: int
    epochs: int
    train_set: TensorDataset
    val_set: TensorDataset
    train_bs: int
    val_bs: int


def _plateau_setting(case: Case) -> _PlateauSetting:
    """Random labels: the training loss falls as the net memorises, the validation loss rises.

    The two losses move in opposite directions, so the metric a plateau scheduler is fed is observable.
    """
    seed, epochs, train_n, val_n, train_bs, val_bs = (21, 7, 40, 60, 10, 20) if case.hidden else (8, 6, 32, 48, 8, 16)
    generator = torch.Generator().manual_seed(case.seeded(seed))
    sets = [
        TensorDataset(torch.randn(n, 10, generator=generator), torch.randint(0, 2, (n,), generator=generator))
        for n in (train_n, val_n)
    ]
    return _PlateauSetting(case.seeded(seed), epochs, *sets, train_bs, val_bs)


def _plateau_model() -> nn.Module:
    return nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 2))


def _plateau_scheduler(optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.ReduceLROnPlateau:
    return torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=0)


def _mean_loss(model: nn.Module, dataset: TensorDataset) -> float:
    model.eval()
    with torch.no_grad():
        return float(nn.functional.cross_entropy(model(dataset.tensors[0]), dataset.tensors[1]))


class _PlateauSpy:
    """Wraps a ReduceLROnPlateau's `step` to record the metric it receives and the model's weights then."""

    def __init__(self, scheduler: Any, model: nn.Module) -> None:
        self.calls: list[dict[str, Any]] = []
        self._step = scheduler.step
        self._model = model
        scheduler.step = self  # an instance attribute shadows the method: the student's calls land here

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        metric = args[0] if args else kwargs.get("metrics")
        weights = {k: v.detach().clone() for k, v in self._model.state_dict().items()}
        self.calls.append({"metric": None if metric is None else float(metric), "weights": weights})
        if metric is None:  # ReduceLROnPlateau would raise a TypeError that hides the cause
            _no_metric_failure()
        self._step(*args, **kwargs)


def _no_metric_failure() -> None:
    fail(
        "plateau-no-metric",
        observed="scheduler.step() was called without a metric",
        expected="scheduler.step(val_loss): ReduceLROnPlateau decides from the value you give it",
        cause="calling it like the other schedulers",
        where="the end of the epoch, after evaluating on the validation set",
    )


def _check_eval_modes(records: list[Any], val_batch: int, train_batch: int) -> None:
    """Validation forwards in eval mode without autograd; forwards that record a graph in train mode."""
    records = [(bool(training), bool(grad), size) for training, grad, size in records]
    val_forwards = [r for r in records if r[2] == val_batch]
    # training forwards are those that record a graph; a no_grad pass over the training set (to log its loss)
    # may legitimately run in eval mode
    train_forwards = [r for r in records if r[2] == train_batch and r[1]]
    if not val_forwards:
        fail(
            "no-validation",
            observed="the model never ran on a validation batch",
            expected="one pass over val_loader per epoch",
            cause="the validation loss is not computed from val_loader",
            where="the evaluation part of the epoch",
        )
    if any(training for training, _, _ in val_forwards):
        fail(
            "val-in-train-mode",
            observed="validation batches ran with model.training == True",
            expected="model.eval() before evaluating (dropout and batch norm behave differently)",
            cause="missing model.eval()",
            where="before the validation loop",
        )
    if any(grad for _, grad, _ in val_forwards):
        fail(
            "val-with-grad",
            observed="validation ran with autograd recording",
            expected="torch.no_grad() (or torch.inference_mode()) around evaluation",
            cause="the validation loop builds graphs it never uses",
            where="wrap the validation loop in `with torch.no_grad():`",
        )
    if any(not training for training, _, _ in train_forwards):
        fail(
            "train-in-eval-mode",
            observed="training batches ran with model.training == False",
            expected="model.train() at the start of every epoch",
            cause="model.eval() for validation is never undone",
            where="the top of the epoch loop",
        )


@register(
    "07-plateau",
    hints=Hints(
        nudge="ReduceLROnPlateau reacts to the number you pass to step(). Which number tells you the model "
        "stopped improving on data it has not trained on?",
        concept="Each epoch: train (model.train()), then evaluate on val_loader in eval mode without autograd, "
        "then one scheduler.step(val_loss). The training loss keeps falling and never plateaus.",
        solution="val_loss, _ = evaluate(model, val_loader, loss_fn); scheduler.step(val_loss); "
        "val_losses.append(val_loss) at the end of each epoch; return val_losses",
        section="5. `ReduceLROnPlateau`: feed it the validation metric",
    ),
    requires={
        "plateau-per-batch": Requirement(
            "the scheduler is stepped once per epoch",
            hint="Count your scheduler.step calls in one epoch: how many validation results does an epoch give?"),
        "plateau-no-metric": Requirement(
            "scheduler.step receives the validation metric",
            hint="ReduceLROnPlateau has no curve of its own: what does it compare from one epoch to the next?"),
        "plateau-not-stepped": Requirement(
            "the scheduler is stepped every epoch, the first one included",
            hint="Count your scheduler.step calls over the whole run: one per epoch, from the first epoch on?"),
        "no-validation": Requirement(
            "the validation loss is computed on val_loader",
            hint="Which loader does your evaluation iterate over?"),
        "val-in-train-mode": Requirement(
            "validation runs in eval mode (model.eval())",
            hint="Dropout is still on while you validate: which call turns it off?"),
        "val-with-grad": Requirement(
            "validation runs without autograd (torch.no_grad())",
            hint="Your validation builds a graph it never uses: which context turns autograd off?"),
        "train-in-eval-mode": Requirement(
            "training runs in train mode every epoch (model.train())",
            hint="After the first validation, which mode is the model in when the next epoch trains?"),
        "plateau-train-metric": Requirement(
            "the metric is the validation loss, not the training loss",
            hint="On random labels the training loss keeps falling: which loss tells you the model stopped "
            "improving on unseen data?"),
        "plateau-wrong-metric": Requirement(
            "the metric is this epoch's mean validation loss",
            hint="Is the value you pass computed after this epoch's training, and is it a mean over the "
            "validation set?"),
        "wrong-return": Requirement(
            "returns the list of validation losses, one per epoch",
            hint="What does your function return? The check wants one validation loss per epoch."),
    },
)
def probe_plateau(train_with_plateau: Callable[..., Any], *, case: Case) -> dict:
    """Train with a spied ReduceLROnPlateau; record each metric it received with the weights at that moment."""
    setting = _plateau_setting(case)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(setting.seed)
        model = _plateau_model()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        scheduler = _plateau_scheduler(optimizer)
        spy = _PlateauSpy(scheduler, model)
        train_loader = DataLoader(
            setting.train_set, batch_size=setting.train_bs, shuffle=True,
            generator=torch.Generator().manual_seed(setting.seed),
        )
        val_loader = DataLoader(setting.val_set, batch_size=setting.val_bs)
        with ForwardRecorder(model) as forwards:
            returned = train_with_plateau(
                model, train_loader, val_loader, nn.CrossEntropyLoss(), optimizer, scheduler, setting.epochs
            )
    return {
        "calls": spy.calls,
        "forwards": [(r.training, r.grad_enabled, r.batch_size) for r in forwards.records],
        "returned": returned,
    }


def _losses_at(weights: Any, setting: _PlateauSetting) -> tuple[float, float]:
    """The mean validation and training losses (eval mode) of the plateau model holding `weights`."""
    with torch.random.fork_rng(devices=[]):
        model = _plateau_model()
    model.load_state_dict(weights, strict=True)
    return _mean_loss(model, setting.val_set), _mean_loss(model, setting.train_set)


@judges("07-plateau")
def judge_plateau(seen: dict, *, case: Case) -> str:
    """The scheduler must receive, once per epoch, the validation loss of the model at that moment."""
    setting = _plateau_setting(case)
    epochs, calls = setting.epochs, seen["calls"]
    if len(calls) > epochs:
        fail(
            "plateau-per-batch",
            observed=f"scheduler.step was called {len(calls)} times in {epochs} epochs",
            expected=f"{epochs} calls: one per epoch, after validation",
            cause="scheduler.step(...) sits inside the batch loop, or is called more than once per epoch",
            where="move it to the end of the epoch",
        )
    if any(call["metric"] is None for call in calls):
        _no_metric_failure()
    if len(calls) < epochs:
        fail(
            "plateau-not-stepped",
            observed=f"scheduler.step was called {len(calls)} times in {epochs} epochs",
            expected=f"{epochs} calls, one per epoch",
            cause="the scheduler is not stepped every epoch",
            where="the end of the epoch loop: scheduler.step(val_loss)",
        )
    _check_eval_modes(seen["forwards"], setting.val_bs, setting.train_bs)
    metrics = [float(call["metric"]) for call in calls]
    losses = [_losses_at(call["weights"], setting) for call in calls]
    wrong = [
        (e, m, v, t) for e, (m, (v, t)) in enumerate(zip(metrics, losses, strict=True))
        if not math.isclose(m, v, rel_tol=1e-4, abs_tol=1e-6)
    ]
    like_train = [w for w in wrong if abs(w[1] - w[3]) < abs(w[1] - w[2])]
    if wrong and 2 * len(like_train) >= len(wrong):
        epoch, metric, val_loss, train_loss = like_train[-1]
        fail(
            "plateau-train-metric",
            observed=f"epoch {epoch}: scheduler.step received {metric:.4f} while the validation loss was "
            f"{val_loss:.4f} (training loss {train_loss:.4f})",
            expected="the validation loss: here the net memorises random labels, so the training loss keeps "
            "falling and never plateaus, while the validation loss rises",
            cause="scheduler.step(train_loss) instead of scheduler.step(val_loss)",
            where="the argument of scheduler.step at the end of the epoch",
        )
    if wrong:
        epoch, metric, val_loss, _ = wrong[0]
        fail(
            "plateau-wrong-metric",
            observed=f"epoch {epoch}: scheduler.step received {metric:.4f}, the validation loss was {val_loss:.4f}",
            expected="the mean validation loss of the model after this epoch's training",
            cause="a stale value (last epoch's), a sum instead of a mean, or a single batch's loss",
            where="how the validation loss is computed and when it is passed",
        )
    val_losses = [val for val, _ in losses]
    returned = seen["returned"]
    if not isinstance(returned, (list, tuple)) or not _close([_as_float(r) for r in returned], val_losses, 1e-4, 1e-6):
        fail(
            "wrong-return",
            observed=f"returned {returned!r:.120}",
            expected=f"the {epochs} validation losses, one per epoch: {_fmt(val_losses)}",
            cause="returning the training losses, or nothing",
            where="the return statement",
        )
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1e-2)
    scheduler = _plateau_scheduler(optimizer)
    for val_loss in val_losses:
        scheduler.step(val_loss)
    final_lr = optimizer.param_groups[0]["lr"]
    return f"stepped once per epoch with the validation loss; lr went 0.01 -> {final_lr:.2g} as it rose"


# ----------------------------------------------------------------------------------------------------
# 07-amp-skip: under a GradScaler, the scheduler must not advance on a skipped step
# ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _AmpSetting:
    """The amp check's inputs: batches (some overflowing), the model's seed, the scheduler."""

    batches: list[tuple[torch.Tensor, torch.Tensor]]
    poisoned: frozenset[int]
    model_seed: int
    make: SchedulerFactory


def _amp_setting(case: Case) -> _AmpSetting:
    # both overflow on the first batch and on two batches in a row
    count, poisoned = (12, {0, 5, 6, 10}) if case.hidden else (10, {0, 3, 4, 8})
    generator = torch.Generator().manual_seed(case.seeded(13 if case.hidden else 1))
    batches = []
    for i in range(count):
        inputs = torch.randn(8, 4, generator=generator)
        targets = torch.randn(8, 1, generator=generator)
        if i in poisoned:
            inputs[0, 0] = float("inf")  # an overflow: the scaler finds inf gradients and skips the step
        batches.append((inputs, targets))
    if case.hidden:
        make = lambda opt: torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.8)  # noqa: E731
    else:
        make = lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))  # noqa: E731
    return _AmpSetting(batches, frozenset(poisoned), case.seeded(5), make)


def _amp_model(seed: int) -> nn.Linear:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Linear(4, 1)


def _reference_grads(
    seed: int, params: list[torch.Tensor], inputs: torch.Tensor, targets: torch.Tensor
) -> list[torch.Tensor]:
    """The true gradients of the MSE loss of the amp model holding `params` on one batch."""
    model = _amp_model(seed)
    with torch.no_grad():
        for parameter, value in zip(model.parameters(), params, strict=True):
            parameter.copy_(value)
    nn.functional.mse_loss(model(inputs), targets).backward()
    return [model.weight.grad, model.bias.grad]


def _as_float(value: Any) -> float | None:
    """A returned number or one-element tensor as a float; None for anything else."""
    if _is_number(value):
        return float(value)
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_complex():
        return float(value)
    return None


def _as_flag(value: Any) -> bool | None:
    """A returned bool (or a one-element tensor, or a numpy bool) as a bool; None for anything else."""
    if isinstance(value, Opaque) and value.type_name == "bool_" and value.text in ("True", "False"):
        return value.text == "True"
    number = _as_float(value) if not isinstance(value, bool) else float(value)
    return None if number is None else bool(number)


@register(
    "07-amp-skip", nonfinite=('steps/*', 'final/*'),
    hints=Hints(
        nudge="When scaler.step() finds inf/NaN gradients it skips optimizer.step() and scaler.update() lowers "
        "the scale. If the scheduler still advances, the schedule runs ahead of the real updates.",
        concept="The scale only drops after a skipped step (it grows after growth_interval good steps): compare "
        "scaler.get_scale() before scaler.step and after scaler.update().",
        solution="scale = scaler.get_scale(); scaler.step(optimizer); scaler.update(); "
        "stepped = scaler.get_scale() >= scale; if stepped: scheduler.step(); "
        "optimizer.zero_grad(set_to_none=True); return stepped",
        section="6. When the `GradScaler` skips a step",
    ),
    requires={
        "bypasses-scaler": Requirement(
            "the update goes through scaler.step(optimizer), which skips overflowing steps",
            hint="Did an update happen on a batch whose gradients hold inf? Who decides to skip it?"),
        "wrong-step-count": Requirement(
            "one scaler.step(optimizer) per call, and the gradients reset after it",
            hint="Count the real optimizer steps: one per good batch. Is .grad reset after every call, so that "
            "an inf from a skipped batch does not stay?"),
        "loss-not-scaled": Requirement(
            "backward goes through scaler.scale(loss), scaled once",
            hint="scaler.step unscales the gradients: were they scaled exactly once before?"),
        "steps-inconsistent": Requirement(
            "each optimizer step uses the true gradients of its own batch",
            hint="Between backward and scaler.step, does anything change the gradients (clipping while they "
            "are still scaled, leftovers of an earlier batch)?"),
        "skip-not-reported": Requirement(
            "returns whether the optimizer really stepped",
            hint="The scale also grows after good steps: does your test treat any change of scale as a skip?"),
        "scheduler-not-stepped": Requirement(
            "the scheduler is stepped after every real step",
            hint="Print optimizer.param_groups[0]['lr'] after a few calls: does it ever change?"),
        "scheduler-advanced-on-skip": Requirement(
            "the scheduler is not stepped when the optimizer step was skipped",
            hint="On a batch that overflowed, was there an update? Then should the schedule move?"),
    },
)
def probe_amp_skip(amp_step: Callable[..., bool], *, case: Case) -> dict:
    """Feed the batches, some overflowing; record every real optimizer step, the returns and the scheduler's count."""
    setting = _amp_setting(case)
    model = _amp_model(setting.model_seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = setting.make(optimizer)
    # growth_interval=2: the scale also *grows* after two good steps, which must not look like a skip
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8, growth_interval=2)

    def run() -> list[Any]:
        return [amp_step(model, x, y, nn.MSELoss(), optimizer, scaler, scheduler) for x, y in setting.batches]

    seen = _record_steps(run, optimizer)
    seen["last_epoch"] = scheduler.last_epoch
    return seen


@judges("07-amp-skip")
def judge_amp_skip(seen: dict, *, case: Case) -> str:
    """The scheduler advances exactly once per real optimizer step; skipped steps are reported and leave it alone."""
    setting = _amp_setting(case)
    count, poisoned = len(setting.batches), setting.poisoned
    real = count - len(poisoned)
    steps, warned = seen["steps"], seen["warned"]
    if len(steps) == count:
        fail(
            "bypasses-scaler",
            observed=f"optimizer.step() ran on all {count} batches, including {len(poisoned)} with inf gradients",
            expected=f"{real} optimizer steps: scaler.step(optimizer) skips the overflowing ones",
            cause="calling optimizer.step() directly instead of scaler.step(optimizer)",
            where="the update: scaler.step(optimizer); scaler.update()",
        )
    if len(steps) != real:
        fail(
            "wrong-step-count",
            observed=f"{len(steps)} optimizer steps over {count} batches ({len(poisoned)} overflowing)",
            expected=f"{real}: one per batch whose gradients are finite",
            cause=("optimizer.step() called in addition to scaler.step(optimizer), or a step taken several times "
                   "per call" if len(steps) > real else
                   "the gradients are not reset after each call (zero_grad missing: the inf of a skipped batch "
                   "stays in .grad, so every later step is skipped too), or scaler.step(optimizer) not called "
                   "every time"),
            where="scaler.step(optimizer) once per call, and optimizer.zero_grad(set_to_none=True) after it",
        )
    finite = [batch for i, batch in enumerate(setting.batches) if i not in poisoned]
    for step, (inputs, targets) in zip(steps, finite, strict=True):
        expected_grads = _reference_grads(setting.model_seed, step["params"], inputs, targets)
        grad = step["grads"][0]
        ratio = float(grad.norm() / expected_grads[0].norm()) if isinstance(grad, torch.Tensor) else math.nan
        # a scale missing or applied twice multiplies the gradients by a power of two; anything else is
        # left to the replay below (clipped or accumulated gradients)
        power = math.log2(ratio) if ratio > 0 and math.isfinite(ratio) else math.nan
        if abs(power) >= 0.99 and math.isclose(power, round(power), abs_tol=1e-2):
            fail(
                "loss-not-scaled",
                observed=f"gradients at optimizer.step() are {ratio:.3g}x the true ones (2**{round(power)})",
                expected="the true gradients (scaler.step unscales what scaler.scale(loss) scaled)",
                cause="loss.backward() instead of scaler.scale(loss).backward(), or the loss scaled twice",
                where="the backward call",
            )
    returned = [_as_flag(r) for r in seen["returned"]]
    expected_returns = [i not in poisoned for i in range(count)]
    if returned != expected_returns:
        fail(
            "skip-not-reported",
            observed=f"returned {seen['returned']!r:.200}",
            expected=f"{expected_returns} (False where the batch overflowed and the step was skipped)",
            cause="the return value does not say whether the optimizer stepped; note the scale also grows after "
            "good steps, so compare with >=",
            where="compare scaler.get_scale() before and after scaler.update()",
        )
    used = _used_lrs(seen)
    schedule = _scheduler_trace(setting.make, 0.1, count)
    last_epoch = seen["last_epoch"]
    if _close(used, schedule[:real]) and last_epoch == real:
        _replay_steps(_amp_model(setting.model_seed), seen, finite)
        return f"{len(poisoned)} skipped steps left the schedule alone; {real} real steps used {_fmt(schedule[:real])}"
    if len(set(used)) == 1 and last_epoch == 0:
        fail(
            "scheduler-not-stepped",
            observed=f"every optimizer step used lr {used[0]:.4g}",
            expected=f"{_fmt(schedule[:real])}",
            cause="scheduler.step() is never called",
            where="after scaler.update(), when the step was taken",
        )
    fail(
        "scheduler-advanced-on-skip",
        observed=f"after {real} real steps the scheduler had stepped {last_epoch} times; lrs used {_fmt(used)}",
        expected=f"{real} scheduler steps; lrs {_fmt(schedule[:real])}",
        cause="scheduler.step() runs even when scaler.step() skipped the optimizer step, so the schedule runs "
        "ahead of the real updates." + _order_note(warned),
        where="step the scheduler only if the scale did not drop",
    )
