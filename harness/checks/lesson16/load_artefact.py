"""16-load-artefact, the probe.

Call `load_artefact` on a good artefact, on the same artefact saved as if from a GPU this machine lacks, on
one that runs code when unpickled, and on one with a renamed key; record the returned model's type, mode and
state, and what each other artefact did.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from harness.checks.lesson16.common import build_classifier, case_config, case_model, cloned_state
from harness.contract.case import Case
from harness.contract.registry import register

_SPRUNG: list[str] = []


def _spring() -> str:
    """What the trap artefact's pickle calls when a loader unpickles it: a harmless stand-in for an attacker's
    code, which records that it ran."""
    _SPRUNG.append("ran")
    return "this string was made by code the file told the loader to run"


class _Trap:
    """An object whose unpickling runs `_spring` (as a malicious file's would run anything)."""

    def __reduce__(self) -> tuple[Callable[[], str], tuple]:
        return (_spring, ())


_TAGS: list[str] = []  # while not empty, torch.save tags every storage it writes with _TAGS[-1]


def _tag(storage: Any) -> str | None:
    """torch.serialization's tagger: the location to record for `storage`, or None to let the others decide."""
    return _TAGS[-1] if _TAGS else None


@contextlib.contextmanager
def _saved_on(location: str) -> Iterator[None]:
    """torch.save inside this block tags every tensor as saved on `location` ("cuda:0"), as a file written on
    that GPU is: torch.load puts each storage back on its tagged device unless map_location says otherwise."""
    if not any(tagger is _tag for _, tagger, _ in torch.serialization._package_registry):
        torch.serialization.register_package(-16, _tag, lambda storage, location: None)  # loading is untouched
    _TAGS.append(location)
    try:
        yield
    finally:
        _TAGS.clear()


def another_device() -> str:
    """A CUDA device this machine does not have: cuda:0 on a CPU machine, cuda:N beside N GPUs."""
    return f"cuda:{torch.cuda.device_count()}"


def _renamed(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The state_dict with the head's weight under another name (an artefact of another version of the code)."""
    return {("classifier.weight" if k == "head.weight" else k): v for k, v in state.items()}


@register("16-load-artefact")
def probe_load_artefact(load_artefact: Callable[..., Any], *, case: Case) -> dict:
    """Call `load_artefact` on a good artefact, on it saved from a GPU this machine lacks, on one that runs code
    when unpickled, and on one with a renamed key; record the returned model's type, mode and state, and what
    each other artefact did."""
    model, config = case_model(case, salt=10), case_config(case)
    state = model.state_dict()
    seen: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="harness-16-") as folder:
        good, gpu, trap, renamed = (os.path.join(folder, name)
                                    for name in ("good.pt", "gpu.pt", "trap.pt", "renamed.pt"))
        torch.save({"config": dict(config), "state_dict": state}, good)
        with _saved_on(another_device()):
            torch.save({"config": dict(config), "state_dict": state}, gpu)
        torch.save({"config": dict(config), "state_dict": state, "note": _Trap()}, trap)
        torch.save({"config": dict(config), "state_dict": _renamed(state)}, renamed)
        loaded = load_artefact(good, build_classifier)
        seen["type"] = type(loaded).__name__
        if isinstance(loaded, nn.Module):
            seen["training"] = loaded.training
            seen["state"] = cloned_state(loaded)
        seen["gpu_raised"], seen["gpu_state"] = None, None
        try:
            from_gpu = load_artefact(gpu, build_classifier)
            seen["gpu_state"] = cloned_state(from_gpu) if isinstance(from_gpu, nn.Module) else None
        except Exception as error:  # what a loader without map_location does: data for the judge
            seen["gpu_raised"] = f"{type(error).__name__}: {error}"[:300]
        for name, path in (("trap", trap), ("renamed", renamed)):
            _SPRUNG.clear()
            try:
                load_artefact(path, build_classifier)
                seen[name] = None
            except Exception as error:  # raising is the expected behaviour
                seen[name] = f"{type(error).__name__}: {error}"[:300]
            if name == "trap":
                seen["sprung"] = bool(_SPRUNG)
        _SPRUNG.clear()
    return seen
