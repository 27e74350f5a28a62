"""`fit`: the training loop every lesson and the capstone run. Read it top to bottom, in execution order.

`fit` validates its options, wraps the model (torch.compile, then DDP), resumes from `last.pt` if asked,
then loops over epochs: `train_one_epoch` (forward and loss under autocast, backward, and every
`accumulation_steps` micro-batches one `optimizer_step`), `evaluate` on the validation data, the
per-epoch scheduler, early stopping, checkpoints and the history row.

One optimizer step always follows the same AMP sequence:
autocast forward and loss -> `scaler.scale(loss).backward()` outside autocast -> `scaler.unscale_` ->
`clip_grad_norm_` -> `scaler.step` -> `scaler.update` -> scheduler (if the step was not skipped) ->
`zero_grad(set_to_none=True)`.

Host syncs: reading a GPU value (`.item()`, `.tolist()`, `bool(tensor)`) makes the CPU wait for the GPU to
finish everything queued, which stalls the pipeline. So losses and gradient norms stay on the device and
the host reads them only at sync points: every `sync_every` batches (where the progress bar updates and
non-finite losses are detected) and at the end of each epoch.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch
import torch.distributed as dist
from torch import nn
from torch.optim.lr_scheduler import CyclicLR, ExponentialLR, MultiStepLR, OneCycleLR, ReduceLROnPlateau, StepLR
from torch.utils.data import DataLoader, DistributedSampler

from harness.amp import autocast, make_scaler, validate_precision
from harness.checkpoint import (
    CheckpointError,
    atomic_copy,
    load_checkpoint,
    remove_stale_temporaries,
    restore_checkpoint,
    save_checkpoint,
)
from harness.distributed import all_reduce_sum, barrier, get_rank, get_world_size, is_distributed, is_main_process
from harness.early_stopping import EarlyStopping
from harness.history import history_frame, lists_to_rows, rows_to_lists, write_history
from harness.progress import epoch_bar, format_epoch_line, progress_enabled
from harness.repro import capture_rng_state, restore_rng_state

__all__ = ["EarlyStopping", "NonFiniteLossError", "OffDeviceError", "evaluate", "fit", "optimizer_step",
           "train_one_epoch"]

Metric = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
# Schedulers whose arguments are conventionally counted in optimizer steps or in epochs. Any other
# scheduler (LambdaLR, CosineAnnealingLR, LinearLR, SequentialLR...) means different things stepped per
# step or per epoch, so fit asks for `scheduler_interval` rather than guess.
_PER_STEP_SCHEDULERS = (OneCycleLR, CyclicLR)
_PER_EPOCH_SCHEDULERS = (ReduceLROnPlateau, StepLR, MultiStepLR, ExponentialLR)
# Settings a resumed run must share with the run that wrote the checkpoint.
_RESUME_MUST_MATCH = ("precision", "accumulation_steps", "max_grad_norm", "scheduler", "scheduler_interval", "monitor",
                      "optimizer")
# What fit writes into checkpoint_dir; the first three mean the folder holds a run.
_RUN_FILES = ("last.pt", "best.pt", "history.csv", "config.json")


class OffDeviceError(ValueError):
    """A parameter or buffer of the model is not on the device fit trains on (`name`, where it is: `found`)."""

    def __init__(self, device: torch.device, name: str, found: torch.device) -> None:
        super().__init__(f"fit runs on {device} but {name} is on {found}. Call model.to({str(device)!r}) first, "
                         "then build the optimizer from model.parameters().")
        self.name, self.found = name, found


class NonFiniteLossError(FloatingPointError):
    """The loss became NaN or inf; training stopped."""


@dataclass(frozen=True)
class LoopSettings:
    """The fixed settings of the inner loop (see `fit` for their meaning)."""

    device: torch.device
    precision: str = "fp32"
    max_grad_norm: float | None = None
    accumulation_steps: int = 1
    on_nonfinite: str = "raise"
    sync_every: int = 50


@dataclass
class EpochResult:
    """What one epoch of training measured, read from the device at the epoch's end."""

    train_loss: float
    grad_norm: float
    lr: float
    samples: int
    skipped_steps: int
    global_step: int


def fit(
    model: nn.Module,
    train_loader: DataLoader,
    val_loader: DataLoader | None = None,
    *,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    optimizer: torch.optim.Optimizer,
    epochs: int = 10,
    device: str | torch.device | None = None,
    precision: str = "fp32",
    max_grad_norm: float | None = None,
    accumulation_steps: int = 1,
    scheduler: Any | None = None,
    scheduler_interval: str | None = None,
    early_stopping: EarlyStopping | None = None,
    metrics: dict[str, Metric] | None = None,
    checkpoint_dir: str | Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    compile: bool = False,
    progress: bool | None = None,
    live_plot: bool = False,
    on_nonfinite: str = "raise",
    sync_every: int = 50,
    on_epoch_end: Callable[[int, dict[str, Any]], None] | None = None,
) -> pd.DataFrame:
    """Train `model` for `epochs` epochs and return the history, one row per epoch.

    Move the model to its device before building the optimizer; fit checks the parameters are there.

    Args:
        model: the network, already on `device`.
        train_loader: yields `(inputs, targets)` batches. Under DDP its sampler must be a DistributedSampler.
        val_loader: validation batches, evaluated after every epoch (None: no validation).
        loss_fn: `loss_fn(outputs, targets)` -> the batch's mean loss.
        optimizer: built on `model`'s parameters after the model was moved to `device`.
        epochs: total epochs, counting those a resumed run already did.
        device: where to train; None: the device the model's parameters are on.
        precision: "fp32", "bf16" (autocast, no scaler) or "fp16" (autocast and a GradScaler).
        max_grad_norm: clip the total gradient norm to this value (None: no clipping; the norm is still recorded).
        accumulation_steps: micro-batches per optimizer step. Each loss is divided by its group's real size,
            so a last partial group is averaged correctly and still steps.
        scheduler: a learning-rate scheduler built on `optimizer`.
        scheduler_interval: "step" (after each optimizer step) or "epoch". None infers it: OneCycleLR and
            CyclicLR -> step; ReduceLROnPlateau, StepLR, MultiStepLR, ExponentialLR -> epoch; any other
            scheduler must say. ReduceLROnPlateau is stepped with the monitored validation metric.
        early_stopping: stop when its metric has not improved for its patience. Its metric is also the
            monitored metric that picks `best.pt` (default: val_loss, or train_loss without validation).
        metrics: name -> `fn(outputs, targets)` returning the batch mean as a tensor (e.g.
            `harness.metrics.accuracy`); recorded as `val_<name>`.
        checkpoint_dir: write `last.pt` every epoch, `best.pt` when the monitored metric improves, and
            `history.csv` and `config.json` (rank 0 only).
        resume: continue from `checkpoint_dir/last.pt` when it exists (weights, optimizer, scheduler,
            scaler, early stopping, history, RNG and data-order states), else start fresh. A run killed at
            any moment resumes from its last complete epoch; `best.pt`, `history.csv` and `config.json`
            are brought in line with `last.pt` first.
        overwrite: start a new run in a `checkpoint_dir` that holds another run's `last.pt`, `best.pt` or
            `history.csv`, deleting them first. Without it (or resume=True) fit refuses to touch them.
        compile: run the model through `torch.compile` (checkpoints still hold the plain model's weights).
        progress: a tqdm bar per epoch and a line of results per epoch; None: on, except while grading.
        live_plot: redraw the curves in place in a notebook (at most once a second); outside a notebook,
            print the line of results per epoch.
        on_nonfinite: "raise" stops at the first sync point after a NaN/inf loss with a NonFiniteLossError
            naming the epoch and batch. "skip" leaves such batches out (counted in `skipped_steps`),
            restoring the buffers (BatchNorm running statistics) their forward pass had changed.
        sync_every: batches between host syncs (progress, non-finite check). With "raise", up to
            `sync_every - 1` optimizer steps may follow a non-finite loss before it is detected, so the
            weights in memory may be damaged (checkpoints never are: every save is preceded by a check).
            Under fp16 the GradScaler skips those steps anyway. `sync_every=1` stops before the bad update
            at the cost of one sync per step; "skip" also pays that sync, to decide each batch.
        on_epoch_end: called as `on_epoch_end(epoch, row)` after each epoch's checkpoint is written.

    Returns:
        The history DataFrame: epoch, train_loss, val_loss, val_<metric>..., lr (at the epoch's last
        optimizer step), grad_norm (mean total norm before clipping over the finite ones), skipped_steps
        (batches left out by on_nonfinite="skip" plus optimizer steps the fp16 GradScaler skipped),
        epoch_seconds (training and validation), samples_per_second (training only).
        `history.attrs["config"]` holds the resolved configuration.

    Raises:
        ValueError: an option with a wrong value, parameters off the device, or a loader without batches.
        FileExistsError: `checkpoint_dir` holds another run and neither resume=True nor overwrite=True was given.
        FileNotFoundError: resume=True, and `checkpoint_dir` holds `best.pt` or `history.csv` but no `last.pt`.
        CheckpointError: `checkpoint_dir` cannot be written (a file, read-only, a full disk).
        NonFiniteLossError: a NaN or inf loss with on_nonfinite="raise".
    """
    # --- configuration: check everything before doing any work -------------------------------------
    device = _resolve_device(model, device)
    validate_precision(precision, device)
    metrics = dict(metrics or {})
    _validate_options(model, optimizer, train_loader, val_loader, loss_fn, metrics, epochs, max_grad_norm,
                      accumulation_steps, on_nonfinite, sync_every, checkpoint_dir, resume, overwrite)
    interval = _resolve_scheduler_interval(scheduler, scheduler_interval, optimizer)
    tracker = _make_tracker(early_stopping, val_loader, metrics)  # early stopping, and which epoch is best
    if isinstance(scheduler, ReduceLROnPlateau) and val_loader is None:
        raise ValueError("ReduceLROnPlateau reacts to a validation metric: pass val_loader.")
    if isinstance(scheduler, ReduceLROnPlateau) and scheduler.mode != tracker.mode:
        raise ValueError(f"ReduceLROnPlateau(mode={scheduler.mode!r}) watches {tracker.metric}, which improves "
                         f"in mode {tracker.mode!r}: build the scheduler with mode={tracker.mode!r}.")
    settings = LoopSettings(device, precision, max_grad_norm, accumulation_steps, on_nonfinite, sync_every)
    config = _resolved_config(settings, epochs, scheduler, interval, tracker, early_stopping, metrics, loss_fn,
                              optimizer, compile, train_loader)
    checkpoint_dir = None if checkpoint_dir is None else Path(checkpoint_dir)
    main_process = is_main_process()  # rank 0 alone logs, plots and writes files
    if checkpoint_dir is not None:
        _prepare_checkpoint_dir(checkpoint_dir, resume, overwrite, main_process)

    # --- model wrappers: compile first, then DDP (nanoGPT's order); checkpoints use raw_model ----------
    raw_model = model
    if compile:
        model = torch.compile(model)
    if is_distributed():
        _require_distributed_sampler(train_loader)
        model = nn.parallel.DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
    scaler = make_scaler(device, precision)

    # --- resume: restore every piece of state the uninterrupted run would have at this point -----------
    rows: list[dict[str, Any]] = []
    global_step = 0
    last_path = None if checkpoint_dir is None else checkpoint_dir / "last.pt"
    if resume and last_path.is_file():
        _start_persistent_workers(train_loader, val_loader)  # draws from the RNGs that _resume restores
        rows, global_step = _resume(last_path, raw_model, optimizer, scheduler, scaler, tracker, train_loader, config)
        if main_process:
            _repair_run_files(checkpoint_dir, rows, tracker, config)

    live = _live_plot() if live_plot and main_process else None
    # a line of results per epoch on stdout: with the progress bar, or as the live plot outside notebooks
    show_lines = main_process and (progress_enabled(progress) or (live_plot and live is None))

    # --- the epochs -------------------------------------------------------------------------------------
    for epoch in range(len(rows) + 1, epochs + 1):
        if tracker.should_stop:  # a resumed run that had already stopped early
            break
        if isinstance(getattr(train_loader, "sampler", None), DistributedSampler):
            train_loader.sampler.set_epoch(epoch)  # a new shuffle each epoch, the same one on every rank
        started = time.perf_counter()
        bar = epoch_bar(len(train_loader), epoch, epochs, enabled=main_process and progress_enabled(progress))
        result = train_one_epoch(model, train_loader, loss_fn=loss_fn, optimizer=optimizer, scaler=scaler,
                                 scheduler=scheduler if interval == "step" else None, settings=settings,
                                 epoch=epoch, global_step=global_step, bar=bar)
        train_seconds = time.perf_counter() - started
        global_step = result.global_step

        row: dict[str, Any] = {"epoch": epoch, "train_loss": result.train_loss}
        if val_loader is not None:
            scores = evaluate(model, val_loader, loss_fn=loss_fn, metrics=metrics, device=device, precision=precision)
            row.update({f"val_{name}": value for name, value in scores.items()})
        bar.close()
        if isinstance(scheduler, ReduceLROnPlateau):
            scheduler.step(row[tracker.metric])  # the monitored validation metric, never the training loss
        elif interval == "epoch":
            scheduler.step()
        improved = tracker.update(row[tracker.metric], epoch)
        row.update(lr=result.lr, grad_norm=result.grad_norm, skipped_steps=result.skipped_steps,
                   epoch_seconds=time.perf_counter() - started,
                   samples_per_second=result.samples * get_world_size() / train_seconds)
        rows.append(row)

        if checkpoint_dir is not None:
            _save_run(checkpoint_dir, raw_model, optimizer, scheduler, scaler, tracker, improved, rows, config,
                      epoch, global_step, train_loader)
        if show_lines:
            print(format_epoch_line(row, epochs), flush=True)
        if live is not None:
            live.update(history_frame(rows, config), force=epoch == epochs or tracker.should_stop)
        if on_epoch_end is not None:
            on_epoch_end(epoch, row)
    if show_lines and tracker.should_stop:
        print(f"early stopping: {tracker.metric} has not improved for {tracker.patience} epochs "
              f"(best {tracker.best:.4f} at epoch {tracker.best_epoch})", flush=True)
    return history_frame(rows, config)


def train_one_epoch(
    model: nn.Module,
    loader: Iterable,
    *,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    scheduler: Any | None,
    settings: LoopSettings,
    epoch: int,
    global_step: int,
    bar: Any,
) -> EpochResult:
    """One pass over `loader`: forward, backward, and an optimizer step every `accumulation_steps` batches.

    `scheduler` is the per-step scheduler, or None. Losses and gradient norms stay on the device until a
    sync point (every `settings.sync_every` batches and at the end).
    """
    model.train()
    device, group = settings.device, settings.accumulation_steps
    n_batches = len(loader)
    params = [p for p in model.parameters() if p.requires_grad]
    window = _SyncWindow(epoch)
    lr, skipped = optimizer.param_groups[0]["lr"], 0
    group_has_gradients = False  # False only when on_nonfinite="skip" left a whole group out
    # a skipped batch's forward has already updated the buffers (BatchNorm running statistics): keep a copy
    buffers = list(model.buffers()) if settings.on_nonfinite == "skip" else []
    index = -1  # stays -1 if the loader yields nothing
    for index, batch in enumerate(loader):
        inputs, targets = _to_device(batch, device)
        group_start = index - index % group
        group_size = min(group, n_batches - group_start)  # the last group may be partial
        last_of_group = index == group_start + group_size - 1

        kept = [b.clone() for b in buffers]
        with autocast(device, settings.precision):  # forward and loss only: backward runs outside autocast
            outputs = model(inputs)
            loss = loss_fn(outputs, targets)
        if settings.on_nonfinite == "skip" and not torch.isfinite(loss):  # host sync: the price of skipping
            skipped += 1
            for buffer, before in zip(buffers, kept):
                buffer.copy_(before)  # undo the NaN the forward wrote into the running statistics
        else:
            # the mean over the group: each micro-batch's loss divided by the group's real size
            scaled = loss / group_size if group_size > 1 else loss
            with _gradient_sync(model, enabled=last_of_group):
                scaler.scale(scaled).backward()
            window.add_loss(loss.detach(), index, len(inputs))
            group_has_gradients = True
        if (index + 1) % settings.sync_every == 0 or index + 1 == n_batches:
            window.sync(bar)  # raises NonFiniteLossError here, before the optimizer step, if a loss was bad
        if last_of_group and group_has_gradients:
            group_has_gradients = False
            lr = optimizer.param_groups[0]["lr"]  # the rate this step uses (the scheduler changes it after)
            grad_norm, stepped = optimizer_step(params, optimizer, scaler, scheduler, settings.max_grad_norm)
            window.add_grad_norm(grad_norm)
            skipped += not stepped
            global_step += 1
    if index < 0:
        raise ValueError(f"the train loader yielded no batches at epoch {epoch} although its len() is {n_batches}: a "
                         "dataset whose __len__ does not match what it yields, or an iterator already used up. Pass "
                         "a DataLoader or a list of batches, which can be iterated every epoch.")
    train_loss, grad_norm, samples = window.finish(settings.device)
    return EpochResult(train_loss, grad_norm, lr, samples, skipped, global_step)


def optimizer_step(
    params: Sequence[torch.Tensor],
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    scheduler: Any | None,
    max_grad_norm: float | None,
) -> tuple[torch.Tensor, bool]:
    """Unscale, clip, step, update, schedule, zero: the fixed sequence after the group's backward passes.

    Returns:
        The total gradient norm before clipping (a device tensor) and whether the optimizer stepped (a
        GradScaler skips steps whose gradients hold inf or NaN).
    """
    # gradients back to their true scale, so the norm and the clipping threshold mean what they say
    scaler.unscale_(optimizer)
    if max_grad_norm is not None:
        grad_norm = nn.utils.clip_grad_norm_(params, max_grad_norm)
    else:
        grad_norm = nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
    scale = scaler.get_scale()  # 1.0 without fp16; with fp16, scaler.step below syncs anyway
    scaler.step(optimizer)  # skips optimizer.step() when the gradients hold inf or NaN
    scaler.update()
    stepped = scaler.get_scale() >= scale  # the scaler lowers its scale exactly when it skipped the step
    if scheduler is not None and stepped:
        scheduler.step()
    optimizer.zero_grad(set_to_none=True)  # frees the gradients; the next backward writes fresh ones
    return grad_norm, stepped


def evaluate(
    model: nn.Module,
    loader: Iterable,
    *,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    metrics: dict[str, Metric] | None = None,
    device: str | torch.device | None = None,
    precision: str = "fp32",
) -> dict[str, float]:
    """Mean loss and metrics over `loader`, weighted by batch size, in eval mode under inference_mode.

    Sums stay on the device; the host reads them once at the end. Under DDP the sums and counts are added
    across ranks, so every rank returns the mean over all the data the ranks saw.

    Returns:
        {"loss": ..., "<metric>": ...}.
    """
    device = _resolve_device(model, device)
    metrics = metrics or {}
    model.eval()  # dropout off, batch norm uses its running statistics
    count = 0
    with torch.inference_mode(), autocast(device, precision):
        sums = torch.zeros(1 + len(metrics), device=device)
        for batch in loader:
            inputs, targets = _to_device(batch, device)
            outputs = model(inputs)
            values = [loss_fn(outputs, targets), *(fn(outputs, targets) for fn in metrics.values())]
            sums += torch.stack([torch.as_tensor(v, device=device).float() for v in values]) * len(inputs)
            count += len(inputs)
    if count == 0:
        raise ValueError("evaluate got a loader without batches: check the dataset split.")
    totals = all_reduce_sum(torch.cat([sums, torch.tensor([float(count)], device=device)]))
    means = (totals[:-1] / totals[-1]).tolist()  # the evaluation's one host sync
    return dict(zip(["loss", *metrics], means))


@dataclass
class _SyncWindow:
    """Losses and gradient norms left on the device between sync points, then read in one transfer each."""

    epoch: int
    losses: list[torch.Tensor] = field(default_factory=list)
    batches: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    grad_norms: list[torch.Tensor] = field(default_factory=list)
    loss_sum: float = 0.0
    samples: int = 0
    norm_sum: float = 0.0
    norm_count: int = 0
    reported: int = 0

    def add_loss(self, loss: torch.Tensor, batch: int, size: int) -> None:
        self.losses.append(loss)
        self.batches.append(batch)
        self.sizes.append(size)

    def add_grad_norm(self, norm: torch.Tensor) -> None:
        self.grad_norms.append(norm)

    def sync(self, bar: Any) -> None:
        """Read the pending values (a host sync), stop on a non-finite loss, and update the progress bar."""
        if self.grad_norms:
            # skipped fp16 steps have inf norms: leave them out of the mean
            finite = [n for n in torch.stack(self.grad_norms).float().tolist() if math.isfinite(n)]
            self.norm_sum, self.norm_count = self.norm_sum + sum(finite), self.norm_count + len(finite)
            self.grad_norms = []
        if not self.losses:
            return
        values = torch.stack(self.losses).float().tolist()
        bad = next((i for i, v in enumerate(values) if not math.isfinite(v)), None)
        if bad is not None:
            raise NonFiniteLossError(
                f"the loss is {values[bad]} at epoch {self.epoch}, batch {self.batches[bad]}: training stopped. "
                "Likely causes: a learning rate too high, log or division of zero, fp16 overflow, bad input "
                "data. The weights in memory may hold non-finite values; last.pt and best.pt do not. Use "
                "sync_every=1 to stop before the bad update, or on_nonfinite='skip' to leave such batches out."
            )
        self.loss_sum += sum(v * n for v, n in zip(values, self.sizes))
        self.samples += sum(self.sizes)
        if bar is not None and not bar.disable:
            bar.update(self.batches[-1] + 1 - self.reported)
            self.reported = self.batches[-1] + 1
            bar.set_postfix(loss=f"{self.loss_sum / self.samples:.4f}", refresh=False)
        self.losses, self.batches, self.sizes = [], [], []

    def finish(self, device: torch.device) -> tuple[float, float, int]:
        """The epoch's mean loss and mean finite gradient norm (over all ranks under DDP), and this rank's samples."""
        self.sync(None)
        totals = [self.loss_sum, float(self.samples), self.norm_sum, float(self.norm_count)]
        if is_distributed():
            totals = all_reduce_sum(torch.tensor(totals, dtype=torch.float64, device=device)).tolist()
        loss_sum, samples, norm_sum, norm_count = totals
        return (loss_sum / samples if samples else math.nan, norm_sum / norm_count if norm_count else math.nan,
                self.samples)


def _live_plot() -> Any:
    """A LivePlot inside a notebook, else None (matplotlib is imported only when a plot is wanted)."""
    from harness.plots import LivePlot, in_notebook

    return LivePlot() if in_notebook() else None


def _gradient_sync(model: nn.Module, enabled: bool) -> contextlib.AbstractContextManager:
    """Under DDP, skip the gradient all-reduce on micro-batches that are not the last of their group."""
    if isinstance(model, nn.parallel.DistributedDataParallel) and not enabled:
        return model.no_sync()
    return contextlib.nullcontext()


def _to_device(batch: Any, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
        raise ValueError(f"fit expects each batch to be (inputs, targets); got {type(batch).__name__}"
                         f"{f' of length {len(batch)}' if isinstance(batch, (tuple, list)) else ''}.")
    inputs, targets = batch
    # non_blocking overlaps the copy with compute when the loader uses pinned memory
    return inputs.to(device, non_blocking=True), targets.to(device, non_blocking=True)


def _resolve_device(model: nn.Module, device: str | torch.device | None) -> torch.device:
    """The training device, checked against where the model's parameters actually are."""
    params = list(model.parameters())
    if not params:
        raise ValueError("the model has no parameters to train.")
    if device is None:
        device = params[0].device
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    for name, tensor in itertools.chain(model.named_parameters(), model.named_buffers()):
        if tensor.device != device:
            raise OffDeviceError(device, name, tensor.device)
    return device


def _validate_options(model: nn.Module, optimizer: Any, train_loader: Any, val_loader: Any, loss_fn: Any,
                      metrics: dict[str, Any], epochs: Any, max_grad_norm: Any, accumulation_steps: Any,
                      on_nonfinite: Any, sync_every: Any, checkpoint_dir: Any, resume: Any, overwrite: Any) -> None:
    """Fail loudly, with what to do, on any option that cannot work."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}.")
    model_params = {id(p) for p in model.parameters()}
    if any(id(p) not in model_params for group in optimizer.param_groups for p in group["params"]):
        raise ValueError("the optimizer holds parameters that are not the model's: build it from model.parameters().")
    if not callable(loss_fn):
        raise ValueError(f"loss_fn must be callable, e.g. nn.CrossEntropyLoss(); got {loss_fn!r}.")
    for name, fn in metrics.items():
        if not callable(fn) or name == "loss":
            raise ValueError("metrics must map names other than 'loss' to functions (outputs, targets); "
                             f"got {name!r}: {fn!r}.")
    if not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs={epochs!r}: use a whole number >= 1.")
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
    if resume and checkpoint_dir is None:
        raise ValueError("resume=True needs checkpoint_dir: the folder holding last.pt.")
    if overwrite and (resume or checkpoint_dir is None):
        raise ValueError("overwrite=True deletes the run in checkpoint_dir to start a new one: it needs "
                         "checkpoint_dir, and cannot go with resume=True (which continues that run).")
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


def _resolve_scheduler_interval(scheduler: Any, interval: str | None, optimizer: torch.optim.Optimizer) -> str | None:
    """'step', 'epoch' or None (no scheduler); see `fit` for the inference rule."""
    if scheduler is None:
        if interval is not None:
            raise ValueError(f"scheduler_interval={interval!r} was given without a scheduler.")
        return None
    if getattr(scheduler, "optimizer", None) is not optimizer:
        raise ValueError("the scheduler was built on a different optimizer than the one given to fit.")
    if interval not in (None, "step", "epoch"):
        raise ValueError(f"scheduler_interval={interval!r}: use 'step' (per optimizer step) or 'epoch'.")
    if isinstance(scheduler, ReduceLROnPlateau) and interval == "step":
        raise ValueError("ReduceLROnPlateau reacts to a validation metric, which exists once per epoch: "
                         "use scheduler_interval='epoch' (or leave it None).")
    if interval is not None:
        return interval
    if isinstance(scheduler, _PER_STEP_SCHEDULERS):
        return "step"
    if isinstance(scheduler, _PER_EPOCH_SCHEDULERS):
        return "epoch"
    raise ValueError(
        f"{type(scheduler).__name__} can be stepped per optimizer step or per epoch, and its arguments mean "
        "different things in each: pass scheduler_interval='step' (warm-up and cosine over steps) or 'epoch'."
    )


def _make_tracker(early_stopping: EarlyStopping | None, val_loader: Any, metrics: dict[str, Any]) -> EarlyStopping:
    """A fresh EarlyStopping (the caller's object is never mutated) that also picks the best epoch."""
    if early_stopping is None:
        tracker = EarlyStopping(metric="val_loss" if val_loader is not None else "train_loss", patience=None)
    else:
        tracker = EarlyStopping(early_stopping.metric, early_stopping.mode, early_stopping.patience,
                                early_stopping.min_delta)
    known = ["train_loss"] + ([] if val_loader is None else ["val_loss", *(f"val_{m}" for m in metrics)])
    if tracker.metric not in known:
        raise ValueError(f"early stopping monitors {tracker.metric!r}, which this run does not record: "
                         f"choose one of {known} (validation metrics need val_loader and metrics=...).")
    return tracker


def _require_distributed_sampler(loader: DataLoader) -> None:
    if not isinstance(getattr(loader, "sampler", None), DistributedSampler):
        raise ValueError("under DDP each rank must train on its own shard: build the train DataLoader with "
                         "sampler=DistributedSampler(dataset) (and no shuffle=True).")


def _prepare_checkpoint_dir(directory: Path, resume: bool, overwrite: bool, main_process: bool) -> None:
    """Before any training: refuse to touch another run's files unless told, and check the folder can be written.

    Rank 0 also removes the temporary files of saves that were killed and, with overwrite=True, the old run.
    """
    if directory.exists() and not directory.is_dir():
        raise CheckpointError(f"checkpoint_dir {directory} is a file, not a folder: pass a folder's path (fit creates "
                              "it if missing).")
    found = [name for name in _RUN_FILES[:3] if (directory / name).is_file()]
    if found and not resume and not overwrite:
        raise FileExistsError(f"{directory} already holds a run ({', '.join(found)}), which fit does not overwrite "
                              "unasked: pass resume=True to continue it, overwrite=True to delete it and start a new "
                              "run, or choose another checkpoint_dir.")
    if found and resume and "last.pt" not in found:
        raise FileNotFoundError(f"resume=True, but {directory} has no last.pt to resume from, only {', '.join(found)}. "
                                "Put last.pt back to continue that run; to start a new one instead, keep what you "
                                "need elsewhere and pass overwrite=True (without resume), or choose another "
                                "checkpoint_dir.")
    if not main_process:
        return
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):  # the check a read-only folder or disk fails
            pass
    except OSError as error:
        raise CheckpointError(f"cannot write checkpoints into {directory} ({error.strerror}): make it writable or "
                              "choose another checkpoint_dir. Nothing was trained.") from error
    remove_stale_temporaries(directory, _RUN_FILES)
    if overwrite:
        for name in _RUN_FILES:
            (directory / name).unlink(missing_ok=True)


def _repair_run_files(directory: Path, rows: list[dict[str, Any]], tracker: EarlyStopping,
                      config: dict[str, Any]) -> None:
    """After a resume: bring best.pt, history.csv and config.json in line with last.pt.

    A kill between the writes of one epoch (see `_save_run`) leaves last.pt an epoch ahead of the others.
    """
    if tracker.best_epoch == len(rows):  # last.pt's epoch was the best one: best.pt holds the same state
        atomic_copy(directory / "last.pt", directory / "best.pt")
    write_history(history_frame(rows, config), directory)


def _resolved_config(settings: LoopSettings, epochs: int, scheduler: Any, interval: str | None,
                     tracker: EarlyStopping, early_stopping: EarlyStopping | None, metrics: dict[str, Any],
                     loss_fn: Any, optimizer: torch.optim.Optimizer, compile: bool,
                     train_loader: Any) -> dict[str, Any]:
    """Plain values only: saved in checkpoints (weights_only), config.json and history.attrs."""
    return {
        "epochs": epochs, "device": str(settings.device), "precision": settings.precision,
        "max_grad_norm": settings.max_grad_norm, "accumulation_steps": settings.accumulation_steps,
        "scheduler": None if scheduler is None else type(scheduler).__name__, "scheduler_interval": interval,
        "monitor": tracker.metric, "monitor_mode": tracker.mode,
        "early_stopping_patience": None if early_stopping is None else early_stopping.patience,
        "early_stopping_min_delta": None if early_stopping is None else early_stopping.min_delta,
        "metrics": list(metrics), "loss_fn": type(loss_fn).__name__, "optimizer": type(optimizer).__name__,
        "compile": compile, "on_nonfinite": settings.on_nonfinite, "sync_every": settings.sync_every,
        "world_size": get_world_size(), "train_batches": len(train_loader),
    }


def _data_order_generators(loader: Any) -> list[torch.Generator]:
    """The generators that decide the train loader's shuffle (the loader's and its sampler's), once each."""
    found: list[torch.Generator] = []
    for owner in (loader, getattr(loader, "sampler", None), getattr(loader, "batch_sampler", None)):
        generator = getattr(owner, "generator", None)
        if isinstance(generator, torch.Generator) and all(generator is not g for g in found):
            found.append(generator)
    return found


def _start_persistent_workers(*loaders: Any) -> None:
    """Start persistent-worker loaders' workers now, before a resume restores the RNG and data-order states.

    Creating a DataLoader's iterator draws the workers' base seed from the loader's generator (the global
    RNG without one). With persistent workers the iterator is created once: an uninterrupted run drew that
    seed in its first epoch only, before the states its checkpoints hold. A resumed process would draw it
    again in its first resumed epoch, one draw too many, and shuffle differently from then on. Drawn here,
    before the restore, it changes nothing restored; the batches the new workers prefetch are discarded
    when the epoch's `iter(loader)` resets them.
    """
    for loader in loaders:
        if isinstance(loader, DataLoader) and loader.persistent_workers and loader.num_workers > 0:
            iter(loader)


def _gather_rng_states() -> list[dict[str, Any]]:
    """Every rank's RNG states, indexed by rank (each rank drew its own dropout masks)."""
    state = capture_rng_state()
    if not is_distributed():
        return [state]
    states: list[Any] = [None] * get_world_size()
    dist.all_gather_object(states, state)
    return states


def _save_run(directory: Path, raw_model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
              scaler: torch.amp.GradScaler, tracker: EarlyStopping, improved: bool, rows: list[dict[str, Any]],
              config: dict[str, Any], epoch: int, global_step: int, train_loader: Any) -> None:
    """last.pt every epoch, best.pt on improvement, history.csv: written by rank 0, then all ranks wait."""
    # captured now, at the end of the epoch, these are exactly the states the next epoch starts from
    rng = _gather_rng_states()
    if is_main_process():
        state = {
            "epoch": epoch, "global_step": global_step, "early_stopping": tracker.state_dict(),
            "history": rows_to_lists(rows), "rng": rng, "config": config,
            "data_order": [g.get_state() for g in _data_order_generators(train_loader)],
        }
        pieces = {"model": raw_model, "optimizer": optimizer, "scheduler": scheduler, "scaler": scaler}
        # in this order, a kill at any point leaves best.pt no older than the best epoch in history.csv;
        # a resume brings best.pt and history.csv up to last.pt (`_repair_run_files`)
        save_checkpoint(directory / "last.pt", **pieces, **state)
        if improved:
            atomic_copy(directory / "last.pt", directory / "best.pt")  # the same state: copied, not serialized again
        write_history(history_frame(rows, config), directory)
    barrier()  # no rank moves on (or resumes) before the files are complete


def _resume(path: Path, raw_model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
            scaler: torch.amp.GradScaler, tracker: EarlyStopping, train_loader: Any,
            config: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
    """Restore a run from `path`; returns the history rows so far and the global step."""
    saved = load_checkpoint(path, map_location="cpu")  # RNG states must stay CPU tensors
    if "config" not in saved:
        raise CheckpointError(f"{path} was not written by fit (it has no run settings, e.g. save_checkpoint without "
                              "config): fit resumes only its own runs. Load its weights with "
                              "load_checkpoint(path, model=model) and start a run in another checkpoint_dir.")
    before = saved["config"]
    differing = {k: (before.get(k), config[k]) for k in _RESUME_MUST_MATCH if before.get(k) != config[k]}
    if differing:
        raise ValueError(f"{path} was written with different settings (saved, now): {differing}. Resume with the "
                         "same settings, or start a new run in another checkpoint_dir.")
    if config["scheduler_interval"] == "step" and before.get("train_batches") != config["train_batches"]:
        raise ValueError(f"{path} was written with {before.get('train_batches')} batches per epoch, this train loader "
                         f"has {config['train_batches']}: the per-step {config['scheduler']} was built for the first "
                         "run's number of steps. Resume with the same dataset and batch size (and drop_last).")
    restore_checkpoint(saved, path, model=raw_model, optimizer=optimizer, scheduler=scheduler,
                       scaler=scaler if scaler.is_enabled() else None)
    tracker.load_state_dict(saved["early_stopping"])
    rng = saved["rng"]
    if len(rng) != get_world_size():
        raise ValueError(f"{path} was written by {len(rng)} processes; resume it with as many, "
                         f"not {get_world_size()}.")
    restore_rng_state(rng[get_rank()])
    generators = _data_order_generators(train_loader)
    if len(generators) != len(saved["data_order"]):
        raise ValueError(f"{path} saved {len(saved['data_order'])} data-order generator(s) but the train loader has "
                         f"{len(generators)}: build the DataLoader the same way (shuffle, generator) as the first run.")
    for generator, state in zip(generators, saved["data_order"]):
        generator.set_state(state)
    return lists_to_rows(saved["history"]), int(saved["global_step"])
