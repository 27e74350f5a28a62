"""Checks of lesson 08 (checkpointing).

They observe files and states: what a checkpoint holds, what survives a crash in the middle of a save, and
whether a run killed and resumed in a fresh Python process ends with exactly the weights of a run that
never stopped. The resume check rebuilds the student's functions in the child process from their source
(`inspect.getsource`, plus the notebook functions and modules they use), because a function defined in a
notebook cannot be imported by another process.
"""

from __future__ import annotations

import builtins
import copy
import inspect
import io
import math
import os
import pathlib
import subprocess
import sys
import tempfile
import textwrap
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from harness.checks.core import fail, register

def _same(a: Any, b: Any) -> bool:
    """Deep equality of nested dicts, lists, tensors and numbers (NaN equals NaN)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape and bool(
            torch.equal(a, b) or (a.is_floating_point() and torch.allclose(a, b, rtol=0, atol=0, equal_nan=True))
        )
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


# ----------------------------------------------------------------------------------------------------
# 08-portable: state dicts without wrapper prefixes
# ----------------------------------------------------------------------------------------------------
class _Net(nn.Module):
    """Key names chosen to trip naive prefix stripping: `module_list.*`, `head.module.*`."""

    def __init__(self) -> None:
        super().__init__()
        self.module_list = nn.ModuleList([nn.Linear(3, 4), nn.Linear(4, 4)])
        self.head = nn.Sequential()
        self.head.add_module("module", nn.Linear(4, 2))
        self.register_buffer("steps", torch.tensor(7))


class _CompiledLike(nn.Module):
    """Holds a model as `_orig_mod`, exactly as torch.compile's OptimizedModule does.

    The real torch.compile costs seconds just to import TorchDynamo, too slow inside a graded cell; the state
    dict key names are identical (the tests compare the two).
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self._orig_mod = model


def _wrapped_state_dicts(hidden: bool) -> list[tuple[str, dict[str, torch.Tensor]]]:
    torch.manual_seed(3 if hidden else 1)
    net = _Net()
    cases = [
        ("a plain model", net),
        ("nn.DataParallel(model)", nn.DataParallel(net)),
        ("torch.compile(model)", _CompiledLike(net)),
        ("torch.compile(DataParallel(model))", _CompiledLike(nn.DataParallel(net))),
    ]
    if hidden:
        cases += [
            ("DataParallel(torch.compile(model))", nn.DataParallel(_CompiledLike(net))),
            ("DataParallel(DataParallel(model))", nn.DataParallel(nn.DataParallel(net))),
        ]
    return [(name, wrapper.state_dict()) for name, wrapper in cases]


def _strip_wrappers(key: str) -> str:
    while key.startswith(("module.", "_orig_mod.")):
        key = key.split(".", 1)[1]
    return key


@register(
    "08-portable",
    hints=(
        "Wrappers only add prefixes in front of the real names: DDP/DataParallel add 'module.', torch.compile "
        "adds '_orig_mod.', and they can stack. Names inside the model must stay untouched.",
        "For each key: while it starts with 'module.' or '_orig_mod.', cut that prefix (key[len(prefix):] or "
        "key.removeprefix(prefix)). Do not use str.replace: 'head.module.weight' is a real name.",
    ),
)
def check_portable(portable_state_dict: Callable[[dict], dict], *, hidden: bool) -> str:
    """The result must load strictly into the plain model, with every value untouched."""
    reference = _Net().state_dict()
    cases = _wrapped_state_dicts(hidden)
    for name, state in cases:
        keys_before = list(state)
        result = portable_state_dict(state)
        if list(state) != keys_before:
            fail(
                "mutated-input",
                observed=f"the state dict of {name} passed in was changed",
                expected="a new dict; the caller's state dict left as it was",
                cause="deleting or renaming keys in place",
                where="build and return a new dict",
            )
        left = [k for k in result if k.startswith(("module.", "_orig_mod."))]
        if left:
            fail(
                "prefix-left",
                observed=f"for {name} the result still has keys like {left[0]!r}",
                expected=f"the plain model's keys: {sorted(reference)[:3]}...",
                cause="only one prefix removed, while wrappers can stack (compile around DDP, or the reverse)",
                where="repeat the stripping until no wrapper prefix is left",
            )
        if set(result) != set(reference):
            odd = sorted(set(result) - set(reference))
            fail(
                "over-stripped",
                observed=f"for {name} the result has keys {odd[:3]} that the plain model does not have",
                expected=f"exactly the plain model's keys, e.g. 'module_list.0.weight' and 'head.module.weight'",
                cause="str.replace or lstrip removes 'module' inside real names, not only the leading prefix",
                where="remove a prefix only from the start of the key",
            )
        expected = {_strip_wrappers(k): v for k, v in state.items()}
        for key, value in result.items():
            source = expected[key]
            if not isinstance(value, torch.Tensor) or not torch.equal(value, source):
                fail(
                    "values-changed",
                    observed=f"for {name}, {key!r} does not hold the wrapped model's tensor",
                    expected="the same tensors, only renamed",
                    cause="values copied from the wrong key, or modified",
                    where="keep each value with its renamed key",
                )
        _Net().load_state_dict(result, strict=True)
    return f"{len(cases)} wrapped state dicts load strictly into the plain model"


# ----------------------------------------------------------------------------------------------------
# 08-early-stopping: an early-stopping state that survives a resume
# ----------------------------------------------------------------------------------------------------
def _early_stopping_reference(metrics: list[float], patience: int, mode: str, min_delta: float) -> list[tuple[bool, float]]:
    best, bad, out = None, 0, []
    for value in metrics:
        better = best is None or (value < best - min_delta if mode == "min" else value > best + min_delta)
        best, bad = (value, 0) if better else (best, bad + 1)
        out.append((bad >= patience, best))
    return out


def _early_stopping_cases(hidden: bool) -> list[tuple[list[float], int, str, float]]:
    cases = [
        ([1.0, 0.8, 0.9, 0.85, 0.7, 0.75, 0.72, 0.71, 0.9], 2, "min", 0.0),
        ([0.5, 0.6, 0.6, 0.55, 0.7, 0.69, 0.68, 0.7], 2, "max", 0.0),
    ]
    if hidden:
        cases += [
            ([1.0, 0.95, 0.94, 0.93, 0.8, 0.79, 0.78, 0.6], 2, "min", 0.05),
            ([0.1, 0.2, 0.21, 0.25, 0.5, 0.5, 0.49, 0.52, 0.4], 3, "max", 0.02),
            ([3.0, 3.0, 3.0, 2.0], 1, "min", 0.0),
        ]
    return cases


def _run_early_stopping(make: Callable[..., Any], metrics: list[float], patience: int, mode: str, min_delta: float) -> None:
    stopper = make(patience=patience, mode=mode, min_delta=min_delta)
    expected = _early_stopping_reference(metrics, patience, mode, min_delta)
    for epoch, (value, (stop, best)) in enumerate(zip(metrics, expected)):
        said = stopper.step(value)
        setting = f"patience={patience}, mode={mode!r}, min_delta={min_delta}, metrics {metrics[: epoch + 1]}"
        if stopper.best is None or not math.isclose(float(stopper.best), best):
            code = "min-delta-ignored" if min_delta else "mode-ignored" if mode == "max" else "wrong-best"
            fail(
                code,
                observed=f"best = {stopper.best} after {setting}",
                expected=f"best = {best}",
                cause="an improvement must beat the best by more than min_delta, in the direction mode says "
                "('min': lower is better, 'max': higher is better)",
                where="the comparison in step()",
            )
        if bool(said) != stop:
            fail(
                "wrong-stop",
                observed=f"step() returned {said} after {setting}",
                expected=f"{stop}: stop once {patience} epochs in a row did not improve",
                cause="the counter of bad epochs is not reset on improvement, or compared with > instead of >=",
                where="bad_epochs in step()",
            )


def _resume_early_stopping(make: Callable[..., Any], metrics: list[float], patience: int, mode: str, min_delta: float, cut: int) -> None:
    first = make(patience=patience, mode=mode, min_delta=min_delta)
    for value in metrics[:cut]:
        first.step(value)
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    try:
        state = torch.load(buffer, weights_only=True)
    except Exception as error:  # noqa: BLE001 -- any refusal means the same thing here
        fail(
            "not-weights-only",
            observed=f"torch.load(..., weights_only=True) refused the state dict: {str(error)[:160]}",
            expected="plain values only (numbers, None, lists, dicts)",
            cause="state_dict() returns an object (self, or a custom class) instead of plain values",
            where="state_dict()",
        )
    second = make(patience=patience, mode=mode, min_delta=min_delta)
    second.load_state_dict(state)
    expected = _early_stopping_reference(metrics, patience, mode, min_delta)[cut:]
    for epoch, (value, (stop, best)) in enumerate(zip(metrics[cut:], expected), start=cut):
        said = second.step(value)
        if bool(said) != stop or second.best is None or not math.isclose(float(second.best), best):
            fail(
                "state-not-restored",
                observed=f"after load_state_dict and {epoch - cut + 1} more epochs: step() returned {said}, best "
                f"= {second.best}",
                expected=f"{stop} and best = {best}, as if the run had never stopped",
                cause="state_dict() or load_state_dict() leaves out the best value or the bad-epoch counter",
                where="state_dict and load_state_dict: both 'best' and 'bad_epochs'",
            )


@register(
    "08-early-stopping",
    hints=(
        "Early stopping has two pieces of memory: the best value so far and how many epochs in a row did not "
        "beat it. A resumed run needs both, or it waits `patience` epochs all over again.",
        "step(): better = best is None or value < best - min_delta (mode 'min'; > best + min_delta for 'max'); "
        "reset bad_epochs to 0 when better, else add 1; return bad_epochs >= patience. state_dict returns "
        "{'best': ..., 'bad_epochs': ...}; load_state_dict sets them back.",
    ),
)
def check_early_stopping(early_stopping_class: Callable[..., Any], *, hidden: bool) -> str:
    """Decisions match the reference; state_dict round-trips through weights_only loading."""
    cases = _early_stopping_cases(hidden)
    for metrics, patience, mode, min_delta in cases:
        _run_early_stopping(early_stopping_class, metrics, patience, mode, min_delta)
        for cut in range(1, len(metrics)):
            _resume_early_stopping(early_stopping_class, metrics, patience, mode, min_delta, cut)
    return f"right decisions on {len(cases)} metric sequences; the state resumes exactly at every epoch"


# ----------------------------------------------------------------------------------------------------
# 08-atomic-save: a crash mid-save keeps the previous checkpoint
# ----------------------------------------------------------------------------------------------------
class _CrashDuringSave:
    """Pickling it raises: a crash in the middle of torch.save, after the file was opened."""

    def __reduce__(self) -> Any:
        raise RuntimeError("simulated crash in the middle of torch.save")


def _listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


@register(
    "08-atomic-save",
    hints=(
        "torch.save(obj, path) first truncates `path`: if it dies half way, the old checkpoint is gone too. "
        "Write somewhere else first, and only swap the finished file in.",
        "tmp = path.with_name(path.name + '.tmp'); torch.save(obj, tmp); os.replace(tmp, path). Wrap it in "
        "try/except BaseException: on failure remove tmp (tmp.unlink(missing_ok=True)) and re-raise.",
    ),
)
def check_atomic_save(atomic_save: Callable[[Any, Any], Any], *, hidden: bool) -> str:
    """Saves must replace the file whole, and a save that fails must leave the previous file intact."""
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        path = directory / "last.pt"
        target: Any = str(path) if hidden else path
        size = 50_000 if hidden else 1_000
        first = {"weights": torch.arange(size, dtype=torch.float32), "epoch": 1}
        second = {"weights": torch.arange(size, dtype=torch.float32) * 2, "epoch": 2}
        for number, state in enumerate((first, second), start=1):
            atomic_save(state, target)
            if not path.exists() or not _same(torch.load(path, weights_only=True), state):
                fail(
                    "wrong-content",
                    observed=f"after save {number}, {path.name} does not hold what was saved",
                    expected="torch.load(path, weights_only=True) returns the object just saved",
                    cause="the temporary file is never moved onto `path`, or a different object is written",
                    where="the final os.replace(tmp, path)",
                )
            if _listing(directory) != [path.name]:
                fail(
                    "temp-left-behind",
                    observed=f"after a successful save the folder holds {_listing(directory)}",
                    expected=f"only {path.name}",
                    cause="the temporary file is copied instead of renamed (os.replace)",
                    where="move the temporary file with os.replace",
                )
        crashed = False
        try:
            atomic_save({"weights": second["weights"] + 1, "crash": _CrashDuringSave()}, target)
        except Exception:  # noqa: BLE001 -- the simulated crash; anything raised counts as reported
            crashed = True
        try:
            survived = torch.load(path, weights_only=True)
        except Exception as error:  # noqa: BLE001
            survived = f"unreadable ({type(error).__name__}: {str(error)[:80]})"
        if not _same(survived, second):
            fail(
                "not-atomic",
                observed=f"after a save that crashed half way, {path.name} is "
                f"{survived if isinstance(survived, str) else 'a different object'}",
                expected="the previous checkpoint, intact",
                cause="torch.save writes straight to `path`: it truncates the old file before the new one is complete",
                where="save to a temporary file in the same folder, then os.replace it onto `path`",
            )
        if not crashed:
            fail(
                "swallowed-error",
                observed="the save failed, but atomic_save returned normally",
                expected="the exception propagates, so the training loop knows the checkpoint was not written",
                cause="an except block that does not re-raise",
                where="end the except block with a bare `raise`",
            )
        if _listing(directory) != [path.name]:
            fail(
                "temp-left-behind",
                observed=f"after a failed save the folder holds {_listing(directory)}",
                expected=f"only {path.name}: the half-written temporary file removed",
                cause="no cleanup when torch.save raises",
                where="except BaseException: tmp.unlink(missing_ok=True); raise",
            )
    return "saves replace the file whole; a crash mid-save keeps the previous checkpoint and leaves no debris"


# ----------------------------------------------------------------------------------------------------
# 08-best-last
# ----------------------------------------------------------------------------------------------------
def _best_last_cases(hidden: bool) -> list[tuple[str, list[float]]]:
    cases = [("min", [0.9, 0.7, 0.8, 0.7, 0.5, 0.6]), ("max", [0.2, 0.5, 0.4, 0.6, 0.6, 0.1])]
    if hidden:
        generator = torch.Generator().manual_seed(4)
        cases += [("min", torch.rand(12, generator=generator).tolist()), ("max", torch.rand(12, generator=generator).tolist())]
    return cases


def _load_epoch(path: Path) -> int | None:
    return int(torch.load(path, weights_only=True)["epoch"]) if path.exists() else None


@register(
    "08-best-last",
    hints=(
        "last.pt is written every epoch (to resume); best.pt only when the metric beats the best so far (to "
        "deploy). 'min' means lower is better, 'max' higher; a tie is not an improvement.",
        "improved = best_metric is None or (metric < best_metric if mode == 'min' else metric > best_metric). "
        "Save last.pt; if improved, save best.pt and return metric, else return best_metric.",
    ),
)
def check_best_last(save_best_and_last: Callable[..., Any], *, hidden: bool) -> str:
    """Replay metric sequences and read both files after every epoch."""
    for mode, metrics in _best_last_cases(hidden):
        with tempfile.TemporaryDirectory() as tmp:
            directory = Path(tmp)
            best_metric, best_epoch = None, None
            for epoch, metric in enumerate(metrics):
                state = {"epoch": epoch, "weights": torch.full((3,), float(epoch))}
                returned = save_best_and_last(state, directory, metric, best_metric, mode=mode)
                improved = best_metric is None or (metric < best_metric if mode == "min" else metric > best_metric)
                if improved:
                    best_metric, best_epoch = metric, epoch
                seen = f"mode={mode!r}, metrics {[round(m, 3) for m in metrics[: epoch + 1]]}"
                if _load_epoch(directory / "last.pt") != epoch:
                    fail(
                        "last-not-saved",
                        observed=f"after epoch {epoch} ({seen}) last.pt holds epoch {_load_epoch(directory / 'last.pt')}",
                        expected=f"epoch {epoch}: last.pt is overwritten every epoch",
                        cause="last.pt saved only on improvement, or under another name",
                        where="save to directory / 'last.pt' on every call",
                    )
                held = _load_epoch(directory / "best.pt")
                if held != best_epoch:
                    later = held is not None and held > best_epoch
                    fail(
                        "best-overwritten" if later else "best-not-updated",
                        observed=f"after epoch {epoch} ({seen}) best.pt holds epoch {held}",
                        expected=f"epoch {best_epoch}, the best so far"
                        + (" (a tie does not replace it)" if later and metrics[held] == best_metric else ""),
                        cause="best.pt saved without comparing (or comparing the wrong way for this mode)"
                        if later
                        else "the comparison misses improvements, or mode is ignored",
                        where="the `improved` test and the save to directory / 'best.pt'",
                    )
                if returned is None or not math.isclose(float(returned), best_metric):
                    fail(
                        "wrong-best-metric",
                        observed=f"after epoch {epoch} ({seen}) it returned {returned}",
                        expected=f"{best_metric}: the best metric so far, which the caller passes back next epoch",
                        cause="returning this epoch's metric, or nothing",
                        where="the return statement",
                    )
    return "last.pt follows every epoch, best.pt only improvements, in both modes"


# ----------------------------------------------------------------------------------------------------
# 08-resume: kill a run and resume it in a fresh process
# ----------------------------------------------------------------------------------------------------
@dataclass
class _Run:
    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    scaler: torch.amp.GradScaler
    generator: torch.Generator
    loader: DataLoader


def _build_run(seed: int, data_seed: int, epochs: int) -> _Run:
    """A small run with every kind of state: dropout (global RNG), shuffling (a generator), Adam moments, a
    per-step OneCycle schedule and a GradScaler whose scale grows during training."""
    data = torch.Generator().manual_seed(data_seed)
    inputs = torch.randn(64, 6, generator=data)
    targets = (inputs[:, :3].sum(1) > 0).long() + (inputs[:, 3] > 0.5).long()
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 3))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(seed + 1)
    loader = DataLoader(TensorDataset(inputs, targets), batch_size=16, shuffle=True, generator=generator)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=2e-2, total_steps=epochs * len(loader))
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=3)
    return _Run(model, optimizer, scheduler, scaler, generator, loader)


def _train_epoch(run: _Run) -> None:
    run.model.train()
    for inputs, targets in run.loader:
        loss = nn.functional.cross_entropy(run.model(inputs), targets)
        run.scaler.scale(loss).backward()
        scale = run.scaler.get_scale()
        run.scaler.step(run.optimizer)
        run.scaler.update()
        if run.scaler.get_scale() >= scale:
            run.scheduler.step()
        run.optimizer.zero_grad(set_to_none=True)


def _objects(run: _Run) -> dict[str, Any]:
    return {"model": run.model, "optimizer": run.optimizer, "scheduler": run.scheduler, "scaler": run.scaler, "generator": run.generator}


def _snapshot(run: _Run) -> dict[str, Any]:
    """Every piece of state an exact resume needs, copied."""
    return copy.deepcopy(
        {
            "model": run.model.state_dict(),
            "optimizer": run.optimizer.state_dict(),
            "scheduler": run.scheduler.state_dict(),
            "scaler": run.scaler.state_dict(),
            "rng": torch.get_rng_state(),
            "data_generator": run.generator.get_state(),
        }
    )


def _resume_in_child(load_checkpoint: Callable[..., Any], checkpoint: str, out: str, seed: int, data_seed: int, epochs: int) -> None:
    """Run in the fresh process: build a run with other seeds, load, report the restored state, finish."""
    run = _build_run(seed + 1000, data_seed, epochs)  # other seeds: nothing matches unless it is loaded
    torch.manual_seed(seed + 2000)
    counters = load_checkpoint(checkpoint, **_objects(run))
    # written before training on, so a resume that then crashes still shows what it restored
    torch.save({"counters": counters, "restored": _snapshot(run)}, out + ".restored")
    start = int(counters["epoch"]) if isinstance(counters, dict) and "epoch" in counters else 0
    for _ in range(start, epochs):
        _train_epoch(run)
    torch.save(run.model.state_dict(), out)


# -- rebuilding the student's functions in another process ----------------------------------------------
def _names_used(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names_used(const)
    return names


def _rebuild_source(functions: list[Callable[..., Any]]) -> str:
    """Python source that defines `functions` (and the same-module functions they call) in a new process."""
    home = functions[0].__module__
    lines: list[str] = []
    sources: list[str] = []
    done: set[str] = set()
    queue = list(functions)
    while queue:
        function = queue.pop(0)
        if function.__name__ in done:
            continue
        done.add(function.__name__)
        try:
            sources.append(textwrap.dedent(inspect.getsource(function)))
        except (OSError, TypeError) as error:
            raise RuntimeError(f"the check cannot read the source of {function.__name__} ({error}); define it in a cell with def") from error
        for name in sorted(_names_used(function.__code__) - done):
            if name not in function.__globals__ or hasattr(builtins, name):
                continue
            value = function.__globals__[name]
            if isinstance(value, types.ModuleType):
                lines.append(f"import {value.__name__} as {name}")
            elif isinstance(value, types.FunctionType) and value.__module__ == home:
                queue.append(value)
            elif getattr(value, "__module__", None) not in (None, home) and "<" not in getattr(value, "__qualname__", "<"):
                lines.append(f"from {value.__module__} import {value.__qualname__} as {name}")
            elif isinstance(value, (int, float, str, bool, type(None))):
                lines.append(f"{name} = {value!r}")
            else:
                raise RuntimeError(
                    f"{function.__name__} uses {name!r} ({type(value).__name__}), which the check cannot rebuild in a "
                    f"fresh process: use it inside the function or pass it as an argument"
                )
    return "\n".join(dict.fromkeys(lines)) + "\n\n" + "\n\n".join(reversed(sources))


class _UnsafePayload:
    """Unpickling it creates a file: the harmless stand-in for code hidden in a malicious checkpoint."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (pathlib.Path.touch, (pathlib.Path(self.marker),))


_PARTS = {
    "model": ("model-not-restored", "the model weights"),
    "optimizer": ("optimizer-not-restored", "the optimizer state (Adam's moment estimates and step counts)"),
    "scheduler": ("scheduler-not-restored", "the scheduler state (its step count: the lr would restart the schedule)"),
    "scaler": ("scaler-not-restored", "the GradScaler state (its scale and growth tracker)"),
    "rng": ("rng-not-restored", "the global RNG states (dropout masks would differ)"),
    "data_generator": ("data-order-not-restored", "the DataLoader generator (the shuffling order would differ)"),
}


def _check_contents(path: Path, saved: dict[str, Any], epoch: int, best_metric: float) -> dict[str, Any]:
    try:
        checkpoint = torch.load(path, weights_only=True)
    except Exception as error:  # noqa: BLE001 -- the refusal is the observation
        fail(
            "not-weights-only",
            observed=f"torch.load(path, weights_only=True) refuses the checkpoint: {str(error)[:200]}",
            expected="only tensors and plain values (state dicts, numbers, the dict from capture_rng_state())",
            cause="a whole object (model, optimizer, generator) saved instead of its state",
            where="save_checkpoint: model.state_dict(), generator.get_state(), ...",
        )
    for key, (code, what) in _PARTS.items():
        if key not in checkpoint:
            fail(
                code,
                observed=f"the checkpoint has no {key!r} entry (it has {sorted(checkpoint)})",
                expected=f"{key!r}: {what}",
                cause=f"save_checkpoint leaves out {key!r}, so a resumed run cannot continue exactly",
                where="save_checkpoint",
            )
    rng = checkpoint["rng"]
    if not (isinstance(rng, dict) and _same(rng.get("torch"), saved["rng"])) and not _same(rng, saved["rng"]):
        fail(
            "rng-not-restored",
            observed="the checkpoint's 'rng' entry does not hold the torch RNG state at the time of saving",
            expected="capture_rng_state() (or at least torch.get_rng_state()) captured inside save_checkpoint",
            cause="RNG state captured at another moment, or not at all",
            where="save_checkpoint: 'rng': capture_rng_state()",
        )
    for key in ("epoch", "best_metric"):
        value = checkpoint.get(key)
        wanted = epoch if key == "epoch" else best_metric
        if not isinstance(value, (int, float)) or not math.isclose(float(value), wanted):
            fail(
                "counters-not-restored",
                observed=f"the checkpoint's {key!r} is {value!r}",
                expected=f"{wanted!r}, the value passed to save_checkpoint",
                cause=f"{key} not saved, or saved under another name",
                where="save_checkpoint",
            )
    return checkpoint


def _check_unsafe_load(load_checkpoint: Callable[..., Any], checkpoint: dict[str, Any], directory: Path, seed: int, epochs: int) -> None:
    marker = directory / "code-ran"
    trap_path = directory / "downloaded.pt"
    torch.save({**checkpoint, "note": _UnsafePayload(marker)}, trap_path)
    run = _build_run(seed + 3000, 0, epochs)
    rng = torch.get_rng_state()
    try:
        load_checkpoint(trap_path, **_objects(run))
    except Exception:  # noqa: BLE001 -- weights_only=True refusing the file is the expected outcome
        pass
    finally:
        torch.set_rng_state(rng)
    if marker.exists():
        fail(
            "unsafe-load",
            observed="loading a checkpoint that hides a pickled call ran that call (it created a file)",
            expected="torch.load(path, weights_only=True): it refuses anything but tensors and plain values",
            cause="weights_only=False: unpickling can run any code the file's author chose",
            where="the torch.load call in load_checkpoint",
        )


def _run_child(functions: tuple[Callable[..., Any], Callable[..., Any]], directory: Path, checkpoint: Path, out: Path, run: tuple[int, int]) -> subprocess.CompletedProcess:
    """Run `_resume_in_child` in a fresh Python process, with the student's functions rebuilt from source."""
    save_checkpoint, load_checkpoint = functions
    seed, epochs = run
    try:
        source = _rebuild_source([load_checkpoint, save_checkpoint])
    except RuntimeError as error:
        fail(
            "cannot-rebuild",
            observed=str(error),
            expected="functions defined with def in the notebook, using modules and other notebook functions",
            cause="the check re-creates your functions in a fresh Python process from their source",
            where="load_checkpoint and the helpers it calls",
        )
    script = (
        # annotations stay strings: a type named in a signature need not be importable in the child
        "from __future__ import annotations\nimport torch\ntorch.set_num_threads(1)\n"
        f"{source}\n\n"
        "from harness.checks.lesson08 import _resume_in_child\n"
        f"_resume_in_child({load_checkpoint.__name__}, {str(checkpoint)!r}, {str(out)!r}, {seed}, 0, {epochs})\n"
    )
    (directory / "resume_child.py").write_text(script)
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    return subprocess.run(
        [sys.executable, str(directory / "resume_child.py")], cwd=directory, env=environment, capture_output=True, text=True, timeout=180
    )


def _resume(
    functions: tuple[Callable[..., Any], Callable[..., Any]],
    directory: Path,
    checkpoint: Path,
    run: tuple[int, int],
    expected: tuple[dict[str, Any], int, float],
    fresh_process: bool,
) -> dict[str, torch.Tensor]:
    """Resume from `checkpoint` (in a fresh process, or here with fresh objects); compare what was restored;
    return the final weights."""
    saved, epoch, best_metric = expected
    out = directory / "resumed.pt"
    restored = Path(f"{out}.restored")
    if not fresh_process:
        seed, epochs = run
        try:
            _resume_in_child(functions[1], str(checkpoint), str(out), seed, 0, epochs)
        except Exception:
            if restored.exists():  # a crash after a bad restore is best explained by the restore
                _compare_restored(torch.load(restored, weights_only=True), saved, epoch, best_metric)
            raise
        _compare_restored(torch.load(restored, weights_only=True), saved, epoch, best_metric)
        return torch.load(out, weights_only=True)
    done = _run_child(functions, directory, checkpoint, out, run)
    if restored.exists():  # compare first: a crash after a bad restore is best explained by the restore
        _compare_restored(torch.load(restored, weights_only=True), saved, epoch, best_metric)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["(no message)"]
        fail(
            "resume-crashed",
            observed=f"resuming in a fresh process failed: {tail[0][:300]}",
            expected="load_checkpoint restores the run and training continues",
            cause="load_checkpoint expects something the checkpoint does not hold, or uses a name defined elsewhere",
            where="load_checkpoint (the fresh process sees only it, its helpers and the modules they import)",
        )
    return torch.load(out, weights_only=True)


def _compare_restored(result: dict[str, Any], saved: dict[str, Any], epoch: int, best_metric: float) -> None:
    counters = result["counters"]
    if not isinstance(counters, dict) or counters.get("epoch") != epoch or not math.isclose(float(counters.get("best_metric", math.nan)), best_metric):
        fail(
            "counters-not-restored",
            observed=f"load_checkpoint returned {counters!r}",
            expected=f"{{'epoch': {epoch}, 'best_metric': {best_metric}}}: where to continue and the best so far",
            cause="the counters are not returned from the checkpoint",
            where="the return statement of load_checkpoint",
        )
    restored = result["restored"]
    for key, (code, what) in _PARTS.items():
        if not _same(restored[key], saved[key]):
            fail(
                code,
                observed=f"after load_checkpoint into freshly built objects, {what} differ from the saved ones",
                expected="every part of the run restored exactly",
                cause=f"load_checkpoint does not restore {key!r} (load_state_dict / set_state / restore_rng_state)",
                where="load_checkpoint",
            )


@register(
    "08-resume",
    hints=(
        "A resumed run continues exactly only if *everything* that influences the next step is restored: "
        "weights, optimizer moments, scheduler position, scaler, RNG states (dropout) and the data order.",
        "save: torch.save({'model': model.state_dict(), 'optimizer': ..., 'scheduler': ..., 'scaler': ..., "
        "'rng': capture_rng_state(), 'data_generator': generator.get_state(), 'epoch': epoch, 'best_metric': "
        "best_metric}, path). load: torch.load(path, weights_only=True), then load_state_dict on each object, "
        "restore_rng_state, generator.set_state; return {'epoch': ..., 'best_metric': ...}.",
    ),
)
def check_resume(save_checkpoint: Callable[..., Any], load_checkpoint: Callable[..., Any], *, hidden: bool) -> str:
    """Train continuously, checkpoint mid-way, resume (in a fresh process when visible): same final weights."""
    seed, epochs, stop_at = (29, 5, 3) if hidden else (17, 4, 2)
    best_metric = 0.125 * stop_at
    threads = torch.get_num_threads()
    rng = torch.get_rng_state()
    torch.set_num_threads(1)  # the child runs single-threaded too: identical float reductions, identical weights
    try:
        with tempfile.TemporaryDirectory() as tmp:
            directory = Path(tmp)
            path = directory / "checkpoint.pt"
            run = _build_run(seed, 0, epochs)
            saved: dict[str, Any] = {}
            for epoch in range(1, epochs + 1):
                _train_epoch(run)
                if epoch == stop_at:
                    saved = _snapshot(run)
                    save_checkpoint(path, **_objects(run), epoch=epoch, best_metric=best_metric)
            continuous = run.model.state_dict()
            checkpoint = _check_contents(path, saved, stop_at, best_metric)
            _check_unsafe_load(load_checkpoint, checkpoint, directory, seed, epochs)
            # the visible test resumes in a fresh process; the hidden one (other seeds and epochs, same cell)
            # resumes here with freshly built objects and a scrambled RNG, which halves the cell's time
            final = _resume(
                (save_checkpoint, load_checkpoint), directory, path, (seed, epochs), (saved, stop_at, best_metric),
                fresh_process=not hidden,
            )
    finally:
        torch.set_num_threads(threads)
        torch.set_rng_state(rng)
    worst = max(float((final[k] - v).abs().max()) for k, v in continuous.items())
    if worst > 0:
        fail(
            "weights-diverged",
            observed=f"after resuming at epoch {stop_at} of {epochs}, the final weights differ from the run that "
            f"never stopped by up to {worst:.3g}",
            expected="identical weights",
            cause="something that influences training is not in the checkpoint or not restored in the right order",
            where="save_checkpoint and load_checkpoint",
        )
    where = "in this process with freshly built objects" if hidden else "in a fresh process"
    return f"stopped after epoch {stop_at} of {epochs}, resumed {where}: final weights identical to the continuous run"
