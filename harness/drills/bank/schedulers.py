"""Drills on learning-rate schedulers: warmup-cosine, stepping granularity, plateau, param groups, resuming.

The probes hand the answer a real optimizer and scheduler (or ask it for one), run it, and record the learning
rate of every optimizer step (`StepRecorder`); the judges rebuild the same schedule with torch's own schedulers
or the closed form and compare.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from harness.contract.case import Case
from harness.contract.instruments import StepRecorder
from harness.drills.core import Drill, add
from harness.drills.support import case_generator, explain


def _randint(case: Case, base: int, low: int, high: int) -> int:
    """An int in [low, high) drawn from the case."""
    return int(torch.randint(low, high, (), generator=case_generator(case, base)))


def warmup_configs(case: Case) -> list[tuple[int, int]]:
    """(warmup, total) settings of the warmup drill: one drawn by the case, and edge cases."""
    warmup = _randint(case, 0, 2, 12)
    return [(warmup, warmup + _randint(case, 1, 5, 200)), (1, 10), (10, 10), (0, _randint(case, 2, 5, 40))]


def warmup_queries(case: Case) -> list[tuple[int, int, int]]:
    """(step, warmup, total) queries of the warmup drill: the edges of each setting and a few drawn steps."""
    queries = []
    for warmup, total in warmup_configs(case):
        steps = {0, 1, max(warmup - 1, 0), warmup, (warmup + total) // 2, total - 1, total, total + 5}
        steps |= {_randint(case, 10 + i, 0, total + 10) for i in range(3)}
        queries += [(step, warmup, total) for step in sorted(steps)]
    return queries


def _probe_warmup_cosine(answer: dict, *, case: Case) -> dict:
    factor = answer["warmup_cosine"]
    values = [float(factor(step, warmup, total)) for step, warmup, total in warmup_queries(case)]
    warmup, total = warmup_configs(case)[0]
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: factor(s, warmup, total))
    with StepRecorder(optimizer) as steps:
        for _ in range(warmup + 3):
            optimizer.step()
            scheduler.step()
    return {"values": values, "lrs": [r.lrs for r in steps.records]}


add(
    Drill(
        id="schedulers-warmup-cosine",
        title="Warmup then cosine, as a LambdaLR factor",
        kind="write",
        topics=("schedulers",),
        difficulty=2,
        prompt="Write warmup_cosine(step, warmup, total) -> the LR multiplier for LambdaLR: (step + 1) / warmup for "
        "step < warmup, then 0.5 * (1 + cos(pi * p)) with p = (step - warmup) / (total - warmup), "
        "clamped to 0 after total. warmup may be 0, and may equal total.",
        entry="warmup_cosine",
        starter="import math\n\n\ndef warmup_cosine(step, warmup, total):\n    raise NotImplementedError\n",
        hints=("Two phases and a clamp. Check the boundaries: step = warmup - 1, warmup, total.",
               "Guard total == warmup with max(1, total - warmup), and clamp progress with min(..., 1.0)."),
        probe=_probe_warmup_cosine,
    )
)


# ---------------------------------------------------------------------------------------------------------------
# schedulers-wrong-granularity


def _regression_batches(case: Case, base: int, count: int, features: int = 4) -> list[tuple[torch.Tensor, ...]]:
    gen = case_generator(case, base)
    return [(torch.randn(8, features, generator=gen), torch.randn(8, 1, generator=gen)) for _ in range(count)]


def _small_linear(case: Case, base: int, features: int = 4) -> nn.Linear:
    gen = case_generator(case, base)
    layer = nn.Linear(features, 1)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(1, features, generator=gen) * 0.3)
        layer.bias.zero_()
    return layer


GRAN_EPOCHS = 4


def gran_setup(case: Case) -> tuple[float, int]:
    """(learning rate, epochs) of the per-step or per-epoch drill."""
    return round(0.05 + float(torch.rand((), generator=case_generator(case, 20))), 4), _randint(case, 21, 3, 7)


def _probe_granularity(answer: dict, *, case: Case) -> dict:
    lr, n_batches = gran_setup(case)
    model = _small_linear(case, 22)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.1)
    with StepRecorder(optimizer) as steps:
        answer["train"](model, _regression_batches(case, 23, n_batches), optimizer, scheduler, nn.MSELoss(),
                        GRAN_EPOCHS)
    return {"lrs": [r.lrs for r in steps.records]}


GRANULARITY_STARTER = '''import torch


def train(model, batches, optimizer, scheduler, loss_fn, epochs):
    """scheduler is a StepLR(step_size=2 epochs, gamma=0.1).
    Symptom: the learning rate collapses to ~0 within the first epoch."""
    for epoch in range(epochs):
        model.train()
        for x, y in batches:
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            optimizer.step()
            scheduler.step()
'''

add(
    Drill(
        id="schedulers-wrong-granularity",
        title="Bug hunt: the learning rate collapses in the first epoch",
        kind="bughunt",
        topics=("schedulers", "loop"),
        difficulty=1,
        prompt="With StepLR(step_size=2, gamma=0.1) the learning rate should drop tenfold every 2 epochs, but it "
        "collapses to ~0 within the first epoch. Fix train().",
        entry="train",
        starter=GRANULARITY_STARTER,
        hints=("How many times per epoch does scheduler.step() run?",
               "StepLR counts epochs: step it after the batch loop."),
        probe=_probe_granularity,
    )
)


# ---------------------------------------------------------------------------------------------------------------
# schedulers-plateau-metric


PLATEAU_EPOCHS = 6


def plateau_data(case: Case) -> tuple[list, list]:
    """The plateau drill's four train batches and two validation batches."""
    gen = case_generator(case, 30)
    x = torch.randn(64, 16, generator=gen)
    train_batches = [(x[i:i + 16], torch.randn(16, 1, generator=gen)) for i in range(0, 64, 16)]
    val_batches = [(torch.randn(16, 16, generator=gen), torch.randn(16, 1, generator=gen)) for _ in range(2)]
    return train_batches, val_batches


def plateau_metric_model(case: Case) -> nn.Sequential:
    """The plateau drill's seeded ReLU MLP (16 -> 32 -> 1)."""
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    gen = case_generator(case, 31)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
    return model


class _RecordingPlateau(torch.optim.lr_scheduler.ReduceLROnPlateau):
    """A real ReduceLROnPlateau that records each metric it is given and the model's parameters at that moment."""

    def __init__(self, optimizer: torch.optim.Optimizer, model: nn.Module) -> None:
        super().__init__(optimizer, mode="min", patience=1)
        self.model, self.seen = model, []

    def step(self, metrics, epoch=None):  # type: ignore[override]
        value = float(metrics.detach()) if isinstance(metrics, torch.Tensor) else metrics
        self.seen.append({"metric": value, "params": [p.detach().clone() for p in self.model.parameters()]})
        return super().step(metrics)


def _probe_plateau(answer: dict, *, case: Case) -> dict:
    model = plateau_metric_model(case)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scheduler = _RecordingPlateau(optimizer, model)
    train_batches, val_batches = plateau_data(case)
    with StepRecorder(optimizer) as steps:
        answer["train"](model, train_batches, val_batches, optimizer, scheduler, nn.MSELoss(), PLATEAU_EPOCHS)
    return {"scheduler_steps": scheduler.seen, "optimizer_params": [r.params for r in steps.records]}


PLATEAU_STARTER = '''import torch


def train(model, train_batches, val_batches, optimizer, scheduler, loss_fn, epochs):
    """scheduler is ReduceLROnPlateau(mode='min', patience=1).
    Symptom: the validation loss has stopped improving for epochs, yet the LR never drops."""
    for epoch in range(epochs):
        model.train()
        total = 0.0
        for x, y in train_batches:
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            total += loss.detach()
        model.eval()
        with torch.no_grad():
            val_loss = sum(loss_fn(model(x), y) for x, y in val_batches) / len(val_batches)
        scheduler.step(total / len(train_batches))
'''

add(
    Drill(
        id="schedulers-plateau-metric", unjudged=('optimizer_params/*',),
        title="Bug hunt: ReduceLROnPlateau never reduces",
        kind="bughunt",
        topics=("schedulers",),
        difficulty=2,
        prompt="The validation loss stopped improving epochs ago, yet ReduceLROnPlateau never lowers the LR. "
        "Fix train().",
        entry="train",
        starter=PLATEAU_STARTER,
        hints=("Which number does the scheduler watch, and is it the one that plateaued?",
               "Step ReduceLROnPlateau with the validation metric: scheduler.step(val_loss)."),
        probe=_probe_plateau,
    )
)


# ---------------------------------------------------------------------------------------------------------------
# schedulers-onecycle-per-batch


def onecycle_setup(case: Case) -> tuple[float, int, int]:
    """(max lr, epochs, batches per epoch) of the OneCycle drill."""
    return round(0.01 + float(torch.rand((), generator=case_generator(case, 40))) * 0.1, 5), _randint(case, 41, 3, 6), 3


def _probe_onecycle(answer: dict, *, case: Case) -> dict:
    max_lr, n_batches, epochs = onecycle_setup(case)
    model = _small_linear(case, 42)
    optimizer = torch.optim.SGD(model.parameters(), lr=max_lr, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=max_lr, total_steps=epochs * n_batches)
    with StepRecorder(optimizer) as steps:
        answer["train"](model, _regression_batches(case, 43, n_batches), optimizer, scheduler, nn.MSELoss(), epochs)
    return {"lrs": [r.lrs for r in steps.records]}


ONECYCLE_STARTER = '''import torch


def train(model, batches, optimizer, scheduler, loss_fn, epochs):
    """scheduler is OneCycleLR(optimizer, max_lr, total_steps=epochs * len(batches)).
    Symptom: the learning rate stays near max_lr / 25 for the whole run."""
    for epoch in range(epochs):
        model.train()
        for x, y in batches:
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            optimizer.step()
        scheduler.step()
'''


add(
    Drill(
        id="schedulers-onecycle-per-batch",
        title="Bug hunt: OneCycleLR never reaches its peak",
        kind="bughunt",
        topics=("schedulers", "loop"),
        difficulty=1,
        prompt="OneCycleLR was built with total_steps = epochs * len(batches), but the learning rate stays near its "
        "starting value for the whole run. Fix train().",
        entry="train",
        starter=ONECYCLE_STARTER,
        hints=("What does total_steps count, and how many times does this loop step the scheduler?",
               "OneCycleLR is a per-batch schedule: scheduler.step() after every optimizer.step()."),
        probe=_probe_onecycle,
    )
)


# ---------------------------------------------------------------------------------------------------------------
# schedulers-plateau-mode: a scheduler for a metric that should go up


def _accuracies(case: Case) -> list[float]:
    gen = case_generator(case, 50)
    rising = (0.5 + 0.05 * torch.arange(6) + torch.rand(6, generator=gen) * 0.01).tolist()
    flat = (rising[-1] - 0.001 - torch.rand(14, generator=gen) * 0.02).tolist()
    return [round(v, 5) for v in rising + flat]


def _plateau_lr(case: Case) -> float:
    return round(0.01 + float(torch.rand((), generator=case_generator(case, 51))) * 0.1, 5)


def plateau_run(scheduler_for: object, case: Case) -> list[float]:
    """The learning rates a scheduler from `scheduler_for` gives over the case's validation accuracies."""
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=_plateau_lr(case))
    scheduler = scheduler_for(optimizer)  # type: ignore[operator]
    lrs = []
    for accuracy in _accuracies(case):
        optimizer.step()
        scheduler.step(accuracy)
        lrs.append(float(optimizer.param_groups[0]["lr"]))
    return lrs


def _probe_plateau_mode(answer: dict, *, case: Case) -> dict:
    return {"lrs": plateau_run(answer["make_scheduler"], case)}


add(
    Drill(
        id="schedulers-plateau-mode",
        title="ReduceLROnPlateau on a validation accuracy",
        kind="write",
        topics=("schedulers",),
        difficulty=1,
        prompt="Write make_scheduler(optimizer): a scheduler that is stepped once per epoch with the validation "
        "ACCURACY (scheduler.step(val_accuracy)) and halves the learning rate once the accuracy has not improved "
        "for 2 epochs in a row (the third epoch without improvement triggers it).",
        entry="make_scheduler",
        starter="import torch\n\n\ndef make_scheduler(optimizer):\n    raise NotImplementedError\n",
        hints=("ReduceLROnPlateau assumes a metric to minimise unless told otherwise.",
               "ReduceLROnPlateau(optimizer, mode='max', factor=0.5, patience=2)"),
        probe=_probe_plateau_mode,
    )
)


# ---------------------------------------------------------------------------------------------------------------
# schedulers-linear-warmup


def warmup_setup(case: Case) -> tuple[int, tuple[float, float]]:
    """(warmup steps, the two groups' learning rates) of the per-group warmup drill."""
    gen = case_generator(case, 60)
    lrs = (torch.rand(2, generator=gen) * 0.1 + 0.001).tolist()
    return _randint(case, 61, 2, 9), (round(lrs[0], 5), round(lrs[1], 5))


def _probe_linear_warmup(answer: dict, *, case: Case) -> dict:
    warmup, (lr_a, lr_b) = warmup_setup(case)
    optimizer = torch.optim.SGD([{"params": [nn.Parameter(torch.zeros(1))], "lr": lr_a},
                                 {"params": [nn.Parameter(torch.zeros(1))], "lr": lr_b}])
    scheduler = answer["make_warmup"](optimizer, warmup)
    with StepRecorder(optimizer) as steps:
        for _ in range(warmup + 4):
            optimizer.step()
            scheduler.step()
    return {"lrs": [r.lrs for r in steps.records]}


add(
    Drill(
        id="schedulers-linear-warmup",
        title="A linear warm-up, then a constant LR",
        kind="write",
        topics=("schedulers",),
        difficulty=2,
        prompt="Write make_warmup(optimizer, warmup) -> a scheduler (stepped after every optimizer step) such that "
        "optimizer step k (0-based) of every param group runs at base_lr * (k + 1) / warmup while k < warmup, and at "
        "its base_lr after. Each group keeps its own base LR.",
        entry="make_warmup",
        starter="import torch\n\n\ndef make_warmup(optimizer, warmup):\n    raise NotImplementedError\n",
        hints=("LambdaLR multiplies each group's initial LR by your function of the step count (0 at first).",
               "LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))"),
        probe=_probe_linear_warmup,
    )
)


# ---------------------------------------------------------------------------------------------------------------
# schedulers-param-group-lrs


class _TwoPart(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Linear(6, 6)
        self.head = nn.Linear(6, 2)


def group_setup(case: Case) -> tuple[float, int]:
    """(learning rate, epochs) of the scheduler-with-groups drill."""
    return round(1e-3 + float(torch.rand((), generator=case_generator(case, 70))) * 1e-2, 6), _randint(case, 71, 2, 6)


def _probe_param_group_lrs(answer: dict, *, case: Case) -> dict:
    lr, warmup = group_setup(case)
    model = _TwoPart()
    names = {id(p): name for name, p in model.named_parameters()}
    optimizer, scheduler = answer["make_optimizer"](model, lr, warmup)
    groups = [[names.get(id(p), "?") for p in group["params"]] for group in optimizer.param_groups]
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    with StepRecorder(optimizer) as steps:
        for _ in range(warmup + 2):
            optimizer.step()
            scheduler.step()
    return {"groups": groups, "kind": type(optimizer).__name__, "lrs": [r.lrs for r in steps.records]}


add(
    Drill(
        id="schedulers-param-group-lrs",
        title="Discriminative learning rates under one scheduler",
        kind="write",
        topics=("schedulers", "finetuning"),
        difficulty=2,
        prompt="Fine-tuning: write make_optimizer(model, lr, warmup) -> (optimizer, scheduler). model has .backbone "
        "and .head. Use AdamW with two param groups, backbone first at lr / 10, head at lr, and one scheduler (stepped "
        "per optimizer step) that warms both up linearly: step k runs at base * min(1, (k + 1) / warmup), each group "
        "with its own base.",
        entry="make_optimizer",
        starter="import torch\n\n\ndef make_optimizer(model, lr, warmup):\n    raise NotImplementedError\n",
        hints=("An optimizer takes a list of dicts, one per group, each with its own 'lr'.",
               "LambdaLR scales each group's own initial LR: build the groups first, then the scheduler."),
        probe=_probe_param_group_lrs,
    )
)


# ---------------------------------------------------------------------------------------------------------------
# checkpointing-resume-schedule (difficulty 3)


RESUME_AT, _RESUME_TOTAL, RESUME_LATER = 5, 10, 2  # an odd step: StepLR(step_size=2) is mid-period


def resume_batches(case: Case) -> list[tuple[torch.Tensor, ...]]:
    """The regression batches of the whole resumed run."""
    return _regression_batches(case, 80, _RESUME_TOTAL, features=8)


def resume_objects(case: Case, base: int) -> tuple[nn.Linear, torch.optim.Optimizer, object]:
    """A seeded linear model, its Adam optimizer and a StepLR schedule, for the resume drill."""
    model = _small_linear(case, base, features=8)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    return model, optimizer, torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)


def resume_step(model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: object,
                 batch: tuple[torch.Tensor, ...]) -> None:
    """One training step on `batch`: zero the gradients, MSE backward, optimizer step, scheduler step."""
    optimizer.zero_grad(set_to_none=True)
    nn.functional.mse_loss(model(batch[0]), batch[1]).backward()
    optimizer.step()
    scheduler.step()  # type: ignore[attr-defined]


def _probe_resume(answer: dict, *, case: Case) -> dict:
    batches = resume_batches(case)
    model, optimizer, scheduler = resume_objects(case, 81)
    for batch in batches[:RESUME_AT]:
        resume_step(model, optimizer, scheduler, batch)
    snapshot = answer["make_checkpoint"](model, optimizer, scheduler)
    for batch in batches[RESUME_AT:RESUME_AT + RESUME_LATER]:  # the run goes on after the snapshot
        resume_step(model, optimizer, scheduler, batch)
    fresh, fresh_optimizer, fresh_scheduler = resume_objects(case, 82)
    answer["load_checkpoint"](snapshot, fresh, fresh_optimizer, fresh_scheduler)
    loaded = [p.detach().clone() for p in fresh.parameters()]
    with StepRecorder(fresh_optimizer) as steps:
        for batch in batches[RESUME_AT:]:
            resume_step(fresh, fresh_optimizer, fresh_scheduler, batch)
    return {"loaded": loaded, "params": [r.params for r in steps.records], "lrs": [r.lrs for r in steps.records]}


RESUME_STARTER = '''import torch


def make_checkpoint(model, optimizer, scheduler):
    """The best-so-far snapshot, kept in memory while training goes on (the optimizer is Adam,
    the scheduler a StepLR stepped after every optimizer step)."""
    return {"model": model.state_dict()}


def load_checkpoint(checkpoint, model, optimizer, scheduler):
    """Restore the snapshot into freshly built objects, so the run continues exactly as if uninterrupted
    from the moment the snapshot was taken.
    Symptoms: after resuming, the loss jumps, the LR restarts from its first value, and the weights
    restored are not the ones of the snapshot."""
    model.load_state_dict(checkpoint["model"])
'''


add(
    Drill(
        id="checkpointing-resume-schedule",
        title="Bug hunt: a resumed run that does not continue where it stopped",
        kind="bughunt",
        topics=("checkpointing", "schedulers"),
        difficulty=3,
        prompt="make_checkpoint keeps a best-so-far snapshot in memory while training goes on; load_checkpoint "
        "restores it into freshly built model, Adam optimizer and StepLR scheduler. After resuming, the run should "
        "continue exactly as if it had never stopped, from the moment of the snapshot. It has three bugs: fix them.",
        entry="make_checkpoint",
        starter=RESUME_STARTER,
        hints=("Three things: what the snapshot holds, what it leaves out, and whether it changes after it was taken.",
               "Snapshot all three state_dicts (model, optimizer, scheduler) with copy.deepcopy, and load all three."),
        probe=_probe_resume,
    )
)


# ---------------------------------------------------------------------------------------------------------------
# explain


def _order_experiment() -> None:
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scheduler.step()
        optimizer.step()
    print(f"scheduler.step() before optimizer.step(): {len(caught)} warning(s)")
    for warning in caught:
        print(f"  {str(warning.message)[:110]}...")
    print(f"and the first LR value, 0.1, was skipped: the optimizer stepped with lr={optimizer.param_groups[0]['lr']}")


add(
    explain(
        id="schedulers-order",
        title="optimizer.step() and scheduler.step(): which first?",
        topics=("schedulers", "loop"),
        difficulty=1,
        question="What happens if you call scheduler.step() before optimizer.step() at every iteration "
        "(PyTorch >= 1.1)?",
        hints=("Run it and watch the warnings.", "The scheduler advances the LR before it was ever used."),
        experiment=_order_experiment,
    )
)
