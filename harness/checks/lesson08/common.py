"""Lesson 08: what several of its tasks share on the probe side (inputs, instruments, models)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch


class _CrashDuringSave:
    """Pickling it raises: a crash in the middle of torch.save, after the file was opened."""

    def __reduce__(self) -> Any:
        raise RuntimeError("simulated crash in the middle of torch.save")


def as_data(value: Any) -> Any:
    """A loaded checkpoint as wire data: dict keys as strings (optimizer states use ints), tuples as lists."""
    if isinstance(value, dict):
        return {str(k): as_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_data(v) for v in value]
    return value


def _read_back(path: Path) -> Any:
    """What a file holds, loaded with weights_only=True: the data, None if absent, a string if unreadable."""
    if not path.exists():
        return None
    try:
        return as_data(torch.load(path, weights_only=True))
    except Exception as error:  # noqa: BLE001 -- the refusal is the observation
        return f"unreadable ({type(error).__name__}: {str(error)[:80]})"


# What a file holds before the notebook's atomic_save is asked to overwrite it with a save that crashes.
PREVIOUS = {"epoch": -1}


class _Counted:
    """A stand-in for a function that counts its calls and passes them on."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function, self.calls = function, 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.function(*args, **kwargs)


def _crash_through(function: Callable[..., Any], crash: Callable[[], Any], directory: Path) -> dict[str, Any]:
    """Run `crash` (a call of `function` whose save raises half way) counting the calls of the notebook's
    `atomic_save` (a global `function` reads, when there is one), and ask that atomic_save alone to overwrite a
    file with a save that crashes: what the file holds afterwards says whether it is atomic (08-atomic-save's
    own requirement), so that a failure here can name it as the cause."""
    namespace = getattr(function, "__globals__", {})
    helper = namespace.get("atomic_save")
    if not callable(helper):
        crash()
        return {"helper_calls": 0, "helper_kept": None}
    counted = _Counted(helper)
    namespace["atomic_save"] = counted
    try:
        crash()
    finally:
        namespace["atomic_save"] = helper
    target = directory / "helper-check.pt"
    torch.save(PREVIOUS, target)
    try:
        helper({"crash": _CrashDuringSave()}, target)
    except Exception:  # noqa: BLE001 -- the simulated crash
        pass
    kept = _read_back(target)
    target.unlink(missing_ok=True)
    for leftover in directory.glob("helper-check.pt*"):
        leftover.unlink()
    return {"helper_calls": counted.calls, "helper_kept": kept}
