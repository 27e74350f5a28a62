"""Checkpoints: save everything needed to resume exactly, write atomically, load strictly and safely.

A checkpoint is a dict of tensors and plain containers only, so it loads with
`torch.load(..., weights_only=True)`, which cannot run code hidden in a malicious file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pickle
import shutil
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import torch
from torch import nn

FORMAT_VERSION = 1


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be written or does not fit what it is loaded into."""


def unwrap_model(model: nn.Module) -> nn.Module:
    """The plain module inside DistributedDataParallel (`.module`) and torch.compile (`._orig_mod`) wrappers.

    Saving the unwrapped module keeps `module.` and `_orig_mod.` prefixes out of the state dict, so the
    checkpoint loads into a plain model.
    """
    while True:
        if isinstance(model, nn.parallel.DistributedDataParallel):
            model = model.module
        elif hasattr(model, "_orig_mod"):
            model = model._orig_mod
        else:
            return model


def save_checkpoint(
    path: str | Path,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
    scaler: torch.amp.GradScaler | None = None,
    **extra: Any,
) -> Path:
    """Write model, optimizer, scheduler and scaler state, plus `extra` plain values, atomically to `path`.

    The file is written to a temporary name in the same directory, flushed and fsynced, then renamed over
    `path` (`os.replace` is atomic), and the directory is fsynced so the rename itself survives a power cut.
    A crash at any moment leaves either the old or the new checkpoint, never half of one.

    Args:
        path: destination file, e.g. `runs/x/last.pt`.
        model: saved unwrapped (no DDP or torch.compile prefixes).
        optimizer, scheduler, scaler: saved through their `state_dict()` when given.
        **extra: tensors and plain values (numbers, strings, lists, dicts), e.g. epoch and history.

    Returns:
        The path written.

    Raises:
        CheckpointError: the model holds NaN or inf weights (saving them would overwrite a good checkpoint).
    """
    weights = unwrap_model(model).state_dict()
    _require_finite(weights, path)
    state = {
        "format": FORMAT_VERSION,
        "model": weights,
        "optimizer": None if optimizer is None else optimizer.state_dict(),
        "scheduler": None if scheduler is None else scheduler.state_dict(),
        "scaler": None if scaler is None else scaler.state_dict(),
        **extra,
    }
    return atomic_torch_save(state, path)


def load_checkpoint(
    path: str | Path,
    *,
    model: nn.Module | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
    scaler: torch.amp.GradScaler | None = None,
    map_location: str | torch.device = "cpu",
) -> dict[str, Any]:
    """Load a checkpoint with `weights_only=True` and restore the objects given into it, strictly.

    Returns:
        The whole checkpoint dict (epoch, history, RNG states and whatever else was saved).

    Raises:
        FileNotFoundError: no file at `path`.
        CheckpointError: a corrupt or truncated file, or weights that do not fit `model` (the message names
            the missing and unexpected keys).
    """
    path = Path(path)
    state = _read(path, map_location)
    restore_checkpoint(state, path, model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler)
    return state


def restore_checkpoint(
    state: dict[str, Any],
    source: str | Path,
    *,
    model: nn.Module | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
    scaler: torch.amp.GradScaler | None = None,
) -> None:
    """Load an already-read checkpoint dict into the objects given (strictly); `source` names it in errors."""
    if model is not None:
        _load_weights(unwrap_model(model), state["model"], source)
    for name, target in (("optimizer", optimizer), ("scheduler", scheduler), ("scaler", scaler)):
        if target is not None:
            if state.get(name) is None:
                raise CheckpointError(f"{source} holds no {name} state, but a {name} was given to restore.")
            try:
                target.load_state_dict(state[name])
            except (KeyError, ValueError, TypeError) as error:
                raise CheckpointError(
                    f"{source}'s {name} state does not fit the {type(target).__name__} given "
                    f"({type(error).__name__}: {error}): build the same {name} (type and parameter groups) "
                    "that wrote it."
                ) from error


def atomic_torch_save(obj: Any, path: str | Path) -> Path:
    """`torch.save(obj, path)` that never leaves a partial file at `path` (see `save_checkpoint`).

    Raises:
        CheckpointError: the disk is full; the message says the previous file at `path` is intact.
    """
    return atomic_write(Path(path), lambda file: torch.save(obj, file))


def atomic_copy(source: str | Path, path: str | Path) -> Path:
    """Copy `source` to `path` with the same guarantee as `atomic_torch_save`: the old or the new file, never half."""
    with open(source, "rb") as original:
        return atomic_write(Path(path), lambda file: shutil.copyfileobj(original, file))


def remove_stale_temporaries(directory: str | Path, names: tuple[str, ...]) -> list[Path]:
    """Delete the temporary files that killed saves of `names` left in `directory`; returns those removed.

    Atomic writes go through `.<name>.<random>.tmp` (or `.<name>.tmp`); a process killed mid-save leaves one
    behind, up to a whole checkpoint in size. Call this only while no save into `directory` is under way.
    """
    removed = []
    for name in names:
        for stale in Path(directory).glob(f".{name}.*tmp"):
            if stale.is_file():
                stale.unlink(missing_ok=True)
                removed.append(stale)
    return removed


def atomic_write(path: Path, write: Callable[[BinaryIO], None]) -> Path:
    """Call `write(file)` on a temporary file in `path`'s folder, fsync it, rename it over `path`, fsync the
    folder: `path` holds the old or the new content, never half of it.

    Raises:
        CheckpointError: the disk is full; the message says the previous file at `path` is intact.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())  # the bytes reach the disk before the rename makes them visible
        os.replace(tmp_name, path)
    except BaseException as error:
        full = _is_disk_full(error, path.parent)  # measured while the partial file still takes its space
        Path(tmp_name).unlink(missing_ok=True)
        if full:
            kept = f"the previous {path.name} is intact" if path.is_file() else f"no {path.name} was written"
            raise CheckpointError(
                f"cannot write {path}: the disk is full; "
                f"{kept}. Free some space (or choose a checkpoint_dir on another disk) and resume."
            ) from error
        raise
    _fsync_directory(path.parent)
    return path


def _is_disk_full(error: BaseException, directory: Path) -> bool:
    """ENOSPC, or torch's zip writer failing (its message hides the errno) on a disk with almost nothing left."""
    if isinstance(error, OSError):
        return error.errno in (errno.ENOSPC, errno.EDQUOT)
    if isinstance(error, RuntimeError):
        with contextlib.suppress(OSError):
            return shutil.disk_usage(directory).free < 2**20
    return False


def _fsync_directory(directory: Path) -> None:
    """Persist a rename: the directory entry lives in the directory, not in the file."""
    if os.name != "posix":  # Windows cannot open a directory; os.replace is still atomic there
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _require_finite(weights: dict[str, torch.Tensor], path: str | Path) -> None:
    floats = [t for t in weights.values() if t.is_floating_point() and t.numel()]
    # one host sync for the whole model, not one per tensor
    if floats and not bool(torch.stack([torch.isfinite(t).all() for t in floats]).all()):
        bad = [name for name, t in weights.items() if t.is_floating_point() and not bool(torch.isfinite(t).all())]
        raise CheckpointError(f"not saving {path}: the model has NaN or inf values in {bad[:5]}; "
                              "the previous file is kept.")


def _read(path: Path, map_location: str | torch.device) -> dict[str, Any]:
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}{_other_checkpoint_hint(path)}")
    if not zipfile.is_zipfile(path):  # torch.save writes a zip archive whose directory sits at the end
        raise CheckpointError(f"{path} is corrupt or truncated: it is not a complete torch.save archive."
                              f"{_other_checkpoint_hint(path)}")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        if "weights_only" not in str(error):
            hint = _other_checkpoint_hint(path)
            raise CheckpointError(f"{path} is corrupt and cannot be loaded ({error}).{hint}") from error
        raise CheckpointError(
            f"{path} holds objects other than tensors and plain containers, which weights_only loading refuses "
            "because unpickling them could run code. Save plain state (state_dict(), numbers, lists, dicts)."
        ) from error
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError) as error:
        raise CheckpointError(
            f"{path} is corrupt or truncated and cannot be loaded ({type(error).__name__}: {str(error)[:200]})."
            f"{_other_checkpoint_hint(path)}"
        ) from error
    if not isinstance(state, dict) or "model" not in state:
        raise CheckpointError(f"{path} is not a harness checkpoint (no 'model' entry): save it with save_checkpoint.")
    return state


def _other_checkpoint_hint(path: Path) -> str:
    others = [p.name for p in sorted(path.parent.glob("*.pt")) if p != path]
    return f" Try another checkpoint in {path.parent}: {', '.join(others)}." if others else ""


def _load_weights(model: nn.Module, weights: dict[str, torch.Tensor], path: str | Path) -> None:
    expected = model.state_dict()
    missing = sorted(set(expected) - set(weights))
    unexpected = sorted(set(weights) - set(expected))
    mismatched = [
        f"{k}: checkpoint {tuple(weights[k].shape)} vs model {tuple(expected[k].shape)}"
        for k in sorted(set(weights) & set(expected))
        if weights[k].shape != expected[k].shape
    ]
    if missing or unexpected or mismatched:
        raise CheckpointError(
            f"{path} was saved from a different model. Missing keys (in the model, not the checkpoint): "
            f"{missing[:10]}; unexpected keys (in the checkpoint, not the model): {unexpected[:10]}; "
            f"shape mismatches: {mismatched[:10]}. Build the same architecture that was saved."
        )
    model.load_state_dict(weights, strict=True)
