"""A run's folder (`checkpoint_dir`): prepared before training, written after each epoch, read back on resume.

The folder holds `last.pt` (the full state after the last epoch), `best.pt` (the same for the best epoch),
`history.csv` and `config.json`. Every file is written atomically, in an order that leaves a consistent run
whatever moment the process is killed at; a resume repairs what a kill between two writes left behind.
Rank 0 alone writes; every rank reads `last.pt` on resume and restores its own RNG states.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from harness.checkpoint import (
    CheckpointError,
    atomic_copy,
    load_checkpoint,
    remove_stale_temporaries,
    restore_checkpoint,
    save_checkpoint,
)
from harness.distributed import barrier, get_rank, get_world_size, is_distributed, is_main_process
from harness.history import history_frame, lists_to_rows, rows_to_lists, write_history
from harness.repro import capture_rng_state, restore_rng_state
from harness.run_state import RunState

__all__ = ["RUN_FILES", "prepare_run_folder", "repair_run_files", "resume_run", "save_run"]

# What fit writes into checkpoint_dir; the first three mean the folder holds a run.
RUN_FILES = ("last.pt", "best.pt", "history.csv", "config.json")
# Settings a resumed run must share with the run that wrote the checkpoint.
_RESUME_MUST_MATCH = ("precision", "accumulation_steps", "max_grad_norm", "scheduler", "scheduler_interval", "monitor",
                      "optimizer")


def prepare_run_folder(directory: Path, resume: bool, overwrite: bool, main_process: bool) -> None:
    """Before any training: refuse to touch another run's files unless told, and check the folder can be written.

    Rank 0 also removes the temporary files of saves that were killed and, with overwrite=True, the old run.

    Raises:
        CheckpointError: the path is a file, or the folder cannot be written.
        FileExistsError: the folder holds a run and neither resume nor overwrite was asked.
        FileNotFoundError: resume was asked but the run has no last.pt.
    """
    if directory.exists() and not directory.is_dir():
        raise CheckpointError(f"checkpoint_dir {directory} is a file, not a folder: pass a folder's path (fit creates "
                              "it if missing).")
    found = [name for name in RUN_FILES[:3] if (directory / name).is_file()]
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
    remove_stale_temporaries(directory, RUN_FILES)
    if overwrite:
        for name in RUN_FILES:
            (directory / name).unlink(missing_ok=True)


def save_run(run: RunState, improved: bool) -> None:
    """last.pt every epoch, best.pt on improvement, history.csv: written by rank 0, then all ranks wait."""
    # captured now, at the end of the epoch, these are exactly the states the next epoch starts from
    rng = _gather_rng_states()
    if is_main_process():
        state = {
            "epoch": len(run.rows), "global_step": run.global_step, "early_stopping": run.tracker.state_dict(),
            "history": rows_to_lists(run.rows), "rng": rng, "config": run.config,
            "data_order": [g.get_state() for g in _data_order_generators(run.train_loader)],
        }
        pieces = {"model": run.raw_model, "optimizer": run.optimizer, "scheduler": run.scheduler, "scaler": run.scaler}
        # in this order, a kill at any point leaves best.pt no older than the best epoch in history.csv;
        # a resume brings best.pt and history.csv up to last.pt (`repair_run_files`)
        save_checkpoint(run.folder / "last.pt", **pieces, **state)
        if improved:
            atomic_copy(run.folder / "last.pt", run.folder / "best.pt")  # the same state: copied, not serialized again
        write_history(history_frame(run.rows, run.config), run.folder)
    barrier()  # no rank moves on (or resumes) before the files are complete


def resume_run(run: RunState) -> None:
    """Restore `run` from its folder's last.pt: every piece of state the uninterrupted run had at that point.

    Raises:
        CheckpointError: last.pt was not written by fit.
        ValueError: the run's settings, batches per epoch, process count or data-order generators differ.
    """
    path = run.folder / "last.pt"
    _start_persistent_workers(run.train_loader, run.val_loader)  # draws from the RNGs restored below
    saved = load_checkpoint(path, map_location="cpu")  # RNG states must stay CPU tensors
    if "config" not in saved:
        raise CheckpointError(f"{path} was not written by fit (it has no run settings, e.g. save_checkpoint without "
                              "config): fit resumes only its own runs. Load its weights with "
                              "load_checkpoint(path, model=model) and start a run in another checkpoint_dir.")
    _check_same_run(path, saved["config"], run.config)
    restore_checkpoint(saved, path, model=run.raw_model, optimizer=run.optimizer, scheduler=run.scheduler,
                       scaler=run.scaler if run.scaler.is_enabled() else None)
    run.tracker.load_state_dict(saved["early_stopping"])
    rng = saved["rng"]
    if len(rng) != get_world_size():
        raise ValueError(f"{path} was written by {len(rng)} processes; resume it with as many, "
                         f"not {get_world_size()}.")
    restore_rng_state(rng[get_rank()])
    generators = _data_order_generators(run.train_loader)
    if len(generators) != len(saved["data_order"]):
        raise ValueError(f"{path} saved {len(saved['data_order'])} data-order generator(s) but the train loader has "
                         f"{len(generators)}: build the DataLoader the same way (shuffle, generator) as the first run.")
    for generator, state in zip(generators, saved["data_order"], strict=True):
        generator.set_state(state)
    run.rows, run.global_step = lists_to_rows(saved["history"]), int(saved["global_step"])


def repair_run_files(run: RunState) -> None:
    """After a resume: bring best.pt, history.csv and config.json in line with last.pt (rank 0 only).

    A kill between the writes of one epoch (see `save_run`) leaves last.pt an epoch ahead of the others.
    """
    if run.tracker.best_epoch == len(run.rows):  # last.pt's epoch was the best one: best.pt holds the same state
        atomic_copy(run.folder / "last.pt", run.folder / "best.pt")
    write_history(history_frame(run.rows, run.config), run.folder)


def _check_same_run(path: Path, before: dict[str, Any], now: dict[str, Any]) -> None:
    """The settings a resume must keep, and the batch count a per-step schedule was built for."""
    differing = {k: (before.get(k), now[k]) for k in _RESUME_MUST_MATCH if before.get(k) != now[k]}
    if differing:
        raise ValueError(f"{path} was written with different settings (saved, now): {differing}. Resume with the "
                         "same settings, or start a new run in another checkpoint_dir.")
    if now["scheduler_interval"] == "step" and before.get("train_batches") != now["train_batches"]:
        raise ValueError(f"{path} was written with {before.get('train_batches')} batches per epoch, this train loader "
                         f"has {now['train_batches']}: the per-step {now['scheduler']} was built for the first "
                         "run's number of steps. Resume with the same dataset and batch size (and drop_last).")


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
