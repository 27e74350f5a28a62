"""The notebook's face of the checks: `check`, `hint` and `demonstrate`.

A check is cut in two (CONTRIBUTING.md, "A check"; the contract lives in `harness.contract`): the probe runs
where the student's objects live and returns data, the judge decides from that data alone. `check(task,
*objects)` in a notebook runs both, with the observation passed through the wire format, so the feedback a
student sees comes from exactly the code that grades. When graded, the probe runs in the sandbox on cases
drawn from the instructor's secret, and the judge decides every point outside it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.contract.case import Case
from harness.contract.failure import CheckFailed
from harness.contract.protocol import decide, preserved_state, run_probe, seal
from harness.contract.registry import get

RELEASED = Path(__file__).with_name("released_hints.json")
WITHHELD = ("the solution line of a graded exercise is withheld: your instructor releases it after the due date "
            "(or for practice), in the course's next update. Hints 1 and 2 and the lesson's sections are yours now.")
_hints_shown: dict[str, int] = {}
_last_failure: dict[str, tuple[str, str | None]] = {}  # task id -> (failure code, the cause's own hint or None)
# Set by the grader's first cell in a graded notebook: the test cells then leave checking to the judge.
graded_outside = False


def check(task_id: str, *objects: Any, hidden: bool = False) -> None:
    """Run the check of `task_id` on the student's objects; print what passed or raise CheckFailed.

    Args:
        task_id: the exercise's id, as in the notebook ("04-train-step").
        *objects: what the exercise asks for (a function, a class, a module...).
        hidden: run the hidden variant (other seeds, shapes and edge cases) used by the graders.

    Raises:
        CheckFailed: the behaviour differs from the reference; the message says what to fix. An exception
            raised by the student's own code is reported as a CheckFailed that names it.
    """
    __tracebackhide__ = True
    if graded_outside:
        print(f"{task_id}: checked by the grader's judge (its verdict replaces this cell's output)")
        return
    try:
        verified = _run(task_id, objects, hidden)
    except CheckFailed as failure:
        if _last_failure.get(task_id) != (failure.code, failure.hint):
            _hints_shown.pop(task_id, None)  # a new mistake: the next hint starts again, about it
        _last_failure[task_id] = (failure.code, failure.hint)
        raise
    _last_failure.pop(task_id, None)
    print(f"\u2714 {task_id}{' (hidden tests)' if hidden else ''}: {verified}")


def _run(task_id: str, objects: tuple[Any, ...], hidden: bool) -> str:
    """Probe, wire and judge `objects` on the visible (or hidden) case: what was verified, or CheckFailed."""
    case = Case(hidden=hidden)
    with preserved_state():  # the judge's references draw from the RNGs too, in the student's session
        return decide(task_id, seal(task_id, run_probe(get(task_id), objects, case), case), case)


def demonstrate(task_id: str, *objects: Any) -> CheckFailed | None:
    """Run the check of `task_id` on a lesson's own example and print its verdict, without counting it as the
    student's attempt: their hints for the task are left as they were.

    Returns:
        The failure (for a demonstration of a bug), or None when the example passes or the notebook is being
        graded (a graded kernel holds no judges: the demonstration is for the student's own runs).
    """
    if graded_outside:
        print(f"(a demonstration of {task_id}'s check: it runs in your own notebook, not while grading)")
        return None
    try:
        verified = _run(task_id, objects, hidden=False)
    except CheckFailed as failure:
        print(failure)
        return failure
    print(f"\u2714 {task_id}: {verified}")
    return None


def hint(task_id: str, level: int | None = None) -> None:
    """Print the next hint for `task_id`: after a failed check, first the hint for that failure, then the
    concept (and the section to reread), then the solution line.

    Args:
        task_id: the exercise's id.
        level: show this level (1 to 3) without counting it as used: for a lesson's own demonstrations.
    """
    if graded_outside:  # the judges declare the hints, and a graded kernel holds none: one line, never on stderr
        print(f"(the hints of {task_id} show in your own notebook, not while grading)")
        return
    entry = get(task_id)
    if level is None:
        level = min(_hints_shown.get(task_id, 0) + 1, 3)
        _hints_shown[task_id] = level
    elif not 1 <= level <= 3:
        raise ValueError(f"{task_id} has hint levels 1 to 3")
    hints, (code, cause_hint) = entry.hints, _last_failure.get(task_id, (None, None))
    after = entry.requires.get(code) if code else None
    text = {1: cause_hint or (after.hint if after else hints.nudge),
            2: f"{hints.concept} (Reread the section \"{hints.section}\".)",
            3: hints.solution or _released_solution(task_id)}[level] or WITHHELD
    about = f" (after [{code}])" if level == 1 and (after or cause_hint) else ""
    more = " Call hint() again for a more explicit one." if level < 3 else ""
    print(f"Hint {level}/3 for {task_id}{about}: {text}{more}")  # the line is also the record of hints used


def _released_solution(task_id: str) -> str:
    """The solution line the course released for `task_id` (`released_hints.json`, written into the student tree by
    `harness release --student`), or ''."""
    try:
        return str(json.loads(RELEASED.read_text(encoding="utf-8")).get(task_id, ""))
    except (OSError, ValueError, AttributeError):
        return ""
