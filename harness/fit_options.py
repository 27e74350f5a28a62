"""The arguments of `fit` and `fast_fit`, checked before any work: each wrong value is an error saying what to do.

Both loops call the same functions, so a mistake gets the same message whichever loop the student runs.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import CosineAnnealingLR, OneCycleLR

from harness.distributed import all_gather_int, is_distributed

__all__ = ["OffDeviceError", "check_batch_tensors", "check_equal_batch_counts", "check_folder_options",
           "check_loaders", "check_loop_settings", "check_loss", "check_metric_values", "check_schedule_length",
           "check_training", "resolve_device"]


class OffDeviceError(ValueError):
    """A parameter or buffer of the model is not on the device fit trains on (`name`, where it is: `found`)."""

    def __init__(self, device: torch.device, name: str, found: torch.device) -> None:
        super().__init__(f"fit runs on {device} but {name} is on {found}. Call model.to({str(device)!r}) first, "
                         "then build the optimizer from model.parameters().")
        self.name, self.found = name, found


def resolve_device(model: nn.Module, device: str | torch.device | None) -> torch.device:
    """The training device (None: where the first parameter is), checked against every parameter and buffer.

    Raises:
        ValueError: the model has no parameters.
        OffDeviceError: a parameter or buffer is elsewhere.
    """
    params = list(model.parameters())
    if not params:
        raise ValueError("the model has no parameters to train.")
    device = torch.device(params[0].device if device is None else device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    for name, tensor in itertools.chain(model.named_parameters(), model.named_buffers()):
        if tensor.device != device:
            raise OffDeviceError(device, name, tensor.device)
    return device


def check_training(model: nn.Module, optimizer: Any, loss_fn: Any, epochs: Any,
                   metrics: dict[str, Any] | None = None) -> None:
    """The optimizer holds the model's parameters, the loss and metrics are callables, epochs is a count."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}.")
    model_params = {id(p) for p in model.parameters()}
    if any(id(p) not in model_params for group in optimizer.param_groups for p in group["params"]):
        raise ValueError("the optimizer holds parameters that are not the model's: build it from model.parameters().")
    if not any(p.requires_grad for p in model.parameters()):
        raise ValueError("every parameter of the model is frozen (requires_grad=False): there is nothing to train. "
                         "Unfreeze the layers to train first (e.g. model.head.requires_grad_(True)), then build the "
                         "optimizer from [p for p in model.parameters() if p.requires_grad].")
    if not any(p.requires_grad for group in optimizer.param_groups for p in group["params"]):
        raise ValueError("none of the optimizer's parameters requires grad (they are all frozen), so no step would "
                         "change the model: build the optimizer from the trainable ones, "
                         "[p for p in model.parameters() if p.requires_grad].")
    if not callable(loss_fn):
        raise ValueError(f"loss_fn must be callable, e.g. nn.CrossEntropyLoss(); got {loss_fn!r}.")
    for name, fn in (metrics or {}).items():
        if not callable(fn) or name == "loss":
            raise ValueError("metrics must map names other than 'loss' to functions (outputs, targets); "
                             f"got {name!r}: {fn!r}.")
    if not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs={epochs!r}: use a whole number >= 1.")


def check_loop_settings(max_grad_norm: Any, accumulation_steps: Any, on_nonfinite: Any, sync_every: Any) -> None:
    """Clipping, accumulation, the non-finite policy and the sync interval hold values the loop can use."""
    if max_grad_norm is not None and not (isinstance(max_grad_norm, (int, float)) and max_grad_norm > 0):
        raise ValueError(f"max_grad_norm={max_grad_norm!r}: use a positive number, or None for no clipping.")
    if not isinstance(accumulation_steps, int) or accumulation_steps < 1:
        raise ValueError(f"accumulation_steps={accumulation_steps!r}: use a whole number >= 1.")
    if on_nonfinite not in ("raise", "skip"):
        raise ValueError(f"on_nonfinite={on_nonfinite!r}: use 'raise' or 'skip'.")
    if on_nonfinite == "skip" and is_distributed():
        raise ValueError("on_nonfinite='skip' would let DDP ranks disagree on which batches to skip: use 'raise'.")
    if not isinstance(sync_every, int) or sync_every < 1:
        raise ValueError(f"sync_every={sync_every!r}: use a whole number of batches >= 1.")


def check_folder_options(checkpoint_dir: str | Path | None, resume: bool, overwrite: bool) -> None:
    """resume and overwrite need a checkpoint_dir, and exclude each other."""
    if resume and checkpoint_dir is None:
        raise ValueError("resume=True needs checkpoint_dir: the folder holding last.pt.")
    if overwrite and (resume or checkpoint_dir is None):
        raise ValueError("overwrite=True deletes the run in checkpoint_dir to start a new one: it needs "
                         "checkpoint_dir, and cannot go with resume=True (which continues that run).")


def check_loaders(train_loader: Any, val_loader: Any = None) -> None:
    """Both loaders (val_loader may be None) have a len() of at least one batch."""
    for name, loader in (("train_loader", train_loader), ("val_loader", val_loader)):
        if loader is None:
            continue
        try:
            batches = len(loader)
        except TypeError:
            raise ValueError(
                f"{name} has no len(): fit needs the number of batches per epoch (progress, accumulation groups, "
                "per-step schedules). Give the dataset a __len__ (a map-style Dataset rather than an IterableDataset "
                "without one), or pass a list of (inputs, targets) batches."
            ) from None
        if batches == 0:
            raise ValueError(f"{name} has no batches: check the dataset and batch size (drop_last?).")


def check_equal_batch_counts(train_loader: Any) -> None:
    """Under DDP, every rank's train loader has as many batches as the others' (a collective: every rank calls it).

    Raises:
        ValueError: on every rank, listing each rank's count, when they differ.
    """
    counts = all_gather_int(len(train_loader))
    if len(set(counts)) > 1:
        first, *others = (f"rank {rank} has {count}" for rank, count in enumerate(counts))
        listing = ", ".join([f"{first} batches per epoch", *others])  # rank 0 has 13 batches per epoch, rank 1 has 12
        raise ValueError(
            f"under DDP every rank must train on the same number of batches per epoch, but {listing}: DDP would "
            "hang at the first step one rank does not take (every step all-reduces the gradients of all ranks). "
            "Give each rank a DistributedSampler over the same whole dataset, with the same batch_size: it pads the "
            "shards to one size (or drops the tail with drop_last=True), so every rank gets the same count "
            "(harness.distributed.distributed_loader does).")


def check_schedule_length(scheduler: Any, interval: str | None, epochs: int, batches: int,
                          accumulation_steps: int) -> None:
    """A OneCycleLR or CosineAnnealingLR lasts at least as many steps as the run takes.

    OneCycleLR stepped past its total_steps raises torch's "Tried to step N times"; CosineAnnealingLR past
    T_max climbs back up (a cosine is periodic). A resumed run is checked against the scheduler it passes,
    the schedule it continues on (`harness.resume_policy`).

    Raises:
        ValueError: the schedule ends before the run does, with the value to build it with.
    """
    if interval is None:
        return
    per_epoch = math.ceil(batches / accumulation_steps) if interval == "step" else 1
    steps = epochs * per_epoch
    unit = f"optimizer steps ({epochs} epochs x {per_epoch})" if interval == "step" else "epochs"
    after = " A resumed run continues on the schedule you pass, from where last.pt stopped."
    if isinstance(scheduler, OneCycleLR) and scheduler.total_steps < steps:
        hint = f" (or epochs={epochs}, steps_per_epoch={per_epoch})" if interval == "step" else ""
        raise ValueError(f"OneCycleLR was built for total_steps={scheduler.total_steps}, but this run takes {steps} "
                         f"{unit}: torch would stop it with 'Tried to step {scheduler.total_steps + 1} times'. "
                         f"Build it with total_steps={steps}{hint}.{after}")
    if isinstance(scheduler, CosineAnnealingLR) and scheduler.T_max < steps - 1:
        raise ValueError(f"CosineAnnealingLR(T_max={scheduler.T_max}) reaches eta_min after {scheduler.T_max} "
                         f"scheduler steps and then climbs back up (a cosine is periodic), but this run takes {steps} "
                         f"{unit}: build it with T_max={steps}.{after}")


def check_loss(loss: Any, epoch: int, batch: int) -> None:
    """The loss is a floating-point scalar tensor with a gradient (metadata only: no host sync).

    Raises:
        ValueError: what the loss is instead, and what to change.
    """
    where = f"at epoch {epoch}, batch {batch}"
    if not isinstance(loss, torch.Tensor):
        raise ValueError(f"loss_fn returned a {type(loss).__name__} ({loss!r}) {where}, not a tensor: a Python number "
                         "has no gradient to train with. Return the loss tensor itself (no .item() or float() in "
                         "loss_fn).")
    if loss.dim() != 0:
        raise ValueError(f"loss_fn returned a tensor of shape {tuple(loss.shape)} {where}, not a scalar: reduce it to "
                         "the batch's mean (reduction='mean', the default of nn.CrossEntropyLoss, or .mean() on a "
                         "per-sample loss).")
    if not loss.is_floating_point():
        raise ValueError(f"loss_fn returned an integer tensor ({loss.dtype}) {where}: a count (of wrong predictions, "
                         "argmax == targets) has no gradient. Compute the loss in floating point from the model's "
                         "outputs, e.g. nn.CrossEntropyLoss()(outputs, targets).")
    if not loss.requires_grad:
        raise ValueError(f"the loss {where} has no gradient (requires_grad=False, no grad_fn), so backward cannot "
                         "train anything. Likely causes: .detach(), .data or torch.no_grad() inside loss_fn, or a "
                         "loss computed without the model's outputs. Return the loss computed from the outputs.")


def check_batch_tensors(inputs: Any, targets: Any) -> None:
    """A batch's inputs and targets are tensors (not the lists a dataset of Python lists collates into).

    Raises:
        ValueError: naming which is not a tensor and how to fix the dataset.
    """
    for name, value in (("inputs", inputs), ("targets", targets)):
        if isinstance(value, torch.Tensor):
            continue
        if isinstance(value, (list, tuple)):
            raise ValueError(
                f"the batch's {name} are a {type(value).__name__} of {len(value)} items, not one tensor: the dataset "
                "returns Python lists (or nested lists) per sample, which the DataLoader's default collate turns "
                "into one list entry per position. Return a tensor from the dataset's __getitem__ "
                "(torch.tensor(values, dtype=torch.float32)), or build the data as a TensorDataset.")
        raise ValueError(f"the batch's {name} are a {type(value).__name__}, not a tensor: return tensors from the "
                         "dataset (torch.tensor(...)), or give the DataLoader a collate_fn that stacks them.")


def check_metric_values(metrics: dict[str, Any], values: list[Any]) -> None:
    """Each metric returned one number for the batch (a scalar tensor or a Python number), not one per sample.

    Raises:
        ValueError: naming the metric and the shape it returned.
    """
    for name, value in zip(metrics, values, strict=True):
        shape = tuple(value.shape) if isinstance(value, torch.Tensor) else None
        if shape or isinstance(value, (list, tuple)):
            raise ValueError(f"metric {name!r} returned {f'a tensor of shape {shape}' if shape else 'a list'}, one "
                             "value per sample, not the batch's mean: return a scalar, e.g. "
                             "(outputs.argmax(1) == targets).float().mean() (harness.metrics.accuracy).")
