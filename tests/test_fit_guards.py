"""The common mistakes `fit` meets, each refused with a message naming what to change (before training where
it can be known), and `EarlyStopping`'s mode read from the metric's name. Tiny models on the CPU, seconds in all.
"""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from harness.checkpoint import load_checkpoint
from harness.early_stopping import infer_mode
from harness.metrics import accuracy
from harness.train import EarlyStopping, fit

FEATURES, CLASSES = 6, 3


def make_data(n: int = 64, seed: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(n, FEATURES, generator=generator)
    return TensorDataset(inputs, (inputs[:, 0] > 0).long() + (inputs[:, 1] > 0.5).long())


def make_model(*, batch_norm: bool = False) -> nn.Module:
    torch.manual_seed(0)
    norm = [nn.BatchNorm1d(16)] if batch_norm else []
    return nn.Sequential(nn.Linear(FEATURES, 16), *norm, nn.ReLU(), nn.Linear(16, CLASSES))


class CountingLoss(nn.Module):
    """A loss that counts its calls, so a test can prove nothing trained; `wrap` turns it into a wrong one."""

    def __init__(self, wrap=lambda loss: loss) -> None:
        super().__init__()
        self.calls, self.wrap = 0, wrap

    def forward(self, outputs, targets):
        self.calls += 1
        return self.wrap(nn.functional.cross_entropy(outputs, targets, reduction="none").mean())


def run(model: nn.Module | None = None, train=None, val=None, *, loss_fn=None, **options) -> pd.DataFrame:
    model = model or make_model()
    options.setdefault("optimizer", torch.optim.SGD(model.parameters(), lr=0.1))
    return fit(model, train if train is not None else DataLoader(make_data(), batch_size=8), val,
               loss_fn=loss_fn or CountingLoss(), progress=False, **options)


# --- nothing to train ---------------------------------------------------------------------------------------

def test_a_frozen_model_is_refused_before_training():
    model = make_model().requires_grad_(False)
    loss = CountingLoss()
    with pytest.raises(ValueError, match=r"every parameter of the model is frozen.*nothing to train.*Unfreeze"):
        run(model, loss_fn=loss)
    assert loss.calls == 0


def test_an_optimizer_of_frozen_parameters_only_is_refused_before_training():
    model = make_model()
    model[0].requires_grad_(False)
    with pytest.raises(ValueError, match=r"none of the optimizer's parameters requires grad.*p.requires_grad\]"):
        run(model, optimizer=torch.optim.SGD(model[0].parameters(), lr=0.1))


# --- a loss fit cannot train with ----------------------------------------------------------------------------

@pytest.mark.parametrize(("wrap", "message"), [
    (lambda loss: loss.repeat(8), r"tensor of shape \(8,\) at epoch 1, batch 0, not a scalar.*reduction='mean'"),
    (lambda loss: (loss * 100).long(), r"integer tensor \(torch.int64\) at epoch 1, batch 0.*floating point"),
    (lambda loss: loss.detach(), r"loss at epoch 1, batch 0 has no gradient.*\.detach\(\)"),
    (lambda loss: loss.item(), r"returned a float \(1\.\d+\) at epoch 1, batch 0, not a tensor.*no \.item\(\)"),
], ids=["per-sample", "integer", "detached", "python-float"])
def test_a_loss_that_is_not_a_float_scalar_with_a_gradient_is_refused_at_the_first_batch(wrap, message):
    model = make_model()
    before = [p.clone() for p in model.parameters()]
    loss = CountingLoss(wrap)
    with pytest.raises(ValueError, match=message):
        run(model, loss_fn=loss)
    assert loss.calls == 1
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))  # no step was taken


# --- data and metrics ----------------------------------------------------------------------------------------

class ListDataset(Dataset):
    """Each sample as Python lists: what a dataset built from rows of a CSV often returns."""

    def __init__(self) -> None:
        self.data = make_data(16)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int):
        inputs, target = self.data[index]
        return inputs.tolist(), int(target)


def test_nested_list_inputs_from_a_dataset_say_to_return_tensors():
    with pytest.raises(ValueError, match=r"inputs are a list of 6 items, not one tensor.*Python lists.*"
                                         r"torch.tensor\(values, dtype=torch.float32\)"):
        run(train=DataLoader(ListDataset(), batch_size=4))


def test_a_per_sample_metric_is_named_with_its_shape():
    def per_sample_accuracy(outputs, targets):
        return (outputs.argmax(1) == targets).float()  # missing .mean()

    with pytest.raises(ValueError, match=r"metric 'accuracy' returned a tensor of shape \(8,\), one value per "
                                         r"sample.*\.float\(\)\.mean\(\)"):
        run(val=DataLoader(make_data(16, seed=1), batch_size=8), metrics={"accuracy": per_sample_accuracy})


def test_a_batchnorm_batch_of_one_after_trained_batches_says_drop_last():
    loss = CountingLoss()
    with pytest.raises(ValueError, match=r"batch 5 of epoch 1 holds 1 sample.*BatchNorm.*drop_last=True"):
        run(make_model(batch_norm=True), DataLoader(make_data(41), batch_size=8), loss_fn=loss)
    assert loss.calls == 5  # five batches trained before the batch of one
    history = run(make_model(batch_norm=True), DataLoader(make_data(41), batch_size=8, drop_last=True), epochs=1)
    assert len(history) == 1


# --- schedules that end before the run ------------------------------------------------------------------------

def test_a_one_cycle_schedule_shorter_than_the_run_is_refused_before_training():
    model, loss = make_model(), CountingLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=8)  # one epoch's steps
    with pytest.raises(ValueError, match=r"total_steps=8, but this run takes 24 optimizer steps \(3 epochs x 8\).*"
                                         r"'Tried to step 9 times'.*total_steps=24"):
        run(model, loss_fn=loss, optimizer=optimizer, scheduler=scheduler, epochs=3)
    assert loss.calls == 0


def test_a_cosine_schedule_shorter_than_the_run_is_refused_instead_of_climbing_back():
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=2)
    with pytest.raises(ValueError, match=r"T_max=2\) reaches eta_min.*climbs back up.*takes 5 epochs.*T_max=5"):
        run(model, optimizer=optimizer, scheduler=scheduler, scheduler_interval="epoch", epochs=5)


# --- early stopping's mode -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("metric", "mode"), [
    ("val_loss", "min"), ("train_loss", "min"), ("val_accuracy", "max"), ("val_acc", "max"), ("val_f1", "max"),
    ("val_auc", "max"), ("val_top1_accuracy", "max"), ("val_error", "min"), ("val_perplexity", "min"),
    ("val_rising", None), ("val_neg_loss", None), ("val_loss_accuracy", None),
])
def test_early_stopping_infers_the_mode_of_well_known_metric_names(metric, mode):
    assert infer_mode(metric) == mode
    if mode is not None:
        assert EarlyStopping(metric).mode == mode


def test_early_stopping_refuses_an_ambiguous_name_without_mode_and_a_mode_that_contradicts_the_name():
    with pytest.raises(ValueError, match=r"cannot tell whether a higher or a lower 'val_rising' is better.*mode='max'"):
        EarlyStopping("val_rising")
    assert EarlyStopping("val_rising", mode="max").mode == "max"
    with pytest.raises(ValueError, match=r"mode='min'\) would keep the worst epoch.*use mode='max'"):
        EarlyStopping("val_accuracy", mode="min")
    assert EarlyStopping("val_accuracy", mode="max").mode == "max"  # an explicit, consistent mode still works


def test_early_stopping_on_accuracy_without_mode_keeps_the_most_accurate_epoch(tmp_path):
    val = DataLoader(make_data(32, seed=1), batch_size=8)
    model = make_model()
    history = run(model, val=val, metrics={"accuracy": accuracy}, epochs=6, checkpoint_dir=tmp_path,
                  optimizer=torch.optim.SGD(model.parameters(), lr=0.5),
                  early_stopping=EarlyStopping("val_accuracy", patience=10))
    assert history.attrs["config"]["monitor_mode"] == "max"
    best = load_checkpoint(tmp_path / "best.pt")
    assert best["early_stopping"]["best"] == history["val_accuracy"].max()
    assert history["val_accuracy"].iloc[best["epoch"] - 1] == history["val_accuracy"].max()
    assert history["val_accuracy"].min() < history["val_accuracy"].max()  # the choice mattered
