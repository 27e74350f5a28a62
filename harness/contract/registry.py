"""One registered check per task id: its probe, its judge, and what the judge enforces.

The probe side registers the instrument (`@register(task_id)`: what runs where the student's objects live and what
it records); the judge side registers what it enforces (`@judges(task_id, requires=..., hints=...)`: the
requirement table, the hints, the leaves it lets be non-finite or never compares), so a failure code is declared
in the file that raises it. A lesson's probes live in `harness.checks.lessonNN` (a module, or a package with one
module per task) and its judges in `harness.judges.lessonNN`, the judge side that a graded kernel never mounts:
there a check has no hints and no requirement table. Both are imported on first use from the task id's two
leading digits ("04-train-step" -> lesson 04), so a notebook only pays for the lesson it checks.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from harness.contract.failure import Hints, Requirement
from harness.contract.judged import Judge, Judged, Probe


@dataclass(frozen=True, kw_only=True)
class Check(Judged):
    """One task's check: `probe(*objects, case=...)` -> observation, `judge(observation, case=...)` -> verdict
    (`Judged`, the record drills share), with the exercise's hints and its requirement table: failure code ->
    the requirement its violation breaks. Hints and table are the judge's: None until it registers (always, in a
    graded kernel).
    """

    task_id: str
    hints: Hints | None = None
    requires: Mapping[str, Requirement] | None = None
    # A task whose targets must stay secret: builds a hidden case's inputs, which a graded kernel gets as data
    inputs_as_data: Callable[[Any], Any] | None = None


_REGISTRY: dict[str, Check] = {}


def register(task_id: str, *, inputs_as_data: Callable[[Any], Any] | None = None) -> Callable[[Probe], Probe]:
    """Register the decorated function as the probe of `task_id`.

    The probe takes the student's objects and a keyword `case`, and returns an observation (a dict of
    data). Attach its judge, with what the judge enforces, with `@judges(task_id, ...)`. `inputs_as_data(case)`,
    for a task whose targets must stay secret (held-out labels), builds a hidden case's inputs: graded, the kernel
    receives them as a file and never the seed that rebuilds the targets (`Case.inputs`); the probe reads
    `case.inputs` when it is set.
    """

    def decorate(probe: Probe) -> Probe:
        if "case" not in inspect.signature(probe).parameters:
            raise TypeError(f"{task_id}: a probe takes the student's objects and a keyword argument `case`")
        if task_id in _REGISTRY and _REGISTRY[task_id].probe.__qualname__ != probe.__qualname__:
            raise ValueError(f"two checks registered for task {task_id!r}")
        known = _REGISTRY.get(task_id) or Check(task_id=task_id)
        _REGISTRY[task_id] = replace(known, probe=probe, inputs_as_data=inputs_as_data)
        return probe

    return decorate


def judges(task_id: str, *, hints: Hints, requires: Mapping[str, Requirement], nonfinite: tuple[str, ...] = (),
           unjudged: tuple[str, ...] = ()) -> Callable[[Judge], Judge]:
    """Register the decorated function as the judge of `task_id` (registered before with `@register`), with
    what it enforces: the exercise's hints and requirement table.

    The judge takes the observation (data only) and a keyword `case`; it raises CheckFailed (through
    `fail`) or returns what it verified, in a few words. `requires` maps each failure code the judge (or its
    probe) can give to the requirement of the exercise's text that it enforces (tests/checks plant a bug for
    each). `nonfinite` and `unjudged` are described on `Judged`.
    """
    if not isinstance(hints, Hints):
        raise TypeError(f"{task_id}: hints are Hints(nudge, concept, solution, section)")
    if not requires or not all(isinstance(r, Requirement) for r in requires.values()):
        raise TypeError(f"{task_id}: requires maps failure codes to Requirement(states, hint), one per requirement")

    def decorate(judge: Judge) -> Judge:
        if task_id not in _REGISTRY:
            raise ValueError(f"register the probe of {task_id!r} before its judge")
        _REGISTRY[task_id] = replace(_REGISTRY[task_id], judge=judge, hints=hints, requires=dict(requires),
                                     nonfinite=tuple(nonfinite), unjudged=tuple(unjudged))
        return judge

    return decorate


def _import_lesson(lesson: str, task_id: str) -> None:
    """Import lesson `lesson`'s probes, then its judges where they live apart and are mounted."""
    try:
        importlib.import_module(f"harness.checks.lesson{lesson}")
    except ModuleNotFoundError as error:
        if error.name != f"harness.checks.lesson{lesson}":
            raise
        raise KeyError(f"no checks exist for lesson {lesson} (looking up task {task_id!r})") from error
    try:
        importlib.import_module(f"harness.judges.lesson{lesson}")
    except ModuleNotFoundError as error:  # judges beside the probes, or a graded kernel without the judge side
        if error.name not in (f"harness.judges.lesson{lesson}", "harness.judges"):
            raise


def get(task_id: str, *, judged: bool = True) -> Check:
    """The registered check of `task_id`, importing its lesson on first use.

    Args:
        task_id: "NN-name".
        judged: require its judge too (False in a graded kernel, which only probes).

    Raises:
        KeyError: no such task, or (with `judged`) a task whose judge is not available.
    """
    if task_id not in _REGISTRY or (judged and _REGISTRY[task_id].judge is None):
        lesson = task_id[:2]
        if not lesson.isdigit():
            raise KeyError(f"{task_id!r} is not a task id: task ids start with the lesson number, "
                           "like '04-train-step'.")
        _import_lesson(lesson, task_id)
    if task_id not in _REGISTRY:
        known = ", ".join(sorted(t for t in _REGISTRY if t[:2] == task_id[:2]))
        raise KeyError(f"no check named {task_id!r}; this lesson's tasks are: {known}")
    entry = _REGISTRY[task_id]
    if judged and entry.judge is None:
        raise KeyError(f"the check of {task_id!r} has a probe but no judge (@judges({task_id!r}))")
    return entry


def registered() -> dict[str, Check]:
    """Every check registered so far (a copy: the grader's tamper guard compares against it)."""
    return dict(_REGISTRY)
