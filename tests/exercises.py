"""Every exercise's mutation set, found through the registry (CONTRIBUTING, "A check"): the tasks every lesson's
probe modules register, and the mistakes and correct variants its tests/checks/test_lessonNN.py lists
(`MISTAKES`, `CORRECT`). tests/checks/test_every_exercise.py runs them; tests/test_requirements.py,
tests/test_hidden_as_strict.py and tests/test_pipeline.py (the planted bugs) read them.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from harness.checks.lesson09 import common as lesson09
from harness.checks.testing import Correct, Mistake, SolutionCell, solution_cell
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


def lesson_tasks(lesson: str) -> list[str]:
    """The registered tasks of lesson `lesson` ("06")."""
    return [task for task in tasks() if task[:2] == lesson]


def stub_cells() -> list[tuple[str, SolutionCell]]:
    """(task, its release's solution cell) for every task whose release cell is nbgrader's stub inside the
    function or class it asks for, read in notebooks/: run, it defines what the test cell passes to check(), and
    using it raises NotImplementedError. A bare stub (lesson 11's cells) raises before any check runs."""
    import nbformat

    found = []
    for assignment in ASSIGNMENTS:
        notebook = nbformat.read(REPO_ROOT / "notebooks" / assignment / f"{assignment}.ipynb", as_version=4)
        cells = {cell.metadata.get("nbgrader", {}).get("grade_id"): cell.source for cell in notebook.cells}
        given = None
        for task in lesson_tasks(assignment[:2]):
            passed = re.search(rf'^check\("{task}", ([\w, ]+)\)$', cells.get(task, ""), re.M)
            source = cells.get(f"{task}-code", "")
            if passed and any(isinstance(node, (ast.FunctionDef, ast.ClassDef))
                              for node in ast.parse(_without_magics(source)).body):
                given = notebook_namespace(assignment) if given is None else given
                found.append((task, solution_cell(source, *map(str.strip, passed.group(1).split(",")), given=given)))
    return found


def _lesson_of(task: str) -> ModuleType:
    return lesson_tests(next(assignment for assignment in ASSIGNMENTS if assignment[:2] == task[:2]))


def mistakes(task: str) -> list[Mistake]:
    """The mistakes of `task` its lesson's tests list."""
    return [mistake for mistake in getattr(_lesson_of(task), "MISTAKES", []) if mistake.task == task]


def correct_variants(task: str) -> list[Correct]:
    """The correct variants of `task` its lesson's tests list."""
    return [correct for correct in getattr(_lesson_of(task), "CORRECT", []) if correct.task == task]


def lesson_marks(task: str) -> list:
    """The marks of `task`'s lesson: the `pytestmark` of its tests/checks/test_lessonNN.py (lesson 09's `slow`,
    lesson 10's xdist group, which shares its trained run)."""
    found = getattr(_lesson_of(task), "pytestmark", [])
    return list(found) if isinstance(found, list) else [found]


def params(cases: list[Mistake] | list[Correct]) -> list:
    """`cases` as pytest parameters named by their str, each with its lesson's marks (`lesson_marks`)."""
    return [pytest.param(case, id=str(case), marks=lesson_marks(case.task)) for case in cases]


def shorten_hangs(mistake: Mistake, monkeypatch: pytest.MonkeyPatch) -> None:
    """For a mistake whose ranks both wait (lesson 09's `hang`), a 3 s launch timeout: 2 x 30 s otherwise."""
    if mistake.code == "hang":
        monkeypatch.setattr(lesson09, "LAUNCH_TIMEOUT_S", 3)


def notebook_namespace(assignment: str) -> dict[str, Any]:
    """What `assignment`'s solution notebook defines, without running it: its imports and the functions and classes
    of every code cell (but one whose definition reads a demo's variable). The `given` of a planted cell whose
    source uses an earlier cell's import or function."""
    import nbformat

    notebook = nbformat.read(REPO_ROOT / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
    definitions = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)
    nodes = [node for cell in notebook.cells if cell.cell_type == "code"
             for node in ast.parse(_without_magics(cell.source)).body if isinstance(node, definitions)]
    namespace: dict[str, Any] = {}
    for node in nodes:
        try:
            exec(compile(ast.Module(body=[node], type_ignores=[]), f"<definitions of {assignment}>", "exec"), namespace)
        except NameError:  # a default or a decorator that reads a demo's variable
            continue
    return namespace


def _without_magics(source: str) -> str:
    """`source` with its IPython magics (`%run ...`, `!pip ...`) replaced by `pass`, so that Python parses it."""
    return "\n".join(line[: len(line) - len(line.lstrip())] + "pass" if line.lstrip()[:1] in ("%", "!") else line
                     for line in source.splitlines())
