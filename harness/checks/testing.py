"""Assertions for testing a check (CONTRIBUTING.md): each planted bug fails with its code and message, and
correct variants pass both the visible and the hidden tests. Used by tests/checks/ for every lesson.

Each lesson's tests/checks/test_lessonNN.py lists its mutation set as data: `MISTAKES` (plausible wrong
answers, each violating one requirement of the exercise's table; one per task marked `planted`, the bug the
pipeline test plants in the notebook) and `CORRECT` (different right answers). tests/checks/test_every_exercise.py
runs both for every task of the registry; tests/test_requirements.py reads them, without running them, to check
that every requirement of every exercise has a planted bug and every exercise at least five.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from harness.checks.core import check
from harness.contract import wire
from harness.contract.case import Case
from harness.contract.failure import CheckFailed
from harness.contract.protocol import decide, observe

# A hidden case as the grader draws one: another seed offset than the local runs use.
DRAWN_CASE = Case(hidden=True, seed=7919)


def assert_check_fails(task: str, *objects: Any, code: str, phrase: str, hidden: bool = False) -> str:
    """Assert that `check(task, *objects)` fails with failure `code` and a message containing `phrase`.

    Returns:
        The failure message, for further assertions.
    """
    with pytest.raises(CheckFailed) as failure:
        check(task, *objects, hidden=hidden)
    assert failure.value.code == code, str(failure.value)
    assert phrase in str(failure.value), str(failure.value)
    return str(failure.value)


def assert_check_passes(task: str, *objects: Any, capsys: pytest.CaptureFixture[str] | None = None) -> None:
    """Assert that the visible and the hidden checks of `task` pass on `objects`, also on a drawn hidden case.

    With `capsys`, also assert that both printed their tick and nothing reached stderr (which nbgrader
    would score as a failed cell).
    """
    check(task, *objects)
    check(task, *objects, hidden=True)
    decide(task, observe(task, objects, DRAWN_CASE), DRAWN_CASE)
    if capsys is not None:
        out = capsys.readouterr()
        assert out.out.count(f"\u2714 {task}") == 2 and "(hidden tests)" in out.out, out.out
        assert out.err == "", out.err


def shortened(observation: Any) -> Iterator[Any]:
    """Every copy of an observation with one list or tuple in it (at any depth) missing its last element:
    forgeries a judge must refuse (fail or raise), never pass."""
    if isinstance(observation, dict):
        for key, item in observation.items():
            for variant in shortened(item):
                yield {**observation, key: variant}
    elif isinstance(observation, (list, tuple)):
        if observation:
            yield type(observation)(observation[:-1])
        for index, item in enumerate(observation):
            for variant in shortened(item):
                yield type(observation)([*observation[:index], variant, *observation[index + 1:]])


def assert_forgeries_refused(task: str, *objects: Any, case: Case) -> None:
    """Assert that the judge of `task` passes the honest observation of `objects` on `case`, and refuses every
    copy of it with one list or tuple shortened: fails it (CheckFailed) or rejects it (ValueError: WireError,
    or a zip(..., strict=True) of the observation with the reference data)."""
    data = observe(task, objects, case)
    decide(task, data, case)
    forgeries = list(shortened(wire.decode(data)))
    assert forgeries, "the observation has no list or tuple to shorten"
    for forged in map(wire.encode, forgeries):
        with pytest.raises((CheckFailed, ValueError)):
            decide(task, forged, case)


@dataclass(frozen=True)
class SolutionCell:
    """A solution cell's source, as a student would write it in the notebook, and what its test cell passes.

    Called, it runs the source in a fresh namespace holding what every lesson's notebook imports (`torch`, `nn`)
    and `given` (what the notebook's earlier cells define that the cell uses: an import, an earlier exercise's
    function), and returns the objects the test cell passes to check(): the objects named `names`, in order, or
    `passes(namespace)` (a test cell passing `globals()`, as lesson 11's). These are the `objects` of a Mistake
    whose source the pipeline test also plants.
    """

    source: str
    names: tuple[str, ...]
    given: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    passes: Callable[[dict[str, Any]], tuple[Any, ...]] | None = field(default=None, compare=False, repr=False)

    def __call__(self) -> tuple[Any, ...]:
        import torch

        namespace: dict[str, Any] = {"torch": torch, "nn": torch.nn, **self.given}
        exec(compile(self.source, f"<solution cell of {', '.join(self.names) or 'a drill'}>", "exec"), namespace)
        return self.passes(namespace) if self.passes is not None else tuple(namespace[name] for name in self.names)


def solution_cell(source: str, *names: str, given: Mapping[str, Any] | None = None,
                  passes: Callable[[dict[str, Any]], tuple[Any, ...]] | None = None) -> SolutionCell:
    """The objects of a planted Mistake: the solution cell `source`, whose test cell passes `names` (or what
    `passes` takes from its namespace), run after the notebook's cells that define `given` (see SolutionCell)."""
    if not names and passes is None:
        raise TypeError("solution_cell needs the names its test cell passes to check(), or passes=")
    return SolutionCell(source, names, dict(given or {}), passes)


@dataclass(frozen=True)
class Mistake:
    """A plausible wrong answer to `task` that violates one requirement: its check must fail with `code` (a key
    of the task's requirement table) on the visible case, with a message containing `phrase`.

    `objects` is what the student passes to check(), or a function that builds it (for answers that need
    setting up). `story` says how students come to write it (a forum question, the lesson's pitfall).
    `planted` marks the task's planted bug for the pipeline test (tests/test_pipeline.py), which puts its
    source in the notebook's solution cell: its objects are then `solution_cell(source, *names)`, so the bug is
    written once and run both here and in the autograded notebook.
    """

    task: str
    code: str
    phrase: str
    objects: tuple[Any, ...] | Callable[[], tuple[Any, ...]]
    story: str
    planted: bool = False

    def __post_init__(self) -> None:
        if self.planted and not isinstance(self.objects, SolutionCell):
            raise TypeError(f"{self}: a planted mistake is a solution cell's source: "
                            "objects=solution_cell(source, name)")

    def __str__(self) -> str:
        return f"{self.task}:{self.code}:{'planted:' if self.planted else ''}{self.story[:40]}"


def planted_cells(mistakes: list[Mistake]) -> dict[str, tuple[str, str]]:
    """Task -> (the buggy source of its solution cell, the failure code it gets), from the mistakes marked
    planted: the pipeline test's planted bugs.

    Raises:
        ValueError: a task has two planted mistakes (its solution cell holds one).
    """
    found: dict[str, tuple[str, str]] = {}
    for mistake in mistakes:
        if mistake.planted:
            if mistake.task in found:
                raise ValueError(f"{mistake.task}: two mistakes are marked planted; its solution cell holds one")
            found[mistake.task] = (mistake.objects.source, mistake.code)  # type: ignore[union-attr]
    return found


@dataclass(frozen=True)
class Correct:
    """A right answer to `task` (written differently from the solution): it passes visible and hidden checks."""

    task: str
    objects: tuple[Any, ...] | Callable[[], tuple[Any, ...]]
    story: str

    def __str__(self) -> str:
        return f"{self.task}:{self.story[:40]}"


def _built(objects: tuple[Any, ...] | Callable[[], tuple[Any, ...]]) -> tuple[Any, ...]:
    return objects() if callable(objects) else objects


def assert_mistake(mistake: Mistake) -> str:
    """Assert that `mistake` fails its task's visible check with its code and phrase; the message."""
    return assert_check_fails(mistake.task, *_built(mistake.objects), code=mistake.code, phrase=mistake.phrase)


def assert_correct(correct: Correct, capsys: pytest.CaptureFixture[str] | None = None) -> None:
    """Assert that `correct` passes its task's visible, hidden and drawn hidden checks."""
    assert_check_passes(correct.task, *_built(correct.objects), capsys=capsys)
