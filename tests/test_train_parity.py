"""`fit` against a hand-written loop: same seed, model, data and optimizer on the CPU in fp32 must give
bitwise-equal weights, for clipping, accumulation and each kind of scheduler in turn."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from harness.train import fit

SEED = 7


def loaders() -> tuple[DataLoader, DataLoader]:
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(120, 5, generator=generator)
    targets = (inputs.sum(dim=1) > 0).long()
    train = TensorDataset(inputs[:104], targets[:104])  # 104 / 16 -> 7 batches, the last one of 8
    val = TensorDataset(inputs[104:], targets[104:])
    shuffle = torch.Generator().manual_seed(SEED)
    return DataLoader(train, batch_size=16, shuffle=True, generator=shuffle), DataLoader(val, batch_size=8)


def model_and_optimizer(kind: str) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(SEED)
    model = nn.Sequential(nn.Linear(5, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 2))
    if kind == "adamw":
        return model, torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)


def reference_loop(model, train, val, optimizer, *, epochs, max_grad_norm=None, accumulation_steps=1,
                   scheduler=None, interval=None) -> None:
    """The loop as one writes it by hand, the textbook way."""
    loss_fn = nn.CrossEntropyLoss()
    batches = len(train)
    for _ in range(epochs):
        model.train()
        for i, (inputs, targets) in enumerate(train):
            group_start = i - i % accumulation_steps
            group_size = min(accumulation_steps, batches - group_start)
            loss = loss_fn(model(inputs), targets)
            (loss / group_size).backward()
            if i == group_start + group_size - 1:
                if max_grad_norm is not None:
                    nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
                optimizer.step()
                if interval == "step":
                    scheduler.step()
                optimizer.zero_grad(set_to_none=True)
        model.eval()
        with torch.no_grad():
            val_loss = sum(loss_fn(model(x), y) * len(x) for x, y in val) / len(val.dataset)
        if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            scheduler.step(val_loss)
        elif interval == "epoch":
            scheduler.step()


SCHEDULERS: dict[str, tuple[Callable | None, str | None]] = {
    "none": (None, None),
    "onecycle-step": (lambda opt: torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=4 * 7), "step"),
    "warmup-lambda-step": (lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 5)), "step"),
    "steplr-epoch": (lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7), "epoch"),
    "cosine-epoch": (lambda opt: torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=4), "epoch"),
    "plateau": (lambda opt: torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=0, threshold=0.15,
                                                                      threshold_mode="abs"), "epoch"),
}
CASES = [
    ("sgd", None, 1, "none"),
    ("sgd", 0.5, 1, "none"),  # clipping (the norm exceeds 0.5 on most steps)
    ("adamw", None, 3, "none"),  # accumulation: groups 3, 3, 1
    ("adamw", 1.0, 2, "onecycle-step"),
    ("sgd", None, 1, "warmup-lambda-step"),
    ("sgd", None, 1, "steplr-epoch"),
    ("adamw", None, 1, "cosine-epoch"),
    ("sgd", 0.5, 1, "plateau"),
]


@pytest.mark.parametrize(("optimizer_kind", "max_grad_norm", "accumulation_steps", "schedule"), CASES)
def test_fit_matches_a_hand_written_loop_bit_for_bit(optimizer_kind, max_grad_norm, accumulation_steps, schedule):
    make_scheduler, interval = SCHEDULERS[schedule]
    epochs = 4

    model, optimizer = model_and_optimizer(optimizer_kind)
    scheduler = make_scheduler(optimizer) if make_scheduler else None
    train, val = loaders()
    reference_loop(model, train, val, optimizer, epochs=epochs, max_grad_norm=max_grad_norm,
                   accumulation_steps=accumulation_steps, scheduler=scheduler, interval=interval)
    expected = [p.detach().clone() for p in model.parameters()]
    expected_lr = optimizer.param_groups[0]["lr"]

    model, optimizer = model_and_optimizer(optimizer_kind)
    scheduler = make_scheduler(optimizer) if make_scheduler else None
    train, val = loaders()
    history = fit(model, train, val, loss_fn=nn.CrossEntropyLoss(), optimizer=optimizer, epochs=epochs,
                  max_grad_norm=max_grad_norm, accumulation_steps=accumulation_steps, scheduler=scheduler,
                  scheduler_interval=interval if schedule != "plateau" else None, progress=False)

    assert len(history) == epochs
    assert optimizer.param_groups[0]["lr"] == expected_lr
    for got, want in zip(model.parameters(), expected, strict=True):
        assert torch.equal(got, want), f"max difference {(got - want).abs().max():.3e}"
    if schedule == "plateau":
        assert expected_lr < 0.05  # the plateau scheduler did cut the rate in this run


def test_recorded_grad_norm_is_the_mean_pre_clip_norm_of_the_epochs_steps():
    model, optimizer = model_and_optimizer("sgd")
    train, _ = loaders()
    norms = []
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    for inputs, targets in train:
        loss_fn(model(inputs), targets).backward()
        norms.append(float(nn.utils.clip_grad_norm_(model.parameters(), 0.5)))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    model, optimizer = model_and_optimizer("sgd")
    train, _ = loaders()
    history = fit(model, train, loss_fn=loss_fn, optimizer=optimizer, epochs=1, max_grad_norm=0.5, progress=False)
    assert history["grad_norm"][0] == pytest.approx(sum(norms) / len(norms), rel=1e-6)
