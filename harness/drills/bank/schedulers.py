"""Drills on learning-rate schedulers: warmup-cosine, stepping granularity, plateau, param groups, resuming.

The probes hand the answer a real optimizer and scheduler (or ask it for one), run it, and record the learning
rate of every optimizer step (`StepRecorder`); the judges rebuild the same schedule with torch's own schedulers
or the closed form and compare.
"""

from __future__ import annotations

import math
import warnings

import torch
from torch import nn

from harness.contract.case import Case
from harness.contract.failure import fail
from harness.contract.instruments import StepRecorder
from harness.contract.wire import WireError
from harness.drills.core import Drill, add
from harness.drills.support import case_generator, multiple_choice


def _randint(case: Case, base: int, low: int, high: int) -> int:
    """An int in [low, high) drawn from the case."""
    return int(torch.randint(low, high, (), generator=case_generator(case, base)))


def _lrs(steps: object, groups: int = 1) -> list[list[float]]:
    """The recorded learning rates (one list per optimizer step), validated."""
    if not isinstance(steps, list) or not all(
            isinstance(s, list) and len(s) == groups and all(isinstance(v, float) for v in s) for s in steps):
        raise WireError("recorded learning rates malformed")
    return steps


def _same_lrs(got: list[float], want: list[float]) -> bool:
    return len(got) == len(want) and all(math.isclose(g, w, rel_tol=1e-6, abs_tol=1e-12)
                                         for g, w in zip(got, want, strict=True))


def _rounded(values: list[float]) -> list[float]:
    return [float(f"{v:.5g}") for v in values]


# ---------------------------------------------------------------------------------------------------------------
# schedulers-warmup-cosine


def warmup_cosine_factor(step: int, warmup: int, total: int) -> float:
    """The drill's reference: linear warmup reaching 1 at the last warmup step, cosine to 0 at `total`, 0 after."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


def require_warmup_cosine_factor(got: float, step: int, warmup: int, total: int) -> None:
    """Fail unless `got` is the reference factor at (step, warmup, total), with a code naming the phase."""
    want = warmup_cosine_factor(step, warmup, total)
    if not math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9):
        phase, code = (("warmup", "wrong-warmup") if step < warmup else ("after the end", "not-clamped")
                       if step > total else ("cosine decay", "wrong-decay"))
        fail(code, observed=f"warmup_cosine({step}, {warmup}, {total}) = {got:.6f} ({phase})",
             expected=f"{want:.6f}", cause=_warmup_cosine_cause(got, step, warmup, total),
             where=f"the {phase} branch")


def _warmup_cosine_cause(got: float, step: int, warmup: int, total: int) -> str:
    """The slip whose formula gives `got` at (step, warmup, total), else the rule itself."""
    p = (step - warmup) / max(1, total - warmup)
    slips = {
        "step / warmup during warmup: the first step gets a learning rate of 0 (the rule is (step + 1) / warmup)":
            step / warmup if step < warmup else None,
        "the 0.5 of the cosine is missing: the factor starts at 2": 1 + math.cos(math.pi * min(p, 1.0)),
        "cos(pi * p / 2), a quarter period: the factor is not 0 at total": math.cos(math.pi * min(p, 1.0) / 2),
        "p is not clamped to 1: after total the cosine climbs back up": 0.5 * (1 + math.cos(math.pi * p)),
    }
    named = [slip for slip, value in slips.items() if value is not None and math.isclose(got, value, rel_tol=1e-6,
                                                                                         abs_tol=1e-9)]
    return named[0] if named else ("linear warmup reaches 1 at the last warmup step ((step+1)/warmup); the cosine "
                                   "runs from 1 at step=warmup to 0 at step=total and stays 0 after")


def _warmup_configs(case: Case) -> list[tuple[int, int]]:
    warmup = _randint(case, 0, 2, 12)
    return [(warmup, warmup + _randint(case, 1, 5, 200)), (1, 10), (10, 10), (0, _randint(case, 2, 5, 40))]


def _warmup_queries(case: Case) -> list[tuple[int, int, int]]:
    queries = []
    for warmup, total in _warmup_configs(case):
        steps = {0, 1, max(warmup - 1, 0), warmup, (warmup + total) // 2, total - 1, total, total + 5}
        steps |= {_randint(case, 10 + i, 0, total + 10) for i in range(3)}
        queries += [(step, warmup, total) for step in sorted(steps)]
    return queries


def _probe_warmup_cosine(answer: dict, *, case: Case) -> dict:
    factor = answer["warmup_cosine"]
    values = [float(factor(step, warmup, total)) for step, warmup, total in _warmup_queries(case)]
    warmup, total = _warmup_configs(case)[0]
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: factor(s, warmup, total))
    with StepRecorder(optimizer) as steps:
        for _ in range(warmup + 3):
            optimizer.step()
            scheduler.step()
    return {"values": values, "lrs": [r.lrs for r in steps.records]}


def _judge_warmup_cosine(seen: dict, *, case: Case) -> str:
    values, queries = seen.get("values"), _warmup_queries(case)
    if not isinstance(values, list) or len(values) != len(queries) or not all(isinstance(v, float) for v in values):
        raise WireError("values malformed")
    for got, (step, warmup, total) in zip(values, queries, strict=True):
        require_warmup_cosine_factor(got, step, warmup, total)
    warmup, total = _warmup_configs(case)[0]
    got = [lr[0] for lr in _lrs(seen.get("lrs"))]
    want = [0.1 * warmup_cosine_factor(s, warmup, total) for s in range(warmup + 3)]
    if not _same_lrs(got, want):
        fail("wrong-lambdalr", observed=f"LambdaLR with your factor gave {_rounded(got)}", expected=f"{_rounded(want)}",
             cause="the factor depends on something other than its arguments", where="warmup_cosine")
    return "matches the closed form in warmup, decay and after the end, and plugs into LambdaLR"


_COSINE_SOLUTION = (
    "import math\n\n\ndef warmup_cosine(step, warmup, total):\n"
    "    if step < warmup:\n        return (step + 1) / warmup\n"
    "    progress = min((step - warmup) / max(1, total - warmup), 1.0)\n"
    "    return 0.5 * (1 + math.cos(math.pi * progress))\n"
)

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
        solution=_COSINE_SOLUTION,
        hints=("Two phases and a clamp. Check the boundaries: step = warmup - 1, warmup, total.",
               "Guard total == warmup with max(1, total - warmup), and clamp progress with min(..., 1.0)."),
        probe=_probe_warmup_cosine,
        judge=_judge_warmup_cosine,
        wrong_answers=(
            (_COSINE_SOLUTION.replace("(step + 1) / warmup", "step / warmup"), "wrong-warmup"),
            (_COSINE_SOLUTION.replace("min((step - warmup) / max(1, total - warmup), 1.0)",
                                      "(step - warmup) / max(1, total - warmup)"), "not-clamped"),
            (_COSINE_SOLUTION.replace("max(1, total - warmup)", "(total - warmup)"), "raised"),
            (_COSINE_SOLUTION.replace("math.pi * progress", "math.pi * progress / 2"), "wrong-decay"),
        ),
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


_GRAN_EPOCHS = 4


def _gran_setup(case: Case) -> tuple[float, int]:
    return round(0.05 + float(torch.rand((), generator=case_generator(case, 20))), 4), _randint(case, 21, 3, 7)


def _probe_granularity(answer: dict, *, case: Case) -> dict:
    lr, n_batches = _gran_setup(case)
    model = _small_linear(case, 22)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.1)
    with StepRecorder(optimizer) as steps:
        answer["train"](model, _regression_batches(case, 23, n_batches), optimizer, scheduler, nn.MSELoss(),
                        _GRAN_EPOCHS)
    return {"lrs": [r.lrs for r in steps.records]}


def _judge_granularity(seen: dict, *, case: Case) -> str:
    lr, n_batches = _gran_setup(case)
    got = [v[0] for v in _lrs(seen.get("lrs"))]
    want = [lr * 0.1 ** (epoch // 2) for epoch in range(_GRAN_EPOCHS) for _ in range(n_batches)]
    if len(got) != len(want):
        fail("step-count", observed=f"{len(got)} optimizer steps", expected=f"{len(want)} ({_GRAN_EPOCHS} epochs of "
             f"{n_batches} batches)", cause="the batch loop was changed", where="one optimizer.step() per batch")
    if not _same_lrs(got, want):
        first_epoch_decayed = any(v < lr * (1 - 1e-6) for v in got[:n_batches])
        fail("scheduler-per-batch" if first_epoch_decayed else "wrong-schedule",
             observed=f"learning rates per optimizer step ({n_batches} per epoch): {_rounded(got)}",
             expected=f"{_rounded(want)}",
             cause="a per-epoch scheduler stepped once per batch decays len(batches) times too fast"
             if first_epoch_decayed else "the scheduler steps at the start of the epoch: each epoch gets the next "
             "epoch's learning rate", where="call scheduler.step() once per epoch, after the batch loop")
    return "a per-epoch scheduler stepped once per epoch, after the epoch's optimizer steps"


_GRANULARITY_STARTER = '''import torch


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
        starter=_GRANULARITY_STARTER,
        solution=_GRANULARITY_STARTER.replace("            optimizer.step()\n            scheduler.step()\n",
                                              "            optimizer.step()\n"
                                              "        scheduler.step()  # once per epoch\n"),
        hints=("How many times per epoch does scheduler.step() run?",
               "StepLR counts epochs: step it after the batch loop."),
        probe=_probe_granularity,
        judge=_judge_granularity,
        wrong_answers=(
            (_GRANULARITY_STARTER.replace("            optimizer.step()\n            scheduler.step()\n",
                                          "            scheduler.step()\n            optimizer.step()\n"),
             "scheduler-per-batch"),
            (_GRANULARITY_STARTER.replace("        model.train()\n",
                                          "        model.train()\n        scheduler.step()\n")
             .replace("            optimizer.step()\n            scheduler.step()\n", "            optimizer.step()\n"),
             "wrong-schedule"),
        ),
    )
)


# ---------------------------------------------------------------------------------------------------------------
# schedulers-plateau-metric


_PLATEAU_EPOCHS = 6


def _plateau_data(case: Case) -> tuple[list, list]:
    gen = case_generator(case, 30)
    x = torch.randn(64, 16, generator=gen)
    train_batches = [(x[i:i + 16], torch.randn(16, 1, generator=gen)) for i in range(0, 64, 16)]
    val_batches = [(torch.randn(16, 16, generator=gen), torch.randn(16, 1, generator=gen)) for _ in range(2)]
    return train_batches, val_batches


def _plateau_metric_model(case: Case) -> nn.Sequential:
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


def _plateau_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(model(x), y)


def _probe_plateau(answer: dict, *, case: Case) -> dict:
    model = _plateau_metric_model(case)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scheduler = _RecordingPlateau(optimizer, model)
    train_batches, val_batches = _plateau_data(case)
    with StepRecorder(optimizer) as steps:
        answer["train"](model, train_batches, val_batches, optimizer, scheduler, nn.MSELoss(), _PLATEAU_EPOCHS)
    return {"scheduler_steps": scheduler.seen, "optimizer_params": [r.params for r in steps.records]}


def _with_params(case: Case, params: object) -> nn.Sequential:
    model = _plateau_metric_model(case)
    shapes = [p.shape for p in model.parameters()]
    if (not isinstance(params, list) or len(params) != len(shapes)
            or any(not isinstance(t, torch.Tensor) or t.shape != s for t, s in zip(params, shapes, strict=True))):
        raise WireError("recorded parameters malformed")
    with torch.no_grad():
        for p, value in zip(model.parameters(), params, strict=True):
            p.copy_(value)
    return model


def _judge_plateau(seen: dict, *, case: Case) -> str:
    records, before_steps = seen.get("scheduler_steps"), seen.get("optimizer_params")
    if not isinstance(records, list) or not isinstance(before_steps, list):
        raise WireError("records missing")
    train_batches, val_batches = _plateau_data(case)
    n_train = len(train_batches)
    if len(records) != _PLATEAU_EPOCHS:
        fail("plateau-step-count", observed=f"scheduler.step() ran {len(records)} times in {_PLATEAU_EPOCHS} epochs",
             expected=f"{_PLATEAU_EPOCHS}: once per epoch, after validation", cause="stepping it per batch makes "
             "`patience` count batches", where="after the validation loop")
    if len(before_steps) != _PLATEAU_EPOCHS * n_train:
        fail("step-count", observed=f"{len(before_steps)} optimizer steps", expected=f"{_PLATEAU_EPOCHS * n_train}",
             cause="the training loop was changed", where="one optimizer.step() per training batch")
    with torch.no_grad():
        for epoch, record in enumerate(records):
            if not isinstance(record, dict) or not isinstance(record.get("metric"), (int, float)):
                raise WireError("scheduler record malformed")
            metric = float(record["metric"])
            at_end = _with_params(case, record.get("params"))
            val = float(sum(_plateau_loss(at_end, x, y) for x, y in val_batches) / len(val_batches))
            if math.isclose(metric, val, rel_tol=1e-5, abs_tol=1e-7):
                continue
            epoch_losses = [float(_plateau_loss(_with_params(case, before_steps[epoch * n_train + i]), *batch))
                            for i, batch in enumerate(train_batches)]
            if math.isclose(metric, sum(epoch_losses) / n_train, rel_tol=1e-5):
                code, cause = "plateau-on-train-loss", ("the scheduler watches the mean training loss, which keeps "
                                                        "falling while the model memorises: it never plateaus")
            elif math.isclose(metric, epoch_losses[-1], rel_tol=1e-5):
                code, cause = "plateau-on-last-batch-loss", ("the scheduler watches the loss of the last training "
                                                             "batch: a noisy number, and not the validation metric")
            else:
                code, cause = "wrong-metric", "the number given to the scheduler is not the epoch's validation loss"
            fail(code, observed=f"epoch {epoch}: scheduler.step({metric:.5f})",
                 expected=f"scheduler.step(val_loss) with val_loss = {val:.5f}", cause=cause,
                 where="scheduler.step(val_loss), after the validation loop")
    return "ReduceLROnPlateau follows the validation loss, once per epoch"


_PLATEAU_STARTER = '''import torch


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
        starter=_PLATEAU_STARTER,
        solution=_PLATEAU_STARTER.replace("scheduler.step(total / len(train_batches))", "scheduler.step(val_loss)"),
        hints=("Which number does the scheduler watch, and is it the one that plateaued?",
               "Step ReduceLROnPlateau with the validation metric: scheduler.step(val_loss)."),
        probe=_probe_plateau,
        judge=_judge_plateau,
        wrong_answers=(
            (_PLATEAU_STARTER.replace("scheduler.step(total / len(train_batches))", "scheduler.step(loss)"),
             "plateau-on-last-batch-loss"),
            (_PLATEAU_STARTER.replace("        scheduler.step(total / len(train_batches))\n", "").replace(
                "            total += loss.detach()\n", "            total += loss.detach()\n"
                "            scheduler.step(loss)\n"), "plateau-step-count"),
        ),
    )
)


# ---------------------------------------------------------------------------------------------------------------
# schedulers-onecycle-per-batch


def _onecycle_setup(case: Case) -> tuple[float, int, int]:
    return round(0.01 + float(torch.rand((), generator=case_generator(case, 40))) * 0.1, 5), _randint(case, 41, 3, 6), 3


def _onecycle_reference(max_lr: float, total: int) -> list[float]:
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=max_lr, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=max_lr, total_steps=total)
    lrs = []
    for _ in range(total):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return lrs


def _probe_onecycle(answer: dict, *, case: Case) -> dict:
    max_lr, n_batches, epochs = _onecycle_setup(case)
    model = _small_linear(case, 42)
    optimizer = torch.optim.SGD(model.parameters(), lr=max_lr, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=max_lr, total_steps=epochs * n_batches)
    with StepRecorder(optimizer) as steps:
        answer["train"](model, _regression_batches(case, 43, n_batches), optimizer, scheduler, nn.MSELoss(), epochs)
    return {"lrs": [r.lrs for r in steps.records]}


def _judge_onecycle(seen: dict, *, case: Case) -> str:
    max_lr, n_batches, epochs = _onecycle_setup(case)
    got, want = [v[0] for v in _lrs(seen.get("lrs"))], _onecycle_reference(max_lr, epochs * n_batches)
    if len(got) != len(want):
        fail("step-count", observed=f"{len(got)} optimizer steps", expected=f"{len(want)}",
             cause="the batch loop was changed", where="one optimizer.step() per batch")
    if not _same_lrs(got, want):
        per_epoch = [want[e] for e in range(epochs) for _ in range(n_batches)]
        if _same_lrs(got, per_epoch):
            code, cause = "scheduler-per-epoch", ("OneCycleLR's total_steps counts batches: stepped once per epoch "
                                                  "it never leaves its warm-up")
        elif _same_lrs(got[:-1], want[1:]):
            code, cause = "lr-shifted", ("scheduler.step() before optimizer.step(): each batch runs with the next "
                                         "batch's learning rate, and the first value of the schedule is skipped")
        else:
            code, cause = "wrong-schedule", "the scheduler is not stepped exactly once after each optimizer step"
        fail(code, observed=f"learning rate at each step: {_rounded(got)}", expected=f"{_rounded(want)}",
             cause=cause, where="scheduler.step() right after optimizer.step(), inside the batch loop")
    return "OneCycleLR stepped once per batch, after the optimizer"


_ONECYCLE_STARTER = '''import torch


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
_ONECYCLE_SOLUTION = _ONECYCLE_STARTER.replace("            optimizer.step()\n        scheduler.step()\n",
                                               "            optimizer.step()\n            scheduler.step()\n")

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
        starter=_ONECYCLE_STARTER,
        solution=_ONECYCLE_SOLUTION,
        hints=("What does total_steps count, and how many times does this loop step the scheduler?",
               "OneCycleLR is a per-batch schedule: scheduler.step() after every optimizer.step()."),
        probe=_probe_onecycle,
        judge=_judge_onecycle,
        wrong_answers=(
            (_ONECYCLE_SOLUTION.replace("            optimizer.step()\n            scheduler.step()\n",
                                        "            scheduler.step()\n            optimizer.step()\n"), "lr-shifted"),
            (_ONECYCLE_SOLUTION + "        scheduler.step()\n", "raised"),
        ),
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


def _plateau_run(scheduler_for: object, case: Case) -> list[float]:
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=_plateau_lr(case))
    scheduler = scheduler_for(optimizer)  # type: ignore[operator]
    lrs = []
    for accuracy in _accuracies(case):
        optimizer.step()
        scheduler.step(accuracy)
        lrs.append(float(optimizer.param_groups[0]["lr"]))
    return lrs


def _probe_plateau_mode(answer: dict, *, case: Case) -> dict:
    return {"lrs": _plateau_run(answer["make_scheduler"], case)}


def _judge_plateau_mode(seen: dict, *, case: Case) -> str:
    got = seen.get("lrs")
    if not isinstance(got, list) or not all(isinstance(v, float) for v in got):
        raise WireError("learning rates malformed")
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau
    want = _plateau_run(lambda o: plateau(o, mode="max", factor=0.5, patience=2), case)
    if _same_lrs(got, want):
        return "halves the LR after 2 epochs without a better validation accuracy, and only then"
    for code, make, cause in (
        ("wrong-mode", lambda o: plateau(o, mode="min", factor=0.5, patience=2), "mode='min' (the default) treats a "
         "rising accuracy as no improvement: the LR drops while the model is still getting better"),
        ("wrong-patience", lambda o: plateau(o, mode="max", factor=0.5), "the default patience is 10 epochs"),
        ("wrong-factor", lambda o: plateau(o, mode="max", patience=2), "the default factor is 0.1, not 0.5"),
    ):
        if _same_lrs(got, _plateau_run(make, case)):
            fail(code, observed=f"learning rate after each epoch: {_rounded(got)}", expected=f"{_rounded(want)}",
                 cause=cause, where="ReduceLROnPlateau(optimizer, mode='max', factor=0.5, patience=2)")
    fail("wrong-schedule", observed=f"learning rate after each epoch: {_rounded(got)}", expected=f"{_rounded(want)}",
         cause="the scheduler does not halve the LR after exactly 2 epochs without a higher accuracy",
         where="ReduceLROnPlateau(optimizer, mode='max', factor=0.5, patience=2)")


_PLATEAU_MODE_SOLUTION = '''import torch


def make_scheduler(optimizer):
    return torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="max", factor=0.5, patience=2)
'''

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
        solution=_PLATEAU_MODE_SOLUTION,
        hints=("ReduceLROnPlateau assumes a metric to minimise unless told otherwise.",
               "ReduceLROnPlateau(optimizer, mode='max', factor=0.5, patience=2)"),
        probe=_probe_plateau_mode,
        judge=_judge_plateau_mode,
        wrong_answers=(
            (_PLATEAU_MODE_SOLUTION.replace('mode="max", ', ""), "wrong-mode"),
            (_PLATEAU_MODE_SOLUTION.replace(", patience=2", ""), "wrong-patience"),
            (_PLATEAU_MODE_SOLUTION.replace(", factor=0.5", ""), "wrong-factor"),
        ),
    )
)


# ---------------------------------------------------------------------------------------------------------------
# schedulers-linear-warmup


def _warmup_setup(case: Case) -> tuple[int, tuple[float, float]]:
    gen = case_generator(case, 60)
    lrs = (torch.rand(2, generator=gen) * 0.1 + 0.001).tolist()
    return _randint(case, 61, 2, 9), (round(lrs[0], 5), round(lrs[1], 5))


def _probe_linear_warmup(answer: dict, *, case: Case) -> dict:
    warmup, (lr_a, lr_b) = _warmup_setup(case)
    optimizer = torch.optim.SGD([{"params": [nn.Parameter(torch.zeros(1))], "lr": lr_a},
                                 {"params": [nn.Parameter(torch.zeros(1))], "lr": lr_b}])
    scheduler = answer["make_warmup"](optimizer, warmup)
    with StepRecorder(optimizer) as steps:
        for _ in range(warmup + 4):
            optimizer.step()
            scheduler.step()
    return {"lrs": [r.lrs for r in steps.records]}


def _judge_linear_warmup(seen: dict, *, case: Case) -> str:
    warmup, bases = _warmup_setup(case)
    got = _lrs(seen.get("lrs"), groups=2)
    if len(got) != warmup + 4:
        raise WireError("wrong number of recorded steps")
    for k, step_lrs in enumerate(got):
        for group, (lr, base) in enumerate(zip(step_lrs, bases, strict=True)):
            want = base * min(1.0, (k + 1) / warmup)
            if math.isclose(lr, want, rel_tol=1e-6):
                continue
            if k == 0 and lr == 0:
                code, cause = "warmup-starts-at-zero", ("the factor is step / warmup: the first optimizer step runs "
                                                        "with lr 0 and is wasted, and the warm-up ends one step late")
            elif k >= warmup and lr > base * (1 + 1e-6):
                code, cause = "no-plateau", "the factor is not capped at 1 after the warm-up: the LR keeps growing"
            else:
                code, cause = "wrong-warmup", ("the LR does not rise in equal steps of base/warmup from base/warmup "
                                               "at the first step to base at step warmup-1")
            fail(code, observed=f"group {group} at optimizer step {k}: lr {lr:.6g}", expected=f"{want:.6g} "
                 f"(base {base} x min(1, (k + 1) / {warmup}))", cause=cause,
                 where="LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))")
    return "linear warm-up to each group's own base LR, then constant"


_LINEAR_WARMUP_SOLUTION = '''import torch


def make_warmup(optimizer, warmup):
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
'''

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
        solution=_LINEAR_WARMUP_SOLUTION,
        hints=("LambdaLR multiplies each group's initial LR by your function of the step count (0 at first).",
               "LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))"),
        probe=_probe_linear_warmup,
        judge=_judge_linear_warmup,
        wrong_answers=(
            (_LINEAR_WARMUP_SOLUTION.replace("min(1.0, (step + 1) / warmup)", "min(1.0, step / warmup)"),
             "warmup-starts-at-zero"),
            (_LINEAR_WARMUP_SOLUTION.replace("min(1.0, (step + 1) / warmup)", "(step + 1) / warmup"), "no-plateau"),
            ("import torch\n\ndef make_warmup(optimizer, warmup):\n    return torch.optim.lr_scheduler.LinearLR(\n"
             "        optimizer, start_factor=1 / warmup, total_iters=warmup)\n", "wrong-warmup"),
        ),
    )
)


# ---------------------------------------------------------------------------------------------------------------
# schedulers-param-group-lrs


class _TwoPart(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Linear(6, 6)
        self.head = nn.Linear(6, 2)


def _group_setup(case: Case) -> tuple[float, int]:
    return round(1e-3 + float(torch.rand((), generator=case_generator(case, 70))) * 1e-2, 6), _randint(case, 71, 2, 6)


def _probe_param_group_lrs(answer: dict, *, case: Case) -> dict:
    lr, warmup = _group_setup(case)
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


def _judge_param_group_lrs(seen: dict, *, case: Case) -> str:
    lr, warmup = _group_setup(case)
    groups = seen.get("groups")
    if not isinstance(groups, list) or not all(isinstance(g, list) for g in groups):
        raise WireError("groups malformed")
    want_groups = [["backbone.weight", "backbone.bias"], ["head.weight", "head.bias"]]
    if len(groups) != 2:
        fail("one-group" if len(groups) == 1 else "wrong-groups", observed=f"{len(groups)} param group(s): {groups}",
             expected=f"2 groups: {want_groups}", cause="model.parameters() passed as one group: one LR for all",
             where="AdamW([{'params': model.backbone.parameters(), 'lr': lr / 10}, "
             "{'params': model.head.parameters(), 'lr': lr}])")
    if [sorted(g) for g in groups] != [sorted(g) for g in want_groups]:
        fail("wrong-groups", observed=f"groups {groups}", expected=f"{want_groups}, in that order",
             cause="parameters assigned to the wrong group", where="the params of each group")
    if seen.get("kind") != "AdamW":
        fail("wrong-optimizer", observed=f"a {seen.get('kind')} optimizer", expected="AdamW",
             cause="the prompt asks for AdamW", where="torch.optim.AdamW")
    got = _lrs(seen.get("lrs"), groups=2)
    factors = [min(1.0, (k + 1) / warmup) for k in range(warmup + 2)]
    for group, base in enumerate((lr / 10, lr)):
        series = [s[group] for s in got]
        want = [base * f for f in factors]
        if _same_lrs(series, want):
            continue
        name = ("backbone", "head")[group]
        if group == 0 and _same_lrs(series[1:], [lr * f for f in factors[1:]]):
            code, cause = "base-lr-lost", ("the backbone's LR was changed after the scheduler was built: LambdaLR "
                                           "scales each group's initial_lr, recorded at construction, and overwrites "
                                           "the group's lr at every step")
        else:
            formula = "lr / 10" if group == 0 else "lr"
            code, cause = "wrong-group-lr", f"the {name}'s base LR is not {base:.6g} ({formula})"
        fail(code, observed=f"{name} LR per step: {_rounded(series)}", expected=f"{_rounded(want)}", cause=cause,
             where="set each group's lr when you build the optimizer, then build the scheduler")
    return "two groups with their own base LRs, both warmed up by one LambdaLR"


_GROUPS_SOLUTION = '''import torch


def make_optimizer(model, lr, warmup):
    optimizer = torch.optim.AdamW([
        {"params": model.backbone.parameters(), "lr": lr / 10},
        {"params": model.head.parameters(), "lr": lr},
    ])
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
    return optimizer, scheduler
'''

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
        solution=_GROUPS_SOLUTION,
        hints=("An optimizer takes a list of dicts, one per group, each with its own 'lr'.",
               "LambdaLR scales each group's own initial LR: build the groups first, then the scheduler."),
        probe=_probe_param_group_lrs,
        judge=_judge_param_group_lrs,
        wrong_answers=(
            ("import torch\n\ndef make_optimizer(model, lr, warmup):\n"
             "    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)\n"
             "    return optimizer, torch.optim.lr_scheduler.LambdaLR(\n"
             "        optimizer, lambda step: min(1.0, (step + 1) / warmup))\n", "one-group"),
            ("import torch\n\ndef make_optimizer(model, lr, warmup):\n"
             "    optimizer = torch.optim.AdamW([{'params': model.backbone.parameters()},\n"
             "                                   {'params': model.head.parameters()}], lr=lr)\n"
             "    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup))\n"
             "    optimizer.param_groups[0]['lr'] = lr / 10\n    return optimizer, scheduler\n", "base-lr-lost"),
            (_GROUPS_SOLUTION.replace('"lr": lr / 10', '"lr": lr * 10'), "wrong-group-lr"),
        ),
    )
)


# ---------------------------------------------------------------------------------------------------------------
# checkpointing-resume-schedule (difficulty 3)


_RESUME_AT, _RESUME_TOTAL, _RESUME_LATER = 5, 10, 2  # an odd step: StepLR(step_size=2) is mid-period


def _resume_batches(case: Case) -> list[tuple[torch.Tensor, ...]]:
    return _regression_batches(case, 80, _RESUME_TOTAL, features=8)


def _resume_objects(case: Case, base: int) -> tuple[nn.Linear, torch.optim.Optimizer, object]:
    model = _small_linear(case, base, features=8)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    return model, optimizer, torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)


def _resume_step(model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: object,
                 batch: tuple[torch.Tensor, ...]) -> None:
    optimizer.zero_grad(set_to_none=True)
    nn.functional.mse_loss(model(batch[0]), batch[1]).backward()
    optimizer.step()
    scheduler.step()  # type: ignore[attr-defined]


def _probe_resume(answer: dict, *, case: Case) -> dict:
    batches = _resume_batches(case)
    model, optimizer, scheduler = _resume_objects(case, 81)
    for batch in batches[:_RESUME_AT]:
        _resume_step(model, optimizer, scheduler, batch)
    snapshot = answer["make_checkpoint"](model, optimizer, scheduler)
    for batch in batches[_RESUME_AT:_RESUME_AT + _RESUME_LATER]:  # the run goes on after the snapshot
        _resume_step(model, optimizer, scheduler, batch)
    fresh, fresh_optimizer, fresh_scheduler = _resume_objects(case, 82)
    answer["load_checkpoint"](snapshot, fresh, fresh_optimizer, fresh_scheduler)
    loaded = [p.detach().clone() for p in fresh.parameters()]
    with StepRecorder(fresh_optimizer) as steps:
        for batch in batches[_RESUME_AT:]:
            _resume_step(fresh, fresh_optimizer, fresh_scheduler, batch)
    return {"loaded": loaded, "params": [r.params for r in steps.records], "lrs": [r.lrs for r in steps.records]}


def _resume_reference(case: Case) -> tuple[list[list[torch.Tensor]], list[float]]:
    """Parameters before each step of the uninterrupted run (and after the last), and each step's LR."""
    model, optimizer, scheduler = _resume_objects(case, 81)
    params, lrs = [], []
    for batch in _resume_batches(case):
        params.append([p.detach().clone() for p in model.parameters()])
        lrs.append(optimizer.param_groups[0]["lr"])
        _resume_step(model, optimizer, scheduler, batch)
    params.append([p.detach().clone() for p in model.parameters()])
    return params, lrs


def _close_params(got: object, want: list[torch.Tensor]) -> bool:
    if not isinstance(got, list) or len(got) != len(want):
        raise WireError("recorded parameters malformed")
    return all(isinstance(g, torch.Tensor) and g.shape == w.shape and torch.allclose(g, w, rtol=1e-5, atol=1e-7)
               for g, w in zip(got, want, strict=True))


def _judge_resume(seen: dict, *, case: Case) -> str:
    ref_params, ref_lrs = _resume_reference(case)
    if not _close_params(seen.get("loaded"), ref_params[_RESUME_AT]):
        later = _close_params(seen.get("loaded"), ref_params[_RESUME_AT + _RESUME_LATER])
        fail("checkpoint-aliases-live-weights" if later else "wrong-weights",
             observed="the weights restored from the snapshot are those of "
             + (f"step {_RESUME_AT + _RESUME_LATER}, after training went on" if later else "no step of the run"),
             expected=f"the weights of step {_RESUME_AT}, when the snapshot was taken",
             cause="state_dict() returns references to the live tensors: training after the snapshot changes it "
             "in place" if later else "the model's state is not saved or not loaded",
             where="copy.deepcopy the state dicts you keep in memory (or torch.save them)")
    got_lrs = [v[0] for v in _lrs(seen.get("lrs"))]
    want_lrs = ref_lrs[_RESUME_AT:]
    if len(got_lrs) != len(want_lrs):
        raise WireError("wrong number of recorded steps")
    if not _same_lrs(got_lrs, want_lrs):
        if _same_lrs(got_lrs, ref_lrs[_RESUME_AT + 1:] + [got_lrs[-1]]):
            code, cause = "schedule-shifted", ("the scheduler was stepped after loading its state: the resumed run is "
                                               "one step ahead of the schedule")
        elif not math.isclose(got_lrs[0], want_lrs[0], rel_tol=1e-6):
            code, cause = "optimizer-state-lost", ("the first resumed step ran at the fresh optimizer's LR: the "
                                                   "current LR lives in optimizer.state_dict()['param_groups'] (and "
                                                   "Adam's moments in its 'state'): the optimizer's state is not "
                                                   "restored")
        else:
            code, cause = "scheduler-state-lost", ("the scheduler's state (its step count) is not restored: a fresh "
                                                   "StepLR counts from 0, so the next decay comes at the wrong step")
        fail(code, observed=f"learning rates after resuming: {_rounded(got_lrs)}", expected=f"{_rounded(want_lrs)}",
             cause=cause, where="save and load model, optimizer and scheduler state_dicts; step nothing on load")
    steps = seen.get("params")
    if not isinstance(steps, list) or len(steps) != len(want_lrs):
        raise WireError("recorded steps malformed")
    for i, params in enumerate(steps):
        if not _close_params(params, ref_params[_RESUME_AT + i]):
            fail("optimizer-state-lost", observed=f"the resumed run's weights differ from the uninterrupted run's "
                 f"at step {_RESUME_AT + i}", expected="the same trajectory as without the interruption",
                 cause="Adam's moments (exp_avg, exp_avg_sq) and step counts are not restored, or were restored from "
                 "a snapshot that kept changing (optimizer.state_dict() references the live state tensors)",
                 where="save copy.deepcopy(optimizer.state_dict()); optimizer.load_state_dict() on resume")
    return "the snapshot is a copy; model, optimizer and scheduler resume exactly where it was taken"


_RESUME_STARTER = '''import torch


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
_LOAD_MODEL = '    model.load_state_dict(checkpoint["model"])\n'
_RESUME_COPY = ('    return {"model": model.state_dict()}\n',
                '    return copy.deepcopy({"model": model.state_dict()})\n')
_RESUME_OPTIMIZER = (('"model": model.state_dict()}', '"model": model.state_dict(),\n'
                      '            "optimizer": optimizer.state_dict()}'),
                     (_LOAD_MODEL, _LOAD_MODEL + '    optimizer.load_state_dict(checkpoint["optimizer"])\n'))
_RESUME_SCHEDULER = (('model.state_dict()', 'model.state_dict(), "scheduler": scheduler.state_dict()'),
                     (_LOAD_MODEL, _LOAD_MODEL + '    scheduler.load_state_dict(checkpoint["scheduler"])\n'))


def _resume_fixed(*fixes: tuple[str, str]) -> str:
    source = _RESUME_STARTER.replace("import torch\n", "import copy\n\nimport torch\n")
    for old, new in fixes:
        source = source.replace(old, new)
    return source


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
        starter=_RESUME_STARTER,
        solution=_resume_fixed(_RESUME_COPY, *_RESUME_OPTIMIZER, *_RESUME_SCHEDULER),
        hints=("Three things: what the snapshot holds, what it leaves out, and whether it changes after it was taken.",
               "Snapshot all three state_dicts (model, optimizer, scheduler) with copy.deepcopy, and load all three."),
        probe=_probe_resume,
        judge=_judge_resume,
        wrong_answers=(
            (_resume_fixed(_RESUME_COPY, *_RESUME_OPTIMIZER), "scheduler-state-lost"),
            (_resume_fixed(_RESUME_COPY, *_RESUME_SCHEDULER), "optimizer-state-lost"),
            (_resume_fixed(*_RESUME_OPTIMIZER, *_RESUME_SCHEDULER), "checkpoint-aliases-live-weights"),
            (_resume_fixed(_RESUME_COPY, *_RESUME_OPTIMIZER, *_RESUME_SCHEDULER).replace(
                '    optimizer.load_state_dict(checkpoint["optimizer"])\n',
                '    optimizer.load_state_dict(checkpoint["optimizer"])\n'
                '    scheduler.step()  # resume at the next step\n'),
             "schedule-shifted"),
        ),
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
    multiple_choice(
        id="schedulers-order",
        title="optimizer.step() and scheduler.step(): which first?",
        topics=("schedulers", "loop"),
        difficulty=1,
        question="What happens if you call scheduler.step() before optimizer.step() at every iteration "
        "(PyTorch >= 1.1)?",
        options=(
            ("PyTorch warns, and the schedule's first value is skipped",
             "right: the scheduler advances the LR before the optimizer ever used it, and torch warns about the order"),
            ("nothing: the two calls are independent of each other",
             "the scheduler writes the LR the next optimizer.step() uses: calling it first shifts the whole schedule"),
            ("an exception: the scheduler checks the optimizer has stepped",
             "torch only warns (UserWarning); the training goes on with a shifted schedule"),
            ("the scheduler call is ignored until the optimizer steps",
             "it is not ignored: it advances the LR right away, which is exactly the problem"),
        ),
        key="a",
        hints=("Run it and watch the warnings.", "The scheduler advances the LR before it was ever used."),
        experiment=_order_experiment,
    )
)
