"""Lesson 10's checks (the capstone) reject planted bugs with their codes and accept different correct solutions.

The loader check forks real gloo ranks; the training, held-out and report checks run real (tiny) training.
"""

from __future__ import annotations

import functools
import math
import re
import tempfile
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, SubsetRandomSampler

from harness.checkpoint import load_checkpoint
from harness.checks.testing import Correct, Mistake, assert_check_fails, assert_check_passes, solution_cell
from harness.data import SHAPE_CLASSES, LabeledTensorDataset, normalization_stats, shapes
from harness.distributed import distributed_loader, get_rank, get_world_size
from harness.env import environment_report, select_device, supported_precisions
from harness.metrics import accuracy
from harness.models import capstone_cnn
from harness.plots import plot_history
from harness.report import observe_op_dtypes, write_run_report
from harness.repro import seed_everything
from harness.train import EarlyStopping, evaluate, fit
from tests.exercises import notebook_namespace

# One worker runs this module and lesson 10's fuzz cases: `trained_run` (a real capstone run, cached per
# process) is then trained once, not once per worker.
pytestmark = pytest.mark.xdist_group("lesson10")


# ---------------------------------------------------------------------------------------------- 10-precision
def precision_in_order(device_type, precisions):
    if device_type == "cpu":
        return "fp32"
    if precisions["bf16_autocast"]:
        return "bf16"
    if device_type == "cuda" and precisions["fp16_autocast"] and precisions["grad_scaler"]:
        return "fp16"
    return "fp32"


def precision_from_table(device_type, precisions):
    bf16_ok = device_type != "cpu" and precisions["bf16_autocast"]
    fp16_ok = device_type == "cuda" and all(precisions[k] for k in ("fp16_autocast", "grad_scaler"))
    return {(True, True): "bf16", (True, False): "bf16", (False, True): "fp16"}.get((bf16_ok, fp16_ok), "fp32")


def precision_match(device_type, precisions):
    match device_type, precisions:
        case "cpu", _:
            return "fp32"
        case _, {"bf16_autocast": True}:
            return "bf16"
        case "cuda", {"fp16_autocast": True, "grad_scaler": True}:
            return "fp16"
        case _:
            return "fp32"


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


def precision_forgets_the_device_type(device_type, precisions):
    if precisions["bf16_autocast"]:
        return "bf16"
    return "fp16" if precisions["fp16_autocast"] and precisions["grad_scaler"] else "fp32"


def precision_ignores_scaler(device_type, precisions):
    if precisions["bf16_autocast"]:
        return "bf16"
    return "fp16" if device_type == "cuda" and precisions["fp16_autocast"] else "fp32"


def precision_bf16_only_on_cuda(device_type, precisions):
    if device_type != "cuda":  # "mixed precision is for NVIDIA GPUs"
        return "fp32"
    if precisions["bf16_autocast"]:
        return "bf16"
    return "fp16" if precisions["fp16_autocast"] and precisions["grad_scaler"] else "fp32"


def precision_always_fp32(device_type, precisions):
    return "fp32"


def precision_bf16_wherever_autocast_runs(device_type, precisions):
    if precisions["bf16_autocast"]:
        return "bf16"
    if device_type == "cuda" and precisions["fp16_autocast"] and precisions["grad_scaler"]:
        return "fp16"
    return "fp32"


# ---------------------------------------------------------------------------------------------- 10-optimizer
def warmup_cosine(step, warmup_steps, total_steps):
    if step < warmup_steps:
        return (step + 1) / warmup_steps
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
            return (step + 1) / warmup_steps
        done = min(step - warmup_steps, total_steps - warmup_steps)
        return 0.5 * (1 + math.cos(math.pi * done / max(1, total_steps - warmup_steps)))

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


class WarmupCosine:
    """The factor as a callable object (its state is saved with the scheduler's)."""

    def __init__(self, warmup_steps, total_steps):
        self.warmup_steps, self.total_steps = warmup_steps, total_steps

    def __call__(self, step):
        if step >= self.total_steps:
            return 0.0
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        return 0.5 * (1 + math.cos(math.pi * (step - self.warmup_steps) / (self.total_steps - self.warmup_steps)))


def optimizer_with_callable_factor(model, *, lr, weight_decay, warmup_steps, total_steps):
    trainable = list(filter(lambda p: p.requires_grad, model.parameters()))
    optimizer = torch.optim.AdamW([{"params": [p for p in trainable if p.dim() > 1]},
                                   {"params": [p for p in trainable if p.dim() <= 1], "weight_decay": 0.0}],
                                  lr=lr, weight_decay=weight_decay)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda=WarmupCosine(warmup_steps, total_steps))


def optimizer_only(model, *, lr, weight_decay, warmup_steps, total_steps):
    return optimizer_reference(model, lr=lr, weight_decay=weight_decay, warmup_steps=warmup_steps,
                               total_steps=total_steps)[0]


def optimizer_adam(model, *, lr, weight_decay, warmup_steps, total_steps):
    decay, no_decay = split_by_ndim(model)
    optimizer = torch.optim.Adam([{"params": decay, "weight_decay": weight_decay}, {"params": no_decay}], lr=lr)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: warmup_cosine(s, warmup_steps, total_steps))


def optimizer_with_frozen(model, *, lr, weight_decay, warmup_steps, total_steps):
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=lr)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: warmup_cosine(s, warmup_steps, total_steps))


def optimizer_weights_only(model, *, lr, weight_decay, warmup_steps, total_steps):
    decay, _ = split_by_ndim(model)
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay}], lr=lr)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: warmup_cosine(s, warmup_steps, total_steps))


def optimizer_decay_by_bias_name(model, *, lr, weight_decay, warmup_steps, total_steps):
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    decay = [p for n, p in named if not n.endswith("bias")]
    no_decay = [p for n, p in named if n.endswith("bias")]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=lr)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: warmup_cosine(s, warmup_steps, total_steps))


def optimizer_default_decay(model, *, lr, weight_decay, warmup_steps, total_steps):
    decay, no_decay = split_by_ndim(model)
    optimizer = torch.optim.AdamW([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}], lr=lr)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: warmup_cosine(s, warmup_steps, total_steps))


def optimizer_slow_norms(model, *, lr, weight_decay, warmup_steps, total_steps):
    decay, no_decay = split_by_ndim(model)
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0, "lr": lr / 10}], lr=lr)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: warmup_cosine(s, warmup_steps, total_steps))


def optimizer_scheduler_elsewhere(model, *, lr, weight_decay, warmup_steps, total_steps):
    optimizer, _ = optimizer_reference(model, lr=lr, weight_decay=weight_decay, warmup_steps=warmup_steps,
                                       total_steps=total_steps)
    _, scheduler = optimizer_reference(model, lr=lr, weight_decay=weight_decay, warmup_steps=warmup_steps,
                                           total_steps=total_steps)
    return optimizer, scheduler


def warmup_from_zero(step, warmup_steps, total_steps):
    return step / warmup_steps if step < warmup_steps else warmup_cosine(step, warmup_steps, total_steps)


def cosine_from_zero(step, warmup_steps, total_steps):
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, step / total_steps)))


def warmup_ratio_always(step, warmup_steps, total_steps):
    ramp = min(1.0, (step + 1) / warmup_steps)  # planted: divides by zero when there is no warm-up
    return ramp if step < warmup_steps else warmup_cosine(step, warmup_steps, total_steps)


def cosine_unclamped(step, warmup_steps, total_steps):
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return 0.5 * (1.0 + math.cos(math.pi * (step - warmup_steps) / max(1, total_steps - warmup_steps)))


# ---------------------------------------------------------------------------------------------- 10-train-loader
def loader_reference(dataset, batch_size, *, seed):
    sampler = DistributedSampler(dataset, num_replicas=get_world_size(), rank=get_rank(), shuffle=True, seed=seed)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True)


def loader_from_dist(dataset, batch_size, *, seed):
    world, rank = (dist.get_world_size(), dist.get_rank()) if dist.is_initialized() else (1, 0)
    return DataLoader(dataset, batch_size, sampler=DistributedSampler(dataset, world, rank, seed=seed), drop_last=True)


def loader_positional(dataset, batch_size, *, seed):
    sampler = DistributedSampler(dataset, get_world_size(), get_rank(), True, seed)
    return DataLoader(dataset, batch_size, False, sampler, num_workers=0, drop_last=True)


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


def loader_with_workers(dataset, batch_size, *, seed):
    sampler = DistributedSampler(dataset, num_replicas=get_world_size(), rank=get_rank(), shuffle=True, seed=seed)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True, num_workers=1)


def loader_fixed_seed(dataset, batch_size, *, seed):
    return loader_reference(dataset, batch_size, seed=0)


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
    device = select_device(None if bug == "default-device" else device)
    if bug != "no-seed":
        seed_everything(config["seed"])
    seen = torch.cat([train_set.tensors[0], val_set.tensors[0]]) if bug == "stats-with-val" else train_set.tensors[0]
    norm, cnn = Standardize(*normalization_stats(seen)), capstone_cnn(len(train_set.classes), config["width"])
    if bug == "not-moved":
        model = nn.Sequential(norm, cnn)
    elif bug == "cnn-moved":
        model = nn.Sequential(norm, cnn.to(device))
    else:
        model = nn.Sequential(norm, cnn).to(device)
    batch_size = config["batch_size"] // 2 if bug == "half-batch" else config["batch_size"]
    loader = loader_reference(train_set, batch_size, seed=config["seed"])
    val_loader = distributed_loader(val_set, 256, shuffle=bug == "val-shuffled")
    total = config["epochs"] * len(loader)
    optimizer, scheduler = optimizer_reference(model, lr=config["lr"], weight_decay=config["weight_decay"],
                                               warmup_steps=round(config["warmup_fraction"] * total), total_steps=total)
    options = dict(
        epochs=config["epochs"] + (bug == "more-epochs"),
        precision="fp32" if bug == "fp32" else precision_in_order(device.type, supported_precisions(device))
        if bug == "chooses-itself" else config["precision"],
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
                                             warmup_steps=int(config["warmup_fraction"] * total + 0.5),
                                             total_steps=total)
    precision = config.get("precision", "fp32")
    history = fit(model, loader, DataLoader(val_set, batch_size=64), loss_fn=nn.CrossEntropyLoss(),
                  optimizer=optimizer, epochs=config["epochs"], precision=precision,
                  max_grad_norm=config["max_grad_norm"], scheduler=scheduler, scheduler_interval="step",
                  metrics={"accuracy": accuracy},
                  early_stopping=EarlyStopping(metric="val_accuracy", mode="max", patience=config["patience"]),
                  checkpoint_dir=Path(out_dir), resume=resume, on_epoch_end=on_epoch_end, progress=progress)
    model.load_state_dict(torch.load(Path(out_dir) / "best.pt", weights_only=True)["model"])
    return {"model": model, "history": history, "precision": precision, "checkpoint_dir": Path(out_dir)}


def capstone_training_named(train_set, val_set, out_dir, config, *, resume=False, device=None, on_epoch_end=None,
                            progress=False):
    """A third composition: named layers (OrderedDict), the settings gathered in a dict, the best checkpoint loaded
    through load_checkpoint after reading the folder as a Path."""
    from collections import OrderedDict

    device = select_device(device)
    seed_everything(config["seed"])
    out_dir = Path(out_dir)
    model = nn.Sequential(OrderedDict(
        standardize=Standardize(*normalization_stats(train_set.tensors[0])),
        cnn=capstone_cnn(len(train_set.classes), config["width"]),
    )).to(device)
    loader = loader_positional(train_set, config["batch_size"], seed=config["seed"])
    steps = config["epochs"] * len(loader)
    optimizer, scheduler = optimizer_with_callable_factor(
        model, lr=config["lr"], weight_decay=config["weight_decay"],
        warmup_steps=round(steps * config["warmup_fraction"]), total_steps=steps)
    settings = {"epochs": config["epochs"], "precision": config["precision"], "max_grad_norm": config["max_grad_norm"],
                "scheduler": scheduler, "scheduler_interval": "step", "metrics": {"accuracy": accuracy},
                "early_stopping": EarlyStopping(metric="val_accuracy", mode="max", patience=config["patience"]),
                "checkpoint_dir": out_dir, "resume": resume, "on_epoch_end": on_epoch_end, "progress": progress}
    history = fit(model, loader, distributed_loader(val_set, 256, shuffle=False), loss_fn=nn.CrossEntropyLoss(),
                  optimizer=optimizer, **settings)
    load_checkpoint(out_dir / "best.pt", model=model)
    return {"model": model, "history": history, "precision": settings["precision"], "checkpoint_dir": out_dir}


# ---------------------------------------------------------------------------------------------- 10-held-out
@functools.cache
def trained_run() -> dict:
    """A real capstone run, small enough for a test (about 8 s, once): it clears the threshold with margin.

    In fp32, what choose_precision gives a CPU (where the CPU has no bf16 instructions, bf16 autocast is emulated:
    five times slower on such a machine); neither 10-held-out nor 10-report depends on the run's precision.
    """
    config = dict(epochs=5, batch_size=32, lr=1e-2, weight_decay=0.05, warmup_fraction=0.1, max_grad_norm=1.0,
                  patience=5, width=8, seed=0, precision="fp32")
    out = Path(tempfile.mkdtemp(prefix="test-lesson10-held-out-"))
    return capstone_training(shapes(2000, seed=0), shapes(500, seed=1), out, config, device="cpu")  # the notebook's


def validated_on_test_run() -> dict:
    """A short real run that validates on the notebook's test set (shapes seed 2) instead of its validation set."""
    config = dict(epochs=2, batch_size=32, lr=1e-2, weight_decay=0.05, warmup_fraction=0.1, max_grad_norm=1.0,
                  patience=2, width=4, seed=0, precision="fp32")
    out = Path(tempfile.mkdtemp(prefix="test-lesson10-leak-"))
    return capstone_training(shapes(256, seed=0), shapes(1000, seed=2), out, config, device="cpu")


def trained_on_validation_too_run() -> dict:
    """A short real run on the notebook's train_set with its val_set pooled in, validated on that same val_set."""
    train, val = shapes(2000, seed=0), shapes(500, seed=1)
    pooled = LabeledTensorDataset(*(torch.cat(pair) for pair in zip(train.tensors, val.tensors, strict=True)),
                                  classes=train.classes)
    config = dict(epochs=1, batch_size=64, lr=1e-2, weight_decay=0.05, warmup_fraction=0.1, max_grad_norm=1.0,
                  patience=1, width=4, seed=0, precision="fp32")
    out = Path(tempfile.mkdtemp(prefix="test-lesson10-pooled-"))
    return capstone_training(pooled, val, out, config, device="cpu")


def test_the_held_out_cell_runs_twice(tmp_path):
    """Re-running the exercise's cell to tune CONFIG trains a new run each time (issue 29: the second run raised
    FileExistsError and left the first one in `run` for the test cell to grade)."""
    import json

    cells = json.loads((Path(__file__).parents[2] / "solutions/10_capstone/10_capstone.ipynb").read_text())["cells"]
    source = next("".join(c["source"]) for c in cells
                  if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "10-held-out-code")
    given = source.split("### END SOLUTION", 1)[1]
    namespace = {"train_capstone": functools.partial(capstone_training, device="cpu"), "Path": Path,
                 "tempfile": tempfile, "plot_history": plot_history, "is_grading": lambda: True, "workdir": tmp_path,
                 "train_set": shapes(64, seed=0, size=16), "val_set": shapes(32, seed=1, size=16),
                 "CONFIG": dict(epochs=1, batch_size=32, lr=1e-2, weight_decay=0.05, warmup_fraction=0.1,
                                max_grad_norm=1.0, patience=1, width=4, seed=0, precision="fp32")}
    exec(given, namespace)
    first = namespace["run"]
    exec(given, namespace)
    assert namespace["run"] is not first and namespace["run"]["checkpoint_dir"] != first["checkpoint_dir"]


def untrained_run(history: pd.DataFrame | None = None) -> dict:
    torch.manual_seed(0)
    return {"model": capstone_cnn(5, 8), "history": history}


def normalised_outside() -> dict:
    """The trained network without its Standardize: it expects normalised images, the grader sends raw ones."""
    run = trained_run()
    return {"model": run["model"][1], "history": run["history"]}


def test_held_out_restores_the_mode_it_found():
    model = trained_run()["model"].train()
    assert_check_passes("10-held-out", {"model": nn.Sequential(*model), "history": None})
    assert model.training


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
        scores = {"loss": float(history["val_loss"].iloc[-1]), "accuracy": float(history["val_accuracy"].iloc[-1])}
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


AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


def report_own_loop(run, test_set, out_dir, *, bug=None):
    """The test metrics from a hand-written loop (sums over every batch); `bug` plants one mistake."""
    out_dir = Path(out_dir)
    model, history, precision = run["model"], run["history"], run["precision"]
    loader = DataLoader(test_set, batch_size=128)
    if bug != "train-mode":
        model.eval()
    total_loss, correct, count = 0.0, 0, 0
    with torch.no_grad(), torch.autocast("cpu", dtype=AUTOCAST.get(precision), enabled=precision in AUTOCAST):
        for images, labels in loader:
            logits = model(images).float()
            total_loss += nn.functional.cross_entropy(logits, labels, reduction="sum").item()
            correct += (logits.argmax(dim=1) == labels).sum().item()
            count += len(labels)
            if bug == "first-batch":
                break  # "one batch is enough to see how it does"
    first_images, first_labels = test_set[:16]
    op_dtypes = observe_op_dtypes(model, first_images, precision=precision, targets=first_labels,
                                  loss_fn=nn.CrossEntropyLoss())
    plot_history(history, out_dir / "curves.png")
    accuracy_reported = 100 * correct / count if bug == "percent" else correct / count
    return write_run_report(out_dir / "report.md", history, test_metrics={"loss": total_loss / count,
                                                                          "accuracy": accuracy_reported},
                            best_checkpoint=run["checkpoint_dir"] / "best.pt", op_dtypes=op_dtypes,
                            environment=environment_report(torch.device("cpu")), curves=out_dir / "curves.png")


def test_report_names_what_a_wrong_number_is():
    message = assert_check_fails("10-report", functools.partial(report_own_loop, bug="percent"),
                                 code="wrong-test-metrics", phrase="100 times the accuracy")
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


# ---------------------------------------------------------------------------------------------- notebook globals
# Functions written as in the notebook: defined in a namespace that holds the notebook's data sets and run.
TRAIN_READS_GLOBAL = """
def train_capstone(train_data, val_data, out_dir, config, **options):
    # normalization_stats(train_set.tensors[0]) copied from the exercise's text, with other parameter names
    mean, std = normalization_stats(train_set.tensors[0])
    return capstone_training(train_data, val_data, out_dir, config, **options)
"""

REPORT_HELPER_READS_GLOBAL = """
def test_scores(model, precision):
    loader = DataLoader(test_set, batch_size=256)
    return evaluate(model, loader, loss_fn=nn.CrossEntropyLoss(), metrics={"accuracy": accuracy}, precision=precision)


def write_capstone_report(run, test_data, out_dir):
    test_scores(run["model"], run["precision"])
    return report_writer(run, test_data, out_dir)
"""

REPORT_READS_ALLOWED_GLOBALS = """
def write_capstone_report(run, test_set, out_dir):
    # the notebook's device, a constant and a helper of its own: what a function may read from its notebook
    assert isinstance(device, torch.device) and CONFIG["seed"] == 0
    return report_writer(run, test_set, out_dir, batch_size=EVAL_BATCH, curves_name=curves_file_name())


def curves_file_name():
    return "curves.png"
"""


def in_notebook(source: str, name: str) -> tuple:
    """`name` defined by `source` in a notebook-like namespace: this module's helpers, the notebook's data sets,
    a run, its device and constants."""
    namespace = dict(globals())
    train, val, test = (shapes(n, seed=seed, size=16) for n, seed in ((64, 0), (32, 1), (32, 2)))
    namespace.update(train_set=train, val_set=val, test_set=test, run={"model": capstone_cnn(5, 4)},
                     device=torch.device("cpu"), EVAL_BATCH=128, CONFIG={"seed": 0, "lr": 1e-2})
    exec(compile(source, f"<notebook cell defining {name}>", "exec"), namespace)
    return (namespace[name],)


def test_notebook_data_read_is_named_before_the_function_runs():
    from harness.checks.lesson10.notebook_globals import notebook_data_read

    (train,) = in_notebook(TRAIN_READS_GLOBAL, "train_capstone")
    assert notebook_data_read(train) == {"function": "train_capstone", "name": "train_set", "kind": "a dataset"}
    (report,) = in_notebook(REPORT_HELPER_READS_GLOBAL, "write_capstone_report")
    assert notebook_data_read(functools.partial(report, out_dir="x"))["function"] == "test_scores"
    (allowed,) = in_notebook(REPORT_READS_ALLOWED_GLOBALS, "write_capstone_report")
    assert notebook_data_read(allowed) is None
    assert all(notebook_data_read(f) is None for f in (capstone_training, report_writer, print, functools.partial))


def test_a_global_loss_function_or_constant_tensor_is_not_notebook_data():
    """Correct styles: a loss module built once at the top of the notebook, normalisation constants as a tensor;
    a global model (it has parameters) and a tensor of examples are still data."""
    from harness.checks.lesson10.notebook_globals import notebook_data_read

    source = ("criterion = nn.CrossEntropyLoss()\nMEAN = torch.tensor([0.5, 0.5, 0.5]).view(3, 1, 1)\n"
              "def loss_of(model, x, y):\n    return criterion(model((x - MEAN) / 0.25), y)\n")
    (loss_of,) = in_notebook(source, "loss_of")
    assert notebook_data_read(loss_of) is None
    (uses_model,) = in_notebook("net = nn.Linear(3, 2)\ndef f(x):\n    return net(x)\n", "f")
    assert notebook_data_read(uses_model)["kind"] == "a model"
    (uses_rows,) = in_notebook("X_VAL = torch.zeros(200, 3)\ndef f(m):\n    return m(X_VAL)\n", "f")
    assert notebook_data_read(uses_rows)["kind"] == "a tensor"


# ---------------------------------------------------------------------------------------------- mutation set
def train_bug(bug: str) -> tuple:
    return (functools.partial(capstone_training, bug=bug),)


def report_bug(bug: str) -> tuple:
    return (functools.partial(report_writer, bug=bug),)


def optimizer_factor(factor) -> tuple:
    return (functools.partial(optimizer_reference, factor=factor),)


# What the notebook's other cells define, for the planted cells that use it: its definitions, and small data sets,
# a precision and a folder in place of those its demos make
NOTEBOOK = notebook_namespace("10_capstone") | {
    "train_set": shapes(64, seed=0, size=16), "val_set": shapes(32, seed=1, size=16), "precision": "fp32",
    "workdir": Path(tempfile.gettempdir())}

MISTAKES = [
    # 10-precision
    Mistake("10-precision", "not-a-precision", "returning a dtype", (precision_dtype,),
            story="returns torch.bfloat16, the dtype autocast takes, instead of fit's name for it"),
    Mistake("10-precision", "bf16-unsupported", "a pre-Ampere GPU", (precision_bf16_on_any_gpu,),
            story="'every GPU does bf16': a T4 or V100 does not (forum FAQ)"),
    Mistake("10-precision", "fp16-over-bf16", "test bf16 first", (precision_fp16_first,),
            story="fp16 first because it is the classic AMP recipe"),
    Mistake("10-precision", "fp16-off-cuda", "emulated", (precision_forgets_the_device_type,),
            story="trusts the support dict and forgets that fp16 is for CUDA only"),
    Mistake("10-precision", "fp16-without-scaler", "precisions['grad_scaler'] is False", (precision_ignores_scaler,),
            story="checks fp16 autocast but not the GradScaler"),
    Mistake("10-precision", "fp16-without-scaler", "fp16 needs both", (precision_fp16_anywhere,),
            story="fp16 wherever fp16 autocast works, scaler and device type ignored"),
    Mistake("10-precision", "no-amp", "bf16 kept for CUDA GPUs alone", (precision_bf16_only_on_cuda,),
            story="mixed precision only on NVIDIA GPUs: an Apple GPU with bf16 trains in fp32"),
    Mistake("10-precision", "no-amp", "mixed precision left off", (precision_always_fp32,),
            story="plays safe with fp32 everywhere"),
    Mistake("10-precision", "bf16-on-cpu", "'fp32': on a CPU", (precision_bf16_wherever_autocast_runs,),
            story="bf16 wherever autocast runs it, the CPU included, where it is emulated (the lesson's rule "
            "before issue 44)"),
    Mistake("10-precision", "bf16-unsupported", "a pre-Ampere GPU", solution_cell(
        "def choose_precision(device_type, precisions):\n"
        "    if device_type == 'cpu':\n"
        "        return 'fp32'\n"
        "    if device_type == 'cuda' or precisions['bf16_autocast']:\n"
        "        return 'bf16'\n"
        "    return 'fp32'\n",
        "choose_precision"),
        story="bf16 on every GPU: a T4 or V100 has no native bf16 (it should get fp16 with a GradScaler)",
        planted=True),
    # 10-optimizer
    Mistake("10-optimizer", "not-a-pair", "(optimizer, scheduler)", (optimizer_only,),
            story="returns the optimizer and builds the scheduler elsewhere"),
    Mistake("10-optimizer", "not-adamw", "decoupled", (optimizer_adam,),
            story="Adam with weight_decay, taken for AdamW"),
    Mistake("10-optimizer", "frozen-params-included", "requires_grad", (optimizer_with_frozen,),
            story="sorts model.parameters() without skipping the frozen ones"),
    Mistake("10-optimizer", "missing-params", "is in no group", (optimizer_weights_only,),
            story="only the decayed group: biases and norms never train"),
    Mistake("10-optimizer", "decay-on-bias-or-norm", "normalisation scale", (optimizer_decay_by_bias_name,),
            story="finds biases by name, so BatchNorm and LayerNorm scales are decayed"),
    Mistake("10-optimizer", "no-decay-on-weights", "AdamW's default", (optimizer_default_decay,),
            story="the decay group leaves weight_decay to AdamW's default"),
    Mistake("10-optimizer", "wrong-lr", "base lr 0.001", (optimizer_slow_norms,),
            story="a smaller lr for the norms, 'to be safe'"),
    Mistake("10-optimizer", "scheduler-other-optimizer", "scheduler.optimizer is optimizer",
            (optimizer_scheduler_elsewhere,), story="the scheduler built on a second optimizer"),
    Mistake("10-optimizer", "warmup-wrong", "the first step trains with lr 0", optimizer_factor(warmup_from_zero),
            story="step / warmup_steps: the warm-up starts at lr 0, so the first step is wasted"),
    Mistake("10-optimizer", "divides-by-zero", "a division by warmup_steps, which is 0 here",
            optimizer_factor(warmup_ratio_always), story="(step + 1) / warmup_steps computed even without warm-up"),
    Mistake("10-optimizer", "cosine-wrong", "end of warm-up", optimizer_factor(cosine_from_zero),
            story="the cosine's progress measured from step 0"),
    Mistake("10-optimizer", "rises-after-total", "clamped", optimizer_factor(cosine_unclamped),
            story="progress not clamped: the lr climbs again after total_steps"),
    Mistake("10-optimizer", "decay-on-bias-or-norm", "normalisation scale", solution_cell(
        "def make_optimizer(model, *, lr, weight_decay, warmup_steps, total_steps):\n"
        "    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]\n"
        "    decay = [p for n, p in named if not n.endswith('bias')]\n"
        "    no_decay = [p for n, p in named if n.endswith('bias')]\n"
        "    optimizer = torch.optim.AdamW([{'params': decay, 'weight_decay': weight_decay},\n"
        "                                   {'params': no_decay, 'weight_decay': 0.0}], lr=lr)\n"
        "\n"
        "    def factor(step):\n"
        "        if step < warmup_steps:\n"
        "            return (step + 1) / warmup_steps\n"
        "        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))\n"
        "        return 0.5 * (1.0 + math.cos(math.pi * progress))\n"
        "\n"
        "    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)\n",
        "make_optimizer", given=NOTEBOOK),
        story="biases found by name, so BatchNorm's scales are decayed", planted=True),
    # 10-train-loader
    Mistake("10-train-loader", "overlapping-shards", "every rank reads the whole dataset", (loader_plain_shuffle,),
            story="a shuffled DataLoader: under DDP every rank trains on everything"),
    Mistake("10-train-loader", "partial-last-batch", "drop_last=True", (loader_keeps_last_batch,),
            story="keeps the last, incomplete batch"),
    Mistake("10-train-loader", "wrong-batch-size", "per-rank batch", (loader_global_batch,),
            story="divides batch_size by the world size, as for a global batch"),
    Mistake("10-train-loader", "uses-workers", "num_workers=1", (loader_with_workers,),
            story="num_workers out of habit, for tensors already in memory"),
    Mistake("10-train-loader", "wrong-coverage", "a world of one", (loader_always_two_ranks,),
            story="num_replicas=2 hard-coded from the DDP example"),
    Mistake("10-train-loader", "not-shuffled", "shuffle=False", (loader_in_order,),
            story="shuffle=False, copied from the validation loader"),
    Mistake("10-train-loader", "no-set-epoch", "SubsetRandomSampler", (loader_subset_sampler,),
            story="a hand-made shard in a SubsetRandomSampler"),
    Mistake("10-train-loader", "same-order-every-epoch", "set_epoch(1)", (loader_frozen_epoch,),
            story="a sampler whose set_epoch does nothing"),
    Mistake("10-train-loader", "order-not-reproducible", "resumed run", (loader_random_seed,),
            story="the sampler's seed drawn from the global RNG"),
    Mistake("10-train-loader", "seed-ignored", "seeds 0 and 1", (loader_fixed_seed,),
            story="seed=0 hard-coded instead of the argument"),
    Mistake("10-train-loader", "overlapping-shards", "every rank reads the whole dataset", solution_cell(
        "def train_loader(dataset, batch_size, *, seed):\n"
        "    return DataLoader(dataset, batch_size=batch_size, shuffle=True, drop_last=True,\n"
        "                      generator=torch.Generator().manual_seed(seed))\n",
        "train_loader", given=NOTEBOOK),
        story="a plain shuffled loader: under DDP every rank reads the whole dataset", planted=True),
    # 10-train
    Mistake("10-train", "reads-notebook-data", "train_capstone reads the notebook's global 'train_set' (a dataset)",
            lambda: in_notebook(TRAIN_READS_GLOBAL, "train_capstone"),
            story="normalization_stats(train_set.tensors[0]) copied from the text into a function whose parameter "
            "has another name"),
    Mistake("10-train", "validation-shuffled", "whose default is shuffle=True", train_bug("val-shuffled"),
            story="distributed_loader(val_set, 256): the training loader's call copied, shuffle left at its default"),
    Mistake("10-train", "not-a-run", "train_capstone returned DataFrame", train_bug("history-only"),
            story="returns fit's history only"),
    Mistake("10-train", "missing-checkpoints", "checkpoint_dir=out_dir", train_bug("no-checkpoints"),
            story="fit without checkpoint_dir"),
    Mistake("10-train", "wrong-precision", "trained in 'fp32'", train_bug("fp32"),
            story="precision left at fp32"),
    Mistake("10-train", "wrong-precision", "although config['precision'] was 'bf16'", train_bug("chooses-itself"),
            story="calls choose_precision inside train_capstone instead of taking config's (fp32 on a CPU)"),
    Mistake("10-train", "no-clipping", "max_grad_norm=None", train_bug("no-clipping"),
            story="max_grad_norm not passed on"),
    Mistake("10-train", "no-scheduler", "no learning-rate scheduler", train_bug("no-scheduler"),
            story="the scheduler built but never given to fit"),
    Mistake("10-train", "schedule-per-epoch", "stepped 3 times in 18 optimizer steps", train_bug("per-epoch"),
            story="scheduler_interval='epoch': the warm-up never ends"),
    Mistake("10-train", "wrong-early-stopping", "'val_loss'", train_bug("val-loss"),
            story="early stopping on val_loss, the default habit"),
    Mistake("10-train", "wrong-epochs", "epochs=5", train_bug("more-epochs"), story="one epoch more than config"),
    Mistake("10-train", "wrong-step-count", "36 optimizer steps", train_bug("half-batch"),
            story="half the batch size"),
    Mistake("10-train", "not-best-weights", "best.pt's weights (epoch 1)", train_bug("last-weights"),
            story="returns the model as the last epoch left it"),
    Mistake("10-train", "callback-ignored", "on_epoch_end raised at epoch 2", train_bug("no-callback"),
            story="on_epoch_end not passed through"),
    Mistake("10-train", "resume-ignored", "which fit refused", train_bug("no-resume"),
            story="resume not passed to fit: a restarted run trains from scratch"),
    Mistake("10-train", "not-seeded", "two fresh runs", train_bug("no-seed"), story="no seed_everything"),
    Mistake("10-train", "leaky-normalisation", "training and validation images together", train_bug("stats-with-val"),
            story="normalisation statistics over train and validation together, 'more data, better estimates' "
            "(issue 29: leakage)"),
    Mistake("10-train", "resume-not-exact", "differ from the uninterrupted run", train_bug("changed-on-resume"),
            story="something built differently when resuming (label smoothing)"),
    Mistake("10-train", "ignores-device", "select_device() called without it", train_bug("default-device"),
            story="select_device() without the argument: the best device, not the one asked for"),
    Mistake("10-train", "ignores-device", "never moved with .to(device)", train_bug("not-moved"),
            story="forgets .to(device): invisible on a CPU-only laptop"),
    Mistake("10-train", "ignores-device", "fit refused the model: 0.mean is on cpu", train_bug("cnn-moved"),
            story="moves the CNN but not the Standardize in front of it"),
    Mistake("10-train", "resume-ignored", "which fit refused", solution_cell(
        "def train_capstone(train_set, val_set, out_dir, config, *, resume=False, device=None, on_epoch_end=None,\n"
        "                   progress=False):\n"
        "    device = select_device(device)\n"
        "    seed_everything(config['seed'])\n"
        "    model = nn.Sequential(Standardize(*normalization_stats(train_set.tensors[0])),\n"
        "                          capstone_cnn(len(train_set.classes), config['width'])).to(device)\n"
        "    loader = train_loader(train_set, config['batch_size'], seed=config['seed'])\n"
        "    total_steps = config['epochs'] * len(loader)\n"
        "    optimizer, scheduler = make_optimizer(model, lr=config['lr'], weight_decay=config['weight_decay'],\n"
        "                                          warmup_steps=round(config['warmup_fraction'] * total_steps),\n"
        "                                          total_steps=total_steps)\n"
        "    precision = config['precision']\n"
        "    history = fit(model, loader, distributed_loader(val_set, 256, shuffle=False), loss_fn=nn.CrossEn"
        "tropyLoss(),\n"
        "                  optimizer=optimizer, epochs=config['epochs'], precision=precision,\n"
        "                  max_grad_norm=config['max_grad_norm'], scheduler=scheduler, scheduler_interval='step',\n"
        "                  metrics={'accuracy': accuracy},\n"
        "                  early_stopping=EarlyStopping('val_accuracy', mode='max', patience=config['patience']),\n"
        "                  checkpoint_dir=out_dir, on_epoch_end=on_epoch_end, progress=progress)\n"
        "    load_checkpoint(Path(out_dir) / 'best.pt', model=model)\n"
        "    return {'model': model, 'history': history, 'precision': precision, 'checkpoint_dir': Path(out_dir)}\n",
        "train_capstone", given=NOTEBOOK),
        story="resume is never passed to fit: a restarted run trains from scratch", planted=True),
    # 10-held-out
    Mistake("10-held-out", "below-threshold", "did not learn enough", lambda: (untrained_run(),),
            story="a run that never learned (lr far too small)"),
    Mistake("10-held-out", "below-threshold", "does not behave like the validated one",
            lambda: (untrained_run(pd.DataFrame({"epoch": [1], "val_accuracy": [0.99]})),),
            story="validation looked fine, but the model returned is not the validated one"),
    Mistake("10-held-out", "below-threshold", "normalisation done on the data", lambda: (normalised_outside(),),
            story="normalises the data instead of putting Standardize inside the model"),
    Mistake("10-held-out", "validated-on-test", "scores on the notebook's test set", lambda: (validated_on_test_run(),),
            story="validates on test_set to 'see the real score' while tuning (issue 29: leakage)"),
    Mistake("10-held-out", "validation-seen", "validation images were seen by training",
            lambda: (trained_on_validation_too_run(),),
            story="trains on train_set + val_set 'to use all the data', still validating on val_set"),
    Mistake("10-held-out", "wrong-output-shape", "(N, 5)", ({"model": capstone_cnn(10, 4)},),
            story="the CIFAR-10 model (10 classes) checked on shapes"),
    Mistake("10-held-out", "not-a-run", "received Sequential", (capstone_cnn(5, 4),),
            story="passes run['model'] instead of run"),
    Mistake("10-held-out", "not-a-run", "received DataFrame", lambda: (trained_run()["history"],),
            story="passes the history instead of the run"),
    Mistake("10-held-out", "below-threshold", "did not learn enough", solution_cell(
        "CONFIG = dict(epochs=budget(full=8, grading=6), batch_size=32, lr=1e-5, weight_decay=0.05,\n"
        "              warmup_fraction=0.1, max_grad_norm=1.0, patience=3, width=budget(full=16, grading=8), seed=0,\n"
        "              precision=precision)\n"
        "\n"
        "run = None\n"
        "run_dir = Path(tempfile.mkdtemp(prefix='run-', dir=workdir))\n"
        "run = train_capstone(train_set, val_set, run_dir, CONFIG, progress=not is_grading())\n"
        "plot_history(run['history'], run_dir / 'curves.png')\n",
        "run", given=NOTEBOOK),
        story="a learning rate a thousand times too small: the run never leaves chance level", planted=True),
    # 10-report
    Mistake("10-report", "reads-notebook-data", "test_scores reads the notebook's global 'test_set'",
            lambda: in_notebook(REPORT_HELPER_READS_GLOBAL, "write_capstone_report"),
            story="a helper from an earlier cell evaluates the notebook's test_set, not the one passed in"),
    Mistake("10-report", "no-report", "returned None", report_bug("no-return"),
            story="writes the report and forgets to return its path"),
    Mistake("10-report", "missing-environment", "environment=environment_report(device)", report_bug("environment"),
            story="a hand-trimmed report without its setup section"),
    Mistake("10-report", "missing-config", "configuration", report_bug("config"),
            story="a hand-trimmed report without its configuration"),
    Mistake("10-report", "missing-history", "history table", report_bug("history"),
            story="a hand-trimmed report without the history table"),
    Mistake("10-report", "missing-curves", "![...](file.png)", report_bug("no-curves"),
            story="curves plotted in the notebook, never given to the report"),
    Mistake("10-report", "missing-test-metrics", "held-out test metrics", report_bug("no-test-metrics"),
            story="test scores printed, never given to the report"),
    Mistake("10-report", "wrong-test-metrics", "validation scores of epoch 2", report_bug("validation-as-test"),
            story="reports the last validation scores as test scores (passed the visible check before issue 29)"),
    Mistake("10-report", "train-mode-evaluation", "ran in training mode",
            (functools.partial(report_own_loop, bug="train-mode"),),
            story="a hand-written evaluation loop without model.eval() (issue 29)"),
    Mistake("10-report", "partial-test-set", "the first 128, one batch",
            (functools.partial(report_own_loop, bug="first-batch"),),
            story="scores the first test batch only: 'one batch is enough' (issue 29)"),
    Mistake("10-report", "missing-precision", "observe_op_dtypes", report_bug("no-precision"),
            story="no op_dtypes: the precision section is missing"),
    Mistake("10-report", "missing-best-checkpoint", "best_checkpoint=", report_bug("no-best"),
            story="the best checkpoint's path left out"),
    Mistake("10-report", "missing-test-metrics", "held-out test metrics", solution_cell(
        "def write_capstone_report(run, test_set, out_dir):\n"
        "    out_dir = Path(out_dir)\n"
        "    model, history, precision = run['model'], run['history'], run['precision']\n"
        "    loader = DataLoader(test_set, batch_size=256)\n"
        "    scores = evaluate(model, loader, loss_fn=nn.CrossEntropyLoss(), metrics={'accuracy': accuracy},\n"
        "                      precision=precision)\n"
        "    print('test accuracy', scores['accuracy'])\n"
        "    plot_history(history, out_dir / 'curves.png')\n"
        "    images, labels = next(iter(loader))\n"
        "    op_dtypes = observe_op_dtypes(model, images, precision=precision, targets=labels, loss_fn=nn.Cro"
        "ssEntropyLoss())\n"
        "    return write_run_report(out_dir / 'report.md', history, best_checkpoint=Path(run['checkpoint_dir"
        "']) / 'best.pt',\n"
        "                            op_dtypes=op_dtypes, environment=environment_report(next(model.parameter"
        "s()).device),\n"
        "                            curves=out_dir / 'curves.png')\n",
        "write_capstone_report", given=NOTEBOOK),
        story="the test metrics are computed but never given to the report", planted=True),
]

CORRECT = [
    Correct("10-precision", (precision_in_order,), story="the three tests in order"),
    Correct("10-precision", (precision_from_table,), story="a lookup table"),
    Correct("10-precision", (precision_match,), story="structural pattern matching on the dict"),
    Correct("10-optimizer", (optimizer_reference,), story="split by ndim, functools.partial factor"),
    Correct("10-optimizer", (optimizer_by_name,), story="split by name and dim, lr per group, clamped by min"),
    Correct("10-optimizer", (optimizer_with_callable_factor,),
            story="filter(), default weight_decay on the first group, a callable factor object"),
    Correct("10-train-loader", (loader_reference,), story="DistributedSampler from harness.distributed"),
    Correct("10-train-loader", (loader_from_dist,), story="world and rank from torch.distributed"),
    Correct("10-train-loader", (loader_positional,), story="every argument positional, num_workers=0 spelt out"),
    Correct("10-train", (capstone_training,), story="the lesson's solution"),
    Correct("10-train", (capstone_training_own_steps,), story="torch.device, own factor, best loaded by hand"),
    Correct("10-train", (capstone_training_named,), story="named layers, settings in a dict, callable factor"),
    Correct("10-held-out", lambda: (trained_run(),), story="a trained run"),
    Correct("10-held-out", lambda: ({"model": nn.Sequential(*trained_run()["model"]).train(), "history": None},),
            story="the same weights unrolled, in training mode, without history"),
    Correct("10-held-out", lambda: ({**trained_run(), "config": {"lr": 1e-2}, "precision": "fp32"},),
            story="the run with a key more and another precision named (the validation check then sees no match)"),
    Correct("10-report", (report_writer,), story="the lesson's solution"),
    Correct("10-report", (report_in_subfolder,), story="smaller batches, curves in a subfolder"),
    Correct("10-report", (report_own_loop,), story="a hand-written loop in eval mode and autocast, summed metrics"),
    Correct("10-report", lambda: in_notebook(REPORT_READS_ALLOWED_GLOBALS, "write_capstone_report"),
            story="reads the notebook's device, a constant, CONFIG and a helper of its own"),
]
