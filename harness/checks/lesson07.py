"""Checks of lesson 07 (learning-rate schedulers).

Every check observes the learning rate each `optimizer.step()` actually used (an optimizer step pre-hook,
`StepRecorder`), the calls a scheduler receives, and the modes the model ran in; it never reads source.
"""

from __future__ import annotations

import math
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from harness.checks.core import fail, register
from harness.checks.probes import ForwardRecorder, StepRecorder

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


def _reference_lrs(make_scheduler: SchedulerFactory, lr: float, steps: int) -> list[float]:
    """The learning rate a scheduler gives before each of `steps + 1` consecutive scheduler steps."""
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=lr)
    scheduler = make_scheduler(optimizer)
    lrs = [optimizer.param_groups[0]["lr"]]
    for _ in range(steps):
        optimizer.step()  # keeps PyTorch's order bookkeeping happy: no warning in the reference
        scheduler.step()
        lrs.append(optimizer.param_groups[0]["lr"])
    return lrs


def _close(a: Sequence[float], b: Sequence[float]) -> bool:
    return len(a) == len(b) and all(math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-12) for x, y in zip(a, b))


def _fmt(values: Sequence[float], limit: int = 8) -> str:
    shown = ", ".join(f"{v:.4g}" for v in values[:limit])
    return f"[{shown}{', ...' if len(values) > limit else ''}]"


def _run_recorded(train: Callable[..., Any], optimizer: torch.optim.Optimizer, *args: Any) -> tuple[list[float], bool]:
    """Run the student's loop; return the lr each optimizer.step used and whether PyTorch warned on order."""
    with StepRecorder(optimizer) as steps, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train(*args)
    warned = any(_ORDER_WARNING in str(w.message) for w in caught)
    return [record.lrs[0] for record in steps.records], warned


def _order_note(warned: bool) -> str:
    if not warned:
        return ""
    return " PyTorch also warned: 'Detected call of `lr_scheduler.step()` before `optimizer.step()`'."


# ----------------------------------------------------------------------------------------------------
# 07-warmup-cosine
# ----------------------------------------------------------------------------------------------------
def warmup_cosine_reference(step: int, warmup_steps: int, total_steps: int) -> float:
    """Closed form of linear warmup (0 -> 1 over `warmup_steps`) then cosine decay to 0 at `total_steps`."""
    if step < warmup_steps:
        return step / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def _compare_warmup_cosine(factor: Callable[[int, int, int], float], step: int, warmup: int, total: int) -> None:
    value = factor(step, warmup, total)
    where = f"warmup_cosine(step={step}, warmup_steps={warmup}, total_steps={total})"
    if isinstance(value, torch.Tensor) or not isinstance(value, (int, float)):
        fail(
            "not-a-float",
            observed=f"{where} returned a {type(value).__name__}",
            expected="a Python float (LambdaLR multiplies the base lr by it)",
            cause="returning a tensor or numpy value; math.cos and plain arithmetic give a float",
            where="the return statement of warmup_cosine",
        )
    expected = warmup_cosine_reference(step, warmup, total)
    if math.isclose(value, expected, rel_tol=1e-6, abs_tol=1e-9):
        return
    if step < warmup:
        fail(
            "warmup-wrong",
            observed=f"{where} = {value:.6g}",
            expected=f"{expected:.6g} = step / warmup_steps (a linear ramp from 0 that reaches 1 at step {warmup})",
            cause="an off-by-one ((step + 1) / warmup_steps) or dividing by total_steps during warmup",
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
            cause="progress measured from 0 instead of from the end of warmup, or a wrong cosine period",
            where="the cosine branch: progress and the cosine",
        )
    fail(
        "rises-after-total",
        observed=f"{where} = {value:.6g} (past the end of the schedule)",
        expected="0.0: once step >= total_steps the factor stays at the end of the cosine",
        cause="progress is not clamped to 1, so the cosine comes back up after total_steps",
        where="clamp progress with min(1.0, ...)",
    )


def _check_with_lambda_lr(factor: Callable[[int, int, int], float], warmup: int, total: int) -> None:
    """The lr LambdaLR produces from the student's factor matches base_lr times the closed form."""
    base_lr = 0.3
    lrs = _reference_lrs(
        lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda s: factor(s, warmup, total)), base_lr, total + 3
    )
    expected = [base_lr * warmup_cosine_reference(s, warmup, total) for s in range(total + 4)]
    if not _close(lrs, expected):
        first = next(i for i, (a, b) in enumerate(zip(lrs, expected)) if not math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12))
        fail(
            "cosine-wrong",
            observed=f"LambdaLR with your factor gives lr {lrs[first]:.6g} at step {first}",
            expected=f"{expected[first]:.6g} (base lr {base_lr} x the closed form)",
            cause="the factor depends on something other than its three arguments",
            where="warmup_cosine",
        )


@register(
    "07-warmup-cosine",
    hints=(
        "Two pieces: a linear ramp step / warmup_steps while step < warmup_steps, then a half cosine from 1 "
        "down to 0 over the remaining total_steps - warmup_steps steps.",
        "progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps)); "
        "return 0.5 * (1 + math.cos(math.pi * progress)). The min keeps it at 0 after total_steps.",
    ),
)
def check_warmup_cosine(factor: Callable[[int, int, int], float], *, hidden: bool) -> str:
    """Compare the student's factor with the closed form on many (step, warmup, total), property-based."""
    from hypothesis import given, settings, strategies as st
    from hypothesis.configuration import set_hypothesis_home_dir

    # Hypothesis caches into ./.hypothesis by default: keep it out of the student's (and the release's) folder
    set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "harness-hypothesis")

    @st.composite
    def cases(draw: Any) -> tuple[int, int, int]:
        warmup = draw(st.integers(0 if hidden else 1, 200 if hidden else 20))
        total = draw(st.integers(warmup + (0 if hidden else 1), warmup + (2000 if hidden else 200)))
        step = draw(st.integers(0, total + (500 if hidden else 50)))
        return step, warmup, total

    examples = 400 if hidden else 150

    @settings(max_examples=examples, database=None, deadline=None, derandomize=True, print_blob=False)
    @given(cases())
    def agrees(case: tuple[int, int, int]) -> None:
        _compare_warmup_cosine(factor, *case)

    for step, warmup, total in [(0, 5, 50), (4, 5, 50), (5, 5, 50), (50, 5, 50), (80, 5, 50), (0, 0, 10)]:
        if warmup or hidden:
            _compare_warmup_cosine(factor, step, warmup, total)
    agrees()
    _check_with_lambda_lr(factor, *((7, 40) if hidden else (5, 30)))
    return f"matches the closed form on {examples} property-based cases and drives LambdaLR correctly"


# ----------------------------------------------------------------------------------------------------
# 07-per-step and 07-per-epoch: a scheduler stepped at the right place and granularity
# ----------------------------------------------------------------------------------------------------
def _tiny_regressor(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


def _step_count_failure(observed: int, epochs: int, batches: int) -> None:
    fail(
        "wrong-step-count",
        observed=f"{observed} optimizer steps",
        expected=f"{epochs * batches} ({epochs} epochs x {batches} batches, one optimizer.step() per batch)",
        cause="the loop runs the wrong number of epochs or batches, or steps the optimizer more than once",
        where="the epoch and batch loops",
    )


@register(
    "07-per-step",
    hints=(
        "A per-step scheduler (OneCycleLR, warmup) moves once per batch, right after the optimizer used the "
        "current lr.",
        "Inside the batch loop: zero_grad, forward, loss, backward, optimizer.step(), then scheduler.step(). "
        "Never before optimizer.step(), and not once per epoch.",
    ),
)
def check_per_step(train_per_step: Callable[..., Any], *, hidden: bool) -> str:
    """The lr used by optimizer step i must be the schedule's i-th value."""
    epochs, batch_size, n = (4, 6, 36) if hidden else (3, 8, 48)
    loader = _regression_loader(n, batch_size, seed=11 if hidden else 7)
    batches = len(loader)
    total = epochs * batches
    if hidden:
        make = lambda opt: torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0, end_factor=0.05, total_iters=total)  # noqa: E731
    else:
        make = lambda opt: torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=total)  # noqa: E731
    model = _tiny_regressor(3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scheduler = make(optimizer)
    used, warned = _run_recorded(train_per_step, optimizer, model, loader, nn.MSELoss(), optimizer, scheduler, epochs)
    expected = _reference_lrs(make, 0.05, total)
    if len(used) != total:
        _step_count_failure(len(used), epochs, batches)
    if _close(used, expected[:total]):
        return f"lr used at each of {total} optimizer steps follows the per-step schedule"
    if len(set(used)) == 1:
        fail(
            "scheduler-not-stepped",
            observed=f"every optimizer step used lr {used[0]:.4g}",
            expected=f"the schedule {_fmt(expected)}",
            cause="scheduler.step() is never called",
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
    first = next(i for i, (a, b) in enumerate(zip(used, expected)) if not math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12))
    fail(
        "wrong-lr-trace",
        observed=f"optimizer step {first} used lr {used[first]:.6g}",
        expected=f"{expected[first]:.6g}; the whole schedule is {_fmt(expected)}",
        cause="scheduler.step() is called more or less than once per optimizer step." + _order_note(warned),
        where="the batch loop: exactly one scheduler.step() after each optimizer.step()",
    )


@register(
    "07-per-epoch",
    hints=(
        "StepLR, MultiStepLR and ExponentialLR count epochs: the lr stays the same for every batch of an epoch.",
        "Run the whole batch loop, then call scheduler.step() once, at the end of the epoch (outside the batch "
        "loop, after the last optimizer.step()).",
    ),
)
def check_per_epoch(train_per_epoch: Callable[..., Any], *, hidden: bool) -> str:
    """Every batch of epoch e must use the schedule's e-th value."""
    epochs, batch_size, n = (6, 5, 25) if hidden else (5, 8, 32)
    loader = _regression_loader(n, batch_size, seed=5 if hidden else 2)
    batches = len(loader)
    total = epochs * batches
    if hidden:
        make = lambda opt: torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[1, 3, 4], gamma=0.3)  # noqa: E731
    else:
        make = lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)  # noqa: E731
    model = _tiny_regressor(4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.04)
    scheduler = make(optimizer)
    used, warned = _run_recorded(train_per_epoch, optimizer, model, loader, nn.MSELoss(), optimizer, scheduler, epochs)
    per_epoch = _reference_lrs(make, 0.04, epochs)
    expected = [per_epoch[e] for e in range(epochs) for _ in range(batches)]
    if len(used) != total:
        _step_count_failure(len(used), epochs, batches)
    if _close(used, expected):
        return f"every batch of each of {epochs} epochs used that epoch's lr"
    if len(set(used)) == 1:
        fail(
            "scheduler-not-stepped",
            observed=f"every optimizer step used lr {used[0]:.4g}",
            expected=f"the lr per epoch {_fmt(per_epoch[:epochs])}",
            cause="scheduler.step() is never called",
            where="the end of the epoch loop",
        )
    per_batch = _reference_lrs(make, 0.04, total)[:total]
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
    first = next(i for i, (a, b) in enumerate(zip(used, expected)) if not math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12))
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
def _memorisation_task(seed: int, train_n: int, val_n: int) -> tuple[TensorDataset, TensorDataset]:
    """Random labels: the training loss falls as the net memorises, the validation loss rises.

    The two losses move in opposite directions, so the metric a plateau scheduler is fed is observable.
    """
    generator = torch.Generator().manual_seed(seed)
    make = lambda n: TensorDataset(torch.randn(n, 10, generator=generator), torch.randint(0, 2, (n,), generator=generator))  # noqa: E731
    return make(train_n), make(val_n)


def _mean_loss(model: nn.Module, dataset: TensorDataset, loss_fn: nn.Module) -> float:
    was_training = model.training
    model.eval()
    with torch.no_grad():
        value = float(loss_fn(model(dataset.tensors[0]), dataset.tensors[1]))
    model.train(was_training)
    return value


class _PlateauSpy:
    """Wraps a ReduceLROnPlateau's `step` to record the metric it receives and the true losses then."""

    def __init__(self, scheduler: Any, model: nn.Module, train_set: TensorDataset, val_set: TensorDataset) -> None:
        self.calls: list[tuple[float, float, float]] = []  # (metric passed, true val loss, true train loss)
        self._step = scheduler.step
        self._model, self._train, self._val = model, train_set, val_set
        scheduler.step = self  # an instance attribute shadows the method: the student's calls land here

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        metric = args[0] if args else kwargs.get("metrics")
        if metric is None:
            fail(
                "plateau-no-metric",
                observed="scheduler.step() was called without a metric",
                expected="scheduler.step(val_loss): ReduceLROnPlateau decides from the value you give it",
                cause="calling it like the other schedulers",
                where="the end of the epoch, after evaluating on the validation set",
            )
        loss_fn = nn.CrossEntropyLoss()
        self.calls.append((float(metric), _mean_loss(self._model, self._val, loss_fn), _mean_loss(self._model, self._train, loss_fn)))
        self._step(*args, **kwargs)


def _check_eval_modes(records: list[Any], val_batch: int, train_batch: int) -> None:
    val_forwards = [r for r in records if r.batch_size == val_batch]
    # training forwards are those that record a graph; a no_grad pass over the training set (to log its loss)
    # may legitimately run in eval mode
    train_forwards = [r for r in records if r.batch_size == train_batch and r.grad_enabled]
    if not val_forwards:
        fail(
            "no-validation",
            observed="the model never ran on a validation batch",
            expected="one pass over val_loader per epoch",
            cause="the validation loss is not computed from val_loader",
            where="the evaluation part of the epoch",
        )
    if any(r.training for r in val_forwards):
        fail(
            "val-in-train-mode",
            observed="validation batches ran with model.training == True",
            expected="model.eval() before evaluating (dropout and batch norm behave differently)",
            cause="missing model.eval()",
            where="before the validation loop",
        )
    if any(r.grad_enabled for r in val_forwards):
        fail(
            "val-with-grad",
            observed="validation ran with autograd recording",
            expected="torch.no_grad() (or torch.inference_mode()) around evaluation",
            cause="the validation loop builds graphs it never uses",
            where="wrap the validation loop in `with torch.no_grad():`",
        )
    if any(not r.training for r in train_forwards):
        fail(
            "train-in-eval-mode",
            observed="training batches ran with model.training == False",
            expected="model.train() at the start of every epoch",
            cause="model.eval() for validation is never undone",
            where="the top of the epoch loop",
        )


@register(
    "07-plateau",
    hints=(
        "ReduceLROnPlateau reacts to the number you pass to step(). Which number tells you the model stopped "
        "improving on data it has not trained on?",
        "Each epoch: train, then model.eval() and a no_grad pass over val_loader to get the mean validation "
        "loss, then scheduler.step(val_loss) once. Return the list of validation losses.",
    ),
)
def check_plateau(train_with_plateau: Callable[..., Any], *, hidden: bool) -> str:
    """The scheduler must receive, once per epoch, the validation loss of the model at that moment."""
    seed, epochs, train_n, val_n, train_bs, val_bs = (21, 7, 40, 60, 10, 20) if hidden else (8, 6, 32, 48, 8, 16)
    train_set, val_set = _memorisation_task(seed, train_n, val_n)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=0)
    spy = _PlateauSpy(scheduler, model, train_set, val_set)
    train_loader = DataLoader(train_set, batch_size=train_bs, shuffle=True, generator=torch.Generator().manual_seed(seed))
    val_loader = DataLoader(val_set, batch_size=val_bs)
    with ForwardRecorder(model) as forwards:
        returned = train_with_plateau(model, train_loader, val_loader, nn.CrossEntropyLoss(), optimizer, scheduler, epochs)
    calls = spy.calls
    if len(calls) > epochs:
        fail(
            "plateau-per-batch",
            observed=f"scheduler.step was called {len(calls)} times in {epochs} epochs",
            expected=f"{epochs} calls: one per epoch, after validation",
            cause="scheduler.step(...) sits inside the batch loop",
            where="move it to the end of the epoch",
        )
    if len(calls) < epochs:
        fail(
            "plateau-not-stepped",
            observed=f"scheduler.step was called {len(calls)} times in {epochs} epochs",
            expected=f"{epochs} calls, one per epoch",
            cause="the scheduler is not stepped every epoch",
            where="the end of the epoch loop: scheduler.step(val_loss)",
        )
    _check_eval_modes(forwards.records, val_bs, train_bs)
    wrong = [(e, m, v, t) for e, (m, v, t) in enumerate(calls) if not math.isclose(m, v, rel_tol=1e-4, abs_tol=1e-6)]
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
    val_losses = [val for _, val, _ in calls]
    if returned is None or len(returned) != epochs or not all(
        math.isclose(float(a), b, rel_tol=1e-4, abs_tol=1e-6) for a, b in zip(returned, val_losses)
    ):
        fail(
            "wrong-return",
            observed=f"returned {returned!r:.120}",
            expected=f"the {epochs} validation losses, one per epoch: {_fmt(val_losses)}",
            cause="returning the training losses, or nothing",
            where="the return statement",
        )
    final_lr = optimizer.param_groups[0]["lr"]
    return f"stepped once per epoch with the validation loss; lr went 0.01 -> {final_lr:.2g} as it rose"


# ----------------------------------------------------------------------------------------------------
# 07-amp-skip: under a GradScaler, the scheduler must not advance on a skipped step
# ----------------------------------------------------------------------------------------------------
def _amp_batches(seed: int, count: int, poisoned: set[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for i in range(count):
        inputs = torch.randn(8, 4, generator=generator)
        targets = torch.randn(8, 1, generator=generator)
        if i in poisoned:
            inputs[0, 0] = float("inf")  # an overflow: the scaler finds inf gradients and skips the step
        batches.append((inputs, targets))
    return batches


def _reference_grads(params: list[torch.Tensor], inputs: torch.Tensor, targets: torch.Tensor) -> list[torch.Tensor]:
    model = nn.Linear(4, 1)
    with torch.no_grad():
        model.weight.copy_(params[0])
        model.bias.copy_(params[1])
    nn.functional.mse_loss(model(inputs), targets).backward()
    return [model.weight.grad, model.bias.grad]


@register(
    "07-amp-skip",
    hints=(
        "When scaler.step() finds inf/NaN gradients it skips optimizer.step() and scaler.update() lowers the "
        "scale. If the scheduler still advances, the schedule runs ahead of the real updates.",
        "scale = scaler.get_scale(); scaler.step(optimizer); scaler.update(); "
        "stepped = scaler.get_scale() >= scale; if stepped: scheduler.step(). Return stepped.",
    ),
)
def check_amp_skip(amp_step: Callable[..., bool], *, hidden: bool) -> str:
    """Feed batches, some overflowing; the scheduler must advance exactly once per real optimizer step."""
    count, poisoned = (12, {0, 5, 6, 10}) if hidden else (10, {2, 3, 7})
    batches = _amp_batches(13 if hidden else 1, count, poisoned)
    torch.manual_seed(5)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    if hidden:
        make = lambda opt: torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.8)  # noqa: E731
    else:
        make = lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))  # noqa: E731
    scheduler = make(optimizer)
    # growth_interval=2: the scale also *grows* after two good steps, which must not look like a skip
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8, growth_interval=2)
    returned = []
    with StepRecorder(optimizer) as steps, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for inputs, targets in batches:
            returned.append(amp_step(model, inputs, targets, nn.MSELoss(), optimizer, scaler, scheduler))
    warned = any(_ORDER_WARNING in str(w.message) for w in caught)
    real = count - len(poisoned)
    if len(steps.records) == count:
        fail(
            "bypasses-scaler",
            observed=f"optimizer.step() ran on all {count} batches, including {len(poisoned)} with inf gradients",
            expected=f"{real} optimizer steps: scaler.step(optimizer) skips the overflowing ones",
            cause="calling optimizer.step() directly instead of scaler.step(optimizer)",
            where="the update: scaler.step(optimizer); scaler.update()",
        )
    if len(steps.records) != real:
        fail(
            "wrong-step-count",
            observed=f"{len(steps.records)} optimizer steps over {count} batches ({len(poisoned)} overflowing)",
            expected=f"{real}",
            cause="the step is taken zero or several times per call",
            where="scaler.step(optimizer) once per call",
        )
    finite = [batches[i] for i in range(count) if i not in poisoned]
    for record, (inputs, targets) in zip(steps.records, finite):
        expected_grads = _reference_grads(record.params, inputs, targets)
        ratio = float(record.grads[0].norm() / expected_grads[0].norm())
        if not math.isclose(ratio, 1.0, rel_tol=2e-2):
            fail(
                "loss-not-scaled",
                observed=f"gradients at optimizer.step() are {ratio:.3g}x the true ones",
                expected="the true gradients (scaler.step unscales what scaler.scale(loss) scaled)",
                cause="loss.backward() instead of scaler.scale(loss).backward(), or an extra scaling",
                where="the backward call",
            )
    expected_returns = [i not in poisoned for i in range(count)]
    if [bool(r) for r in returned] != expected_returns:
        fail(
            "skip-not-reported",
            observed=f"returned {[bool(r) for r in returned]}",
            expected=f"{expected_returns} (False where the batch overflowed and the step was skipped)",
            cause="the return value does not say whether the optimizer stepped; note the scale also grows after "
            "good steps, so compare with >=",
            where="compare scaler.get_scale() before and after scaler.update()",
        )
    used = [record.lrs[0] for record in steps.records]
    schedule = _reference_lrs(make, 0.1, count)
    if _close(used, schedule[:real]) and scheduler.last_epoch == real:
        return f"{len(poisoned)} skipped steps left the schedule alone; {real} real steps used {_fmt(schedule[:real])}"
    if len(set(used)) == 1 and scheduler.last_epoch == 0:
        fail(
            "scheduler-not-stepped",
            observed=f"every optimizer step used lr {used[0]:.4g}",
            expected=f"{_fmt(schedule[:real])}",
            cause="scheduler.step() is never called",
            where="after scaler.update(), when the step was taken",
        )
    fail(
        "scheduler-advanced-on-skip",
        observed=f"after {real} real steps the scheduler had stepped {scheduler.last_epoch} times; lrs used "
        f"{_fmt(used)}",
        expected=f"{real} scheduler steps; lrs {_fmt(schedule[:real])}",
        cause="scheduler.step() runs even when scaler.step() skipped the optimizer step, so the schedule runs "
        "ahead of the real updates." + _order_note(warned),
        where="step the scheduler only if the scale did not drop",
    )
