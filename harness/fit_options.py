"""The arguments of `fit` and `fast_fit`, checked before any work: each wrong value is an error saying what to do.

Both loops call the same functions, so a mistake gets the same message whichever loop the student runs.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import torch
from torch import nn

from harness.distributed import is_distributed

__all__ = ["OffDeviceError", "check_folder_options", "check_loaders", "check_loop_settings", "check_training",
           "resolve_device"]


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
