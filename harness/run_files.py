"""A run's folder (`checkpoint_dir`): prepared before training, written after each epoch, read back on resume.

The folder holds `last.pt` (the full state after the last epoch), `best.pt` (the same for the best epoch),
`history.csv` and `config.json`. Every file is written atomically, in an order that leaves a consistent run
whatever moment the process is killed at; a resume repairs what a kill between two writes left behind.
Rank 0 alone writes; every rank reads `last.pt` on resume and restores its own RNG states.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
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
from harness.resume_policy import apply_schedule, built_schedule, changed_settings, refuse_changes, saved_schedule
from harness.run_lock import hold_run_folder
from harness.run_state import RunState

__all__ = ["RUN_FILES", "claim_run_folder", "repair_run_files", "resume_run", "save_run"]

# What fit writes into checkpoint_dir; the first three mean the folder holds a run.
RUN_FILES = ("last.pt", "best.pt", "history.csv", "config.json")


@contextmanager
def claim_run_folder(directory: Path, resume: bool, overwrite: bool, main_process: bool) -> Iterator[None]:
    """Hold the run folder for the block (rank 0), after refusing to touch another run's files unless told.

    Rank 0 checks the folder can be written, takes its lock (`harness.run_lock`: a live run elsewhere is
    refused, naming its pid and host), then removes the temporary files of saves that were killed and, with
    overwrite=True, the old run. Other ranks only check the files: rank 0 alone writes.

    Raises:
        CheckpointError: the path is a file, or the folder cannot be written.
        RunFolderBusyError: another live process holds the folder (rank 0).
        FileExistsError: the folder holds a run and neither resume nor overwrite was asked.
        FileNotFoundError: resume was asked but the run has no last.pt.
    """
    if directory.exists() and not directory.is_dir():
        raise CheckpointError(f"checkpoint_dir {directory} is a file, not a folder: pass a folder's path (fit creates "
                              "it if missing).")
    if not main_process:
        _check_run_files(directory, resume, overwrite)
        yield
        return
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):  # the check a read-only folder or disk fails
            pass
    except OSError as error:
        raise CheckpointError(f"cannot write checkpoints into {directory} ({error.strerror}): make it writable or "
                              "choose another checkpoint_dir. Nothing was trained.") from error
    with hold_run_folder(directory, _refused_action(resume, overwrite)):
        _check_run_files(directory, resume, overwrite)
        remove_stale_temporaries(directory, RUN_FILES)  # safe now: no other process saves here
        if overwrite:
            for name in RUN_FILES:
                (directory / name).unlink(missing_ok=True)
        yield


def _refused_action(resume: bool, overwrite: bool) -> str:
    """What a call refused by a live run's lock would have done to that run."""
    if overwrite:
        return "overwrite=True would delete its files while it writes them"
    if resume:
        return "resume=True would continue it a second time, beside itself"
    return "a second run would write its checkpoints over the running one's"


def _check_run_files(directory: Path, resume: bool, overwrite: bool) -> None:
    """Refuse a folder holding a run unless resume or overwrite was asked, and a resume without last.pt."""
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

    Changes from the run that wrote last.pt are refused or applied as `harness.resume_policy` says, all of
    them checked before anything is restored; applied ones are printed (rank 0) and recorded in
    `run.config["resumed_with_changes"]`.

    Raises:
        CheckpointError: last.pt was not written by fit.
        ValueError: the process count, batch size, batches per epoch or a setting that must match differs, the
            run asks for fewer epochs than last.pt holds, or the data-order generators differ.
    """
    path = run.folder / "last.pt"
    _start_persistent_workers(run.train_loader, run.val_loader)  # draws from the RNGs restored below
    saved = load_checkpoint(path, map_location="cpu")  # RNG states must stay CPU tensors
    if "config" not in saved:
        raise CheckpointError(f"{path} was not written by fit (it has no run settings, e.g. save_checkpoint without "
                              "config): fit resumes only its own runs. Load its weights with "
                              "load_checkpoint(path, model=model) and start a run in another checkpoint_dir.")
    refuse_changes(path, saved, run.config)
    generators = _data_order_generators(run.train_loader)
    if len(generators) != len(saved["data_order"]):
        raise ValueError(f"{path} saved {len(saved['data_order'])} data-order generator(s) but the train loader has "
                         f"{len(generators)}: build the DataLoader the same way (shuffle, generator) as the first run.")
    built = built_schedule(run.scheduler, run.optimizer)  # before the restore overwrites it with the checkpoint's
    restore_checkpoint(saved, path, model=run.raw_model, optimizer=run.optimizer, scheduler=run.scheduler,
                       scaler=run.scaler if run.scaler.is_enabled() else None)
    run.tracker.load_state_dict(saved["early_stopping"])
    restore_rng_state(saved["rng"][get_rank()])
    for generator, state in zip(generators, saved["data_order"], strict=True):
        generator.set_state(state)
    run.rows, run.global_step = lists_to_rows(saved["history"]), int(saved["global_step"])

    changes = {}
    if saved["config"]["epochs"] != run.config["epochs"]:
        changes["epochs"] = [saved["config"]["epochs"], run.config["epochs"]]
    schedule_changes = changed_settings(saved_schedule(saved), None if built is None else built.definition)
    if schedule_changes:
        apply_schedule(run.scheduler, run.optimizer, built, saved["scheduler"]["last_epoch"])
        changes[run.config["scheduler"]] = schedule_changes
    _record_changes(run, saved, changes)


def _record_changes(run: RunState, saved: dict[str, Any], changes: dict[str, Any]) -> None:
    """Carry the checkpoint's record of earlier resumes with changes, add this one's, and say it (rank 0)."""
    record = list(saved["config"].get("resumed_with_changes", []))
    if changes:
        record.append({"after_epoch": saved["epoch"], **changes})
        if is_main_process():
            print(f"resuming {run.folder / 'last.pt'} after epoch {saved['epoch']} with changes: "
                  f"{_describe(changes)}.", flush=True)
    if record:
        run.config["resumed_with_changes"] = record


def _describe(changes: dict[str, Any]) -> str:
    """'epochs 10 -> 20; OneCycleLR total_steps 100 -> 200 (...)'."""
    parts = []
    for name, value in changes.items():
        if name == "epochs":
            parts.append(f"epochs {value[0]} -> {value[1]}")
        else:
            settings = ", ".join(f"{key} {old} -> {new}" for key, (old, new) in value.items())
            parts.append(f"{name} {settings} (the new schedule applies from this step on)")
    return "; ".join(parts)


def repair_run_files(run: RunState) -> None:
    """After a resume: bring best.pt, history.csv and config.json in line with last.pt (rank 0 only).

    A kill between the writes of one epoch (see `save_run`) leaves last.pt an epoch ahead of the others.
    """
    if run.tracker.best_epoch == len(run.rows):  # last.pt's epoch was the best one: best.pt holds the same state
        atomic_copy(run.folder / "last.pt", run.folder / "best.pt")
    write_history(history_frame(run.rows, run.config), run.folder)


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
