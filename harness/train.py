"""`fit`: the training loop every lesson and the capstone run. Read it top to bottom, in execution order.

`fit` checks its arguments (`harness.fit_options`), gathers the run's pieces in a `RunState`
(`harness.run_state`), wraps the model (torch.compile, then DDP), resumes from `last.pt` if asked
(`harness.run_files`), then loops over epochs: `train_one_epoch` (forward and loss under autocast, backward,
and every `accumulation_steps` micro-batches one `optimizer_step`), `evaluate` on the validation data
(`harness.evaluation`), the per-epoch scheduler, early stopping, then the run's files and the history row.

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
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch import nn
from torch.optim.lr_scheduler import CyclicLR, ExponentialLR, MultiStepLR, OneCycleLR, ReduceLROnPlateau, StepLR
from torch.utils.data import DataLoader, DistributedSampler

from harness.amp import autocast, make_scaler, validate_precision
from harness.distributed import all_reduce_sum, get_world_size, is_distributed, is_main_process
from harness.early_stopping import EarlyStopping
from harness.evaluation import Metric, batch_to_device, evaluate
from harness.fit_options import (
    OffDeviceError,
    check_equal_batch_counts,
    check_folder_options,
    check_loaders,
    check_loop_settings,
    check_loss,
    check_schedule_length,
    check_training,
    resolve_device,
)
from harness.history import history_frame
from harness.progress import epoch_bar, format_epoch_line, progress_enabled
from harness.run_files import claim_run_folder, repair_run_files, resume_run, save_run
from harness.run_lock import RunFolderBusyError
from harness.run_state import LoopSettings, RunState

__all__ = ["EarlyStopping", "LoopSettings", "NonFiniteLossError", "OffDeviceError", "RunFolderBusyError", "evaluate",
           "fit", "optimizer_step", "train_one_epoch"]

# Schedulers whose arguments are conventionally counted in optimizer steps or in epochs. Any other
# scheduler (LambdaLR, CosineAnnealingLR, LinearLR, SequentialLR...) means different things stepped per
# step or per epoch, so fit asks for `scheduler_interval` rather than guess.
_PER_STEP_SCHEDULERS = (OneCycleLR, CyclicLR)
_PER_EPOCH_SCHEDULERS = (ReduceLROnPlateau, StepLR, MultiStepLR, ExponentialLR)


class NonFiniteLossError(FloatingPointError):
    """The loss became NaN or inf; training stopped."""



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
        loss_fn: `loss_fn(outputs, targets)` -> the batch's mean loss: a floating-point scalar tensor with a
            gradient (anything else is refused at the first batch, saying what it is).
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
            `history.csv` and `config.json` (rank 0 only). One live run per folder: rank 0 holds `fit.lock`
            there until fit returns; another fit, resume or overwrite on the folder meanwhile is refused.
        resume: continue from `checkpoint_dir/last.pt` when it exists (weights, optimizer, scheduler,
            scaler, early stopping, history, RNG and data-order states), else start fresh. A run killed at
            any moment resumes from its last complete epoch; `best.pt`, `history.csv` and `config.json`
            are brought in line with `last.pt` first. More epochs, or a scheduler built with other settings,
            are applied and stated (the new schedule continues from the checkpoint's step); another process
            count, batch size, batches per epoch, precision, accumulation, clipping, optimizer, scheduler type
            or monitored metric is refused (`harness.resume_policy`).
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
        RunFolderBusyError: a live process (named by pid and host) is running a fit in `checkpoint_dir`.
        FileNotFoundError: resume=True, and `checkpoint_dir` holds `best.pt` or `history.csv` but no `last.pt`.
        CheckpointError: `checkpoint_dir` cannot be written (a file, read-only, a full disk).
        NonFiniteLossError: a NaN or inf loss with on_nonfinite="raise".
    """
    # --- configuration: check everything before doing any work -------------------------------------
    device = resolve_device(model, device)
    validate_precision(precision, device)
    metrics = dict(metrics or {})
    check_training(model, optimizer, loss_fn, epochs, metrics)
    check_loop_settings(max_grad_norm, accumulation_steps, on_nonfinite, sync_every)
    check_folder_options(checkpoint_dir, resume, overwrite)
    check_loaders(train_loader, val_loader)
    check_equal_batch_counts(train_loader)  # under DDP: a rank with fewer batches would leave the others waiting
    interval = _resolve_scheduler_interval(scheduler, scheduler_interval, optimizer)
    check_schedule_length(scheduler, interval, epochs, len(train_loader), accumulation_steps)
    tracker = _make_tracker(early_stopping, scheduler, val_loader, metrics)  # early stopping, and the best epoch
    folder = None if checkpoint_dir is None else Path(checkpoint_dir)
    main_process = is_main_process()  # rank 0 alone logs, plots and writes files
    # one live run per folder: rank 0 holds its lock until fit returns (the kernel frees it if the process dies)
    claim = contextlib.nullcontext() if folder is None else claim_run_folder(folder, resume, overwrite, main_process)
    with claim:
        # --- the run: model wrappers (compile first, then DDP: nanoGPT's order; checkpoints use raw_model) -
        run = RunState(
            model=_wrap(model, compile, device, train_loader), raw_model=model, optimizer=optimizer,
            scheduler=scheduler, interval=interval, scaler=make_scaler(device, precision), tracker=tracker,
            loss_fn=loss_fn, metrics=metrics, train_loader=train_loader, val_loader=val_loader,
            settings=LoopSettings(device, precision, max_grad_norm, accumulation_steps, on_nonfinite, sync_every),
            epochs=epochs, folder=folder)
        run.config = _resolved_config(run, early_stopping, compile)

        # --- resume: restore every piece of state the uninterrupted run would have at this point -------
        if resume and (folder / "last.pt").is_file():
            resume_run(run)  # refuses, or applies and states, what changed since last.pt (resume_policy)
            if main_process:
                repair_run_files(run)

        live = _live_plot() if live_plot and main_process else None
        # a line of results per epoch on stdout: with the progress bar, or as the live plot outside notebooks
        show_lines = main_process and (progress_enabled(progress) or (live_plot and live is None))

        # --- the epochs ---------------------------------------------------------------------------------
        for epoch in range(len(run.rows) + 1, epochs + 1):
            if tracker.should_stop:  # a resumed run that had already stopped early
                break
            row, improved = _run_epoch(run, epoch, progress=main_process and progress_enabled(progress))
            run.rows.append(row)
            if folder is not None:
                save_run(run, improved)
            if show_lines:
                print(format_epoch_line(row, epochs), flush=True)
            if live is not None:
                live.update(history_frame(run.rows, run.config), force=epoch == epochs or tracker.should_stop)
            if on_epoch_end is not None:
                on_epoch_end(epoch, row)
    if show_lines and tracker.should_stop:
        print(f"early stopping: {tracker.metric} has not improved for {tracker.patience} epochs "
              f"(best {tracker.best:.4f} at epoch {tracker.best_epoch})", flush=True)
    return history_frame(run.rows, run.config)


def _run_epoch(run: RunState, epoch: int, progress: bool) -> tuple[dict[str, Any], bool]:
    """Train one epoch, validate, step a per-epoch scheduler, update the tracker: the history row, and
    whether this epoch is the best so far."""
    loader = run.train_loader
    if isinstance(getattr(loader, "sampler", None), DistributedSampler):
        loader.sampler.set_epoch(epoch)  # a new shuffle each epoch, the same one on every rank
    started = time.perf_counter()
    bar = epoch_bar(len(loader), epoch, run.epochs, enabled=progress)
    result = train_one_epoch(run.model, loader, loss_fn=run.loss_fn, optimizer=run.optimizer, scaler=run.scaler,
                             scheduler=run.scheduler if run.interval == "step" else None, settings=run.settings,
                             epoch=epoch, global_step=run.global_step, bar=bar)
    train_seconds = time.perf_counter() - started
    run.global_step = result.global_step

    row: dict[str, Any] = {"epoch": epoch, "train_loss": result.train_loss}
    if run.val_loader is not None:
        scores = evaluate(run.model, run.val_loader, loss_fn=run.loss_fn, metrics=run.metrics,
                          device=run.settings.device, precision=run.settings.precision)
        row.update({f"val_{name}": value for name, value in scores.items()})
    bar.close()
    if isinstance(run.scheduler, ReduceLROnPlateau):
        run.scheduler.step(row[run.tracker.metric])  # the monitored validation metric, never the training loss
    elif run.interval == "epoch":
        run.scheduler.step()
    improved = run.tracker.update(row[run.tracker.metric], epoch)
    row.update(lr=result.lr, grad_norm=result.grad_norm, skipped_steps=result.skipped_steps,
               epoch_seconds=time.perf_counter() - started,
               samples_per_second=result.samples * get_world_size() / train_seconds)
    return row, improved


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
        inputs, targets = batch_to_device(batch, device)
        group_start = index - index % group
        group_size = min(group, n_batches - group_start)  # the last group may be partial
        last_of_group = index == group_start + group_size - 1

        kept = [b.clone() for b in buffers]
        with autocast(device, settings.precision):  # forward and loss only: backward runs outside autocast
            outputs = _forward(model, inputs, epoch, index)
            loss = loss_fn(outputs, targets)
        check_loss(loss, epoch, index)  # a scalar float tensor with a gradient (metadata only: no host sync)
        if settings.on_nonfinite == "skip" and not torch.isfinite(loss):  # host sync: the price of skipping
            skipped += 1
            for buffer, before in zip(buffers, kept, strict=True):
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
        self.loss_sum += sum(v * n for v, n in zip(values, self.sizes, strict=True))
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


def _forward(model: nn.Module, inputs: torch.Tensor, epoch: int, batch: int) -> torch.Tensor:
    """`model(inputs)`, with BatchNorm's error for a batch of one sample explained."""
    try:
        return model(inputs)
    except ValueError as error:
        if "Expected more than 1 value per channel" not in str(error):
            raise
        raise ValueError(f"batch {batch} of epoch {epoch} holds {len(inputs)} sample, and BatchNorm cannot compute "
                         "batch statistics from one sample in training: the dataset's size leaves a last batch of "
                         "one. Pass drop_last=True to the train DataLoader (or pick a batch_size that divides the "
                         "dataset).") from error


def _live_plot() -> Any:
    """A LivePlot inside a notebook, else None (matplotlib is imported only when a plot is wanted)."""
    from harness.plots import LivePlot, in_notebook

    return LivePlot() if in_notebook() else None


def _gradient_sync(model: nn.Module, enabled: bool) -> contextlib.AbstractContextManager:
    """Under DDP, skip the gradient all-reduce on micro-batches that are not the last of their group."""
    if isinstance(model, nn.parallel.DistributedDataParallel) and not enabled:
        return model.no_sync()
    return contextlib.nullcontext()



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



def _make_tracker(early_stopping: EarlyStopping | None, scheduler: Any, val_loader: Any,
                  metrics: dict[str, Any]) -> EarlyStopping:
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
    if isinstance(scheduler, ReduceLROnPlateau) and val_loader is None:
        raise ValueError("ReduceLROnPlateau reacts to a validation metric: pass val_loader.")
    if isinstance(scheduler, ReduceLROnPlateau) and scheduler.mode != tracker.mode:
        raise ValueError(f"ReduceLROnPlateau(mode={scheduler.mode!r}) watches {tracker.metric}, which improves "
                         f"in mode {tracker.mode!r}: build the scheduler with mode={tracker.mode!r}.")
    return tracker


def _wrap(model: nn.Module, compile: bool, device: torch.device, train_loader: Any) -> nn.Module:
    """The module that trains: compiled if asked, then wrapped in DDP under torchrun."""
    if compile:
        model = torch.compile(model)
    if is_distributed():
        if not isinstance(getattr(train_loader, "sampler", None), DistributedSampler):
            raise ValueError("under DDP each rank must train on its own shard: build the train DataLoader with "
                             "sampler=DistributedSampler(dataset) (and no shuffle=True).")
        model = nn.parallel.DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
    return model


def _resolved_config(run: RunState, early_stopping: EarlyStopping | None, compile: bool) -> dict[str, Any]:
    """Plain values only: saved in checkpoints (weights_only), config.json and history.attrs."""
    settings, tracker = run.settings, run.tracker
    return {
        "epochs": run.epochs, "device": str(settings.device), "precision": settings.precision,
        "max_grad_norm": settings.max_grad_norm, "accumulation_steps": settings.accumulation_steps,
        "scheduler": None if run.scheduler is None else type(run.scheduler).__name__,
        "scheduler_interval": run.interval, "monitor": tracker.metric, "monitor_mode": tracker.mode,
        "early_stopping_patience": None if early_stopping is None else early_stopping.patience,
        "early_stopping_min_delta": None if early_stopping is None else early_stopping.min_delta,
        "metrics": list(run.metrics), "loss_fn": type(run.loss_fn).__name__,
        "optimizer": type(run.optimizer).__name__, "compile": compile, "on_nonfinite": settings.on_nonfinite,
        "sync_every": settings.sync_every, "world_size": get_world_size(), "train_batches": len(run.train_loader),
        "batch_size": getattr(run.train_loader, "batch_size", None),
    }
