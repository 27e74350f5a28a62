"""Drills on learning-rate schedulers: warmup-cosine, stepping granularity, plateau, skipped steps."""

from __future__ import annotations

import math
import warnings

import torch
from torch import nn

from harness.checks.core import fail
from harness.checks.probes import StepRecorder
from harness.drills.core import Drill, add
from harness.drills.support import multiple_choice


def warmup_cosine_factor(step: int, warmup: int, total: int) -> float:
    """The drill's reference: linear warmup reaching 1 at the last warmup step, cosine to 0 at `total`, 0 after."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


def require_warmup_cosine_factor(got: float, step: int, warmup: int, total: int) -> None:
    """Fail with `wrong-factor` unless `got` is the reference factor at (step, warmup, total)."""
    want = warmup_cosine_factor(step, warmup, total)
    if not math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9):
        phase = "warmup" if step < warmup else ("after the end" if step >= total else "cosine decay")
        fail("wrong-factor", observed=f"warmup_cosine({step}, {warmup}, {total}) = {got:.6f} ({phase})",
             expected=f"{want:.6f}", cause="linear warmup reaches 1 at the last warmup step ((step+1)/warmup); "
             "the cosine runs from 1 at step=warmup to 0 at step=total and stays 0 after",
             where=f"the {phase} branch")


def _check_warmup_cosine(ns: dict) -> str:
    factor = ns["warmup_cosine"]
    for warmup, total in ((5, 50), (1, 10), (10, 10), (3, 1000), (0, 20)):
        for step in sorted({0, 1, max(warmup - 1, 0), warmup, (warmup + total) // 2, total - 1, total, total + 5}):
            require_warmup_cosine_factor(float(factor(step, warmup, total)), step, warmup, total)
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)
    torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: factor(s, 5, 50))
    return "matches the closed form in warmup, decay and after the end, and plugs into LambdaLR"


add(
    Drill(
        id="schedulers-warmup-cosine",
        title="Warmup then cosine, as a LambdaLR factor",
        kind="write",
        topics=("schedulers",),
        difficulty=2,
        prompt="Write warmup_cosine(step, warmup, total) -> the LR multiplier for LambdaLR: (step + 1) / warmup for "
        "step < warmup, then 0.5 * (1 + cos(pi * p)) with p = (step - warmup) / (total - warmup), "
        "clamped to 0 after total. warmup may be 0.",
        entry="warmup_cosine",
        starter="import math\n\n\ndef warmup_cosine(step, warmup, total):\n    raise NotImplementedError\n",
        solution=(
            "import math\n\n\ndef warmup_cosine(step, warmup, total):\n"
            "    if step < warmup:\n        return (step + 1) / warmup\n"
            "    progress = min((step - warmup) / max(1, total - warmup), 1.0)\n"
            "    return 0.5 * (1 + math.cos(math.pi * progress))\n"
        ),
        hints=("Two phases and a clamp. Check the boundaries: step = warmup - 1, warmup, total.",
               "Guard total == warmup with max(1, total - warmup), and clamp progress with min(..., 1.0)."),
        check=_check_warmup_cosine,
        wrong_answers=(
            "import math\n\ndef warmup_cosine(step, warmup, total):\n"
            "    if step < warmup:\n        return step / warmup\n"
            "    return 0.5 * (1 + math.cos(math.pi * (step - warmup) / (total - warmup)))\n",
            "import math\n\ndef warmup_cosine(step, warmup, total):\n"
            "    if step < warmup:\n        return (step + 1) / warmup\n"
            "    return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))\n",
        ),
    )
)

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


def _check_granularity(ns: dict) -> str:
    train = ns["train"]
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.1)
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randn(8, 4, generator=gen), torch.randn(8, 1, generator=gen)) for _ in range(5)]
    with StepRecorder(optimizer) as steps:
        train(model, batches, optimizer, scheduler, nn.MSELoss(), 4)
    lrs = [round(r.lrs[0], 6) for r in steps.records]
    want = [1.0] * 10 + [0.1] * 10
    if lrs != want:
        fail("scheduler-per-batch" if any(lr < 1.0 for lr in lrs[:10]) else "wrong-schedule",
             observed=f"learning rates per optimizer step (5 per epoch): {lrs}", expected=f"{want}",
             cause="a per-epoch scheduler stepped once per batch decays 5x too fast", where="call scheduler.step() "
             "once per epoch, after the batch loop")
    return "a per-epoch scheduler stepped once per epoch"


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
        check=_check_granularity,
        wrong_answers=(_GRANULARITY_STARTER.replace("            optimizer.step()\n            scheduler.step()\n",
                                                    "            scheduler.step()\n            optimizer.step()\n"),),
    )
)

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


def _check_plateau(ns: dict) -> str:
    train = ns["train"]
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(64, 16, generator=gen)
    train_batches = [(x[i:i + 16], torch.randn(16, 1, generator=gen)) for i in range(0, 64, 16)]  # noise: memorised
    val_batches = [(torch.randn(16, 16, generator=gen), torch.randn(16, 1, generator=gen)) for _ in range(2)]
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", patience=1)
    train(model, train_batches, val_batches, optimizer, scheduler, nn.MSELoss(), 12)
    if optimizer.param_groups[0]["lr"] >= 1e-2:
        fail("plateau-on-train-loss", observed="the LR never dropped although the validation loss stopped improving "
             "(the model memorises noise: its training loss keeps falling)", expected="the LR reduced",
             cause="ReduceLROnPlateau was stepped with the training loss", where="scheduler.step(val_loss)")
    return "ReduceLROnPlateau follows the validation loss"


add(
    Drill(
        id="schedulers-plateau-metric",
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
        check=_check_plateau,
        wrong_answers=(_PLATEAU_STARTER.replace("scheduler.step(total / len(train_batches))", "scheduler.step(loss)"),),
    )
)


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
        prompt="What happens if you call scheduler.step() before optimizer.step() (PyTorch >= 1.1)?\n"
        "  a) nothing: the order does not matter\n  b) PyTorch warns, and the first value of the schedule is skipped\n"
        "  c) an exception\n  d) the scheduler is ignored\n",
        correct="b",
        explanation="a UserWarning, and the schedule's first value is skipped",
        hints=("Run it and watch the warnings.", "The scheduler advances the LR before it was ever used."),
        wrong=("a", "c"),
        experiment=_order_experiment,
    )
)
