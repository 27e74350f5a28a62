"""The GPU speed path: the whole dataset resident on the device, and a short training loop without host syncs.

What the fastest public training scripts (e.g. KellerJordan/cifar10-airbench) do, in two pieces:

- `DeviceResidentLoader` keeps every sample on the device, normalised once. Each epoch draws one
  `torch.randperm` on the device and slices batches from it; augmentation (random horizontal flip, random
  translation) runs as batched tensor ops on the whole batch. No DataLoader workers, no host-to-device copy.
- `fast_fit` is the loop: bf16 autocast, optional `torch.compile`, channels_last inputs, losses and correct
  counts summed on the device, and ONE host sync per epoch (where the history row is read). Epochs are timed
  with CUDA events, which need no extra sync.

Build in this order: `model = to_device(model, device)` (moves it, channels_last), THEN the optimizer with
`fused=True` (one kernel for all parameters instead of one per parameter), then the loaders, then
`fast_fit`. For gradient clipping, accumulation, fp16, checkpoints or early stopping use `harness.train.fit`.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from harness.amp import autocast, validate_precision
from harness.env import bf16_supported
from harness.evaluation import batch_to_device, evaluation_sums
from harness.fit_options import check_training, resolve_device
from harness.history import history_frame
from harness.metrics import accuracy
from harness.train import NonFiniteLossError

__all__ = ["DeviceResidentLoader", "LapTimer", "fast_fit", "fast_precision", "random_flip", "random_translate",
           "to_device"]

Batch = tuple[torch.Tensor, torch.Tensor]


def random_flip(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Each image (N, C, H, W) mirrored left-right with probability 1/2, in one batched op."""
    flip = torch.rand(len(images), device=images.device, generator=generator) < 0.5
    return torch.where(flip[:, None, None, None], images.flip(-1), images)


def random_translate(images: torch.Tensor, max_shift: int, generator: torch.Generator) -> torch.Tensor:
    """Each image (N, C, H, W) shifted by its own random (dy, dx) in [-max_shift, max_shift], edges reflected.

    Equivalent to a random crop of the reflect-padded image, done for the whole batch with one gather.
    The result is in channels_last memory format.
    """
    n, _, height, width = images.shape
    padded = F.pad(images, (max_shift,) * 4, mode="reflect")
    # offsets into the padded image: max_shift + shift, in [0, 2 * max_shift]
    offsets = torch.randint(0, 2 * max_shift + 1, (n, 2), device=images.device, generator=generator)
    rows = offsets[:, 0, None] + torch.arange(height, device=images.device)  # (N, H)
    cols = offsets[:, 1, None] + torch.arange(width, device=images.device)  # (N, W)
    batch = torch.arange(n, device=images.device)[:, None, None]
    # advanced indices around a slice put their dimensions first: (N, H, W, C), i.e. channels_last
    crops = padded[batch, :, rows[:, :, None], cols[:, None, :]]
    return crops.permute(0, 3, 1, 2)


class DeviceResidentLoader:
    """Batches sliced from a dataset held whole on the device; iterate it like a DataLoader.

    Each epoch draws a fresh permutation from the loader's own seeded generator (on the device), so two
    loaders built with the same seed give the same batches, and successive epochs differ.

    Args:
        inputs: (N, ...) inputs; images are (N, C, H, W).
        targets: (N,) targets.
        batch_size: samples per batch.
        device: where the data lives and the batches are made (default: the inputs' device).
        shuffle: a new random order every epoch (False: the stored order).
        drop_last: leave out the last partial batch (keeps every batch the same shape for torch.compile).
        mean: subtracted from every input once, at construction, e.g. from `normalization_stats`.
        std: inputs are divided by it after subtracting `mean`.
        flip: mirror each image left-right with probability 1/2.
        translate: shift each image by up to this many pixels in each direction (reflect padding).
        channels_last: yield images in channels_last memory format (what tensor cores prefer).
        dtype: the dtype the inputs are stored and yielded in (bfloat16 halves the memory; use it only
            under bf16 autocast).
        seed: seeds the generator behind the shuffling and the augmentation.

    Raises:
        ValueError: mismatched lengths, a batch size below 1, or augmentation of inputs that are not images.
    """

    def __init__(
        self,
        inputs: torch.Tensor,
        targets: torch.Tensor,
        *,
        batch_size: int,
        device: str | torch.device | None = None,
        shuffle: bool = True,
        drop_last: bool = False,
        mean: torch.Tensor | None = None,
        std: torch.Tensor | None = None,
        flip: bool = False,
        translate: int = 0,
        channels_last: bool = True,
        dtype: torch.dtype = torch.float32,
        seed: int = 0,
    ) -> None:
        if len(inputs) != len(targets):
            raise ValueError(f"inputs hold {len(inputs)} samples but targets {len(targets)}.")
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size}: use a whole number >= 1.")
        if (flip or translate) and inputs.dim() != 4:
            raise ValueError(f"flip and translate need images (N, C, H, W); got inputs of shape {tuple(inputs.shape)}.")
        self.device = torch.device(device) if device is not None else inputs.device
        inputs = inputs.to(self.device, torch.float32)
        if mean is not None:
            inputs = inputs - mean.to(self.device)
        if std is not None:
            inputs = inputs / std.to(self.device)
        self.inputs = inputs.to(dtype)  # normalised once here, not on every batch
        self.targets = targets.to(self.device)
        self.batch_size, self.shuffle, self.drop_last = batch_size, shuffle, drop_last
        self.flip, self.translate = flip, translate
        self.channels_last = channels_last and inputs.dim() == 4
        self.generator = torch.Generator(device=self.device).manual_seed(seed)

    def __len__(self) -> int:
        """Batches per epoch."""
        n = len(self.inputs)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self) -> Iterator[Batch]:
        n = len(self.inputs)
        if self.shuffle:
            order = torch.randperm(n, device=self.device, generator=self.generator)
        else:
            order = torch.arange(n, device=self.device)
        for start in range(0, len(self) * self.batch_size, self.batch_size):
            indices = order[start:start + self.batch_size]  # a slice of a device tensor: no host sync
            yield self._augment(self.inputs[indices]), self.targets[indices]

    def _augment(self, images: torch.Tensor) -> torch.Tensor:
        if self.flip:
            images = random_flip(images, self.generator)
        if self.translate:
            images = random_translate(images, self.translate, self.generator)
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)  # no copy when it already is
        return images


def to_device(model: nn.Module, device: str | torch.device, *, channels_last: bool = True) -> nn.Module:
    """Move `model` to `device`, with its 4-D weights in channels_last format. Call it before building the
    optimizer, so that the optimizer's state is created for the parameters where they will train."""
    model = model.to(device)
    return model.to(memory_format=torch.channels_last) if channels_last else model


def fast_fit(
    model: nn.Module,
    train_loader: Iterable[Batch],
    val_loader: Iterable[Batch] | None = None,
    *,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    optimizer: torch.optim.Optimizer,
    epochs: int,
    scheduler: Any | None = None,
    precision: str = "auto",
    compile: bool = False,
    channels_last: bool = True,
) -> pd.DataFrame:
    """Train a classifier for `epochs` epochs with the speed path's loop; returns the history.

    Every step: autocast forward and loss, backward (outside autocast), optimizer step, per-step
    scheduler, `zero_grad(set_to_none=True)`. The loss and correct-prediction sums stay on the device;
    the host reads them once per epoch, together with the validation sums.

    Args:
        model: the network, already on its device (see `to_device`).
        train_loader: (inputs, targets) batches, e.g. a `DeviceResidentLoader`; batches elsewhere are copied.
        val_loader: evaluated after every epoch under `inference_mode` (None: no validation).
        loss_fn: `loss_fn(logits, targets)` -> the batch's mean loss.
        optimizer: built on the model's parameters after the model was moved (ideally `fused=True`).
        epochs: number of epochs.
        scheduler: stepped after every optimizer step (e.g. a LambdaLR over steps); None: constant rate.
        precision: "bf16" (autocast, no scaler needed), "fp32", or "auto": `fast_precision(device)`, bf16 on
            a CUDA GPU with native bf16, fp32 otherwise.
        compile: run the model through `torch.compile` (the first epoch then includes the compilation).
        channels_last: convert image batches to channels_last (a no-op for a DeviceResidentLoader's).

    Returns:
        One row per epoch: epoch, train_loss, train_accuracy, val_loss, val_accuracy (with val_loader), lr
        (at the epoch's last step), epoch_seconds (training and validation), samples_per_second (training
        only). `history.attrs["config"]` holds the settings.

    Raises:
        ValueError: parameters off the device, an unsupported precision, epochs < 1, or a loader without
            batches.
        NonFiniteLossError: the epoch's mean training loss is NaN or inf.
    """
    device = resolve_device(model, None)  # the checks and messages fit gives
    precision = _resolve_precision(precision, device)
    check_training(model, optimizer, loss_fn, epochs)
    config = {
        "device": str(device), "precision": precision, "compile": compile, "channels_last": channels_last,
        "epochs": epochs, "optimizer": type(optimizer).__name__, "fused": bool(optimizer.defaults.get("fused")),
        "scheduler": None if scheduler is None else type(scheduler).__name__, "loss_fn": type(loss_fn).__name__,
    }
    net = torch.compile(model) if compile else model
    rows = []
    for epoch in range(1, epochs + 1):
        clock = LapTimer(device)
        net.train()
        train_sums, samples = torch.zeros(2, device=device), 0  # loss * batch size, correct predictions
        for batch in train_loader:
            inputs, targets = batch_to_device(batch, device, channels_last=channels_last)
            with autocast(device, precision):  # forward and loss only
                logits = net(inputs)
                loss = loss_fn(logits, targets)
            loss.backward()
            lr = optimizer.param_groups[0]["lr"]  # the rate this step uses (the scheduler changes it after)
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            train_sums += torch.stack([loss.detach().float() * len(targets), _correct(logits, targets)])
            samples += len(targets)
        if samples == 0:
            raise ValueError("train_loader has no batches: check the dataset size, batch size and drop_last.")
        clock.lap()
        val_sums, val_samples = torch.zeros(0, device=device), 0
        if val_loader is not None:  # loss and accuracy sums, read below with the training sums
            val_sums, val_samples = evaluation_sums(net, val_loader, loss_fn=loss_fn, metrics={"accuracy": accuracy},
                                                    device=device, precision=precision, channels_last=channels_last)
        clock.lap()
        # the epoch's one host sync: every sum in one transfer, and the event timings with it
        train_loss, train_correct, *val = torch.cat([train_sums, val_sums]).tolist()
        train_seconds, val_seconds = clock.seconds()
        row = {"epoch": epoch, "train_loss": train_loss / samples, "train_accuracy": train_correct / samples}
        if not math.isfinite(row["train_loss"]):
            raise NonFiniteLossError(f"the mean training loss of epoch {epoch} is {row['train_loss']}: lower the "
                                     "learning rate, or look for a log or division of zero.")
        if val_loader is not None:
            row |= {"val_loss": val[0] / val_samples, "val_accuracy": val[1] / val_samples}
        row |= {"lr": lr, "epoch_seconds": train_seconds + val_seconds,
                "samples_per_second": samples / train_seconds}
        rows.append(row)
    return history_frame(rows, config)


def _correct(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return (logits.argmax(dim=1) == targets).sum().float()


class LapTimer:
    """Lap times on the device's timeline without a sync of their own: CUDA events on a GPU (read once the
    host has synchronised anyway), the host's clock on a CPU (where the host does the work), and the host's
    clock after a sync on Apple MPS.

    `LapTimer(device)` marks the start; `lap()` marks the end of each lap; `seconds()` gives the laps.
    """

    def __init__(self, device: torch.device) -> None:
        self.cuda, self.mps = device.type == "cuda", device.type == "mps"
        self.marks: list[Any] = []
        self.lap()

    def lap(self) -> None:
        """Mark the end of a lap (and the start of the next)."""
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
            return
        if self.mps:
            torch.mps.synchronize()  # MPS has no timing events: wait for its queue before reading the clock
        self.marks.append(time.perf_counter())

    def seconds(self) -> list[float]:
        """Durations between consecutive laps; on CUDA only valid once the device has caught up."""
        pairs = itertools.pairwise(self.marks)
        if self.cuda:
            return [start.elapsed_time(end) / 1000 for start, end in pairs]
        return [end - start for start, end in pairs]


def fast_precision(device: torch.device) -> str:
    """The precision `fast_fit(precision="auto")` trains in on `device`: "bf16" on a CUDA GPU with native bf16
    (`harness.env.bf16_supported`, which refuses a T4's emulated bf16 and honours HARNESS_NO_BF16), else "fp32".

    fast_fit has no GradScaler, so where bf16 is not native it stays in fp32; `harness.train.fit` trains in fp16
    with a scaler there.
    """
    return "bf16" if device.type == "cuda" and bf16_supported(device) else "fp32"


def _resolve_precision(precision: str, device: torch.device) -> str:
    if precision == "auto":
        return fast_precision(device)
    if precision not in ("bf16", "fp32"):
        raise ValueError(f"fast_fit runs precision 'bf16' or 'fp32' (or 'auto'), not {precision!r}: fp16 needs a "
                         "GradScaler, which harness.train.fit provides.")
    validate_precision(precision, device)
    return precision
