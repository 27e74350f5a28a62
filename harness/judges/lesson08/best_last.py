"""08-best-last, the judge.

last.pt holds every epoch's state, best.pt the best one so far; the best metric is returned.
"""

from __future__ import annotations

from typing import Any

from harness.checks.lesson08.best_last import best_last_cases, best_last_state
from harness.contract.case import Case
from harness.contract.compare import malformed, real, same_number
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import describe
from harness.judges.lesson08.common import _helper_note, _same
from harness.judges.lesson08.writes import judge_writes


def _held_epoch(content: Any) -> int | None:
    """The epoch a file read back holds: None if the file is absent, -1 if it is not a saved state."""
    if content is None:
        return None
    epoch = content.get("epoch") if isinstance(content, dict) else None
    if isinstance(epoch, int) and _same(content, best_last_state(epoch)):
        return epoch
    return -1


def _held_text(held: int | None) -> str:
    return "no file" if held is None else "an object that is not a saved state" if held < 0 else f"epoch {held}"


def _judge_crash(after_crash: Any, mode: str, metrics: list[float], best_epoch: int | None) -> None:
    """After an improving epoch whose save crashed half way, both files still hold the previous epochs."""
    if not isinstance(after_crash, dict):
        malformed(f"the files after the crashed save: {describe(after_crash)}")
    for name, want in (("last", len(metrics) - 1), ("best", best_epoch)):
        content = after_crash.get(name)
        held = _held_epoch(content)
        if held != want:
            fail(
                "not-atomic",
                observed=f"after the metrics {[round(m, 3) for m in metrics]} (mode={mode!r}), a next, better "
                f"epoch whose save raised half way through left {name}.pt holding "
                + ("something unreadable" if isinstance(content, str) else _held_text(held)),
                expected=f"epoch {want}, intact: a new file replaces it only once it is complete",
                cause=_helper_note(after_crash) or "torch.save straight onto the file (it empties the old file "
                "before the new one is complete)",
                where="atomic_save" if _helper_note(after_crash) else "save both files with your atomic_save",
            )
    judge_writes(after_crash.get("writes"), during=f"a next, better epoch whose save raised half way (mode={mode!r})")


@judges(
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
        "not-atomic": Requirement(
            "both files are saved atomically (with your atomic_save): a save that fails half way leaves the "
            "previous last.pt and best.pt intact",
            hint="What is left in last.pt when torch.save fails half way through writing into it? Which "
            "function of this lesson writes a file atomically?"),
        "wrong-best-metric": Requirement(
            "returns the best metric after this epoch",
            hint="What does your function return when the metric did not improve?"),
    },
)
def judge_best_last(seen: dict, *, case: Case) -> str:
    """last.pt holds every epoch's state, best.pt the best one so far; the best metric is returned."""
    for (mode, metrics), run in zip(best_last_cases(case), seen["runs"], strict=True):
        epochs = run["epochs"]
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
            returned = real(observed["returned"])
            if not same_number(returned, best_metric):
                fail(
                    "wrong-best-metric",
                    observed=f"after epoch {epoch} ({setting}) it returned {describe(observed['returned'])}",
                    expected=f"{best_metric}: the best metric so far, which the caller passes back next epoch",
                    cause="returning this epoch's metric, or nothing when the metric did not improve",
                    where="the return statement",
                )
        _judge_crash(run["after_crash"], mode, metrics, best_epoch)
        # a write that survives the Python exception above (an except that repairs it) but not a kill
        for epoch, observed in enumerate(epochs):
            judge_writes(observed.get("writes"), during=f"epoch {epoch} (mode={mode!r})")
    return ("last.pt follows every epoch, best.pt only improvements, in both modes; a save that crashed left "
            "both files intact")
