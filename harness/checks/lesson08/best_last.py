"""08-best-last, the probe.

Replay each metric sequence, passing back what the student returned; read both files after every epoch and
watch how each call writes them (`harness.checks.lesson08.writes`).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Callable

import torch

from harness.checks.lesson08.common import _crash_through, _CrashDuringSave, _read_back
from harness.checks.lesson08.writes import watching
from harness.contract.case import Case
from harness.contract.registry import register


def best_last_cases(case: Case) -> list[tuple[str, list[float]]]:
    """(mode, metric per epoch) of each call, ties included."""
    cases = [("min", [0.9, 0.7, 0.8, 0.7, 0.5, 0.6]), ("max", [0.2, 0.5, 0.4, 0.6, 0.6, 0.1])]
    if case.hidden:
        generator = torch.Generator().manual_seed(case.seeded(4))
        cases += [(mode, torch.rand(12, generator=generator).tolist()) for mode in ("min", "max")]
    return cases


def best_last_state(epoch: int) -> dict[str, Any]:
    """The state saved at `epoch`: its epoch and weights filled with it."""
    return {"epoch": epoch, "weights": torch.full((3,), float(epoch))}


def _save_that_crashes(
    save_best_and_last: Callable[..., Any], directory: Path, metrics: list[float], best_metric: Any, mode: str
) -> dict[str, Any]:
    """One more epoch, better than all before (so both files would be written), whose state's pickling raises
    half way through torch.save; what both files hold afterwards."""
    better = min(metrics) - 1.0 if mode == "min" else max(metrics) + 1.0
    state = {**best_last_state(len(metrics)), "crash": _CrashDuringSave()}

    writes: dict[str, Any] = {}

    def crash() -> None:
        with watching([directory / "last.pt", directory / "best.pt"]) as seen:
            try:
                save_best_and_last(state, directory, better, best_metric, mode=mode)
            except Exception:  # noqa: BLE001 -- the simulated crash: what matters is the files it leaves
                pass
        writes.update(seen)

    helper = _crash_through(save_best_and_last, crash, directory)
    return {"last": _read_back(directory / "last.pt"), "best": _read_back(directory / "best.pt"), **helper,
            "writes": writes}


@register("08-best-last")
def probe_best_last(save_best_and_last: Callable[..., Any], *, case: Case) -> dict:
    """Replay each metric sequence, passing back what the student returned; read both files after every epoch
    and record how each call wrote them."""
    runs = []
    for mode, metrics in best_last_cases(case):
        with tempfile.TemporaryDirectory() as tmp:
            directory = Path(tmp)
            best_metric, epochs = None, []
            for epoch, metric in enumerate(metrics):
                with watching([directory / "last.pt", directory / "best.pt"]) as writes:
                    returned = save_best_and_last(best_last_state(epoch), directory, metric, best_metric, mode=mode)
                epochs.append({
                    "returned": returned,
                    "last": _read_back(directory / "last.pt"),
                    "best": _read_back(directory / "best.pt"),
                    "writes": writes,
                })
                best_metric = returned
            crash = _save_that_crashes(save_best_and_last, directory, metrics, best_metric, mode)
        runs.append({"epochs": epochs, "after_crash": crash})
    return {"runs": runs}
