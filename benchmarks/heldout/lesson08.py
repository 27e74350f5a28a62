"""Lesson 08 held-out entries (written from the exercise text only)."""

from entry import Entry

PRELUDE = '''
import io
import os
import pickle
import shutil
import tempfile
from pathlib import Path
import torch
from torch import nn
from harness.checks import check, hint
from harness.env import select_device
from harness.repro import capture_rng_state, make_generator, restore_rng_state, seed_everything
seed_everything(0)
device = select_device()
workdir = Path(tempfile.mkdtemp(prefix="lesson08-"))


def atomic_save(obj, path):
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as file:
            torch.save(obj, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
'''

ES = '''
class EarlyStopping:
    def __init__(self, patience, mode="min", min_delta=0.0):
        self.patience, self.mode, self.min_delta = patience, mode, min_delta
        self.best, self.bad_epochs = None, 0

    def state_dict(self):
        return {"best": self.best, "bad_epochs": self.bad_epochs}

    def load_state_dict(self, state):
        self.best, self.bad_epochs = state["best"], state["bad_epochs"]
'''

BL = "def save_best_and_last(state, directory, metric, best_metric, mode='min'):\n    directory = Path(directory)\n"

SAVE = '''
def save_checkpoint(path, *, model, optimizer, scheduler, scaler, generator, epoch, best_metric):
    atomic_save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                 "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(), "rng": capture_rng_state(),
                 "data_generator": generator.get_state(), "epoch": epoch, "best_metric": best_metric}, path)
'''

LOAD = '''
def load_checkpoint(path, *, model, optimizer, scheduler, scaler, generator):
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    scheduler.load_state_dict(checkpoint["scheduler"])
    scaler.load_state_dict(checkpoint["scaler"])
    restore_rng_state(checkpoint["rng"])
    generator.set_state(checkpoint["data_generator"])
    return {"epoch": checkpoint["epoch"], "best_metric": checkpoint["best_metric"]}
'''

RESUME = ("save_checkpoint", "load_checkpoint")

ENTRIES = [
    Entry("08-portable", "mistake", "removed one prefix with if",
          "only one leading prefix removed: stacked prefixes (module._orig_mod.) keep the second", '''
def portable_state_dict(state_dict):
    out = {}
    for key, value in state_dict.items():
        if key.startswith(("module.", "_orig_mod.")):
            key = key.split(".", 1)[1]
        out[key] = value
    return out
''', ("portable_state_dict",)),
    Entry("08-portable", "mistake", "str.replace of the prefixes",
          "replace() removes 'module.' anywhere in the key, also inside names like head.module.weight", '''
def portable_state_dict(state_dict):
    return {k.replace("_orig_mod.", "").replace("module.", ""): v for k, v in state_dict.items()}
''', ("portable_state_dict",)),
    Entry("08-portable", "mistake", "lstrip('module.')",
          "lstrip strips a set of characters, not a prefix: module_list.0.weight loses its leading letters", '''
def portable_state_dict(state_dict):
    return {k.lstrip("module.").lstrip("_orig_mod."): v for k, v in state_dict.items()}
''', ("portable_state_dict",)),
    Entry("08-portable", "mistake", "renamed keys in place",
          "modifies the dict passed in (pops and re-inserts keys)", '''
def portable_state_dict(state_dict):
    for key in list(state_dict):
        new = key
        while new.startswith(("module.", "_orig_mod.")):
            new = new.split(".", 1)[1]
        state_dict[new] = state_dict.pop(key)
    return state_dict
''', ("portable_state_dict",)),
    Entry("08-portable", "mistake", "removeprefix in a fixed order",
          "removes module. then _orig_mod. once each: _orig_mod.module. and deeper stacks keep a prefix", '''
def portable_state_dict(state_dict):
    return {k.removeprefix("module.").removeprefix("_orig_mod."): v for k, v in state_dict.items()}
''', ("portable_state_dict",)),
    Entry("08-early-stopping", "mistake", "tie counted as improvement",
          "a change of exactly min_delta counts as an improvement (<= instead of <)", ES + '''
    def step(self, metric):
        metric = float(metric)
        if self.best is None or (metric <= self.best - self.min_delta if self.mode == "min"
                                 else metric >= self.best + self.min_delta):
            self.best, self.bad_epochs = metric, 0
        else:
            self.bad_epochs += 1
        return self.bad_epochs >= self.patience
''', ("EarlyStopping",)),
    Entry("08-early-stopping", "mistake", "saved only the best value",
          "state_dict omits the bad-epoch counter: a resumed run restarts its patience", '''
class EarlyStopping:
    def __init__(self, patience, mode="min", min_delta=0.0):
        self.patience, self.mode, self.min_delta = patience, mode, min_delta
        self.best, self.bad_epochs = None, 0

    def step(self, metric):
        metric = float(metric)
        if self.best is None or (metric < self.best - self.min_delta if self.mode == "min"
                                 else metric > self.best + self.min_delta):
            self.best, self.bad_epochs = metric, 0
        else:
            self.bad_epochs += 1
        return self.bad_epochs >= self.patience

    def state_dict(self):
        return {"best": self.best}

    def load_state_dict(self, state):
        self.best = state["best"]
''', ("EarlyStopping",)),
    Entry("08-early-stopping", "mistake", "mode max with min_delta subtracted",
          "for mode='max' the threshold is best - min_delta: a small drop counts as improvement", ES + '''
    def step(self, metric):
        metric = float(metric)
        if self.best is None:
            improved = True
        elif self.mode == "min":
            improved = metric < self.best - self.min_delta
        else:
            improved = metric > self.best - self.min_delta
        if improved:
            self.best, self.bad_epochs = metric, 0
        else:
            self.bad_epochs += 1
        return self.bad_epochs >= self.patience
''', ("EarlyStopping",)),
    Entry("08-early-stopping", "mistake", "kept the metric as given (a tensor)",
          "best holds the tensor passed in, so state_dict is not plain values", ES + '''
    def step(self, metric):
        if self.best is None or (metric < self.best - self.min_delta if self.mode == "min"
                                 else metric > self.best + self.min_delta):
            self.best, self.bad_epochs = metric, 0
        else:
            self.bad_epochs += 1
        return self.bad_epochs >= self.patience
''', ("EarlyStopping",)),
    Entry("08-atomic-save", "mistake", "temporary file then shutil.copyfile onto the target",
          "copyfile writes into the target in place: a crash during the copy leaves a partial file", '''
def atomic_save(obj, path):
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        torch.save(obj, tmp)
        shutil.copyfile(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
''', ("atomic_save",)),
    Entry("08-atomic-save", "mistake", "moved the old file aside and saved straight onto path",
          "torch.save writes the target itself: a kill mid-save leaves a partial file at path", '''
def atomic_save(obj, path):
    path = Path(path)
    backup = path.with_name(path.name + ".bak")
    if path.exists():
        os.replace(path, backup)
    try:
        torch.save(obj, path)
    except BaseException:
        if backup.exists():
            os.replace(backup, path)
        raise
    backup.unlink(missing_ok=True)
''', ("atomic_save",)),
    Entry("08-atomic-save", "mistake", "swallowed the error",
          "the exception is caught and not re-raised: the caller thinks the save worked", '''
def atomic_save(obj, path):
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    except Exception as error:
        tmp.unlink(missing_ok=True)
        print("save failed:", error)
''', ("atomic_save",)),
    Entry("08-atomic-save", "mistake", "no cleanup of the temporary file",
          "a failed save leaves path.tmp behind", '''
def atomic_save(obj, path):
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)
''', ("atomic_save",)),
    Entry("08-atomic-save", "mistake", "temporary file from tempfile.mkstemp in /tmp",
          "temp file not in the target's folder: os.replace may cross file systems; and it is left on failure", '''
def atomic_save(obj, path):
    fd, tmp = tempfile.mkstemp(suffix=".pt")
    os.close(fd)
    torch.save(obj, tmp)
    shutil.move(tmp, str(path))
''', ("atomic_save",)),
    Entry("08-best-last", "mistake", "tie replaces best.pt",
          "<= : an equal metric counts as an improvement and overwrites best.pt", BL + '''
    atomic_save(state, directory / "last.pt")
    if best_metric is None or (metric <= best_metric if mode == "min" else metric >= best_metric):
        atomic_save(state, directory / "best.pt")
        return metric
    return best_metric
''', ("save_best_and_last",)),
    Entry("08-best-last", "mistake", "best.pt copied from last.pt",
          "shutil.copy writes best.pt in place (not atomic): a failure mid-copy corrupts best.pt", BL + '''
    atomic_save(state, directory / "last.pt")
    if best_metric is None or (metric < best_metric if mode == "min" else metric > best_metric):
        shutil.copy(directory / "last.pt", directory / "best.pt")
        return metric
    return best_metric
''', ("save_best_and_last",)),
    Entry("08-best-last", "mistake", "ignored mode",
          "always compares with < (min), so mode='max' keeps the worst model", BL + '''
    atomic_save(state, directory / "last.pt")
    if best_metric is None or metric < best_metric:
        atomic_save(state, directory / "best.pt")
        return metric
    return best_metric
''', ("save_best_and_last",)),
    Entry("08-best-last", "mistake", "returned the epoch's metric",
          "returns metric even when it did not improve: the caller's best regresses", BL + '''
    atomic_save(state, directory / "last.pt")
    if best_metric is None or (metric < best_metric if mode == "min" else metric > best_metric):
        atomic_save(state, directory / "best.pt")
    return metric
''', ("save_best_and_last",)),
    Entry("08-best-last", "mistake", "plain torch.save for both",
          "torch.save directly onto the files: a failing save truncates last.pt", BL + '''
    torch.save(state, directory / "last.pt")
    if best_metric is None or (metric < best_metric if mode == "min" else metric > best_metric):
        torch.save(state, directory / "best.pt")
        return metric
    return best_metric
''', ("save_best_and_last",)),
    Entry("08-resume", "mistake", "scheduler left out of the checkpoint",
          "the scheduler's state is neither saved nor restored: the resumed lr schedule restarts", '''
def save_checkpoint(path, *, model, optimizer, scheduler, scaler, generator, epoch, best_metric):
    atomic_save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                 "scaler": scaler.state_dict(), "rng": capture_rng_state(),
                 "data_generator": generator.get_state(), "epoch": epoch, "best_metric": best_metric}, path)


def load_checkpoint(path, *, model, optimizer, scheduler, scaler, generator):
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    scaler.load_state_dict(checkpoint["scaler"])
    restore_rng_state(checkpoint["rng"])
    generator.set_state(checkpoint["data_generator"])
    return {"epoch": checkpoint["epoch"], "best_metric": checkpoint["best_metric"]}
''', RESUME),
    Entry("08-resume", "mistake", "data generator not restored",
          "the DataLoader generator's state is saved but not set back: the shuffling differs after resume", SAVE + '''
def load_checkpoint(path, *, model, optimizer, scheduler, scaler, generator):
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    scheduler.load_state_dict(checkpoint["scheduler"])
    scaler.load_state_dict(checkpoint["scaler"])
    restore_rng_state(checkpoint["rng"])
    return {"epoch": checkpoint["epoch"], "best_metric": checkpoint["best_metric"]}
''', RESUME),
    Entry("08-resume", "mistake", "plain torch.save",
          "the checkpoint is written straight onto path: a save failing half way destroys the previous one", '''
def save_checkpoint(path, *, model, optimizer, scheduler, scaler, generator, epoch, best_metric):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(), "rng": capture_rng_state(),
                "data_generator": generator.get_state(), "epoch": epoch, "best_metric": best_metric}, path)
''' + LOAD, RESUME),
    Entry("08-resume", "mistake", "RNG restored first, then a dummy draw to warm up",
          "draws from the global RNG after restoring it (a torch.rand call after restore_rng_state)", SAVE + '''
def load_checkpoint(path, *, model, optimizer, scheduler, scaler, generator):
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    restore_rng_state(checkpoint["rng"])
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    scheduler.load_state_dict(checkpoint["scheduler"])
    scaler.load_state_dict(checkpoint["scaler"])
    generator.set_state(checkpoint["data_generator"])
    torch.rand(1)
    return {"epoch": checkpoint["epoch"], "best_metric": checkpoint["best_metric"]}
''', RESUME),
    Entry("08-resume", "correct", "module-level functools.partial(torch.load, ...)", "", '''
import functools
load_cpu = functools.partial(torch.load, map_location="cpu", weights_only=True)
''' + SAVE + '''
def load_checkpoint(path, *, model, optimizer, scheduler, scaler, generator):
    checkpoint = load_cpu(path)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    scheduler.load_state_dict(checkpoint["scheduler"])
    scaler.load_state_dict(checkpoint["scaler"])
    generator.set_state(checkpoint["data_generator"])
    restore_rng_state(checkpoint["rng"])
    return {"epoch": checkpoint["epoch"], "best_metric": checkpoint["best_metric"]}
''', RESUME),
    Entry("08-portable", "correct", "one regular expression", "", '''
import re
_PREFIXES = re.compile(r"^(?:(?:module|_orig_mod)\\.)+")
def portable_state_dict(state_dict):
    return dict((_PREFIXES.sub("", key), value) for key, value in state_dict.items())
''', ("portable_state_dict",)),
    Entry("08-atomic-save", "correct", "NamedTemporaryFile in the same folder", "", '''
def atomic_save(obj, path):
    path = Path(path)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=path.name, suffix=".part", delete=False) as f:
        tmp = Path(f.name)
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
''', ("atomic_save",)),
    Entry("08-early-stopping", "correct", "sign trick for the mode", "", ES + '''
    def step(self, metric):
        sign = 1.0 if self.mode == "min" else -1.0
        value = float(metric)
        if self.best is None or sign * (self.best - value) > self.min_delta:
            self.best, self.bad_epochs = value, 0
        else:
            self.bad_epochs += 1
        return self.bad_epochs >= self.patience
''', ("EarlyStopping",)),
]
