"""Lesson 08 checks: each rejects its planted bugs with the right code and accepts correct variants.

The resume implementations are module-level functions: the check rebuilds them from source in a fresh
process, exactly as it does for functions defined in a notebook.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
import torch

from harness.checks import check
from harness.checks.testing import assert_check_fails
from harness.repro import capture_rng_state, restore_rng_state


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


def portable_once(state_dict):
    return {k.removeprefix("module.").removeprefix("_orig_mod."): v for k, v in state_dict.items()}


def portable_replace(state_dict):
    return {k.replace("module.", "").replace("_orig_mod.", ""): v for k, v in state_dict.items()}


def portable_in_place(state_dict):
    for key in list(state_dict):
        state_dict[portable_loop({key: None}).popitem()[0]] = state_dict.pop(key)
    return state_dict


def portable_zeroed(state_dict):
    return {k: torch.zeros_like(v) for k, v in portable_loop(state_dict).items()}


@pytest.mark.parametrize("impl", [portable_loop, portable_removeprefix])
@pytest.mark.parametrize("hidden", [False, True])
def test_portable_accepts_correct(impl, hidden):
    check("08-portable", impl, hidden=hidden)


@pytest.mark.parametrize(
    ("impl", "code", "phrase", "hidden"),
    [
        (portable_once, "prefix-left", "stack", True),
        (portable_replace, "over-stripped", "str.replace", False),
        (portable_in_place, "mutated-input", "new dict", False),
        (portable_zeroed, "values-changed", "same tensors", False),
    ],
)
def test_portable_rejects_bugs(impl, code, phrase, hidden):
    assert_check_fails("08-portable", impl, code=code, phrase=phrase, hidden=hidden)


@pytest.mark.slow
def test_wrapper_prefixes_name_keys_like_the_real_wrappers():
    from harness.checks.lesson08 import _HIDDEN_WRAPPERS, _WRAPPERS, _Net

    net = _Net()
    real = [
        net, torch.nn.DataParallel(net), torch.compile(net), torch.compile(torch.nn.DataParallel(net)),
        torch.nn.DataParallel(torch.compile(net)), torch.nn.DataParallel(torch.nn.DataParallel(net)),
    ]
    for wrapper, (_, prefix) in zip(real, _WRAPPERS + _HIDDEN_WRAPPERS, strict=True):
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


class EarlyStoppingMinOnly(EarlyStoppingCounter):
    def _improves(self, value):
        return self.best is None or value < self.best - self.min_delta


class EarlyStoppingNoDelta(EarlyStoppingCounter):
    def _improves(self, value):
        return self.best is None or (value < self.best if self.mode == "min" else value > self.best)


@pytest.mark.parametrize("impl", [EarlyStoppingCounter, EarlyStoppingSigned])
@pytest.mark.parametrize("hidden", [False, True])
def test_early_stopping_accepts_correct(impl, hidden):
    check("08-early-stopping", impl, hidden=hidden)


@pytest.mark.parametrize(
    ("impl", "code", "phrase", "hidden"),
    [
        (EarlyStoppingForgetful, "state-not-restored", "bad-epoch counter", False),
        (EarlyStoppingSelfState, "not-weights-only", "plain values", False),
        (EarlyStoppingNoReset, "wrong-stop", "reset", False),
        (EarlyStoppingMinOnly, "mode-ignored", "higher is better", False),
        (EarlyStoppingNoDelta, "min-delta-ignored", "min_delta", True),
    ],
)
def test_early_stopping_rejects_bugs(impl, code, phrase, hidden):
    assert_check_fails("08-early-stopping", impl, code=code, phrase=phrase, hidden=hidden)


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


def atomic_never_moves(obj, path):
    torch.save(obj, Path(str(path) + ".new"))


@pytest.mark.parametrize("impl", [atomic_save_suffix, atomic_save_mkstemp])
@pytest.mark.parametrize("hidden", [False, True])
def test_atomic_save_accepts_correct(impl, hidden):
    check("08-atomic-save", impl, hidden=hidden)


@pytest.mark.parametrize(
    ("impl", "code", "phrase"),
    [
        (save_in_place, "not-atomic", "truncates the old file"),
        (atomic_no_cleanup, "temp-left-behind", "no cleanup"),
        (atomic_swallows, "swallowed-error", "re-raise"),
        (atomic_copy, "temp-left-behind", "os.replace"),
        (atomic_never_moves, "wrong-content", "os.replace"),
    ],
)
def test_atomic_save_rejects_bugs(impl, code, phrase):
    assert_check_fails("08-atomic-save", impl, code=code, phrase=phrase)


# ---------------------------------------------------------------------------------------------- best and last
def best_last_simple(state, directory, metric, best_metric, mode="min"):
    directory = Path(directory)
    torch.save(state, directory / "last.pt")
    improved = best_metric is None or (metric < best_metric if mode == "min" else metric > best_metric)
    if improved:
        torch.save(state, directory / "best.pt")
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
    torch.save(state, Path(directory) / "last.pt")
    torch.save(state, Path(directory) / "best.pt")
    return metric if best_metric is None else min(metric, best_metric)


def best_only(state, directory, metric, best_metric, mode="min"):
    improved = best_metric is None or (metric < best_metric if mode == "min" else metric > best_metric)
    if improved:
        torch.save(state, Path(directory) / "best.pt")
        torch.save(state, Path(directory) / "last.pt")
        return metric
    return best_metric


def best_min_only(state, directory, metric, best_metric, mode="min"):
    return best_last_simple(state, directory, metric, best_metric, mode="min")


def best_ties_replace(state, directory, metric, best_metric, mode="min"):
    torch.save(state, Path(directory) / "last.pt")
    if best_metric is None or (metric <= best_metric if mode == "min" else metric >= best_metric):
        torch.save(state, Path(directory) / "best.pt")
        return metric
    return best_metric


def best_returns_metric(state, directory, metric, best_metric, mode="min"):
    best_last_simple(state, directory, metric, best_metric, mode)
    return metric


@pytest.mark.parametrize("impl", [best_last_simple, best_last_signed])
@pytest.mark.parametrize("hidden", [False, True])
def test_best_last_accepts_correct(impl, hidden):
    check("08-best-last", impl, hidden=hidden)


@pytest.mark.parametrize(
    ("impl", "code", "phrase"),
    [
        (best_always, "best-overwritten", "without comparing"),
        (best_only, "last-not-saved", "every epoch"),
        (best_min_only, "best-not-updated", "mode is ignored"),
        (best_ties_replace, "best-overwritten", "a tie does not replace it"),
        (best_returns_metric, "wrong-best-metric", "best metric so far"),
    ],
)
def test_best_last_rejects_bugs(impl, code, phrase):
    assert_check_fails("08-best-last", impl, code=code, phrase=phrase)


# ---------------------------------------------------------------------------------------------- resume
def save_full(path, *, model, optimizer, scheduler, scaler, generator, epoch, best_metric):
    torch.save(
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
    state |= {"rng": torch.get_rng_state(), "data_generator": generator.get_state(), "epoch": epoch, "best_metric": best_metric}
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
    counters = load_full(path, model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler, generator=generator)
    torch.rand(1)
    return counters


def save_pickled_objects(path, *, model, optimizer, scheduler, scaler, generator, epoch, best_metric):
    save_full(path, model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler, generator=generator, epoch=epoch, best_metric=best_metric)
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["generator"] = generator  # a whole object: weights_only refuses it
    torch.save(checkpoint, path)


RESUME_CORRECT = [(save_full, load_full), (save_atomic_torch_rng, load_with_helper)]


@pytest.mark.slow
@pytest.mark.parametrize(("save", "load"), RESUME_CORRECT)
@pytest.mark.parametrize("hidden", [False, True])
def test_resume_accepts_correct(save, load, hidden):
    check("08-resume", save, load, hidden=hidden)


# hidden=False resumes in a fresh process (a subprocess: slow); hidden=True resumes in this process with
# freshly built objects and a scrambled RNG, and must name the same part
@pytest.mark.parametrize(
    ("save", "load", "code", "phrase", "hidden"),
    [
        pytest.param(save_full, load_skips_optimizer, "optimizer-not-restored", "Adam's moment estimates", False, marks=pytest.mark.slow),
        pytest.param(save_full, load_skips_rng, "rng-not-restored", "dropout masks", False, marks=pytest.mark.slow),
        (save_full, load_skips_optimizer, "optimizer-not-restored", "Adam's moment estimates", True),
        (save_full, load_skips_scheduler, "scheduler-not-restored", "restart the schedule", True),
        (save_full, load_skips_scaler, "scaler-not-restored", "GradScaler state", True),
        (save_full, load_skips_rng, "rng-not-restored", "dropout masks", True),
        (save_full, load_skips_generator, "data-order-not-restored", "shuffling order", True),
        (save_full, load_restarts_epochs, "counters-not-restored", "'epoch': 3", True),
        (save_full, load_rng_too_early, "rng-not-restored", "dropout masks", True),
        (save_full, load_unsafe, "unsafe-load", "weights_only=True", False),
        (save_full, load_unsafe, "unsafe-load", "weights_only=True", True),
        (save_pickled_objects, load_full, "not-weights-only", "state", False),
    ],
)
def test_resume_rejects_bugs(save, load, code, phrase, hidden):
    assert_check_fails("08-resume", save, load, code=code, phrase=phrase, hidden=hidden)


@pytest.mark.parametrize(
    ("missing", "code"),
    [
        ("optimizer", "optimizer-not-restored"),
        ("scheduler", "scheduler-not-restored"),
        ("scaler", "scaler-not-restored"),
        ("rng", "rng-not-restored"),
        ("data_generator", "data-order-not-restored"),
        ("model", "model-not-restored"),
        ("best_metric", "counters-not-restored"),
    ],
)
def test_resume_names_the_part_missing_from_the_checkpoint(missing, code):
    message = assert_check_fails("08-resume", _save_without(missing), load_full, code=code, phrase=repr(missing) if missing != "best_metric" else "best_metric")
    assert "save_checkpoint" in message


def test_unsafe_payload_really_runs_code_when_unpickled(tmp_path):
    from harness.checks.lesson08 import _UnsafePayload

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

