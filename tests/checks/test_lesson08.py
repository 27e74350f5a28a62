"""Lesson 08 checks: each rejects its planted bugs with the right code and accepts correct variants.

The resume implementations are module-level functions: the check rebuilds them from source in a fresh
process, exactly as it does for functions defined in a notebook.
"""

from __future__ import annotations

import functools
import os
import pickle
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pytest
import torch

from harness.checks import CheckFailed, check
from harness.checks.testing import Correct, Mistake, assert_check_fails, solution_cell
from harness.repro import capture_rng_state, restore_rng_state
from tests.exercises import notebook_namespace


# ---------------------------------------------------------------------------------------------- portable
def portable_loop(state_dict):
    clean = {}
    for key, value in state_dict.items():
        while key.startswith(("module.", "_orig_mod.")):
            key = key.split(".", 1)[1]
        clean[key] = value
    return clean


def portable_removeprefix(state_dict):
    def strip(key: str) -> str:
        shorter = key.removeprefix("module.").removeprefix("_orig_mod.")
        return key if shorter == key else strip(shorter)

    return type(state_dict)((strip(k), v) for k, v in state_dict.items())


def portable_regex(state_dict):
    import re

    leading = re.compile(r"^(?:module\.|_orig_mod\.)+")
    return {leading.sub("", key): value for key, value in state_dict.items()}


def portable_once(state_dict):
    return {k.removeprefix("module.").removeprefix("_orig_mod."): v for k, v in state_dict.items()}


def portable_replace(state_dict):
    return {k.replace("module.", "").replace("_orig_mod.", ""): v for k, v in state_dict.items()}


def portable_in_place(state_dict):
    for key in list(state_dict):
        state_dict[portable_loop({key: None}).popitem()[0]] = state_dict.pop(key)
    return state_dict


def portable_fixed_order(state_dict):
    return {k.removeprefix("_orig_mod.").removeprefix("module."): v for k, v in state_dict.items()}


def portable_lstrip(state_dict):
    # B005 flags the planted bug itself: lstrip strips a set of characters, not a prefix
    return {k.lstrip("module.").lstrip("_orig_mod."): v for k, v in state_dict.items()}  # noqa: B005


def portable_split_on_module(state_dict):
    clean = {}
    for key, value in state_dict.items():
        while key.startswith(("module", "_orig_mod")):
            key = key.split(".", 1)[1]
        clean[key] = value
    return clean


def portable_twice(state_dict):
    def strip(key):
        for _ in range(2):  # "DDP and compile: at most two wrappers"
            for prefix in ("module.", "_orig_mod."):
                if key.startswith(prefix):
                    key = key[len(prefix):]
                    break
        return key

    return {strip(k): v for k, v in state_dict.items()}


def portable_items(state_dict):
    return [(portable_loop({k: None}).popitem()[0], v) for k, v in state_dict.items()]


def portable_zeroed(state_dict):
    return {k: torch.zeros_like(v) for k, v in portable_loop(state_dict).items()}


@pytest.mark.slow
def test_wrapper_prefixes_name_keys_like_the_real_wrappers():
    from harness.checks.lesson08.portable import _WRAPPERS, Net

    net = Net()
    real = [
        net, torch.nn.DataParallel(net), torch.compile(net), torch.compile(torch.nn.DataParallel(net)),
        torch.nn.DataParallel(torch.compile(net)), torch.nn.DataParallel(torch.nn.DataParallel(net)),
        torch.nn.DataParallel(torch.compile(torch.nn.DataParallel(net))),
    ]
    for wrapper, (_, prefix) in zip(real, _WRAPPERS, strict=True):
        assert list(wrapper.state_dict()) == [prefix + key for key in net.state_dict()]


# ---------------------------------------------------------------------------------------------- early stopping
class EarlyStoppingCounter:
    def __init__(self, patience, mode="min", min_delta=0.0):
        self.patience, self.mode, self.min_delta = patience, mode, min_delta
        self.best, self.bad_epochs = None, 0

    def _improves(self, value):
        if self.best is None:
            return True
        return value < self.best - self.min_delta if self.mode == "min" else value > self.best + self.min_delta

    def step(self, value):
        if self._improves(value):
            self.best, self.bad_epochs = value, 0
        else:
            self.bad_epochs += 1
        return self.bad_epochs >= self.patience

    def state_dict(self):
        return {"best": self.best, "bad_epochs": self.bad_epochs}

    def load_state_dict(self, state):
        self.best, self.bad_epochs = state["best"], state["bad_epochs"]


class EarlyStoppingSigned:
    """Another correct design: keep a signed best and the epoch of the best."""

    def __init__(self, patience, mode="min", min_delta=0.0):
        self.patience, self.sign, self.min_delta = patience, 1.0 if mode == "min" else -1.0, min_delta
        self.epoch, self.best_epoch, self._signed_best = 0, 0, float("inf")

    @property
    def best(self):
        return None if self._signed_best == float("inf") else self.sign * self._signed_best

    def step(self, value):
        self.epoch += 1
        if self.sign * value < self._signed_best - self.min_delta:
            self._signed_best, self.best_epoch = self.sign * value, self.epoch
        return self.epoch - self.best_epoch >= self.patience

    def state_dict(self):
        return {"epoch": self.epoch, "best_epoch": self.best_epoch, "signed_best": self._signed_best}

    def load_state_dict(self, state):
        self.epoch, self.best_epoch, self._signed_best = state["epoch"], state["best_epoch"], state["signed_best"]


class EarlyStoppingDifference:
    """The comparison written as a difference, as harness/early_stopping.py writes it (issue 29: the visible case
    decided on float rounding and failed this)."""

    def __init__(self, patience, mode="min", min_delta=0.0):
        self.patience, self.mode, self.min_delta = patience, mode, min_delta
        self.best, self.bad_epochs = None, 0

    def step(self, metric):
        gain = None if self.best is None else (self.best - metric if self.mode == "min" else metric - self.best)
        if gain is None or gain > self.min_delta:
            self.best, self.bad_epochs = metric, 0
        else:
            self.bad_epochs += 1
        return self.bad_epochs >= self.patience

    def state_dict(self):
        return dict(vars(self))

    def load_state_dict(self, state):
        vars(self).update(state)


@dataclass
class EarlyStoppingDataclass:
    """A dataclass whose state_dict is dataclasses.asdict; best is read from the history of improvements."""

    patience: int
    mode: str = "min"
    min_delta: float = 0.0
    bad_epochs: int = 0
    history: list = field(default_factory=list)

    @property
    def best(self):
        if not self.history:
            return None
        return min(self.history) if self.mode == "min" else max(self.history)

    def step(self, metric):
        sign = 1.0 if self.mode == "min" else -1.0
        improved = self.best is None or sign * metric < sign * self.best - self.min_delta
        self.bad_epochs = 0 if improved else self.bad_epochs + 1
        if improved:
            self.history.append(float(metric))
        return self.bad_epochs >= self.patience

    def state_dict(self):
        return asdict(self)

    def load_state_dict(self, state):
        for key, value in state.items():
            setattr(self, key, value)


class EarlyStoppingForgetful(EarlyStoppingCounter):
    def state_dict(self):
        return {"best": self.best}

    def load_state_dict(self, state):
        self.best = state["best"]


class EarlyStoppingSelfState(EarlyStoppingCounter):
    def state_dict(self):
        return {"stopper": self}


class EarlyStoppingNoReset(EarlyStoppingCounter):
    def step(self, value):
        if self._improves(value):
            self.best = value
        else:
            self.bad_epochs += 1
        return self.bad_epochs >= self.patience


class EarlyStoppingTieImproves(EarlyStoppingCounter):
    def _improves(self, value):
        if self.best is None:
            return True
        return value <= self.best - self.min_delta if self.mode == "min" else value >= self.best + self.min_delta


class EarlyStoppingMinOnly(EarlyStoppingCounter):
    def _improves(self, value):
        return self.best is None or value < self.best - self.min_delta


class EarlyStoppingStrict(EarlyStoppingCounter):
    def step(self, value):
        super().step(value)
        return self.bad_epochs > self.patience


class EarlyStoppingInfBest(EarlyStoppingCounter):
    def __init__(self, patience, mode="min", min_delta=0.0):
        super().__init__(patience, mode, min_delta)
        self.best = float("inf") if mode == "min" else float("-inf")

    def _improves(self, value):
        return value < self.best - self.min_delta if self.mode == "min" else value > self.best + self.min_delta


class EarlyStoppingLastAsBest(EarlyStoppingCounter):
    def step(self, value):
        stop = super().step(value)
        self.best = value
        return stop


class EarlyStoppingNoDelta(EarlyStoppingCounter):
    def _improves(self, value):
        return self.best is None or (value < self.best if self.mode == "min" else value > self.best)


# ---------------------------------------------------------------------------------------------- atomic save
def atomic_save_suffix(obj, path):
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_save_mkstemp(obj, path):
    import tempfile

    path = Path(path)
    fd, name = tempfile.mkstemp(dir=path.parent, suffix=".partial")
    try:
        with os.fdopen(fd, "wb") as file:
            torch.save(obj, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(name, path)
    except BaseException:
        os.unlink(name)
        raise


def atomic_save_named_temporary(obj, path):
    """Another correct variant: a NamedTemporaryFile in the folder (delete=False), renamed when complete."""
    import tempfile

    folder = os.path.dirname(os.fspath(path)) or "."
    with tempfile.NamedTemporaryFile(dir=folder, prefix=".saving-", delete=False) as file:
        name = file.name
        try:
            torch.save(obj, file)
        except BaseException:
            file.close()
            os.remove(name)
            raise
    os.replace(name, path)


def atomic_move_from_subfolder(obj, path):
    """Another correct variant: a temporary file in a subfolder of path's folder, then shutil.move (a rename
    there: the same file system)."""
    import shutil

    staging = Path(path).parent / ".staging"
    staging.mkdir(exist_ok=True)
    fd, name = tempfile.mkstemp(dir=staging, suffix=".pt")
    os.close(fd)
    try:
        torch.save(obj, name)
        shutil.move(name, os.fspath(path))
    except BaseException:
        os.unlink(name)
        raise
    finally:
        staging.rmdir()


def atomic_mkstemp_in_tmp(obj, path):
    import shutil

    fd, tmp = tempfile.mkstemp(suffix=".pt")  # planted: in /tmp, not in path's folder
    os.close(fd)
    torch.save(obj, tmp)
    shutil.move(tmp, str(path))


def save_in_place(obj, path):
    torch.save(obj, path)


def atomic_no_cleanup(obj, path):
    tmp = Path(str(path) + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def atomic_swallows(obj, path):
    try:
        atomic_save_suffix(obj, path)
    except Exception:
        pass


def atomic_copy(obj, path):
    import shutil

    tmp = Path(str(path) + ".tmp")
    try:
        torch.save(obj, tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    shutil.copyfile(tmp, path)


def atomic_copy_then_remove(obj, path):
    import shutil

    tmp = str(path) + ".tmp"
    try:
        torch.save(obj, tmp)
        shutil.copyfile(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def atomic_replace_inside_with(obj, path):
    tmp = str(path) + ".tmp"
    try:
        with open(tmp, "wb") as file:
            os.replace(tmp, path)  # the name is taken as soon as the file is open; the bytes follow
            torch.save(obj, file)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def atomic_move_aside(obj, path):
    backup = str(path) + ".bak"
    if os.path.exists(path):
        os.replace(path, backup)
    try:
        torch.save(obj, path)
    except BaseException:
        if os.path.exists(backup):
            os.replace(backup, path)
        raise
    if os.path.exists(backup):
        os.remove(backup)


def atomic_copy_then_self_replace(obj, path):
    import shutil

    tmp = str(path) + ".tmp"
    try:
        torch.save(obj, tmp)
        shutil.copyfile(tmp, path)
        os.replace(path, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def atomic_replace_after_fsync(obj, path):
    """Another correct variant: os.replace inside the with block, once the data is flushed and fsynced."""
    tmp = str(path) + ".tmp"
    try:
        with open(tmp, "wb") as file:
            torch.save(obj, file)
            file.flush()
            os.fsync(file.fileno())
            os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def atomic_path_replace(obj, path):
    """Another correct variant: pathlib throughout, Path.replace."""
    path = Path(path)
    partial = path.parent / f".{path.name}.partial"
    try:
        torch.save(obj, partial)
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)


def atomic_rename_posix(obj, path):
    """Another correct variant: os.rename (atomic over an existing file on POSIX), mkstemp and fsync."""
    import tempfile

    folder = os.path.dirname(os.path.abspath(path))
    fd, name = tempfile.mkstemp(dir=folder)
    try:
        with open(fd, "wb") as file:
            torch.save(obj, file)
            file.flush()
            os.fsync(file.fileno())
        os.rename(name, path)
    except BaseException:
        os.unlink(name)
        raise


def atomic_path_only(obj, path):
    tmp = path.with_name(path.name + ".tmp")
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_never_moves(obj, path):
    torch.save(obj, Path(str(path) + ".new"))


# ---------------------------------------------------------------------------------------------- best and last
def best_returns_none(state, directory, metric, best_metric, mode="min"):
    atomic_save_suffix(state, Path(directory) / "last.pt")
    if best_metric is None or (metric < best_metric if mode == "min" else metric > best_metric):
        atomic_save_suffix(state, Path(directory) / "best.pt")
        return metric


def best_last_atomic(state, directory, metric, best_metric, mode="min"):
    directory = Path(directory)
    atomic_save_suffix(state, directory / "last.pt")
    improved = best_metric is None or (metric < best_metric if mode == "min" else metric > best_metric)
    if improved:
        atomic_save_suffix(state, directory / "best.pt")
        return metric
    return best_metric


def best_last_best_first(state, directory, metric, best_metric, mode="min"):
    """Another correct order: best.pt first, with operator.lt / operator.gt for the mode, through mkstemp."""
    import operator

    better = {"min": operator.lt, "max": operator.gt}[mode]
    directory = Path(directory)
    if best_metric is None or better(metric, best_metric):
        atomic_save_mkstemp(state, directory / "best.pt")
        best_metric = metric
    atomic_save_mkstemp(state, directory / "last.pt")
    return best_metric


def best_last_copies_last(state, directory, metric, best_metric, mode="min"):
    """Another correct way: last.pt saved atomically, then copied to a temporary file and renamed onto best.pt."""
    import shutil

    directory = Path(directory)
    atomic_save_suffix(state, directory / "last.pt")
    if best_metric is not None and (metric >= best_metric if mode == "min" else metric <= best_metric):
        return best_metric
    shutil.copyfile(directory / "last.pt", directory / "best.pt.partial")
    os.replace(directory / "best.pt.partial", directory / "best.pt")
    return metric


def best_last_torch_save(state, directory, metric, best_metric, mode="min"):
    directory = Path(directory)
    torch.save(state, directory / "last.pt")
    improved = best_metric is None or (metric < best_metric if mode == "min" else metric > best_metric)
    if improved:
        torch.save(state, directory / "best.pt")
        return metric
    return best_metric


def best_copies_last_onto_best(state, directory, metric, best_metric, mode="min"):
    import shutil

    directory = Path(directory)
    atomic_save_suffix(state, directory / "last.pt")
    if best_metric is None or (metric < best_metric if mode == "min" else metric > best_metric):
        shutil.copyfile(directory / "last.pt", directory / "best.pt")
        return metric
    return best_metric


def best_last_signed(state, directory, metric, best_metric, mode="min"):
    sign = {"min": 1.0, "max": -1.0}[mode]
    atomic_save_suffix(state, Path(directory) / "last.pt")
    if best_metric is not None and not sign * metric < sign * best_metric:
        return best_metric
    atomic_save_suffix(state, Path(directory) / "best.pt")
    return metric


def best_always(state, directory, metric, best_metric, mode="min"):
    atomic_save_suffix(state, Path(directory) / "last.pt")
    atomic_save_suffix(state, Path(directory) / "best.pt")
    return metric if best_metric is None else min(metric, best_metric)


def best_only(state, directory, metric, best_metric, mode="min"):
    improved = best_metric is None or (metric < best_metric if mode == "min" else metric > best_metric)
    if improved:
        atomic_save_suffix(state, Path(directory) / "best.pt")
        atomic_save_suffix(state, Path(directory) / "last.pt")
        return metric
    return best_metric


def best_min_only(state, directory, metric, best_metric, mode="min"):
    return best_last_atomic(state, directory, metric, best_metric, mode="min")


def best_ties_replace(state, directory, metric, best_metric, mode="min"):
    atomic_save_suffix(state, Path(directory) / "last.pt")
    if best_metric is None or (metric <= best_metric if mode == "min" else metric >= best_metric):
        atomic_save_suffix(state, Path(directory) / "best.pt")
        return metric
    return best_metric


def best_returns_metric(state, directory, metric, best_metric, mode="min"):
    best_last_atomic(state, directory, metric, best_metric, mode)
    return metric


# a notebook whose atomic_save is not atomic, and a save_best_and_last that rightly uses it: the failure is
# 08-atomic-save's, and the message must say so (issue 29: one bug names its own exercise)
BEST_LAST_OVER_BROKEN_HELPER = solution_cell(
    "from pathlib import Path\n"
    "\n"
    "\n"
    "def atomic_save(obj, path):\n"
    "    torch.save(obj, path)\n"
    "\n"
    "\n"
    "def save_best_and_last(state, directory, metric, best_metric, mode='min'):\n"
    "    directory = Path(directory)\n"
    "    atomic_save(state, directory / 'last.pt')\n"
    "    if best_metric is not None and not (metric < best_metric if mode == 'min' else metric > best_metric):\n"
    "        return best_metric\n"
    "    atomic_save(state, directory / 'best.pt')\n"
    "    return metric\n",
    "save_best_and_last")


# ---------------------------------------------------------------------------------------------- resume
def save_full(path, *, model, optimizer, scheduler, scaler, generator, epoch, best_metric):
    atomic_save_suffix(
        {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "scaler": scaler.state_dict(),
            "rng": capture_rng_state(),
            "data_generator": generator.get_state(),
            "epoch": epoch,
            "best_metric": best_metric,
        },
        path,
    )


def save_straight_onto_path(path, *, model, optimizer, scheduler, scaler, generator, epoch, best_metric):
    """Every part, but torch.save straight onto the checkpoint: a crash mid-save destroys the previous one."""
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(), "rng": capture_rng_state(),
                "data_generator": generator.get_state(), "epoch": epoch, "best_metric": best_metric}, path)


# Globals a notebook has by the time of exercise 5 (lesson 08 defines `path` in section 4 and `train()` in
# section 8): names the students' functions also use as attributes (os.path, model.train) or parameters.
path = Path(tempfile.gettempdir()) / "lesson08-checkpoint.pt"


def train(epochs):
    return [STATEFUL_PARTS] * epochs  # a notebook global named like model.train, which load functions call


def save_with_exit_stack(path, *, model, optimizer, scheduler, scaler, generator, epoch, best_metric):
    """Another correct variant: mkstemp in the folder, cleaned up by an ExitStack callback unless renamed."""
    import contextlib

    folder = os.path.dirname(os.path.abspath(path))
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
             "scaler": scaler.state_dict(), "rng": capture_rng_state(), "data_generator": generator.get_state(),
             "epoch": epoch, "best_metric": best_metric}
    with contextlib.ExitStack() as cleanup:
        handle, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        cleanup.callback(lambda: os.path.exists(tmp) and os.unlink(tmp))
        with os.fdopen(handle, "wb") as file:
            torch.save(state, file)
        os.replace(tmp, path)


def load_checks_path_and_mode(path, *, model, optimizer, scheduler, scaler, generator):
    """Uses os.path (an attribute named like the notebook's global `path`) and model.train() (like its `train`)."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"no checkpoint at {path}")
    checkpoint = torch.load(path, weights_only=True)
    model.load_state_dict(checkpoint["model"])
    model.train()
    optimizer.load_state_dict(checkpoint["optimizer"])
    scheduler.load_state_dict(checkpoint["scheduler"])
    scaler.load_state_dict(checkpoint["scaler"])
    generator.set_state(checkpoint["data_generator"])
    restore_rng_state(checkpoint["rng"])
    return {"epoch": int(checkpoint["epoch"]), "best_metric": float(checkpoint["best_metric"])}


def load_full(path, *, model, optimizer, scheduler, scaler, generator):
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    scheduler.load_state_dict(checkpoint["scheduler"])
    scaler.load_state_dict(checkpoint["scaler"])
    restore_rng_state(checkpoint["rng"])
    generator.set_state(checkpoint["data_generator"])
    return {"epoch": checkpoint["epoch"], "best_metric": checkpoint["best_metric"]}


def save_atomic_torch_rng(path, *, model, optimizer, scheduler, scaler, generator, epoch, best_metric):
    """Another correct variant: atomic write through a helper, only the torch RNG state."""
    state = {name: obj.state_dict() for name, obj in _stateful(model, optimizer, scheduler, scaler).items()}
    state |= {"rng": torch.get_rng_state(), "data_generator": generator.get_state(), "epoch": epoch,
              "best_metric": best_metric}
    atomic_save_suffix(state, path)


def load_with_helper(path, *, model, optimizer, scheduler, scaler, generator):
    checkpoint = torch.load(path, weights_only=True)
    for name, obj in _stateful(model, optimizer, scheduler, scaler).items():
        obj.load_state_dict(checkpoint[name])
    torch.set_rng_state(checkpoint["rng"])
    generator.set_state(checkpoint["data_generator"])
    return {key: checkpoint[key] for key in ("epoch", "best_metric")}


def _stateful(model, optimizer, scheduler, scaler):
    return {"model": model, "optimizer": optimizer, "scheduler": scheduler, "scaler": scaler}


def _save_without(key):
    def save(path, **objects):
        save_full(path, **objects)
        checkpoint = torch.load(path, weights_only=True)
        del checkpoint[key]
        torch.save(checkpoint, path)

    return save


def load_skips_optimizer(path, *, model, optimizer, scheduler, scaler, generator):
    checkpoint = torch.load(path, weights_only=True)
    model.load_state_dict(checkpoint["model"])
    scheduler.load_state_dict(checkpoint["scheduler"])
    scaler.load_state_dict(checkpoint["scaler"])
    restore_rng_state(checkpoint["rng"])
    generator.set_state(checkpoint["data_generator"])
    return {"epoch": checkpoint["epoch"], "best_metric": checkpoint["best_metric"]}


def load_skips_scheduler(path, *, model, optimizer, scheduler, scaler, generator):
    checkpoint = torch.load(path, weights_only=True)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    scaler.load_state_dict(checkpoint["scaler"])
    restore_rng_state(checkpoint["rng"])
    generator.set_state(checkpoint["data_generator"])
    return {"epoch": checkpoint["epoch"], "best_metric": checkpoint["best_metric"]}


def load_skips_scaler(path, *, model, optimizer, scheduler, scaler, generator):
    checkpoint = torch.load(path, weights_only=True)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    scheduler.load_state_dict(checkpoint["scheduler"])
    restore_rng_state(checkpoint["rng"])
    generator.set_state(checkpoint["data_generator"])
    return {"epoch": checkpoint["epoch"], "best_metric": checkpoint["best_metric"]}


def load_skips_rng(path, *, model, optimizer, scheduler, scaler, generator):
    checkpoint = torch.load(path, weights_only=True)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    scheduler.load_state_dict(checkpoint["scheduler"])
    scaler.load_state_dict(checkpoint["scaler"])
    generator.set_state(checkpoint["data_generator"])
    return {"epoch": checkpoint["epoch"], "best_metric": checkpoint["best_metric"]}


def load_skips_generator(path, *, model, optimizer, scheduler, scaler, generator):
    checkpoint = torch.load(path, weights_only=True)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    scheduler.load_state_dict(checkpoint["scheduler"])
    scaler.load_state_dict(checkpoint["scaler"])
    restore_rng_state(checkpoint["rng"])
    return {"epoch": checkpoint["epoch"], "best_metric": checkpoint["best_metric"]}


def load_unsafe(path, *, model, optimizer, scheduler, scaler, generator):
    checkpoint = torch.load(path, weights_only=False)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    scheduler.load_state_dict(checkpoint["scheduler"])
    scaler.load_state_dict(checkpoint["scaler"])
    restore_rng_state(checkpoint["rng"])
    generator.set_state(checkpoint["data_generator"])
    return {"epoch": checkpoint["epoch"], "best_metric": checkpoint["best_metric"]}


def load_restarts_epochs(path, *, model, optimizer, scheduler, scaler, generator):
    load_full(path, model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler, generator=generator)
    return {"epoch": 0, "best_metric": None}


def load_rng_too_early(path, *, model, optimizer, scheduler, scaler, generator):
    """Restores everything, then draws from the global RNG after restoring it: the dropout masks shift."""
    counters = load_full(path, model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler,
                         generator=generator)
    torch.rand(1)
    return counters


def save_pickled_objects(path, *, model, optimizer, scheduler, scaler, generator, epoch, best_metric):
    save_full(path, model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler, generator=generator,
              epoch=epoch, best_metric=best_metric)
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["generator"] = generator  # a whole object: weights_only refuses it
    torch.save(checkpoint, path)


# parts a loop over this tuple restores: a global the check cannot rebuild in a fresh process
STATEFUL_PARTS = ("model", "optimizer", "scheduler", "scaler")


def load_over_global_tuple(path, *, model, optimizer, scheduler, scaler, generator):
    checkpoint = torch.load(path, weights_only=True)
    objects = {"model": model, "optimizer": optimizer, "scheduler": scheduler, "scaler": scaler}
    for name in STATEFUL_PARTS:
        objects[name].load_state_dict(checkpoint[name])
    restore_rng_state(checkpoint["rng"])
    generator.set_state(checkpoint["data_generator"])
    return {"epoch": checkpoint["epoch"], "best_metric": checkpoint["best_metric"]}


# a module-level partial of torch.load (issue 43, item 5: the visible check could not rebuild it)
load_on_cpu = functools.partial(torch.load, map_location=torch.device("cpu"), weights_only=True)


def load_through_partial(path, *, model, optimizer, scheduler, scaler, generator):
    """Another correct variant: torch.load through a module-level functools.partial."""
    checkpoint = load_on_cpu(path)
    for name, obj in _stateful(model, optimizer, scheduler, scaler).items():
        obj.load_state_dict(checkpoint[name])
    restore_rng_state(checkpoint["rng"])
    generator.set_state(checkpoint["data_generator"])
    return {"epoch": checkpoint["epoch"], "best_metric": checkpoint["best_metric"]}


# the classic map_location idiom, kept as a global lambda in an earlier cell: a lambda has no source of its own
# the check could re-run in a fresh process
cpu_storage = lambda storage, location: storage  # noqa: E731


def load_through_global_lambda(path, *, model, optimizer, scheduler, scaler, generator):
    checkpoint = torch.load(path, map_location=cpu_storage, weights_only=True)
    for name, obj in _stateful(model, optimizer, scheduler, scaler).items():
        obj.load_state_dict(checkpoint[name])
    restore_rng_state(checkpoint["rng"])
    generator.set_state(checkpoint["data_generator"])
    return {"epoch": checkpoint["epoch"], "best_metric": checkpoint["best_metric"]}


def save_copied_onto_path(path, *, model, optimizer, scheduler, scaler, generator, epoch, best_metric):
    import shutil

    tmp = f"{path}.tmp"
    save_full(tmp, model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler, generator=generator,
              epoch=epoch, best_metric=best_metric)
    shutil.copyfile(tmp, path)
    os.remove(tmp)


def load_other_tutorials_keys(path, *, model, optimizer, scheduler, scaler, generator):
    """Keys of another tutorial's checkpoints: 'model_state_dict', 'optimizer_state_dict'."""
    checkpoint = torch.load(path, weights_only=True)
    model.load_state_dict(checkpoint["model_state_dict"])
    optimizer.load_state_dict(checkpoint["optimizer_state_dict"])
    return {"epoch": checkpoint["epoch"], "best_metric": checkpoint["best_metric"]}


def save_then_sample(path, *, model, optimizer, scheduler, scaler, generator, epoch, best_metric):
    """Logs a prediction after capturing the RNG state, with dropout on: the run it saves draws other masks."""
    save_full(path, model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler, generator=generator,
              epoch=epoch, best_metric=best_metric)
    model(torch.randn(2, 6))


# hidden=True resumes in this process with freshly built objects and a scrambled RNG, and must name the same
# part as the fresh process of the visible check
@pytest.mark.parametrize(
    ("save", "load", "code", "phrase"),
    [
        (save_full, load_skips_optimizer, "optimizer-not-restored", "Adam's moment estimates"),
        (save_full, load_skips_scheduler, "scheduler-not-restored", "restart the schedule"),
        (save_full, load_skips_scaler, "scaler-not-restored", "GradScaler state"),
        (save_full, load_skips_rng, "rng-not-restored", "dropout masks"),
        (save_full, load_skips_generator, "data-order-not-restored", "shuffling order"),
        (save_full, load_restarts_epochs, "counters-not-restored", "'epoch': 3"),
        (save_full, load_rng_too_early, "rng-not-restored", "dropout masks"),
        (save_full, load_unsafe, "unsafe-load", "weights_only=True"),
    ],
)
def test_hidden_resume_names_the_same_part(save, load, code, phrase):
    assert_check_fails("08-resume", save, load, code=code, phrase=phrase, hidden=True)


def test_a_tie_and_a_counter_never_reset_get_their_own_cause_and_hint():
    """Issue 43: both fail [wrong-stop]; the judge names the mistake whose replay makes the same decisions."""
    failures = {}
    for stopper in (EarlyStoppingTieImproves, EarlyStoppingNoReset, EarlyStoppingStrict):
        with pytest.raises(CheckFailed) as failure:
            check("08-early-stopping", stopper)
        assert failure.value.code == "wrong-stop"
        failures[stopper] = failure.value
    assert "a tie" not in str(failures[EarlyStoppingNoReset]) and "not reset" not in str(
        failures[EarlyStoppingTieImproves])
    hints = [failure.hint for failure in failures.values()]
    assert all(hints) and len(set(hints)) == 3, hints


# ---------------------------------------------------------------------------------------------- mutation set
# What the notebook's other cells define, for the planted cells that use it
NOTEBOOK = notebook_namespace("08_checkpointing")

MISTAKES = [
    Mistake("08-portable", "prefix-left", "stack in any order", (portable_once,),
            story="removes each prefix once: compile around DDP keeps 'module.'"),
    Mistake("08-portable", "prefix-left", "stack in any order", (portable_fixed_order,),
            story="strips _orig_mod. then module.: DDP around compile keeps '_orig_mod.'"),
    Mistake("08-portable", "prefix-left", "2 of the 3 stacked prefixes removed", (portable_twice,),
            story="strips at most two prefixes: 'DDP and compile, that is two wrappers'"),
    Mistake("08-portable", "over-stripped", "str.replace", (portable_replace,),
            story="str.replace('module.', ''): the forum's one-liner"),
    Mistake("08-portable", "over-stripped", "str.lstrip", (portable_lstrip,),
            story="key.lstrip('module.'): strips characters, not a prefix"),
    Mistake("08-portable", "over-stripped", "without the dot", (portable_split_on_module,),
            story="startswith('module') without the dot: 'module_list.0' loses its name"),
    Mistake("08-portable", "mutated-input", "new dict", (portable_in_place,),
            story="renames the keys in place"),
    Mistake("08-portable", "not-a-dict", "instead of building a dict", (portable_items,),
            story="returns the renamed items, never builds the dict"),
    Mistake("08-portable", "values-changed", "same tensors", (portable_zeroed,),
            story="builds fresh tensors instead of keeping the values"),
    Mistake("08-portable", "over-stripped", "str.replace", solution_cell(
        "def portable_state_dict(state_dict):\n"
        "    return {k.replace('module.', '').replace('_orig_mod.', ''): v for k, v in state_dict.items()}\n",
        "portable_state_dict"),
        story="str.replace also removes 'module.' inside real names such as 'head.module.weight'", planted=True),
    Mistake("08-early-stopping", "state-not-restored", "bad-epoch counter", (EarlyStoppingForgetful,),
            story="saves only best: the resumed run waits patience epochs again"),
    Mistake("08-early-stopping", "not-weights-only", "plain values", (EarlyStoppingSelfState,),
            story="state_dict returns the object itself"),
    Mistake("08-early-stopping", "wrong-stop", "not reset on improvement", (EarlyStoppingNoReset,),
            story="never resets the counter"),
    Mistake("08-early-stopping", "wrong-stop", "equal to best counted as an improvement", (EarlyStoppingTieImproves,),
            story="<= / >= in the comparison: a tie resets the counter"),
    Mistake("08-early-stopping", "wrong-stop", "> instead of >=", (EarlyStoppingStrict,),
            story="stops one epoch late (counter > patience)"),
    Mistake("08-early-stopping", "mode-ignored", "lower taken as better", (EarlyStoppingMinOnly,),
            story="mode accepted but ignored: always 'lower is better'"),
    Mistake("08-early-stopping", "min-delta-ignored", "min_delta", (EarlyStoppingNoDelta,),
            story="min_delta accepted but ignored"),
    Mistake("08-early-stopping", "initial-best", "instead of None", (EarlyStoppingInfBest,),
            story="best = float('inf') as a sentinel"),
    Mistake("08-early-stopping", "wrong-best", "every metric stored", (EarlyStoppingLastAsBest,),
            story="stores every metric as best"),
    Mistake("08-early-stopping", "state-not-restored", "bad-epoch counter", solution_cell(
        "class EarlyStopping:\n"
        "    def __init__(self, patience, mode='min', min_delta=0.0):\n"
        "        self.patience, self.mode, self.min_delta = patience, mode, min_delta\n"
        "        self.best, self.bad_epochs = None, 0\n"
        "\n"
        "    def step(self, metric):\n"
        "        better = self.best is None or (\n"
        "            metric < self.best - self.min_delta if self.mode == 'min' else metric > self.best + self"
        ".min_delta\n"
        "        )\n"
        "        self.best, self.bad_epochs = (metric, 0) if better else (self.best, self.bad_epochs + 1)\n"
        "        return self.bad_epochs >= self.patience\n"
        "\n"
        "    def state_dict(self):\n"
        "        return {'best': self.best}\n"
        "\n"
        "    def load_state_dict(self, state):\n"
        "        self.best = state['best']\n",
        "EarlyStopping"),
        story="the bad-epoch counter is not part of the state: a resumed run waits `patience` epochs again",
        planted=True),
    Mistake("08-atomic-save", "not-atomic", "truncates the old file", (save_in_place,),
            story="plain torch.save onto the checkpoint"),
    Mistake("08-atomic-save", "temp-left-behind", "no cleanup", (atomic_no_cleanup,),
            story="no try/except: a failed save leaves its temporary file"),
    Mistake("08-atomic-save", "swallowed-error", "re-raise", (atomic_swallows,),
            story="catches the error and carries on"),
    Mistake("08-atomic-save", "temp-left-behind", "os.replace", (atomic_copy,),
            story="shutil.copyfile instead of a rename"),
    Mistake("08-atomic-save", "wrong-content", "os.replace", (atomic_never_moves,),
            story="writes the temporary file and forgets the rename"),
    Mistake("08-atomic-save", "not-atomic", "shutil.copyfile wrote the finished file", (atomic_copy_then_remove,),
            story="a temporary file, then shutil.copyfile onto the path (and the temporary removed)"),
    Mistake("08-atomic-save", "not-atomic", "inside the `with open(...)` block", (atomic_replace_inside_with,),
            story="os.replace inside the with block, before torch.save writes into the open file"),
    Mistake("08-atomic-save", "not-atomic", "moved aside", (atomic_move_aside,),
            story="the old file moved to .bak, torch.save onto the path, .bak put back if it raises"),
    Mistake("08-atomic-save", "not-atomic", "os.replace(path, path)", (atomic_copy_then_self_replace,),
            story="copies the temporary file onto the path, then os.replace(path, path) 'to make it atomic'"),
    Mistake("08-atomic-save", "not-atomic", "a file outside last.pt's folder", (atomic_mkstemp_in_tmp,),
            story="tempfile.mkstemp() in /tmp, then shutil.move onto path: a copy where /tmp is another file system"),
    Mistake("08-atomic-save", "raised", "has no attribute 'with_name'", (atomic_path_only,),
            story="path.with_name(...) on a str path: Path-only code"),
    Mistake("08-atomic-save", "not-atomic", "truncates the old file", solution_cell(
        "def atomic_save(obj, path):\n"
        "    torch.save(obj, path)\n",
        "atomic_save", given=NOTEBOOK),
        story="a plain torch.save: a crash half way through destroys the previous checkpoint", planted=True),
    Mistake("08-best-last", "best-overwritten", "without comparing", (best_always,),
            story="best.pt written every epoch"),
    Mistake("08-best-last", "last-not-saved", "every epoch", (best_only,),
            story="last.pt written only on improvement"),
    Mistake("08-best-last", "best-not-updated", "mode is ignored", (best_min_only,),
            story="mode ignored: accuracy treated like a loss"),
    Mistake("08-best-last", "best-overwritten", "<= instead of <", (best_ties_replace,),
            story="a tie replaces the best model"),
    Mistake("08-best-last", "wrong-best-metric", "best metric so far", (best_returns_metric,),
            story="returns this epoch's metric"),
    Mistake("08-best-last", "wrong-best-metric", "did not improve", (best_returns_none,),
            story="returns only in the improvement branch"),
    Mistake("08-best-last", "not-atomic", "Fix atomic_save (08-atomic-save)", BEST_LAST_OVER_BROKEN_HELPER,
            story="a right save_best_and_last over a notebook's atomic_save that is a plain torch.save"),
    Mistake("08-best-last", "not-atomic", "by copying last.pt onto it", (best_copies_last_onto_best,),
            story="last.pt saved atomically, then best.pt made with shutil.copyfile(last.pt, best.pt)"),
    Mistake("08-best-last", "not-atomic", "torch.save straight onto the file", (best_last_torch_save,),
            story="the exercise before was atomic_save, but this one writes both files with torch.save"),
    Mistake("08-best-last", "best-overwritten", "without comparing", solution_cell(
        "def save_best_and_last(state, directory, metric, best_metric, mode='min'):\n"
        "    directory = Path(directory)\n"
        "    atomic_save(state, directory / 'last.pt')\n"
        "    atomic_save(state, directory / 'best.pt')\n"
        "    if best_metric is None:\n"
        "        return metric\n"
        "    return min(metric, best_metric) if mode == 'min' else max(metric, best_metric)\n",
        "save_best_and_last", given=NOTEBOOK),
        story="best.pt written every epoch, whether the metric improved or not", planted=True),
    Mistake("08-resume", "optimizer-not-restored", "'optimizer'", (_save_without("optimizer"), load_full),
            story="the optimizer state left out: the most common checkpoint bug"),
    Mistake("08-resume", "scheduler-not-restored", "'scheduler'", (_save_without("scheduler"), load_full),
            story="the scheduler left out: a second warmup mid-run"),
    Mistake("08-resume", "scaler-not-restored", "'scaler'", (_save_without("scaler"), load_full),
            story="the GradScaler left out"),
    Mistake("08-resume", "rng-not-restored", "it was restored, then advanced by a draw",
            (save_full, load_rng_too_early),
            story="restore_rng_state, then a torch.rand 'warm-up' draw: the restored state moves on"),
    Mistake("08-resume", "rng-not-restored", "'rng'", (_save_without("rng"), load_full),
            story="no RNG state: other dropout masks after resuming"),
    Mistake("08-resume", "data-order-not-restored", "'data_generator'", (_save_without("data_generator"), load_full),
            story="the loader's generator left out: other batches after resuming"),
    Mistake("08-resume", "model-not-restored", "'model'", (_save_without("model"), load_full),
            story="the model saved separately, not in the checkpoint"),
    Mistake("08-resume", "counters-not-restored", "best_metric", (_save_without("best_metric"), load_full),
            story="best_metric not saved"),
    Mistake("08-resume", "not-weights-only", "a whole object", (save_pickled_objects, load_full),
            story="saves the generator object itself"),
    Mistake("08-resume", "unsafe-load", "weights_only=True", (save_full, load_unsafe),
            story="torch.load(..., weights_only=False), as in older tutorials"),
    Mistake("08-resume", "cannot-rebuild", "'cpu_storage' (function)", (save_full, load_through_global_lambda),
            story="map_location=cpu_storage, a global lambda from an earlier cell"),
    Mistake("08-resume", "not-atomic", "shutil.copyfile wrote the finished file", (save_copied_onto_path, load_full),
            story="saved to path.tmp, then shutil.copyfile onto the checkpoint"),
    Mistake("08-resume", "resume-crashed", "KeyError", (save_full, load_other_tutorials_keys),
            story="the keys of another tutorial ('model_state_dict')"),
    Mistake("08-resume", "weights-diverged", "draws random numbers", (save_then_sample, load_full),
            story="logs a prediction with dropout on after capturing the RNG"),
    Mistake("08-resume", "not-atomic", "torch.save straight onto path", (save_straight_onto_path, load_full),
            story="every part saved, but with torch.save onto the checkpoint instead of atomic_save"),
    Mistake("08-resume", "optimizer-not-restored", "'optimizer'", solution_cell(
        "def save_checkpoint(path, *, model, optimizer, scheduler, scaler, generator, epoch, best_metric):\n"
        "    atomic_save({\n"
        "        'model': model.state_dict(),\n"
        "        'scheduler': scheduler.state_dict(),\n"
        "        'scaler': scaler.state_dict(),\n"
        "        'rng': capture_rng_state(),\n"
        "        'data_generator': generator.get_state(),\n"
        "        'epoch': epoch,\n"
        "        'best_metric': best_metric,\n"
        "    }, path)\n"
        "\n"
        "\n"
        "def load_checkpoint(path, *, model, optimizer, scheduler, scaler, generator):\n"
        "    checkpoint = torch.load(path, weights_only=True)\n"
        "    model.load_state_dict(checkpoint['model'])\n"
        "    scheduler.load_state_dict(checkpoint['scheduler'])\n"
        "    scaler.load_state_dict(checkpoint['scaler'])\n"
        "    restore_rng_state(checkpoint['rng'])\n"
        "    generator.set_state(checkpoint['data_generator'])\n"
        "    return {'epoch': checkpoint['epoch'], 'best_metric': checkpoint['best_metric']}\n",
        "save_checkpoint", "load_checkpoint", given=NOTEBOOK),
        story="the optimizer state is left out: Adam's moments restart at zero and the weights diverge", planted=True),
]

CORRECT = [
    Correct("08-portable", (portable_loop,), story="while startswith: split once"),
    Correct("08-portable", (portable_removeprefix,), story="recursive removeprefix"),
    Correct("08-portable", (portable_regex,), story="one anchored regular expression"),
    Correct("08-early-stopping", (EarlyStoppingCounter,), story="best and a counter"),
    Correct("08-early-stopping", (EarlyStoppingSigned,), story="signed best and the epoch of the best"),
    Correct("08-early-stopping", (EarlyStoppingDifference,), story="best - metric > min_delta (issue 29), vars()"),
    Correct("08-early-stopping", (EarlyStoppingDataclass,), story="a dataclass, asdict, best from a history"),
    Correct("08-atomic-save", (atomic_save_suffix,), story="path + '.tmp', os.replace"),
    Correct("08-atomic-save", (atomic_save_mkstemp,), story="mkstemp in the folder, fsync"),
    Correct("08-atomic-save", (atomic_save_named_temporary,), story="NamedTemporaryFile(delete=False), os.replace"),
    Correct("08-atomic-save", (atomic_path_replace,), story="pathlib, a hidden .partial name, Path.replace"),
    Correct("08-atomic-save", (atomic_move_from_subfolder,), story="mkstemp in a subfolder of path's, shutil.move"),
    Correct("08-atomic-save", (atomic_replace_after_fsync,),
            story="os.replace inside the with block, after flush() and os.fsync(): every byte is in the file first"),
    Correct("08-atomic-save", (atomic_rename_posix,), story="mkstemp, open(fd), fsync, os.rename"),
    Correct("08-best-last", (best_last_atomic,), story="compare, then atomic saves"),
    Correct("08-best-last", (best_last_best_first,), story="best.pt first, operator.lt/gt, mkstemp"),
    Correct("08-best-last", (best_last_copies_last,), story="last.pt copied to a temporary file, then renamed"),
    Correct("08-best-last", (best_last_signed,), story="a sign for the mode, atomic saves"),
    Correct("08-resume", (save_full, load_full), story="every part, capture_rng_state"),
    Correct("08-resume", (save_with_exit_stack, load_checks_path_and_mode),
            story="ExitStack cleanup; os.path.exists and model.train() in load (issue 29)"),
    Correct("08-resume", (save_atomic_torch_rng, load_with_helper), story="atomic, torch RNG only, a helper"),
    Correct("08-resume", (save_full, load_over_global_tuple), story="loops over a global tuple of names"),
    Correct("08-resume", (save_full, load_through_partial),
            story="a module-level functools.partial(torch.load, map_location=torch.device('cpu'), ...)"),
]


def test_unsafe_payload_really_runs_code_when_unpickled(tmp_path):
    from harness.checks.lesson08.resume import _UnsafePayload

    marker = tmp_path / "ran"
    blob = pickle.dumps(_UnsafePayload(marker))
    with pytest.raises(pickle.UnpicklingError):
        torch.load(_bytes_file(tmp_path, {"x": _UnsafePayload(marker)}), weights_only=True)
    assert not marker.exists()
    pickle.loads(blob)
    assert marker.exists()


def _bytes_file(tmp_path: Path, obj: object) -> Path:
    path = tmp_path / "trap.pt"
    torch.save(obj, path)
    return path
