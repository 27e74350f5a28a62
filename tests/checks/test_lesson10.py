"""Lesson 10's checks (the capstone) reject planted bugs with their codes and accept different correct solutions.

The loader check forks real gloo ranks; the training, held-out and report checks run real (tiny) training.
"""

from __future__ import annotations

import functools
import math
import re
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, SubsetRandomSampler

from harness.checkpoint import load_checkpoint
from harness.checks.testing import assert_check_fails, assert_check_passes
from harness.data import SHAPE_CLASSES, normalization_stats, shapes
from harness.distributed import distributed_loader, get_rank, get_world_size
from harness.env import environment_report, select_device, supported_precisions
from harness.metrics import accuracy
from harness.models import capstone_cnn
from harness.plots import plot_history
from harness.report import observe_op_dtypes, write_run_report
from harness.repro import seed_everything
from harness.train import EarlyStopping, evaluate, fit


# ---------------------------------------------------------------------------------------------- 10-precision
def precision_in_order(device_type, precisions):
    if precisions["bf16_autocast"]:
        return "bf16"
    if device_type == "cuda" and precisions["fp16_autocast"] and precisions["grad_scaler"]:
        return "fp16"
    return "fp32"


def precision_from_table(device_type, precisions):
    fp16_ok = device_type == "cuda" and all(precisions[k] for k in ("fp16_autocast", "grad_scaler"))
    return {(True, True): "bf16", (True, False): "bf16", (False, True): "fp16"}.get(
        (precisions["bf16_autocast"], fp16_ok), "fp32")


def precision_dtype(device_type, precisions):
    return torch.bfloat16 if precisions["bf16_autocast"] else torch.float32


def precision_bf16_on_any_gpu(device_type, precisions):
    return "bf16" if device_type == "cuda" or precisions["bf16_autocast"] else "fp32"


def precision_fp16_first(device_type, precisions):
    if precisions["fp16_autocast"] and device_type == "cuda":
        return "fp16"
    return "bf16" if precisions["bf16_autocast"] else "fp32"


def precision_fp16_anywhere(device_type, precisions):
    if precisions["bf16_autocast"]:
        return "bf16"
    return "fp16" if precisions["fp16_autocast"] else "fp32"


def precision_ignores_scaler(device_type, precisions):
    if precisions["bf16_autocast"]:
        return "bf16"
    return "fp16" if device_type == "cuda" and precisions["fp16_autocast"] else "fp32"


def precision_always_fp32(device_type, precisions):
    return "fp32"


@pytest.mark.parametrize("solution", [precision_in_order, precision_from_table])
def test_precision_accepts_correct_solutions(solution, capsys):
    assert_check_passes("10-precision", solution, capsys=capsys)


@pytest.mark.parametrize(
    ("solution", "code", "phrase", "hidden"),
    [
        (precision_dtype, "not-a-precision", "returning a dtype", False),
        (precision_bf16_on_any_gpu, "bf16-unsupported", "a pre-Ampere GPU", False),
        (precision_fp16_first, "fp16-over-bf16", "test bf16 first", False),
        (precision_fp16_anywhere, "fp16-off-cuda", "emulated", False),
        (precision_ignores_scaler, "fp16-without-scaler", "GradScaler is unavailable", True),
        (precision_always_fp32, "no-amp", "mixed precision left off", False),
    ],
)
def test_precision_rejects_planted_bugs(solution, code, phrase, hidden):
    assert_check_fails("10-precision", solution, code=code, phrase=phrase, hidden=hidden)


# ---------------------------------------------------------------------------------------------- 10-optimizer
def warmup_cosine(step, warmup_steps, total_steps):
    if step < warmup_steps:
        return step / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def split_by_ndim(model):
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    return decay, no_decay


def optimizer_reference(model, *, lr, weight_decay, warmup_steps, total_steps, factor=warmup_cosine):
    decay, no_decay = split_by_ndim(model)
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=lr)
    schedule = functools.partial(factor, warmup_steps=warmup_steps, total_steps=total_steps)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)


def optimizer_by_name(model, *, lr, weight_decay, warmup_steps, total_steps):
    groups = {"decay": [], "no_decay": []}
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        groups["no_decay" if name.endswith("bias") or parameter.dim() == 1 else "decay"].append(parameter)
    optimizer = torch.optim.AdamW([{"params": groups["no_decay"], "weight_decay": 0.0, "lr": lr},
                                   {"params": groups["decay"], "weight_decay": weight_decay, "lr": lr}])

    def factor(step):
        if step < warmup_steps:
            return step / warmup_steps
        done = min(step - warmup_steps, total_steps - warmup_steps)
        return 0.5 * (1 + math.cos(math.pi * done / max(1, total_steps - warmup_steps)))

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def optimizer_only(model, *, lr, weight_decay, warmup_steps, total_steps):
    return optimizer_reference(model, lr=lr, weight_decay=weight_decay, warmup_steps=warmup_steps,
                               total_steps=total_steps)[0]


def optimizer_adam(model, *, lr, weight_decay, warmup_steps, total_steps):
    decay, no_decay = split_by_ndim(model)
    optimizer = torch.optim.Adam([{"params": decay, "weight_decay": weight_decay}, {"params": no_decay}], lr=lr)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_cosine(s, warmup_steps, total_steps))


def optimizer_with_frozen(model, *, lr, weight_decay, warmup_steps, total_steps):
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=lr)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_cosine(s, warmup_steps, total_steps))


def optimizer_weights_only(model, *, lr, weight_decay, warmup_steps, total_steps):
    decay, _ = split_by_ndim(model)
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay}], lr=lr)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_cosine(s, warmup_steps, total_steps))


def optimizer_decay_by_bias_name(model, *, lr, weight_decay, warmup_steps, total_steps):
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    decay = [p for n, p in named if not n.endswith("bias")]
    no_decay = [p for n, p in named if n.endswith("bias")]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=lr)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_cosine(s, warmup_steps, total_steps))


def optimizer_default_decay(model, *, lr, weight_decay, warmup_steps, total_steps):
    decay, no_decay = split_by_ndim(model)
    optimizer = torch.optim.AdamW([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}], lr=lr)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_cosine(s, warmup_steps, total_steps))


def optimizer_slow_norms(model, *, lr, weight_decay, warmup_steps, total_steps):
    decay, no_decay = split_by_ndim(model)
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0, "lr": lr / 10}], lr=lr)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_cosine(s, warmup_steps, total_steps))


def optimizer_scheduler_elsewhere(model, *, lr, weight_decay, warmup_steps, total_steps):
    optimizer, _ = optimizer_reference(model, lr=lr, weight_decay=weight_decay, warmup_steps=warmup_steps,
                                       total_steps=total_steps)
    _, scheduler = optimizer_reference(model, lr=lr, weight_decay=weight_decay, warmup_steps=warmup_steps,
                                           total_steps=total_steps)
    return optimizer, scheduler


def warmup_off_by_one(step, warmup_steps, total_steps):
    return (step + 1) / warmup_steps if step < warmup_steps else warmup_cosine(step, warmup_steps, total_steps)


def cosine_from_zero(step, warmup_steps, total_steps):
    if step < warmup_steps:
        return step / warmup_steps
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, step / total_steps)))


def cosine_unclamped(step, warmup_steps, total_steps):
    if step < warmup_steps:
        return step / warmup_steps
    return 0.5 * (1.0 + math.cos(math.pi * (step - warmup_steps) / max(1, total_steps - warmup_steps)))


@pytest.mark.parametrize("solution", [optimizer_reference, optimizer_by_name])
def test_optimizer_accepts_correct_solutions(solution, capsys):
    assert_check_passes("10-optimizer", solution, capsys=capsys)


@pytest.mark.parametrize(
    ("solution", "code", "phrase", "hidden"),
    [
        (optimizer_only, "not-a-pair", "(optimizer, scheduler)", False),
        (optimizer_adam, "not-adamw", "decoupled", False),
        (optimizer_with_frozen, "frozen-params-included", "requires_grad", True),
        (optimizer_weights_only, "missing-params", "is in no group", False),
        (optimizer_decay_by_bias_name, "decay-on-bias-or-norm", "normalisation scale", False),
        (optimizer_default_decay, "no-decay-on-weights", "AdamW's default", False),
        (optimizer_slow_norms, "wrong-lr", "base lr 0.001", False),
        (optimizer_scheduler_elsewhere, "scheduler-other-optimizer", "scheduler.optimizer is optimizer", False),
        (functools.partial(optimizer_reference, factor=warmup_off_by_one), "warmup-wrong", "step / warmup_steps", False),
        (functools.partial(optimizer_reference, factor=cosine_from_zero), "cosine-wrong", "end of warm-up", False),
        (functools.partial(optimizer_reference, factor=cosine_unclamped), "rises-after-total", "clamped", False),
    ],
)
def test_optimizer_rejects_planted_bugs(solution, code, phrase, hidden):
    assert_check_fails("10-optimizer", solution, code=code, phrase=phrase, hidden=hidden)


# ---------------------------------------------------------------------------------------------- 10-train-loader
def loader_reference(dataset, batch_size, *, seed):
    sampler = DistributedSampler(dataset, num_replicas=get_world_size(), rank=get_rank(), shuffle=True, seed=seed)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True)


def loader_from_dist(dataset, batch_size, *, seed):
    world, rank = (dist.get_world_size(), dist.get_rank()) if dist.is_initialized() else (1, 0)
    return DataLoader(dataset, batch_size, sampler=DistributedSampler(dataset, world, rank, seed=seed), drop_last=True)


def loader_plain_shuffle(dataset, batch_size, *, seed):
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, drop_last=True,
                      generator=torch.Generator().manual_seed(seed))


def loader_keeps_last_batch(dataset, batch_size, *, seed):
    return DataLoader(dataset, batch_size, sampler=DistributedSampler(dataset, get_world_size(), get_rank(), seed=seed))


def loader_global_batch(dataset, batch_size, *, seed):
    return loader_reference(dataset, batch_size // get_world_size(), seed=seed)


def loader_always_two_ranks(dataset, batch_size, *, seed):
    sampler = DistributedSampler(dataset, num_replicas=2, rank=get_rank(), seed=seed)
    return DataLoader(dataset, batch_size, sampler=sampler, drop_last=True)


def loader_in_order(dataset, batch_size, *, seed):
    sampler = DistributedSampler(dataset, get_world_size(), get_rank(), shuffle=False, seed=seed)
    return DataLoader(dataset, batch_size, sampler=sampler, drop_last=True)


def loader_subset_sampler(dataset, batch_size, *, seed):
    shard = list(range(get_rank(), len(dataset), get_world_size()))
    sampler = SubsetRandomSampler(shard, generator=torch.Generator().manual_seed(seed))
    return DataLoader(dataset, batch_size, sampler=sampler, drop_last=True)


class FrozenEpochSampler(DistributedSampler):
    def set_epoch(self, epoch):
        pass  # planted: the epoch never reaches the shuffle


def loader_frozen_epoch(dataset, batch_size, *, seed):
    return DataLoader(dataset, batch_size, sampler=FrozenEpochSampler(dataset, get_world_size(), get_rank(), seed=seed),
                      drop_last=True)


def loader_random_seed(dataset, batch_size, *, seed):
    drawn = int(torch.randint(0, 2**31, ()).item())  # planted: the order comes from the global RNG
    return loader_reference(dataset, batch_size, seed=drawn)


def loader_fixed_seed(dataset, batch_size, *, seed):
    return loader_reference(dataset, batch_size, seed=0)


@pytest.mark.slow
@pytest.mark.parametrize("solution", [loader_reference, loader_from_dist])
def test_train_loader_accepts_correct_solutions(solution, capsys):
    assert_check_passes("10-train-loader", solution, capsys=capsys)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("solution", "code", "phrase", "hidden"),
    [
        (loader_plain_shuffle, "overlapping-shards", "every rank reads the whole dataset", False),
        (loader_keeps_last_batch, "partial-last-batch", "drop_last=True", False),
        (loader_global_batch, "wrong-batch-size", "per-rank batch", False),
        (loader_always_two_ranks, "wrong-coverage", "a world of one", False),
        (loader_in_order, "not-shuffled", "shuffle=False", False),
        (loader_subset_sampler, "no-set-epoch", "SubsetRandomSampler", False),
        (loader_frozen_epoch, "same-order-every-epoch", "set_epoch(1)", False),
        (loader_random_seed, "order-not-reproducible", "resumed run", False),
        (loader_fixed_seed, "seed-ignored", "seeds 0 and 1", False),
    ],
)
def test_train_loader_rejects_planted_bugs(solution, code, phrase, hidden):
    assert_check_fails("10-train-loader", solution, code=code, phrase=phrase, hidden=hidden)


# ---------------------------------------------------------------------------------------------- 10-train
class Standardize(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.register_buffer("mean", mean)
        self.register_buffer("std", std)

    def forward(self, images):
        return (images - self.mean) / self.std


def capstone_training(train_set, val_set, out_dir, config, *, resume=False, device=None, on_epoch_end=None,
                      progress=False, bug=None):
    """The lesson's solution; `bug` plants one mistake."""
    device = select_device(device)
    if bug != "no-seed":
        seed_everything(config["seed"])
    model = nn.Sequential(Standardize(*normalization_stats(train_set.tensors[0])),
                          capstone_cnn(len(train_set.classes), config["width"])).to(device)
    batch_size = config["batch_size"] // 2 if bug == "half-batch" else config["batch_size"]
    loader = loader_reference(train_set, batch_size, seed=config["seed"])
    val_loader = distributed_loader(val_set, 256, shuffle=False)
    total = config["epochs"] * len(loader)
    optimizer, scheduler = optimizer_reference(model, lr=config["lr"], weight_decay=config["weight_decay"],
                                               warmup_steps=round(config["warmup_fraction"] * total), total_steps=total)
    options = dict(
        epochs=config["epochs"] + (bug == "more-epochs"),
        precision="fp32" if bug == "fp32" else precision_in_order(device.type, supported_precisions(device)),
        max_grad_norm=None if bug == "no-clipping" else config["max_grad_norm"],
        scheduler=None if bug == "no-scheduler" else scheduler,
        scheduler_interval=None if bug == "no-scheduler" else "epoch" if bug == "per-epoch" else "step",
        metrics={"accuracy": accuracy},
        early_stopping=EarlyStopping("val_loss", patience=config["patience"]) if bug == "val-loss"
        else EarlyStopping("val_accuracy", mode="max", patience=config["patience"]),
        checkpoint_dir=None if bug == "no-checkpoints" else out_dir,
        resume=resume and bug != "no-resume",
        on_epoch_end=None if bug == "no-callback" else on_epoch_end,
        progress=progress,
    )
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.1 if bug == "changed-on-resume" and resume else 0.0)
    history = fit(model, loader, val_loader, loss_fn=loss_fn, optimizer=optimizer, **options)
    if bug == "history-only":
        return history
    if bug not in ("last-weights", "no-checkpoints"):
        load_checkpoint(Path(out_dir) / "best.pt", model=model)
    return {"model": model, "history": history, "precision": options["precision"], "checkpoint_dir": Path(out_dir)}


def capstone_training_own_steps(train_set, val_set, out_dir, config, *, resume=False, device=None,
                                on_epoch_end=None, progress=False):
    """Another correct composition: global seed via torch only, its own factor and loader, the best loaded by hand."""
    torch.manual_seed(config["seed"])
    device = torch.device(device or "cpu")
    mean, std = normalization_stats(train_set.tensors[0])
    model = nn.Sequential(Standardize(mean, std), capstone_cnn(len(SHAPE_CLASSES), config["width"])).to(device)
    loader = loader_from_dist(train_set, config["batch_size"], seed=config["seed"])
    total = config["epochs"] * len(loader)
    optimizer, scheduler = optimizer_by_name(model, lr=config["lr"], weight_decay=config["weight_decay"],
                                             warmup_steps=int(config["warmup_fraction"] * total + 0.5), total_steps=total)
    precision = precision_from_table(device.type, supported_precisions(device))
    history = fit(model, loader, DataLoader(val_set, batch_size=64), loss_fn=nn.CrossEntropyLoss(),
                  optimizer=optimizer, epochs=config["epochs"], precision=precision,
                  max_grad_norm=config["max_grad_norm"], scheduler=scheduler, scheduler_interval="step",
                  metrics={"accuracy": accuracy},
                  early_stopping=EarlyStopping(metric="val_accuracy", mode="max", patience=config["patience"]),
                  checkpoint_dir=Path(out_dir), resume=resume, on_epoch_end=on_epoch_end, progress=progress)
    model.load_state_dict(torch.load(Path(out_dir) / "best.pt", weights_only=True)["model"])
    return {"model": model, "history": history, "precision": precision, "checkpoint_dir": Path(out_dir)}


@pytest.mark.parametrize("solution", [capstone_training, capstone_training_own_steps])
def test_train_accepts_correct_solutions(solution, capsys):
    assert_check_passes("10-train", solution, capsys=capsys)


@pytest.mark.parametrize(
    ("bug", "code", "phrase"),
    [
        ("history-only", "not-a-run", "train_capstone returned DataFrame"),
        ("no-checkpoints", "missing-checkpoints", "checkpoint_dir=out_dir"),
        ("fp32", "wrong-precision", "trained in 'fp32'"),
        ("no-clipping", "no-clipping", "max_grad_norm=None"),
        ("no-scheduler", "no-scheduler", "no learning-rate scheduler"),
        ("per-epoch", "schedule-per-epoch", "stepped 3 times in 18 optimizer steps"),
        ("val-loss", "wrong-early-stopping", "'val_loss'"),
        ("more-epochs", "wrong-epochs", "epochs=5"),
        ("half-batch", "wrong-step-count", "36 optimizer steps"),
        ("last-weights", "not-best-weights", "best.pt's weights (epoch 1)"),
        ("no-callback", "callback-ignored", "on_epoch_end raised at epoch 2"),
        ("no-resume", "resume-ignored", "took 18 optimizer steps"),
        ("no-seed", "not-seeded", "two fresh runs"),
        ("changed-on-resume", "resume-not-exact", "differ from the uninterrupted run"),
    ],
)
def test_train_rejects_planted_bugs(bug, code, phrase):
    assert_check_fails("10-train", functools.partial(capstone_training, bug=bug), code=code, phrase=phrase)


# ---------------------------------------------------------------------------------------------- 10-held-out
@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> dict:
    """A real capstone run, small enough for a test: it clears the threshold with margin."""
    config = dict(epochs=5, batch_size=32, lr=1e-2, weight_decay=0.05, warmup_fraction=0.1, max_grad_norm=1.0,
                  patience=5, width=8, seed=0)
    return capstone_training(shapes(2000, seed=0), shapes(200, seed=1), tmp_path_factory.mktemp("held-out"), config,
                             device="cpu")


def untrained_run(history: pd.DataFrame | None = None) -> dict:
    torch.manual_seed(0)
    return {"model": capstone_cnn(5, 8), "history": history}


def test_held_out_accepts_trained_models(trained_run, capsys):
    assert_check_passes("10-held-out", trained_run, capsys=capsys)
    # the same weights behind a different front: in training mode, without history, outside the Sequential
    model = trained_run["model"].train()
    assert_check_passes("10-held-out", {"model": nn.Sequential(*model), "history": None})
    assert model.training  # the check restores the mode it found


def test_held_out_rejects_an_untrained_model():
    assert_check_fails("10-held-out", untrained_run(), code="below-threshold", phrase="did not learn enough")


def test_held_out_says_when_the_model_is_not_the_validated_one():
    validated = pd.DataFrame({"epoch": [1], "val_accuracy": [0.99]})
    assert_check_fails("10-held-out", untrained_run(validated), code="below-threshold",
                       phrase="does not behave like the validated one")


def test_held_out_rejects_the_wrong_number_of_classes():
    assert_check_fails("10-held-out", {"model": capstone_cnn(10, 4)}, code="wrong-output-shape", phrase="(N, 5)")


def test_held_out_needs_the_run():
    assert_check_fails("10-held-out", capstone_cnn(5, 4), code="not-a-run", phrase="received Sequential")


# ---------------------------------------------------------------------------------------------- 10-report
SECTION = {"environment": "## Setup", "config": "## Configuration", "history": "## History"}


def report_writer(run, test_set, out_dir, *, bug=None, batch_size=256, curves_name="curves.png"):
    """The lesson's solution; `bug` plants one mistake."""
    out_dir = Path(out_dir)
    model, history, precision = run["model"], run["history"], run["precision"]
    loss_fn = nn.CrossEntropyLoss()
    loader = DataLoader(test_set, batch_size=batch_size)
    scores = evaluate(model, loader, loss_fn=loss_fn, metrics={"accuracy": accuracy}, precision=precision)
    if bug == "validation-as-test":
        scores = {"loss": float(history["val_loss"].iloc[-1]), "accuracy": float(history["val_accuracy"].iloc[-1]) / 2}
    curves = out_dir / curves_name
    plot_history(history, curves)
    images, labels = next(iter(loader))
    op_dtypes = observe_op_dtypes(model, images, precision=precision, targets=labels, loss_fn=loss_fn)
    path = write_run_report(out_dir / "report.md", history,
                            test_metrics=None if bug == "no-test-metrics" else scores,
                            best_checkpoint=None if bug == "no-best" else Path(run["checkpoint_dir"]) / "best.pt",
                            op_dtypes=None if bug == "no-precision" else op_dtypes,
                            environment=environment_report(next(model.parameters()).device),
                            curves=None if bug == "no-curves" else curves)
    if bug in SECTION:  # a hand-made report that leaves a section out
        text = path.read_text()
        start = text.index(SECTION[bug])
        end = text.find("\n## ", start + 1)
        path.write_text(text[:start] + (text[end + 1 :] if end != -1 else ""))
    if bug == "no-return":
        return None
    return path


def report_in_subfolder(run, test_set, out_dir):
    return report_writer(run, test_set, out_dir, batch_size=64, curves_name="figures/curves.png")


@pytest.mark.parametrize("solution", [report_writer, report_in_subfolder])
def test_report_accepts_correct_solutions(solution, capsys):
    assert_check_passes("10-report", solution, capsys=capsys)


@pytest.mark.parametrize(
    ("bug", "code", "phrase"),
    [
        ("no-return", "no-report", "returned None"),
        ("environment", "missing-environment", "environment=environment_report(device)"),
        ("config", "missing-config", "configuration"),
        ("history", "missing-history", "history table"),
        ("no-curves", "missing-curves", "![...](file.png)"),
        ("no-test-metrics", "missing-test-metrics", "held-out test metrics"),
        ("validation-as-test", "wrong-test-metrics", "on the whole test set given"),
        ("no-precision", "missing-precision", "observe_op_dtypes"),
        ("no-best", "missing-best-checkpoint", "best_checkpoint="),
    ],
)
def test_report_rejects_planted_bugs(bug, code, phrase):
    assert_check_fails("10-report", functools.partial(report_writer, bug=bug), code=code, phrase=phrase)


def test_report_names_what_a_wrong_number_is():
    message = assert_check_fails("10-report", functools.partial(report_writer, bug="validation-as-test"),
                                 code="wrong-test-metrics", phrase="test accuracy")
    assert re.search(r"expected:\s+accuracy 0\.\d+", message, re.IGNORECASE)


def test_checks_leave_the_notebooks_random_streams_as_they_were():
    import random

    import numpy as np

    seed_everything(123)
    expected = (torch.rand(3), np.random.rand(3), random.random())
    seed_everything(123)
    assert_check_passes("10-train", capstone_training)
    after = (torch.rand(3), np.random.rand(3), random.random())
    assert torch.equal(after[0], expected[0]) and np.array_equal(after[1], expected[1]) and after[2] == expected[2]
