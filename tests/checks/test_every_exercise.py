"""One runner for every exercise (issue 42 item 4): each task the registry holds, each of its mistakes fails the
visible check with its code and a message containing its phrase, each of its correct variants passes the
visible, hidden and drawn hidden checks, and its release's stub reports its exception. The lists live in each
lesson's tests/checks/test_lessonNN.py (`MISTAKES`, `CORRECT`, with the lesson's own behavioural tests);
tests/exercises.py finds them."""

from __future__ import annotations

import pytest

from harness.checks.testing import Correct, Mistake, SolutionCell, assert_check_fails, assert_correct, assert_mistake
from tests.exercises import correct_variants, lesson_marks, mistakes, params, shorten_hangs, stub_cells, tasks

TASKS = tasks()


@pytest.mark.parametrize("mistake", params([mistake for task in TASKS for mistake in mistakes(task)]))
def test_mistake_fails_with_its_message(mistake: Mistake, monkeypatch: pytest.MonkeyPatch) -> None:
    shorten_hangs(mistake, monkeypatch)
    assert_mistake(mistake)


@pytest.mark.parametrize("correct", params([correct for task in TASKS for correct in correct_variants(task)]))
def test_correct_variant_passes(correct: Correct, capsys: pytest.CaptureFixture[str]) -> None:
    assert_correct(correct, capsys)


@pytest.mark.parametrize(("task", "stub"), [pytest.param(task, stub, id=task, marks=lesson_marks(task))
                                           for task, stub in stub_cells()])
def test_the_release_stub_reports_its_exception(task: str, stub: SolutionCell) -> None:
    """The release's solution cell, nbgrader's stub, fails with [raised], naming NotImplementedError."""
    assert_check_fails(task, *stub(), code="raised", phrase="NotImplementedError")
