"""`harness new-exercise` (harness/kit.py), run on a temporary copy of the course, never on the real tree.

The skeleton it writes is a working check (its example requirement passes the right answer and fails a wrong
one), lint-clean, registered through its lesson's packages, and the notebook still follows the template; the
test stubs fail until they are written; the planted stub reaches the pipeline's planted bugs; every refusal
says why and writes nothing.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from harness.checks.testing import planted_cells
from harness.cli import main
from harness.grading.layout import REPO_ROOT, graded_tasks
from tests.test_declared_where_decided import judge_side_arguments, solution_lines
from tests.test_notebook_template import SUMMARY, template_problems

LESSON = "16_export_serving"
TASK = "16-new-task"


@pytest.fixture
def course(tmp_path: Path) -> Path:
    """A course with lesson 16 and lesson 11 (notebook, probe and judge packages, tests) and the harness."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO_ROOT / "harness", tmp_path / "harness", ignore=ignore)
    for assignment in (LESSON, "11_interview_drills"):
        shutil.copytree(REPO_ROOT / "solutions" / assignment, tmp_path / "solutions" / assignment, ignore=ignore)
    (tmp_path / "tests" / "checks").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "tests" / "checks" / "test_lesson16.py", tmp_path / "tests" / "checks")
    return tmp_path


def tree_digest(root: Path) -> str:
    """A fingerprint of every file under `root`: the same when nothing was written."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(root)).encode() + path.read_bytes())
    return digest.hexdigest()


def new_exercise(root: Path, *args: str) -> int:
    return main(["new-exercise", *args, "--root", str(root)])


def test_the_kit_writes_a_working_skeleton_in_every_place(course, capsys):
    before = nbformat.read(course / "solutions" / LESSON / f"{LESSON}.ipynb", as_version=4)
    count, points = map(int, SUMMARY.search(before.cells[0].source).groups())
    text = "\n".join(cell.source for cell in before.cells if cell.cell_type == "markdown")
    section = re.findall(r"^## (.+)$", text[:text.index("## Recap")], re.MULTILINE)[-1]  # the one it joins
    assert new_exercise(course, TASK, "--title", "`new_task`", "--points", "3") == 0
    written = capsys.readouterr().out
    probe, judge = (course / "harness" / side / "lesson16" / "new_task.py" for side in ("checks", "judges"))
    for path in (probe, judge, course / "tests" / "checks" / "test_lesson16.py"):
        assert str(path.relative_to(course)) in written
    lint = subprocess.run([str(REPO_ROOT / ".venv" / "bin" / "ruff"), "check", "--config",
                           str(REPO_ROOT / "pyproject.toml"), "harness/checks/lesson16", "harness/judges/lesson16",
                           "tests/checks/test_lesson16.py"], cwd=course, capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout
    probe_source = probe.read_text()  # the probe registers its instrument; the judge declares what it enforces
    assert judge_side_arguments(probe_source) == [] and solution_lines(probe_source) == [], probe_source
    assert "@judges(\n    \"16-new-task\",\n    hints=Hints(" in judge.read_text()

    notebook = nbformat.read(course / "solutions" / LESSON / f"{LESSON}.ipynb", as_version=4)
    assert template_problems(notebook, "16") == []
    assert graded_tasks(course / "solutions" / LESSON)[-1] == TASK
    assert f"**Graded exercises:** {count + 1} ({points + 3} points)" in notebook.cells[0].source
    sources = [cell.source for cell in notebook.cells]
    test_cell = next(i for i, cell in enumerate(notebook.cells) if cell.metadata.get("nbgrader", {}).get("grade_id")
                     == TASK)
    assert notebook.cells[test_cell].metadata.nbgrader == {"grade": True, "solution": False, "locked": True,
                                                           "points": 3, "grade_id": TASK, "schema_version": 3}
    assert notebook.cells[test_cell - 1].metadata.nbgrader == {"solution": True, "grade": False, "locked": False,
                                                               "grade_id": f"{TASK}-code", "schema_version": 3}
    assert "### BEGIN SOLUTION" in sources[test_cell - 1] and "### BEGIN HIDDEN TESTS" in sources[test_cell]
    assert sources[test_cell + 2].startswith("## Recap"), "the exercise goes after the last one, before the recap"
    assert len({cell.id for cell in notebook.cells}) == len(notebook.cells)

    script = f"""
import importlib.util, pytest
from harness.checks import check
from harness.checks.testing import assert_correct, assert_mistake, planted_cells
from harness.contract import registry
from harness.contract.failure import CheckFailed

entry = registry.get("{TASK}")
assert set(entry.requires) == {{"wrong-output"}} and entry.hints.section == "{section}", entry
check("{TASK}", lambda inputs: inputs * 2, hidden=True)  # the skeleton's example requirement, end to end
with pytest.raises(CheckFailed, match="wrong-output"):
    check("{TASK}", lambda inputs: inputs + 2)
spec = importlib.util.spec_from_file_location("lesson_tests", "tests/checks/test_lesson16.py")
tests = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tests)
stubs = [m for m in tests.MISTAKES if m.task == "{TASK}"], [c for c in tests.CORRECT if c.task == "{TASK}"]
assert [len(s) for s in stubs] == [5, 3], stubs
for stub in stubs[0]:  # the planted stub raises NotImplementedError: [raised], not its code
    with pytest.raises((pytest.fail.Exception, AssertionError), match="TODO"):
        assert_mistake(stub)
for stub in stubs[1]:
    with pytest.raises(pytest.fail.Exception, match="TODO"):
        assert_correct(stub)
assert planted_cells(tests.MISTAKES)["{TASK}"][1] == "wrong-output"
print("skeleton ok")
"""
    environment = {**os.environ, "PYTHONPATH": str(course)}
    run = subprocess.run([sys.executable, "-c", script], cwd=course, env=environment, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0 and "skeleton ok" in run.stdout, run.stderr[-3000:]


def test_a_new_section_is_its_heading_and_the_hints_section(course):
    assert new_exercise(course, TASK, "--title", "a title", "--points", "1", "--section", "5. Something new") == 0
    notebook = nbformat.read(course / "solutions" / LESSON / f"{LESSON}.ipynb", as_version=4)
    assert template_problems(notebook, "16") == []
    assert any(cell.source.startswith("## 5. Something new\n") for cell in notebook.cells)
    assert 'section="5. Something new"' in (course / "harness" / "judges" / "lesson16" / "new_task.py").read_text()


@pytest.mark.parametrize("task,says", [
    ("16-predict", "task 16-predict exists already"),
    ("16_top_k", "is not a task id"),
    ("16-Top-k", "is not a task id"),
    ("42-top-k", "there is no lesson 42"),
    ("11-top-k", "add a Drill"),
])
def test_a_refused_request_says_why_and_writes_nothing(course, capsys, task, says):
    before = tree_digest(course)
    assert new_exercise(course, task, "--title", "`top_k`", "--points", "2") == 2
    assert says in capsys.readouterr().err
    assert tree_digest(course) == before


def test_a_planted_mistake_is_a_solution_cell_once_per_task():
    from harness.checks.testing import Mistake, solution_cell

    cell = solution_cell("def double(x):\n    return torch.as_tensor(x) + x\n", "double")
    assert cell()[0](2).item() == 4
    mistake = Mistake("42-double", "wrong-output", "", cell, story="adds", planted=True)
    assert planted_cells([mistake]) == {"42-double": (cell.source, "wrong-output")}
    with pytest.raises(ValueError, match="two mistakes are marked planted"):
        planted_cells([mistake, mistake])
    with pytest.raises(TypeError, match="solution_cell"):
        Mistake("42-double", "wrong-output", "", (lambda x: x,), story="no source", planted=True)
