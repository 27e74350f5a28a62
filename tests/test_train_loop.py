"""The rules of `harness.train.fit`'s loop, each observed through real hooks on a tiny model.

Every test trains a few steps of a small MLP on seeded random data on the CPU (seconds in all).
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils.data import DataLoader, TensorDataset

from harness.contract.instruments import ForwardRecorder, StepRecorder
from harness.metrics import accuracy
from harness.train import EarlyStopping, NonFiniteLossError, fit

FEATURES, CLASSES = 6, 3


def make_data(n: int, seed: int = 0, *, bad_index: int | None = None) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(n, FEATURES, generator=generator)
    targets = (inputs[:, 0] > 0).long() + (inputs[:, 1] > 0.5).long()
    if bad_index is not None:
        inputs[bad_index] = float("nan")
    return TensorDataset(inputs, targets)


def make_loader(n: int = 64, batch_size: int = 8, *, shuffle: bool = False, seed: int = 0, **kw) -> DataLoader:
    generator = torch.Generator().manual_seed(seed) if shuffle else None
    return DataLoader(make_data(n, seed, **kw), batch_size=batch_size, shuffle=shuffle, generator=generator)


def make_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(FEATURES, 16), nn.ReLU(), nn.Linear(16, CLASSES))


def run(model: nn.Module, train: DataLoader, val: DataLoader | None = None, *, lr: float = 0.1, **options):
    optimizer = options.pop("optimizer", None) or torch.optim.SGD(model.parameters(), lr=lr)
    options.setdefault("progress", False)
    return fit(model, train, val, loss_fn=nn.CrossEntropyLoss(), optimizer=optimizer, **options)


# --- modes --------------------------------------------------------------------------------------------


def test_train_and_eval_modes_are_set_every_epoch_and_evaluation_has_no_autograd():
    model = make_model()
    train, val = make_loader(32, 8), make_loader(16, 8, seed=1)
    with ForwardRecorder(model) as forwards:
        run(model, train, val, epochs=3)
    # per epoch: 4 training forwards then 2 validation forwards
    assert len(forwards.records) == 3 * 6
    for epoch in range(3):
        block = forwards.records[epoch * 6 : (epoch + 1) * 6]
        assert all(r.training and r.grad_enabled and not r.inference_mode for r in block[:4]), f"epoch {epoch}"
        assert all(not r.training and not r.grad_enabled for r in block[4:]), f"epoch {epoch}"


def test_gradients_are_set_to_none_after_every_step():
    model = make_model()
    grads_present = []
    model.register_forward_pre_hook(
        lambda module, args: grads_present.append([p.grad is not None for p in module.parameters()])
        if module.training
        else None
    )
    run(model, make_loader(32, 8), epochs=2)
    assert grads_present and not any(any(flags) for flags in grads_present)
    assert all(p.grad is None for p in model.parameters())


# --- mixed precision ----------------------------------------------------------------------------------


def _autocast_observations(model: nn.Module):
    """Autocast state in forward (module pre-hook), in the loss, and during backward (parameter hooks)."""
    seen = {"forward": [], "loss": [], "backward": []}
    model.register_forward_pre_hook(lambda m, a: seen["forward"].append(torch.is_autocast_enabled("cpu")))
    for p in model.parameters():
        p.register_hook(lambda g: seen["backward"].append(torch.is_autocast_enabled("cpu")))
    cross_entropy = nn.CrossEntropyLoss()

    def loss_fn(outputs, targets):
        seen["loss"].append(torch.is_autocast_enabled("cpu"))
        return cross_entropy(outputs, targets)

    return seen, loss_fn


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_autocast_covers_forward_and_loss_but_not_backward(precision):
    model = make_model()
    seen, loss_fn = _autocast_observations(model)
    fit(model, make_loader(16, 8), loss_fn=loss_fn, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        epochs=1, precision=precision, progress=False)
    assert seen["forward"] == [True, True] and seen["loss"] == [True, True]
    assert seen["backward"] and not any(seen["backward"])


def test_fp32_runs_without_autocast():
    model = make_model()
    seen, loss_fn = _autocast_observations(model)
    fit(model, make_loader(16, 8), loss_fn=loss_fn, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        epochs=1, progress=False)
    assert not any(seen["forward"] + seen["loss"] + seen["backward"])


def _output_gradient_scale(precision: str) -> float:
    """The gradient that reaches the logits in backward: the GradScaler multiplies it by its scale."""
    model = make_model()
    scales = []
    model[-1].weight.register_hook(lambda g: scales.append(float(g.abs().max())))
    run(model, make_loader(8, 8), epochs=1, precision=precision)
    return scales[0]


def test_fp16_scales_the_loss_and_bf16_does_not():
    fp16, bf16, fp32 = (_output_gradient_scale(p) for p in ("fp16", "bf16", "fp32"))
    assert 0.5 < bf16 / fp32 < 2  # unscaled: same order as fp32
    assert fp16 / fp32 > 1000  # scaled by the GradScaler's 65536 before backward


def test_fp16_gradients_are_unscaled_before_clipping_and_clipped_once_per_step():
    model = make_model()
    max_norm = 0.01  # far below the natural gradient norm, so every step is clipped
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with StepRecorder(optimizer) as steps:
        history = run(model, make_loader(48, 8), optimizer=optimizer, epochs=1, precision="fp16",
                      max_grad_norm=max_norm, accumulation_steps=2)
    assert len(steps.records) == 3  # 6 batches, groups of 2
    # unscaled then clipped: exactly max_norm at the step (clipping scaled gradients would give ~max_norm/65536)
    for record in steps.records:
        assert record.grad_norm == pytest.approx(max_norm, rel=1e-3)
    assert history["grad_norm"][0] > 10 * max_norm  # the recorded norm is the one before clipping


def test_a_step_the_scaler_skips_does_not_advance_the_scheduler():
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
    calls = {"n": 0}

    def poison_second_backward(grad):
        calls["n"] += 1
        return grad * math.inf if calls["n"] == 2 else grad

    model[0].weight.register_hook(poison_second_backward)
    with StepRecorder(optimizer) as steps:
        history = run(model, make_loader(32, 8), optimizer=optimizer, epochs=1, precision="fp16",
                      scheduler=scheduler, scheduler_interval="step")
    assert len(steps.records) == 3  # 4 batches, the second step skipped by the GradScaler
    assert scheduler.last_epoch == 3  # stepped after the 3 real steps only
    assert [r.lrs[0] for r in steps.records] == pytest.approx([0.1, 0.05, 0.1 / 3])
    assert history["skipped_steps"][0] == 1
    assert all(torch.isfinite(p).all() for p in model.parameters())


# --- gradient accumulation --------------------------------------------------------------------------


def _batch_gradients(model: nn.Module, loader: DataLoader) -> list[list[torch.Tensor]]:
    loss_fn = nn.CrossEntropyLoss()
    result = []
    for inputs, targets in loader:
        model.zero_grad(set_to_none=True)
        loss_fn(model(inputs), targets).backward()
        result.append([p.grad.clone() for p in model.parameters()])
    model.zero_grad(set_to_none=True)
    return result


def test_accumulation_averages_each_group_and_steps_on_the_last_partial_group():
    model, loader = make_model(), make_loader(56, 8)  # 7 batches: groups of 3, 3 and 1
    per_batch = _batch_gradients(model, loader)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: the weights stay, the gradients are comparable
    with StepRecorder(optimizer) as steps:
        run(model, loader, optimizer=optimizer, epochs=1, accumulation_steps=3)
    assert len(steps.records) == 3
    for record, group in zip(steps.records, ([0, 1, 2], [3, 4, 5], [6]), strict=True):
        for i, grad in enumerate(record.grads):
            expected = sum(per_batch[b][i] for b in group) / len(group)
            torch.testing.assert_close(grad, expected)


# --- schedulers ---------------------------------------------------------------------------------------


def test_per_step_scheduler_changes_the_rate_at_every_optimizer_step():
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=8)
    reference = torch.optim.lr_scheduler.OneCycleLR(torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1),
                                                    max_lr=0.1, total_steps=8)
    expected = []
    for _ in range(8):
        expected.append(reference.optimizer.param_groups[0]["lr"])
        reference.optimizer.step()
        reference.step()
    with StepRecorder(optimizer) as steps:
        run(model, make_loader(64, 16), optimizer=optimizer, epochs=2, scheduler=scheduler)  # interval inferred: step
    assert [r.lrs[0] for r in steps.records] == pytest.approx(expected)


def test_per_epoch_scheduler_keeps_the_rate_within_an_epoch():
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    with StepRecorder(optimizer) as steps:
        history = run(model, make_loader(32, 8), optimizer=optimizer, epochs=3, scheduler=scheduler)
    assert [r.lrs[0] for r in steps.records] == pytest.approx([0.1] * 4 + [0.05] * 4 + [0.025] * 4)
    assert list(history["lr"]) == pytest.approx([0.1, 0.05, 0.025])


def test_plateau_scheduler_follows_the_monitored_validation_metric_not_the_losses():
    # "rising" improves every epoch in mode "max"; the losses fall, which in mode "max" reads as no
    # improvement: fed a loss, the scheduler would halve the rate every epoch
    calls = {"n": 0}

    def rising(outputs, targets):
        calls["n"] += 1
        return torch.tensor(float(calls["n"]))

    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="max", factor=0.5, patience=0)
    history = run(model, make_loader(64, 8), make_loader(32, 8, seed=1), optimizer=optimizer, epochs=4,
                  scheduler=scheduler, metrics={"rising": rising},
                  early_stopping=EarlyStopping("val_rising", mode="max", patience=10))
    assert history["val_loss"].is_monotonic_decreasing and history["train_loss"].is_monotonic_decreasing
    assert optimizer.param_groups[0]["lr"] == 0.1


def test_plateau_scheduler_cuts_the_rate_when_the_monitored_metric_stalls():
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="max", factor=0.5, patience=0)
    history = run(model, make_loader(64, 8), make_loader(32, 8, seed=1), optimizer=optimizer, epochs=4,
                  scheduler=scheduler, metrics={"stuck": lambda out, tgt: torch.tensor(0.5)},
                  early_stopping=EarlyStopping("val_stuck", mode="max", patience=10))
    assert list(history["lr"]) == pytest.approx([0.1, 0.1, 0.05, 0.025])


def test_plateau_scheduler_uses_val_loss_by_default():
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=0)
    history = run(model, make_loader(64, 8), make_loader(32, 8, seed=1), optimizer=optimizer, epochs=3,
                  scheduler=scheduler)
    assert history.attrs["config"]["monitor"] == "val_loss"
    assert list(history["lr"]) == pytest.approx([0.1] * 3)  # val_loss improves every epoch here


@pytest.mark.parametrize(
    ("make_scheduler", "interval", "message"),
    [
        (lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0), None, "scheduler_interval="),
        (lambda opt: torch.optim.lr_scheduler.ReduceLROnPlateau(opt), "step", "once per epoch"),
        (lambda opt: torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="max"), None, "mode='min'"),
        (lambda opt: torch.optim.lr_scheduler.StepLR(opt, 1), "hourly", "use 'step'"),
    ],
)
def test_ambiguous_or_wrong_scheduler_settings_are_refused(make_scheduler, interval, message):
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match=message):
        run(model, make_loader(16, 8), make_loader(16, 8), optimizer=optimizer, epochs=1,
            scheduler=make_scheduler(optimizer), scheduler_interval=interval)


def test_plateau_scheduler_without_validation_data_is_refused():
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="pass val_loader"):
        run(model, make_loader(16, 8), optimizer=optimizer, epochs=1,
            scheduler=torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer))


# --- early stopping -------------------------------------------------------------------------------------


def test_early_stopping_stops_after_patience_epochs_without_improvement():
    model = make_model()
    history = run(model, make_loader(32, 8), make_loader(16, 8, seed=1), epochs=10,
                  metrics={"stuck": lambda out, tgt: torch.tensor(1.0)},
                  early_stopping=EarlyStopping("val_stuck", mode="max", patience=2))
    assert list(history["epoch"]) == [1, 2, 3]  # best at 1, then 2 epochs without improvement


# --- non-finite losses ------------------------------------------------------------------------------------


def test_a_nan_loss_stops_training_naming_epoch_and_batch_and_checkpoints_stay_finite(tmp_path):
    clean, poisoned = make_loader(32, 8), make_loader(32, 8, bad_index=21)  # batch 2
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    run(model, clean, optimizer=optimizer, epochs=1, checkpoint_dir=tmp_path)
    with pytest.raises(NonFiniteLossError, match="epoch 2, batch 2"):
        run(model, poisoned, optimizer=optimizer, epochs=2, checkpoint_dir=tmp_path, resume=True)
    saved = torch.load(tmp_path / "last.pt", weights_only=True)
    assert saved["epoch"] == 1
    assert all(torch.isfinite(t).all() for t in saved["model"].values())


def test_sync_every_1_stops_before_the_bad_update():
    model = make_model()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(NonFiniteLossError, match="epoch 1, batch 0"):
        run(model, make_loader(32, 8, bad_index=3), epochs=1, sync_every=1)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_skip_mode_leaves_bad_batches_out_and_counts_them():
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with StepRecorder(optimizer) as steps:
        history = run(model, make_loader(32, 8, bad_index=9), optimizer=optimizer, epochs=2, on_nonfinite="skip")
    assert list(history["skipped_steps"]) == [1, 1]
    assert len(steps.records) == 6
    assert history["train_loss"].notna().all()
    assert all(torch.isfinite(p).all() for p in model.parameters())


# --- host syncs ---------------------------------------------------------------------------------------------


class HostReads(TorchFunctionMode):
    """Counts the calls that copy a tensor's value to Python (each one a device sync on a GPU)."""

    READS = {"item", "tolist", "__bool__", "__float__", "__int__", "__index__", "cpu", "numpy"}

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.count += getattr(func, "__name__", "") in self.READS
        return func(*args, **(kwargs or {}))


def _host_reads(batches: int, sync_every: int) -> int:
    model = make_model()
    with HostReads() as reads:
        run(model, make_loader(batches * 4, 4), make_loader(16, 8), epochs=2, sync_every=sync_every,
            max_grad_norm=1.0, metrics={"accuracy": accuracy})
    return reads.count


def test_host_reads_do_not_grow_with_the_number_of_steps():
    few, many = _host_reads(batches=4, sync_every=1000), _host_reads(batches=40, sync_every=1000)
    assert few == many
    assert many <= 2 * 8  # a handful per epoch
    # sync points add a fixed number of reads each: 40 batches every 10 -> 4 sync points per epoch
    assert _host_reads(batches=40, sync_every=10) - many == 2 * 3 * 2


# --- options ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"precision": "fp8"}, ValueError, "pick fp32, bf16 or fp16"),
        ({"device": "meta"}, ValueError, "Call model.to"),
        ({"epochs": 0}, ValueError, "epochs=0"),
        ({"accumulation_steps": 0}, ValueError, "accumulation_steps"),
        ({"max_grad_norm": -1.0}, ValueError, "max_grad_norm"),
        ({"on_nonfinite": "ignore"}, ValueError, "on_nonfinite"),
        ({"resume": True}, ValueError, "needs checkpoint_dir"),
        ({"early_stopping": EarlyStopping("val_f1")}, ValueError, "does not record"),
        ({"learning_rate": 0.1}, TypeError, "learning_rate"),
    ],
)
def test_bad_options_fail_loudly_before_training(options, error, message):
    model = make_model()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(error, match=message):
        run(model, make_loader(16, 8), make_loader(16, 8), epochs=options.pop("epochs", 1), **options)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_an_optimizer_built_for_another_model_is_refused():
    model, other = make_model(), make_model(1)
    with pytest.raises(ValueError, match="build it from model.parameters"):
        run(model, make_loader(16, 8), optimizer=torch.optim.SGD(other.parameters(), lr=0.1), epochs=1)


def test_history_has_one_row_per_epoch_with_the_documented_columns(tmp_path):
    model = make_model()
    history = run(model, make_loader(32, 8), make_loader(16, 8, seed=1), epochs=2,
                  metrics={"accuracy": accuracy}, checkpoint_dir=tmp_path)
    assert list(history.columns) == ["epoch", "train_loss", "val_loss", "val_accuracy", "lr", "grad_norm",
                                     "skipped_steps", "epoch_seconds", "samples_per_second"]
    assert list(history["epoch"]) == [1, 2] and history.notna().all().all()
    assert (tmp_path / "history.csv").read_text().splitlines()[0].startswith("epoch,train_loss,val_loss")
    assert history.attrs["config"]["precision"] == "fp32"
