"""Checks of lesson 08 (checkpointing).

They observe files and states: what a checkpoint holds, what survives a crash in the middle of a save, and
whether a run killed and resumed (in a fresh Python process for the visible case) ends with exactly the
weights of a run that never stopped. Each probe runs the student's code, reads back what it wrote with
`torch.load(..., weights_only=True)` and records it as data (tensors, numbers, file names), never as pickled
bytes; each judge rebuilds the case's inputs, recomputes what the files and states must hold (for the resume
check, by replaying the small reference run), and decides.

The resume probe rebuilds the student's functions in the child process from their source
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

from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges, register
from harness.contract.wire import Opaque, describe


def _same(a: Any, b: Any) -> bool:
    """Deep equality of nested dicts, lists, tensors and numbers (NaN equals NaN)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape and bool(
            torch.equal(a, b) or (a.is_floating_point() and torch.allclose(a, b, rtol=0, atol=0, equal_nan=True))
        )
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def _as_data(value: Any) -> Any:
    """A loaded checkpoint as wire data: dict keys as strings (optimizer states use ints), tuples as lists."""
    if isinstance(value, dict):
        return {str(k): _as_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_data(v) for v in value]
    return value


def _as_number(value: Any) -> float | None:
    """A returned number (or one-element tensor) as a float; None for anything else (None included)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_complex():
        return float(value)
    return None


def _as_flag(value: Any) -> bool | None:
    """A returned bool (or number, one-element tensor, numpy bool) as a bool; None for anything else."""
    if isinstance(value, bool):
        return value
    if isinstance(value, Opaque) and value.type_name == "bool_" and value.text in ("True", "False"):
        return value.text == "True"
    number = _as_number(value)
    return None if number is None else bool(number)


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


# DataParallel and DDP name their model's keys 'module.' + key, torch.compile '_orig_mod.' + key, and the
# prefixes stack, in either order (the tests compare these with the real wrappers' state dicts). Visible and
# hidden cases use them all; the hidden ones hold other weights.
_WRAPPERS = (
    ("a plain model", ""),
    ("nn.DataParallel(model)", "module."),
    ("torch.compile(model)", "_orig_mod."),
    ("torch.compile(DataParallel(model))", "_orig_mod.module."),
    ("DataParallel(torch.compile(model))", "module._orig_mod."),
    ("DataParallel(DataParallel(model))", "module.module."),
)


def _plain_state_dict(case: Case) -> dict[str, torch.Tensor]:
    """The seeded plain model's state dict."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(case.seeded(3 if case.hidden else 1))
        return _Net().state_dict()


def _wrapped_state_dicts(case: Case) -> list[tuple[str, dict[str, torch.Tensor]]]:
    """The state dict of the case's model as each wrapper names it, each with its own copy of the values."""
    plain = _plain_state_dict(case)
    return [(name, {prefix + k: v.clone() for k, v in plain.items()}) for name, prefix in _WRAPPERS]


@register(
    "08-portable",
    hints=Hints(
        nudge="Wrappers only add prefixes in front of the real names: DDP/DataParallel add 'module.', "
        "torch.compile adds '_orig_mod.', and they can stack. Names inside the model must stay untouched.",
        concept="Strip from the start of each key only, and repeat until no wrapper prefix is left; build a new "
        "dict so the caller's state dict stays as it was.",
        solution="for key, value in state_dict.items(): while key.startswith(('module.', '_orig_mod.')): "
        "key = key.split('.', 1)[1]; clean[key] = value",
        section="2. Portable state dicts: no wrapper prefixes",
    ),
    requires={
        "mutated-input": Requirement(
            "the dict passed in is not modified",
            hint="After your call, print the keys of the dict you were given: are they still the wrapped ones?"),
        "not-a-dict": Requirement(
            "returns a dict",
            hint="What type does your return statement build? load_state_dict wants a dict."),
        "prefix-left": Requirement(
            "every leading wrapper prefix is removed, however many are stacked, in any order",
            hint="Try your function on {'module._orig_mod.w': 0} and {'_orig_mod.module.w': 0}: is a prefix left?"),
        "over-stripped": Requirement(
            "only leading prefixes are removed: names inside the model stay",
            hint="Try your function on {'head.module.weight': 0} and {'module_list.0.weight': 0}: they must "
            "come back unchanged."),
        "values-changed": Requirement(
            "every value is left untouched, with its renamed key",
            hint="Compare each value of your result with the value under the wrapped key: are they the same "
            "tensors?"),
    },
)
def probe_portable(portable_state_dict: Callable[[dict], dict], *, case: Case) -> dict:
    """Call the student's function on each wrapped state dict; record the result and the input's keys after."""
    results = []
    for _, state in _wrapped_state_dicts(case):
        result = portable_state_dict(state)
        results.append({"keys_after": list(state), "result": result})
    return {"results": results}


@judges("08-portable")
def judge_portable(seen: dict, *, case: Case) -> str:
    """The result must load strictly into the plain model, with every value untouched."""
    reference = _plain_state_dict(case)
    cases = _wrapped_state_dicts(case)
    for (name, state), observed in zip(cases, seen["results"], strict=True):
        if observed["keys_after"] != list(state):
            fail(
                "mutated-input",
                observed=f"the state dict of {name} passed in was changed",
                expected="a new dict; the caller's state dict left as it was",
                cause="deleting or renaming keys in place",
                where="build and return a new dict",
            )
        result = observed["result"]
        if not isinstance(result, dict):
            fail(
                "not-a-dict",
                observed=f"for {name} it returned {describe(result)}",
                expected="a dict from the plain model's key names to the same tensors",
                cause="returning the items, a generator or a list instead of building a dict",
                where="the return statement",
            )
        left = [k for k in result if k.startswith(("module.", "_orig_mod."))]
        if left:
            fail(
                "prefix-left",
                observed=f"for {name} the result still has keys like {left[0]!r}",
                expected=f"the plain model's keys: {sorted(reference)[:3]}...",
                cause="only one prefix removed, or the prefixes removed in one fixed order, while wrappers can "
                "stack in any order (compile around DDP, DDP around compile, DDP twice)",
                where="repeat the stripping until no wrapper prefix is left",
            )
        if set(result) != set(reference):
            odd = sorted(set(result) - set(reference))
            fail(
                "over-stripped",
                observed=f"for {name} the result has keys {odd[:3]} that the plain model does not have",
                expected="exactly the plain model's keys, e.g. 'module_list.0.weight' and 'head.module.weight'",
                cause="str.replace, str.lstrip (which strips characters, not a prefix) or startswith('module') "
                "without the dot removes parts of real names, not only the leading prefix",
                where="remove a prefix only from the start of the key",
            )
        for key, value in result.items():
            source = reference[key]
            if not isinstance(value, torch.Tensor) or value.dtype != source.dtype or not torch.equal(value, source):
                fail(
                    "values-changed",
                    observed=f"for {name}, {key!r} does not hold the wrapped model's tensor",
                    expected="the same tensors, only renamed",
                    cause="values copied from the wrong key, or modified",
                    where="keep each value with its renamed key",
                )
        with torch.random.fork_rng(devices=[]):
            _Net().load_state_dict(result, strict=True)
    return f"{len(cases)} wrapped state dicts load strictly into the plain model"


# ----------------------------------------------------------------------------------------------------
# 08-early-stopping: an early-stopping state that survives a resume
# ----------------------------------------------------------------------------------------------------
EarlyStoppingCase = tuple[list[float], int, str, float]


def _early_stopping_reference(
    metrics: list[float], patience: int, mode: str, min_delta: float
) -> list[tuple[bool, float]]:
    best, bad, out = None, 0, []
    for value in metrics:
        better = best is None or (value < best - min_delta if mode == "min" else value > best + min_delta)
        best, bad = (value, 0) if better else (best, bad + 1)
        out.append((bad >= patience, best))
    return out


def _early_stopping_cases(case: Case) -> list[EarlyStoppingCase]:
    """Fixed metric sequences (both modes, min_delta, ties, patience 1 to 3); the hidden ones add a seeded
    random walk."""
    cases = [
        ([1.0, 0.8, 0.9, 0.85, 0.7, 0.75, 0.72, 0.71, 0.9], 2, "min", 0.0),
        ([0.5, 0.6, 0.6, 0.55, 0.7, 0.69, 0.68, 0.7], 2, "max", 0.0),
        ([1.0, 0.95, 0.94, 0.93, 0.8, 0.79, 0.78, 0.6], 2, "min", 0.05),
        ([0.1, 0.2, 0.21, 0.25, 0.5, 0.5, 0.49, 0.52, 0.4], 3, "max", 0.02),
        ([3.0, 3.0, 3.0, 2.0], 1, "min", 0.0),
    ]
    if case.hidden:
        generator = torch.Generator().manual_seed(case.seeded(6))
        walk = (1.0 + torch.randn(10, generator=generator).mul(0.05).cumsum(0)).tolist()
        cases.append((walk, 2, ("min", "max")[case.seed % 2], 0.01))
    return cases


def _replay_stopper(stopper: Any, metrics: list[float]) -> list[tuple[Any, Any]]:
    """What step() returned and what `best` held after each metric."""
    return [(stopper.step(value), stopper.best) for value in metrics]


def _probe_resumed_stopper(
    make: Callable[..., Any], metrics: list[float], patience: int, mode: str, min_delta: float, cut: int
) -> dict[str, Any]:
    """Stop after `cut` metrics, save the state through torch.save and a weights_only load, resume in a new one."""
    first = make(patience=patience, mode=mode, min_delta=min_delta)
    _replay_stopper(first, metrics[:cut])
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    try:
        state = torch.load(buffer, weights_only=True)
    except Exception as error:  # noqa: BLE001 -- any refusal means the same thing here
        return {"refused": str(error)[:160], "steps": None}
    second = make(patience=patience, mode=mode, min_delta=min_delta)
    second.load_state_dict(state)
    return {"refused": None, "steps": _replay_stopper(second, metrics[cut:])}


@register(
    "08-early-stopping", nonfinite=('runs/*/initial',),
    hints=Hints(
        nudge="Early stopping has two pieces of memory: the best value so far and how many epochs in a row did "
        "not beat it. A resumed run needs both, or it waits `patience` epochs all over again.",
        concept="An improvement beats best by more than min_delta in the direction of mode; it resets the "
        "counter, anything else adds 1; stop once the counter reaches patience. state_dict holds both pieces of "
        "memory as plain values.",
        solution="improved = self.best is None or (metric < self.best - self.min_delta if self.mode == 'min' "
        "else metric > self.best + self.min_delta); state_dict: return {'best': self.best, 'bad_epochs': "
        "self.bad_epochs}",
        section="3. Early stopping must resume too",
    ),
    requires={
        "initial-best": Requirement(
            "best is None before the first step",
            hint="Print EarlyStopping(2).best before any step: the text asks for None, not a sentinel."),
        "wrong-best": Requirement(
            "best holds the best value so far (mode 'min': the lowest)",
            hint="After the metrics 1.0, 0.8, 0.9, what should best hold? Is best only replaced on improvement?"),
        "mode-ignored": Requirement(
            "mode='max' means higher is better",
            hint="Run it with mode='max' on 0.5, 0.6: does 0.6 count as an improvement?"),
        "min-delta-ignored": Requirement(
            "an improvement must beat best by more than min_delta",
            hint="With min_delta=0.05, does 0.95 improve on 1.0?"),
        "wrong-stop": Requirement(
            "step() returns True once `patience` epochs in a row did not improve",
            hint="With patience 2: after two epochs without improvement, what does step() return? Is the "
            "counter reset on improvement?"),
        "not-weights-only": Requirement(
            "state_dict() returns plain values (loadable with weights_only=True)",
            hint="What does your state_dict() put in the dict: numbers, or objects?"),
        "state-not-restored": Requirement(
            "load_state_dict restores every piece of memory, so a resumed run decides the same",
            hint="Which attributes change in step()? Are all of them in state_dict() and restored by "
            "load_state_dict()?"),
    },
)
def probe_early_stopping(early_stopping_class: Callable[..., Any], *, case: Case) -> dict:
    """Replay each metric sequence straight through, and stopped and resumed after every epoch."""
    runs = []
    for metrics, patience, mode, min_delta in _early_stopping_cases(case):
        initial = early_stopping_class(patience=patience, mode=mode, min_delta=min_delta).best
        straight = _replay_stopper(early_stopping_class(patience=patience, mode=mode, min_delta=min_delta), metrics)
        resumed = [
            _probe_resumed_stopper(early_stopping_class, metrics, patience, mode, min_delta, cut)
            for cut in range(1, len(metrics))
        ]
        runs.append({"initial": initial, "straight": straight, "resumed": resumed})
    return {"runs": runs}


def _judge_straight(steps: list[Any], metrics: list[float], patience: int, mode: str, min_delta: float) -> None:
    expected = _early_stopping_reference(metrics, patience, mode, min_delta)
    for epoch, ((said, held), (stop, best)) in enumerate(zip(steps, expected, strict=True)):
        setting = f"patience={patience}, mode={mode!r}, min_delta={min_delta}, metrics {metrics[: epoch + 1]}"
        held_number = _as_number(held)
        if held_number is None or not math.isclose(held_number, best):
            code = "min-delta-ignored" if min_delta else "mode-ignored" if mode == "max" else "wrong-best"
            fail(
                code,
                observed=f"best = {held} after {setting}",
                expected=f"best = {best}",
                cause={
                    "min-delta-ignored": "the comparison ignores min_delta, or applies it the wrong way (an "
                    "improvement beats best by more than min_delta)",
                    "mode-ignored": "mode='max' compared like 'min' (lower taken as better)",
                    "wrong-best": "best replaced by a value that did not improve (every metric stored), or not "
                    "replaced when one did",
                }[code],
                where="the comparison in step()",
            )
        if _as_flag(said) != stop:
            fail(
                "wrong-stop",
                observed=f"step() returned {said} after {setting}",
                expected=f"{stop}: stop once {patience} epochs in a row did not improve",
                cause="the counter of bad epochs is not reset on improvement, grows on improvement too, or is "
                "compared with > instead of >=",
                where="bad_epochs in step()",
            )


def _judge_resumed(
    resumed: dict[str, Any], metrics: list[float], patience: int, mode: str, min_delta: float, cut: int
) -> None:
    if resumed["refused"] is not None:
        fail(
            "not-weights-only",
            observed=f"torch.load(..., weights_only=True) refused the state dict: {resumed['refused']}",
            expected="plain values only (numbers, None, lists, dicts)",
            cause="state_dict() returns an object (self, or a custom class) instead of plain values",
            where="state_dict()",
        )
    expected = _early_stopping_reference(metrics, patience, mode, min_delta)[cut:]
    for epoch, ((said, held), (stop, best)) in enumerate(zip(resumed["steps"], expected, strict=True), start=cut):
        held_number = _as_number(held)
        if _as_flag(said) != stop or held_number is None or not math.isclose(held_number, best):
            fail(
                "state-not-restored",
                observed=f"after load_state_dict and {epoch - cut + 1} more epochs: step() returned {said}, best "
                f"= {held}",
                expected=f"{stop} and best = {best}, as if the run had never stopped",
                cause="state_dict() or load_state_dict() leaves out the best value or the bad-epoch counter",
                where="state_dict and load_state_dict: both 'best' and 'bad_epochs'",
            )


@judges("08-early-stopping")
def judge_early_stopping(seen: dict, *, case: Case) -> str:
    """Decisions match the reference; the state round-trips through weights_only loading at every epoch."""
    cases = _early_stopping_cases(case)
    for (metrics, patience, mode, min_delta), run in zip(cases, seen["runs"], strict=True):
        if run["initial"] is not None:
            fail(
                "initial-best",
                observed=f"best = {describe(run['initial'])} before the first step",
                expected="None: there is no best value before the first metric",
                cause="best initialised to a sentinel (inf, -inf, 0) instead of None",
                where="__init__: self.best = None",
            )
        _judge_straight(run["straight"], metrics, patience, mode, min_delta)
        for cut, resumed in enumerate(run["resumed"], start=1):
            _judge_resumed(resumed, metrics, patience, mode, min_delta, cut)
        if len(run["resumed"]) != len(metrics) - 1:
            raise ValueError("the observation does not resume after every epoch")
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


def _read_back(path: Path) -> Any:
    """What a file holds, loaded with weights_only=True: the data, None if absent, a string if unreadable."""
    if not path.exists():
        return None
    try:
        return _as_data(torch.load(path, weights_only=True))
    except Exception as error:  # noqa: BLE001 -- the refusal is the observation
        return f"unreadable ({type(error).__name__}: {str(error)[:80]})"


def _atomic_states(case: Case) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two states saved one after the other (seeded weights; larger in the hidden case)."""
    size = 50_000 if case.hidden else 1_000
    weights = torch.randn(size, generator=torch.Generator().manual_seed(case.seeded(8)))
    return {"weights": weights, "epoch": 1}, {"weights": weights * 2, "epoch": 2}


@register(
    "08-atomic-save",
    hints=Hints(
        nudge="torch.save(obj, path) first truncates `path`: if it dies half way, the old checkpoint is gone "
        "too. Write somewhere else first, and only swap the finished file in.",
        concept="Write a temporary file in the same folder, then os.replace it onto path (an atomic rename); "
        "if anything raises, remove the temporary file and re-raise.",
        solution="path = Path(path); tmp = path.with_name(path.name + '.tmp'); try: torch.save(obj, tmp); "
        "os.replace(tmp, path) except BaseException: tmp.unlink(missing_ok=True); raise",
        section="4. Atomic saves",
    ),
    requires={
        "wrong-content": Requirement(
            "after a save, path holds the object just saved",
            hint="After your function returns, what does torch.load(path) give? Did the new file reach path?"),
        "temp-left-behind": Requirement(
            "nothing but path is left in the folder, after a good save or a failed one",
            hint="List the folder after a save, and after a save that raised: is a temporary file still there?"),
        "not-atomic": Requirement(
            "a save that fails half way leaves the previous file intact",
            hint="What is in path while torch.save is still writing into it?"),
        "swallowed-error": Requirement(
            "a failed save re-raises its exception",
            hint="When the save fails, how does the training loop find out?"),
    },
)
def probe_atomic_save(atomic_save: Callable[[Any, Any], Any], *, case: Case) -> dict:
    """Save twice, then a save that crashes; read the file back and list the folder after each."""
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        path = directory / "last.pt"
        # the path as a Path and as a str, both in every case
        targets: list[Any] = [str(path), path, str(path)] if case.hidden else [path, str(path), path]
        saves = []
        # two good saves to the first two targets; the last target is the crashing save's, below
        for state, target in zip(_atomic_states(case), targets, strict=False):
            atomic_save(state, target)
            saves.append({"content": _read_back(path), "listing": _listing(directory)})
        crashed = False
        try:
            atomic_save({"weights": saves[-1]["content"], "crash": _CrashDuringSave()}, targets[-1])
        except Exception:  # noqa: BLE001 -- the simulated crash; anything raised counts as reported
            crashed = True
        return {"saves": saves, "crashed": crashed, "survived": _read_back(path), "listing": _listing(directory)}


@judges("08-atomic-save")
def judge_atomic_save(seen: dict, *, case: Case) -> str:
    """Saves must replace the file whole, and a save that fails must leave the previous file intact."""
    name = "last.pt"
    states = _atomic_states(case)
    for number, (state, save) in enumerate(zip(states, seen["saves"], strict=True), start=1):
        if not _same(save["content"], state):
            fail(
                "wrong-content",
                observed=f"after save {number}, {name} does not hold what was saved",
                expected="torch.load(path, weights_only=True) returns the object just saved",
                cause="the temporary file is never moved onto `path`, or a different object is written",
                where="the final os.replace(tmp, path)",
            )
        if save["listing"] != [name]:
            fail(
                "temp-left-behind",
                observed=f"after a successful save the folder holds {save['listing']}",
                expected=f"only {name}",
                cause="the temporary file is copied (shutil.copy) instead of renamed with os.replace, or an extra "
                "file is written next to the checkpoint",
                where="move the temporary file with os.replace",
            )
    survived = seen["survived"]
    if not _same(survived, states[-1]):
        fail(
            "not-atomic",
            observed=f"after a save that crashed half way, {name} is "
            f"{survived if isinstance(survived, str) else 'missing' if survived is None else 'a different object'}",
            expected="the previous checkpoint, intact",
            cause="torch.save writes straight to `path` (it truncates the old file before the new one is "
            "complete), or the old file is removed before the new one is complete",
            where="save to a temporary file in the same folder, then os.replace it onto `path`",
        )
    if seen["crashed"] is not True:
        fail(
            "swallowed-error",
            observed="the save failed, but atomic_save returned normally",
            expected="the exception propagates, so the training loop knows the checkpoint was not written",
            cause="an except block that does not re-raise",
            where="end the except block with a bare `raise`",
        )
    if seen["listing"] != [name]:
        fail(
            "temp-left-behind",
            observed=f"after a failed save the folder holds {seen['listing']}",
            expected=f"only {name}: the half-written temporary file removed",
            cause="no cleanup when torch.save raises",
            where="except BaseException: tmp.unlink(missing_ok=True); raise",
        )
    return "saves replace the file whole; a crash mid-save keeps the previous checkpoint and leaves no debris"


# ----------------------------------------------------------------------------------------------------
# 08-best-last
# ----------------------------------------------------------------------------------------------------
def _best_last_cases(case: Case) -> list[tuple[str, list[float]]]:
    cases = [("min", [0.9, 0.7, 0.8, 0.7, 0.5, 0.6]), ("max", [0.2, 0.5, 0.4, 0.6, 0.6, 0.1])]
    if case.hidden:
        generator = torch.Generator().manual_seed(case.seeded(4))
        cases += [(mode, torch.rand(12, generator=generator).tolist()) for mode in ("min", "max")]
    return cases


def _best_last_state(epoch: int) -> dict[str, Any]:
    return {"epoch": epoch, "weights": torch.full((3,), float(epoch))}


def _held_epoch(content: Any) -> int | None:
    """The epoch a file read back holds: None if the file is absent, -1 if it is not a saved state."""
    if content is None:
        return None
    epoch = content.get("epoch") if isinstance(content, dict) else None
    if isinstance(epoch, int) and _same(content, _best_last_state(epoch)):
        return epoch
    return -1


@register(
    "08-best-last",
    hints=Hints(
        nudge="last.pt is written every epoch (to resume); best.pt only when the metric beats the best so far "
        "(to deploy). 'min' means lower is better, 'max' higher; a tie is not an improvement.",
        concept="Compare strictly, in the direction of mode, with None meaning no best yet; the function returns "
        "the best metric after this epoch, which comes back as best_metric next time.",
        solution="improved = best_metric is None or (metric < best_metric if mode == 'min' else metric > "
        "best_metric); save last.pt; if improved: save best.pt and return metric; else return best_metric",
        section="5. Best and last",
    ),
    requires={
        "last-not-saved": Requirement(
            "last.pt holds this epoch's state after every call",
            hint="Is last.pt written on every call, or only on some?"),
        "best-overwritten": Requirement(
            "best.pt is replaced only by a strict improvement (a tie keeps the earlier model)",
            hint="Which epochs write best.pt in your function? Only those that beat the best so far, strictly?"),
        "best-not-updated": Requirement(
            "best.pt is replaced on every improvement, in the direction mode says",
            hint="Run it with mode='max' on 0.2, 0.5: is 0.5 an improvement, and was best.pt written?"),
        "wrong-best-metric": Requirement(
            "returns the best metric after this epoch",
            hint="What does your function return when the metric did not improve?"),
    },
)
def probe_best_last(save_best_and_last: Callable[..., Any], *, case: Case) -> dict:
    """Replay each metric sequence, passing back what the student returned; read both files after every epoch."""
    runs = []
    for mode, metrics in _best_last_cases(case):
        with tempfile.TemporaryDirectory() as tmp:
            directory = Path(tmp)
            best_metric, epochs = None, []
            for epoch, metric in enumerate(metrics):
                returned = save_best_and_last(_best_last_state(epoch), directory, metric, best_metric, mode=mode)
                epochs.append({
                    "returned": returned,
                    "last": _read_back(directory / "last.pt"),
                    "best": _read_back(directory / "best.pt"),
                })
                best_metric = returned
        runs.append(epochs)
    return {"runs": runs}


def _held_text(held: int | None) -> str:
    return "no file" if held is None else "an object that is not a saved state" if held < 0 else f"epoch {held}"


@judges("08-best-last")
def judge_best_last(seen: dict, *, case: Case) -> str:
    """last.pt holds every epoch's state, best.pt the best one so far; the best metric is returned."""
    for (mode, metrics), epochs in zip(_best_last_cases(case), seen["runs"], strict=True):
        best_metric, best_epoch = None, None
        for epoch, (metric, observed) in enumerate(zip(metrics, epochs, strict=True)):
            if best_metric is None or (metric < best_metric if mode == "min" else metric > best_metric):
                best_metric, best_epoch = metric, epoch
            setting = f"mode={mode!r}, metrics {[round(m, 3) for m in metrics[: epoch + 1]]}"
            last = _held_epoch(observed["last"])
            if last != epoch:
                fail(
                    "last-not-saved",
                    observed=f"after epoch {epoch} ({setting}) last.pt holds {_held_text(last)}",
                    expected=f"epoch {epoch}: last.pt is overwritten every epoch",
                    cause="last.pt saved only on improvement, or under another name",
                    where="save to directory / 'last.pt' on every call",
                )
            held = _held_epoch(observed["best"])
            if held != best_epoch:
                later = held is not None and held > best_epoch
                fail(
                    "best-overwritten" if later else "best-not-updated",
                    observed=f"after epoch {epoch} ({setting}) best.pt holds {_held_text(held)}",
                    expected=f"epoch {best_epoch}, the best so far"
                    + (" (a tie does not replace it)" if later and metrics[held] == best_metric else ""),
                    cause=("a tie counted as an improvement (<= instead of <)" if metrics[held] == best_metric
                           else "best.pt saved without comparing, or comparing the wrong way for this mode")
                    if later
                    else "the comparison misses improvements, or mode is ignored",
                    where="the `improved` test and the save to directory / 'best.pt'",
                )
            returned = _as_number(observed["returned"])
            if returned is None or not math.isclose(returned, best_metric):
                fail(
                    "wrong-best-metric",
                    observed=f"after epoch {epoch} ({setting}) it returned {describe(observed['returned'])}",
                    expected=f"{best_metric}: the best metric so far, which the caller passes back next epoch",
                    cause="returning this epoch's metric, or nothing when the metric did not improve",
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


@dataclass(frozen=True)
class _ResumeSetting:
    """The resume check's run: seeds, length, the epoch it stops after and the best metric then."""

    seed: int
    data_seed: int
    epochs: int
    stop_at: int

    @property
    def best_metric(self) -> float:
        return 0.125 * self.stop_at


def _resume_setting(case: Case) -> _ResumeSetting:
    seed, epochs, stop_at = (29, 5, 3) if case.hidden else (17, 4, 2)
    return _ResumeSetting(case.seeded(seed), case.seeded(0), epochs, stop_at)


def _build_run(seed: int, data_seed: int, epochs: int) -> _Run:
    """A small run with every kind of state: dropout (global RNG), shuffling (a generator), Adam moments, a
    per-step OneCycle schedule and a GradScaler whose scale grows during training. Seeds the global RNG."""
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
    return {
        "model": run.model, "optimizer": run.optimizer, "scheduler": run.scheduler, "scaler": run.scaler,
        "generator": run.generator,
    }


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


def _resume_in_child(
    load_checkpoint: Callable[..., Any], checkpoint: str, out: str, seed: int, data_seed: int, epochs: int
) -> None:
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
            raise RuntimeError(
                f"the check cannot read the source of {function.__name__} ({error}); define it in a cell with def"
            ) from error
        for name in sorted(_names_used(function.__code__) - done):
            if name not in function.__globals__ or hasattr(builtins, name):
                continue
            value = function.__globals__[name]
            if isinstance(value, types.ModuleType):
                lines.append(f"import {value.__name__} as {name}")
            elif isinstance(value, types.FunctionType) and value.__module__ == home:
                queue.append(value)
            elif getattr(value, "__module__", None) not in (None, home) and "<" not in getattr(
                value, "__qualname__", "<"
            ):
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


def _unsafe_load_ran(
    load_checkpoint: Callable[..., Any], checkpoint: dict[str, Any], directory: Path, setting: _ResumeSetting
) -> bool:
    """Whether load_checkpoint, given a checkpoint that hides a pickled call, ran that call."""
    marker = directory / "code-ran"
    trap_path = directory / "downloaded.pt"
    torch.save({**checkpoint, "note": _UnsafePayload(marker)}, trap_path)
    run = _build_run(setting.seed + 3000, setting.data_seed, setting.epochs)
    try:
        load_checkpoint(trap_path, **_objects(run))
    except Exception:  # noqa: BLE001 -- weights_only=True refusing the file is the expected outcome
        pass
    return marker.exists()


def _run_child(
    functions: tuple[Callable[..., Any], Callable[..., Any]], directory: Path, checkpoint: Path, out: Path,
    setting: _ResumeSetting,
) -> subprocess.CompletedProcess:
    """Run `_resume_in_child` in a fresh Python process, with the student's functions rebuilt from source."""
    save_checkpoint, load_checkpoint = functions
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
        f"_resume_in_child({load_checkpoint.__name__}, {str(checkpoint)!r}, {str(out)!r}, {setting.seed}, "
        f"{setting.data_seed}, {setting.epochs})\n"
    )
    (directory / "resume_child.py").write_text(script)
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    return subprocess.run(
        [sys.executable, str(directory / "resume_child.py")], cwd=directory, env=environment, capture_output=True,
        text=True, timeout=180,
    )


def _resume(
    functions: tuple[Callable[..., Any], Callable[..., Any]],
    directory: Path,
    checkpoint: Path,
    setting: _ResumeSetting,
    fresh_process: bool,
) -> dict[str, Any]:
    """Resume from `checkpoint` (in a fresh process, or here with fresh objects); what was restored, the final
    weights, and the error if the resume crashed, read back as data."""
    out = directory / "resumed.pt"
    error = None
    if fresh_process:
        done = _run_child(functions, directory, checkpoint, out, setting)
        if done.returncode != 0:
            error = (done.stderr.strip().splitlines()[-1:] or ["(no message)"])[0][:300]
    else:
        try:
            _resume_in_child(functions[1], str(checkpoint), str(out), setting.seed, setting.data_seed, setting.epochs)
        except Exception as raised:  # noqa: BLE001 -- the student's load crashed: the judge reports it
            error = f"{type(raised).__name__}: {raised}"[:300]
    return {"restored": _read_back(Path(f"{out}.restored")), "final": _read_back(out), "error": error}


@register(
    "08-resume",
    hints=Hints(
        nudge="A resumed run continues exactly only if *everything* that influences the next step is restored: "
        "weights, optimizer moments, scheduler position, scaler, RNG states (dropout) and the data order.",
        concept="Save each object's state_dict(), capture_rng_state() and generator.get_state() with the "
        "counters; load with weights_only=True and give each part back to its object.",
        solution="save: atomic_save({'model': model.state_dict(), 'optimizer': ..., 'scheduler': ..., 'scaler': "
        "..., 'rng': capture_rng_state(), 'data_generator': generator.get_state(), 'epoch': epoch, "
        "'best_metric': best_metric}, path). load: torch.load(path, weights_only=True), load_state_dict on each "
        "object, restore_rng_state, generator.set_state; return {'epoch': ..., 'best_metric': ...}",
        section="7. Exact resume",
    ),
    requires={
        "not-weights-only": Requirement(
            "the checkpoint holds tensors and plain values only (it loads with weights_only=True)",
            hint="Does your checkpoint hold a whole object (a model, a generator) instead of its state?"),
        "model-not-restored": Requirement(
            "the checkpoint is a dict whose 'model' entry restores the weights",
            hint="Is 'model': model.state_dict() in the dict you save, and loaded back into the model?"),
        "optimizer-not-restored": Requirement(
            "the optimizer state is saved and restored",
            hint="Adam keeps two moment estimates per weight: are they in your checkpoint, and loaded back?"),
        "scheduler-not-restored": Requirement(
            "the scheduler state is saved and restored",
            hint="Where in the schedule is the resumed run? Is the scheduler's step count saved and loaded?"),
        "scaler-not-restored": Requirement(
            "the GradScaler state is saved and restored",
            hint="The scaler has a scale and a growth counter: are they saved and loaded?"),
        "rng-not-restored": Requirement(
            "the global RNG states of the moment of saving are saved, and restored last",
            hint="Which dropout masks will the resumed run draw? Is the RNG state saved, restored, and not "
            "drawn from after restoring?"),
        "data-order-not-restored": Requirement(
            "the DataLoader generator's state is saved and restored",
            hint="Which batches come next after resuming? The loader shuffles with its own generator."),
        "counters-not-restored": Requirement(
            "epoch and best_metric are saved, and load_checkpoint returns them",
            hint="What does your load_checkpoint return, and where do the values come from?"),
        "unsafe-load": Requirement(
            "load_checkpoint reads with torch.load(..., weights_only=True)",
            hint="What can a downloaded .pt file do when you unpickle it without restrictions?"),
        "resume-crashed": Requirement(
            "load_checkpoint runs on the checkpoint save_checkpoint wrote, in a fresh process",
            hint="Read the error: which key or name does your load_checkpoint expect that is not there?"),
        "weights-diverged": Requirement(
            "saving leaves the run untouched, and the resumed run ends with the weights of the run that never "
            "stopped",
            hint="Does anything in save_checkpoint or load_checkpoint draw random numbers or change an object?"),
        "cannot-rebuild": Requirement(
            "save_checkpoint and load_checkpoint are plain def functions, using modules and other such functions",
            hint="The check re-creates your functions in a fresh process: do they use a global value that is "
            "not a module, a function or a plain constant?"),
    },
)
def probe_resume(save_checkpoint: Callable[..., Any], load_checkpoint: Callable[..., Any], *, case: Case) -> dict:
    """Train continuously, checkpoint mid-way, resume (in a fresh process when visible); record the checkpoint,
    what the resume restored and both runs' final weights."""
    setting = _resume_setting(case)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the child runs single-threaded too: identical float reductions, identical weights
    try:
        with torch.random.fork_rng(devices=[]), tempfile.TemporaryDirectory() as tmp:
            directory = Path(tmp)
            path = directory / "checkpoint.pt"
            run = _build_run(setting.seed, setting.data_seed, setting.epochs)
            for epoch in range(1, setting.epochs + 1):
                _train_epoch(run)
                if epoch == setting.stop_at:
                    save_checkpoint(path, **_objects(run), epoch=epoch, best_metric=setting.best_metric)
            seen: dict[str, Any] = {"continuous": _as_data(run.model.state_dict())}
            try:
                checkpoint = torch.load(path, weights_only=True)
            except Exception as error:  # noqa: BLE001 -- the refusal is the observation
                return {**seen, "refused": str(error)[:200]}
            seen |= {"refused": None, "checkpoint": _as_data(checkpoint)}
            if not isinstance(checkpoint, dict) or not {*_PARTS, "epoch", "best_metric"} <= set(checkpoint):
                return seen  # the judge fails on the missing part: resuming from it would only crash
            seen["unsafe_ran"] = _unsafe_load_ran(load_checkpoint, checkpoint, directory, setting)
            if seen["unsafe_ran"]:
                return seen  # the judge fails on the unsafe load before it looks at the resume
            # the visible test resumes in a fresh process; the hidden one (other seeds and epochs, same cell)
            # resumes here with freshly built objects and a scrambled RNG, which halves the cell's time
            seen |= _resume((save_checkpoint, load_checkpoint), directory, path, setting, fresh_process=not case.hidden)
            return seen
    finally:
        torch.set_num_threads(threads)


def _reference_resume(setting: _ResumeSetting) -> tuple[dict[str, Any], dict[str, Any]]:
    """The reference run, replayed from the case (a few dozen steps of a tiny model): its state when the
    checkpoint is taken, and its final weights, as data."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the probe's reduction order
    try:
        with torch.random.fork_rng(devices=[]):
            run = _build_run(setting.seed, setting.data_seed, setting.epochs)
            for _ in range(setting.stop_at):
                _train_epoch(run)
            saved = _as_data(_snapshot(run))
            for _ in range(setting.stop_at, setting.epochs):
                _train_epoch(run)
            return saved, _as_data(run.model.state_dict())
    finally:
        torch.set_num_threads(threads)


def _close_data(a: Any, b: Any) -> bool:
    """Nested data equal up to float rounding (a replay on another machine may round differently)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.is_floating_point():
            return bool(torch.allclose(a, b, rtol=1e-4, atol=1e-6, equal_nan=True))
        return bool(torch.equal(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close_data(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close_data(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-9) or (math.isnan(a) and math.isnan(b))
    return type(a) is type(b) and a == b


def _judge_contents(seen: dict[str, Any], saved: dict[str, Any], setting: _ResumeSetting) -> None:
    """The checkpoint read back: weights_only-loadable, every part, the RNG state of the moment, the counters."""
    if seen["refused"] is not None:
        fail(
            "not-weights-only",
            observed=f"torch.load(path, weights_only=True) refuses the checkpoint: {seen['refused']}",
            expected="only tensors and plain values (state dicts, numbers, the dict from capture_rng_state())",
            cause="a whole object (model, optimizer, generator) saved instead of its state",
            where="save_checkpoint: model.state_dict(), generator.get_state(), ...",
        )
    checkpoint = seen["checkpoint"]
    if not isinstance(checkpoint, dict):
        fail(
            "model-not-restored",
            observed=f"the checkpoint holds {describe(checkpoint)}, not a dict",
            expected="a dict with 'model', 'optimizer', 'scheduler', 'scaler', 'rng', 'data_generator', 'epoch' "
            "and 'best_metric'",
            cause="save_checkpoint saves a single state instead of a dict of them",
            where="save_checkpoint",
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
        wanted = setting.stop_at if key == "epoch" else setting.best_metric
        number = _as_number(value)
        if number is None or not math.isclose(number, wanted):
            fail(
                "counters-not-restored",
                observed=f"the checkpoint's {key!r} is {value!r}",
                expected=f"{wanted!r}, the value passed to save_checkpoint",
                cause=f"{key} not saved, or saved under another name",
                where="save_checkpoint",
            )


def _judge_restored(result: Any, saved: dict[str, Any], setting: _ResumeSetting) -> None:
    """What load_checkpoint put into freshly built objects, compared with the reference run's state."""
    if not isinstance(result, dict) or not isinstance(result.get("restored"), dict):
        raise ValueError(f"the resume's report is malformed: {describe(result)}")
    counters = result.get("counters")
    epoch, best_metric = setting.stop_at, setting.best_metric
    if (
        not isinstance(counters, dict) or counters.get("epoch") != epoch
        or not math.isclose(_as_number(counters.get("best_metric")) or math.nan, best_metric)
    ):
        fail(
            "counters-not-restored",
            observed=f"load_checkpoint returned {counters!r}",
            expected=f"{{'epoch': {epoch}, 'best_metric': {best_metric}}}: where to continue and the best so far",
            cause="the counters are not returned from the checkpoint",
            where="the return statement of load_checkpoint",
        )
    restored = result["restored"]
    for key, (code, what) in _PARTS.items():
        if not _close_data(restored.get(key), saved[key]):
            fail(
                code,
                observed=f"after load_checkpoint into freshly built objects, {what} differ from the saved ones",
                expected="every part of the run restored exactly",
                cause=f"load_checkpoint does not restore {key!r} (load_state_dict / set_state / restore_rng_state)",
                where="load_checkpoint",
            )


def _largest_difference(weights: Any, reference: dict[str, torch.Tensor]) -> float:
    """The largest absolute difference between two models' weights (inf where they do not match up)."""
    if not isinstance(weights, dict) or weights.keys() != reference.keys():
        return math.inf
    worst = 0.0
    for key, value in reference.items():
        other = weights[key]
        if not isinstance(other, torch.Tensor) or other.shape != value.shape or other.dtype != value.dtype:
            return math.inf
        worst = max(worst, float((other.double() - value.double()).abs().max()) if value.numel() else 0.0)
    return worst


@judges("08-resume")
def judge_resume(seen: dict, *, case: Case) -> str:
    """The checkpoint holds the whole state, loading it is safe and restores it exactly, and the resumed run
    ends with the weights of the run that never stopped (both checked against a replay of the reference run)."""
    setting = _resume_setting(case)
    saved, final_reference = _reference_resume(setting)
    _judge_contents(seen, saved, setting)
    if seen["unsafe_ran"] is not False:
        fail(
            "unsafe-load",
            observed="loading a checkpoint that hides a pickled call ran that call (it created a file)",
            expected="torch.load(path, weights_only=True): it refuses anything but tensors and plain values",
            cause="weights_only=False: unpickling can run any code the file's author chose",
            where="the torch.load call in load_checkpoint",
        )
    where = "in this process with freshly built objects" if case.hidden else "in a fresh process"
    if seen["restored"] is not None:  # compare first: a crash after a bad restore is best explained by the restore
        _judge_restored(seen["restored"], saved, setting)
    if seen["error"] is not None or seen["restored"] is None:
        fail(
            "resume-crashed",
            observed=f"resuming {where} failed: {seen['error']}",
            expected="load_checkpoint restores the run and training continues",
            cause="load_checkpoint expects something the checkpoint does not hold, or uses a name defined elsewhere",
            where="load_checkpoint (the fresh process sees only it, its helpers and the modules they import)",
        )
    stop_at, epochs = setting.stop_at, setting.epochs
    drift = _largest_difference(seen["continuous"], final_reference)
    if drift > 1e-4:
        fail(
            "weights-diverged",
            observed=f"the run that never stopped ended {drift:.3g} away from the check's replay of the same run",
            expected="save_checkpoint leaves the run it saves untouched",
            cause="save_checkpoint changes the training: it draws random numbers or modifies an object it saves",
            where="save_checkpoint",
        )
    worst = _largest_difference(seen["final"], seen["continuous"])  # the continuous run was verified above
    if worst > 0:
        fail(
            "weights-diverged",
            observed=f"after resuming at epoch {stop_at} of {epochs}, the final weights differ from the run that "
            f"never stopped by up to {worst:.3g}",
            expected="identical weights",
            cause="something that influences training is not in the checkpoint or not restored in the right order",
            where="save_checkpoint and load_checkpoint",
        )
    return f"stopped after epoch {stop_at} of {epochs}, resumed {where}: final weights identical to the continuous run"
