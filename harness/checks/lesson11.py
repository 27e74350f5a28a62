"""Probes of lesson 11 (interview drills): the drill bank's own checks, registered under the notebook's task ids.

Each task is a drill of the bank (`harness.drills.lesson.NOTEBOOK_DRILLS`). A test cell passes the cell's
namespace (`check("11-train-step", globals())`, or `{"answer": ...}` for an explain drill). A write or bughunt
task's probe hands that namespace to the drill's probe, which reads the answer's entry from it as it does in
`harness drill check`, and its judge (`harness.judges.lesson11`) is the drill's judge: the notebook and the
terminal grade with one check. What lesson 11 adds is the teaching of a graded exercise (a requirement table and
three levels of hints), which the judges declare. Nothing here answers a drill: the bank's solutions, judges and
explain keys are in `harness.judges`, which a graded kernel never mounts.
"""

from __future__ import annotations

from typing import Any

from harness.contract.case import Case
from harness.contract.failure import fail
from harness.contract.registry import register
from harness.drills.core import Drill, get_drill
from harness.drills.lesson import NOTEBOOK_DRILLS


class _Answer(dict):
    """The namespace a drill's probe reads the answer's entries from; a missing one fails `missing-entry`."""

    def __missing__(self, name: str) -> Any:
        fail("missing-entry", observed=f"your answer defines no `{name}`",
             expected=f"a definition of `{name}`, as in the drill's cell",
             cause="the name was changed or the definition deleted, or its cell was not run",
             where="the drill's solution cell, and the namespace passed to check()")


def _register_drill(task_id: str, drill: Drill) -> None:
    """Register the probe of the write or bughunt drill of `task_id`, which reads the test cell's namespace."""

    def probe(namespace: dict, *, case: Case) -> dict:
        """The drill's probe on the names the test cell passed (a missing entry fails `missing-entry`)."""
        if not isinstance(namespace, dict):
            fail("missing-entry", observed=f"check() received {type(namespace).__name__}, not the cell's names",
                 expected="check(task_id, globals())", cause="another object passed to check()",
                 where="the test cell")
        return drill.probe(_Answer(namespace), case=case)  # type: ignore[misc]

    register(task_id)(probe)


def _register_explain(task_id: str) -> None:
    """Register the probe of the explain drill of `task_id`: the notebook's answer variable, as written."""

    def probe(namespace: dict, *, case: Case) -> dict:
        """Record the chosen letter as written."""
        return {"answer": namespace.get("answer") if isinstance(namespace, dict) else None}

    register(task_id)(probe)


for _task_id, _drill_id in NOTEBOOK_DRILLS:
    _drill = get_drill(_drill_id)
    if _drill.kind == "explain":
        _register_explain(_task_id)
    else:
        _register_drill(_task_id, _drill)
