"""Every exercise's mutation set, found through the registry (CONTRIBUTING, "A check"): the tasks every lesson's
probe modules register, and the mistakes and correct variants its tests/checks/test_lessonNN.py lists
(`MISTAKES`, `CORRECT`). tests/checks/test_every_exercise.py runs them; tests/test_requirements.py,
tests/test_hidden_as_strict.py and tests/test_pipeline.py (the planted bugs) read them.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from harness.checks.lesson09 import common as lesson09
from harness.checks.testing import Correct, Mistake
from harness.contract import registry
from harness.grading.layout import REPO_ROOT, discover_assignments

ASSIGNMENTS = discover_assignments()


def lesson_tests(assignment: str) -> ModuleType:
    """tests/checks/test_lessonNN.py of `assignment`, imported (defining its mistakes runs nothing).

    The module pytest collected is reused (under the name pytest gives it), so that what it caches, as lesson
    10's trained run, is made once per process.
    """
    path = REPO_ROOT / "tests" / "checks" / f"test_lesson{assignment[:2]}.py"
    loaded = sys.modules.get(path.stem)
    if loaded is not None and Path(getattr(loaded, "__file__", "")).resolve() == path.resolve():
        return loaded
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and pickling look a class's module up there
    spec.loader.exec_module(module)
    return module


def tasks() -> list[str]:
    """Every exercise's task id: the checks every lesson's probe modules register, in order."""
    for assignment in ASSIGNMENTS:
        importlib.import_module(f"harness.checks.lesson{assignment[:2]}")
    lessons = {assignment[:2] for assignment in ASSIGNMENTS}
    return sorted(task for task in registry.registered() if task[:2] in lessons)


def _lesson_of(task: str) -> ModuleType:
    return lesson_tests(next(assignment for assignment in ASSIGNMENTS if assignment[:2] == task[:2]))


def mistakes(task: str) -> list[Mistake]:
    """The mistakes of `task` its lesson's tests list."""
    return [mistake for mistake in getattr(_lesson_of(task), "MISTAKES", []) if mistake.task == task]


def correct_variants(task: str) -> list[Correct]:
    """The correct variants of `task` its lesson's tests list."""
    return [correct for correct in getattr(_lesson_of(task), "CORRECT", []) if correct.task == task]


def params(cases: list[Mistake] | list[Correct]) -> list:
    """`cases` as pytest parameters named by their str, each with its lesson's marks (the `pytestmark` of its
    tests/checks/test_lessonNN.py: lesson 09's `slow`, lesson 10's xdist group, which shares its trained run)."""
    def marks(case: Mistake | Correct) -> list:
        found = getattr(_lesson_of(case.task), "pytestmark", [])
        return list(found) if isinstance(found, list) else [found]

    return [pytest.param(case, id=str(case), marks=marks(case)) for case in cases]


def shorten_hangs(mistake: Mistake, monkeypatch: pytest.MonkeyPatch) -> None:
    """For a mistake whose ranks both wait (lesson 09's `hang`), a 3 s launch timeout: 2 x 30 s otherwise."""
    if mistake.code == "hang":
        monkeypatch.setattr(lesson09, "LAUNCH_TIMEOUT_S", 3)
