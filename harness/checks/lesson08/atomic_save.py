"""08-atomic-save, the probe.

Save twice, then a save that crashes; read the file back and list the folder after each, and watch how each
save writes the file (`harness.checks.lesson08.writes`).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Callable

import torch

from harness.checks.lesson08.common import _CrashDuringSave, _read_back
from harness.checks.lesson08.writes import watching
from harness.contract.case import Case
from harness.contract.registry import register


def _listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def atomic_states(case: Case) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two states saved one after the other (seeded weights; larger in the hidden case)."""
    size = 50_000 if case.hidden else 1_000
    weights = torch.randn(size, generator=torch.Generator().manual_seed(case.seeded(8)))
    return {"weights": weights, "epoch": 1}, {"weights": weights * 2, "epoch": 2}


@register("08-atomic-save")
def probe_atomic_save(atomic_save: Callable[[Any, Any], Any], *, case: Case) -> dict:
    """Save twice, then a save that crashes; read the file back and list the folder after each, and record how
    each save wrote the file."""
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        path = directory / "last.pt"
        # the path as a Path and as a str, both in every case
        targets: list[Any] = [str(path), path, str(path)] if case.hidden else [path, str(path), path]
        saves = []
        # two good saves to the first two targets; the last target is the crashing save's, below
        for state, target in zip(atomic_states(case), targets, strict=False):
            with watching([path]) as writes:
                atomic_save(state, target)
            saves.append({"content": _read_back(path), "listing": _listing(directory), "writes": writes})
        crashed = False
        with watching([path]) as writes:
            try:
                atomic_save({"weights": saves[-1]["content"], "crash": _CrashDuringSave()}, targets[-1])
            except Exception:  # noqa: BLE001 -- the simulated crash; anything raised counts as reported
                crashed = True
        return {"saves": saves, "crashed": crashed, "survived": _read_back(path), "listing": _listing(directory),
                "crash_writes": writes}
