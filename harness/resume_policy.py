"""What a resumed run may change from the run that wrote its `last.pt`, and how each change is handled.

Nothing is kept or rewritten silently: every difference between the checkpoint's run and the resuming call
is refused with a message naming it, or applied and stated (printed by rank 0 and recorded in the run's
config under "resumed_with_changes").

Refused: another process count (world size), batch size or number of batches per epoch (the data order,
each rank's RNG states and a per-step schedule belong to them), another precision, accumulation, clipping,
optimizer, monitored metric, scheduler type or interval, and fewer epochs than `last.pt` already holds.

Applied: more epochs (the run goes on to the new count), and a scheduler built with other settings (a
longer OneCycleLR or CosineAnnealingLR, another max_lr...). The scheduler passed to the resuming `fit`
defines the schedule; the checkpoint gives how far along it the run is. From the next step on, the learning
rate is the one the new schedule gives at that step, as if it had been used from the start. So a 10-epoch
cosine run resumed with `epochs=20` and `T_max` for 20 epochs continues from the middle of the 20-epoch
cosine. (A scheduler whose schedule ends before the run does is refused by `check_schedule_length`.)
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.optim.lr_scheduler import ReduceLROnPlateau

__all__ = ["BuiltSchedule", "ScheduleDefinition", "apply_schedule", "built_schedule", "changed_settings",
           "refuse_changes", "saved_schedule"]

# Settings a resumed run must share with the run that wrote the checkpoint.
_MUST_MATCH = ("precision", "accumulation_steps", "max_grad_norm", "scheduler", "scheduler_interval", "monitor",
               "optimizer")
# A scheduler's state that is its progress along the schedule, not the schedule itself.
_PROGRESS = frozenset({"last_epoch", "_step_count", "_is_initial", "_get_lr_called_within_step", "_last_lr", "best",
                       "num_bad_epochs", "cooldown_counter"})
# What LR schedulers write into the optimizer's parameter groups: part of the schedule (OneCycleLR's max_lr).
_GROUP_KEYS = ("initial_lr", "max_lr", "min_lr", "max_momentum", "base_momentum")


@dataclass(frozen=True)
class ScheduleDefinition:
    """A scheduler's settings: its state without its progress, and the schedule's keys in the optimizer's groups."""

    state: dict[str, Any]
    groups: list[dict[str, Any]]


@dataclass(frozen=True)
class BuiltSchedule:
    """A scheduler as the resuming call built it, before the checkpoint is restored into it."""

    definition: ScheduleDefinition
    state: dict[str, Any]  # its whole state at step 0
    lrs: list[float]  # the optimizer's learning rates at step 0


def refuse_changes(path: Path, saved: dict[str, Any], now: dict[str, Any]) -> None:
    """Refuse the changes a resume cannot apply, naming the first one found; check this before restoring anything.

    Args:
        path: the checkpoint, for messages.
        saved: the checkpoint (its "config", "rng" and "epoch").
        now: the resuming run's resolved configuration.

    Raises:
        ValueError: the process count, batch size, batches per epoch or a must-match setting changed, or the
            run asks for fewer epochs than the checkpoint already holds.
    """
    before = saved["config"]
    processes = before.get("world_size", len(saved["rng"]))
    if processes != now["world_size"]:
        raise ValueError(
            f"{path} was written by a run of {processes} process(es) and this one has {now['world_size']}: the "
            "process count (world size) changed. Each rank's RNG states and its shard of the data belong to its "
            f"rank: resume with {processes} process(es) (nproc_per_node / launch(..., {processes})), or start a new "
            "run from its weights (load_checkpoint(path, model=model)) in another checkpoint_dir.")
    sizes = before.get("batch_size"), now["batch_size"]  # None for a loader without one (a list of batches)
    size_changed = None not in sizes and sizes[0] != sizes[1]
    if size_changed or before.get("train_batches") != now["train_batches"]:
        what = (f"the batch size changed (batch_size={sizes[0]} in {path.name}, {sizes[1]} now)"
                if size_changed else "the training data changed (its size, or drop_last)")
        raise ValueError(
            f"{path} was written with {before.get('train_batches')} batches per epoch, this train loader has "
            f"{now['train_batches']}: {what}. A resume continues the same steps (data order, per-step schedule): "
            "resume with the same dataset and batch size, or start a new run from its weights "
            "(load_checkpoint(path, model=model)) in another checkpoint_dir.")
    differing = {k: (before.get(k), now[k]) for k in _MUST_MATCH if before.get(k) != now[k]}
    if differing:
        raise ValueError(f"{path} was written with different settings (saved, now): {differing}. Resume with the same "
                         "settings, or start a new run in another checkpoint_dir.")
    if now["epochs"] < saved["epoch"]:
        raise ValueError(f"epochs={now['epochs']}, but {path} already holds {saved['epoch']} epochs: pass "
                         f"epochs={saved['epoch']} (nothing more to train) or more to train further.")


def built_schedule(scheduler: Any, optimizer: torch.optim.Optimizer) -> BuiltSchedule | None:
    """Capture `scheduler` as built (call before restoring a checkpoint into it); None without a scheduler."""
    if scheduler is None:
        return None
    state = scheduler.state_dict()
    return BuiltSchedule(_definition(state, optimizer.param_groups), state, [g["lr"] for g in optimizer.param_groups])


def saved_schedule(saved: dict[str, Any]) -> ScheduleDefinition | None:
    """The schedule of the run that wrote the checkpoint `saved`; None without a scheduler."""
    if saved.get("scheduler") is None:
        return None
    return _definition(saved["scheduler"], saved["optimizer"]["param_groups"])


def _definition(state: dict[str, Any], groups: list[dict[str, Any]]) -> ScheduleDefinition:
    return ScheduleDefinition(_without_progress(state), [{k: g[k] for k in _GROUP_KEYS if k in g} for g in groups])


def _without_progress(value: Any) -> Any:
    """A scheduler state without its progress, also inside nested schedulers (SequentialLR, ChainedScheduler)."""
    if isinstance(value, dict):
        return {k: _without_progress(v) for k, v in value.items() if k not in _PROGRESS}
    if isinstance(value, list):
        return [_without_progress(v) for v in value]
    return value


def changed_settings(before: ScheduleDefinition | None, now: ScheduleDefinition | None) -> dict[str, list[Any]]:
    """The public settings that differ, as name -> [before, now] (empty when the schedules are the same)."""
    if before is None or now is None or before == now:
        return {}
    changes = {k: [before.state.get(k), v] for k, v in now.state.items()
               if before.state.get(k) != v and not k.startswith("_")}
    for old, new in zip(before.groups, now.groups, strict=False):
        changes.update({k: [old.get(k), v] for k, v in new.items() if old.get(k) != v})
    return changes or {"schedule": ["as saved", "rebuilt differently"]}


def apply_schedule(scheduler: Any, optimizer: torch.optim.Optimizer, built: BuiltSchedule, steps_done: int) -> None:
    """Put `scheduler` (restored from a checkpoint) on the schedule it was `built` with, `steps_done` steps along.

    ReduceLROnPlateau keeps its progress (best value, bad epochs) and the current learning rate under its new
    settings. Any other scheduler restarts from its state as built and is stepped `steps_done` times without
    training, which leaves the learning rate (and momentum) the new schedule gives at this step.
    """
    for group, keys in zip(optimizer.param_groups, built.definition.groups, strict=True):
        group.update(keys)
    if isinstance(scheduler, ReduceLROnPlateau):
        progress = {k: v for k, v in scheduler.state_dict().items() if k in _PROGRESS}
        scheduler.load_state_dict({**built.state, **progress})
        return
    scheduler.load_state_dict(built.state)
    for group, lr in zip(optimizer.param_groups, built.lrs, strict=True):
        group["lr"] = lr
    with warnings.catch_warnings():  # "lr_scheduler.step() before optimizer.step()": no training happens here
        warnings.simplefilter("ignore", UserWarning)
        for _ in range(steps_done):
            scheduler.step()
