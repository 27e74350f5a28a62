"""The hints a student asked for are read back from the notebook they saved: from their own cells' outputs, for
the assignment's tasks, the highest level per task; a lesson's demonstration is not theirs (issue 38, item 2)."""

from __future__ import annotations

import csv
import json

import nbformat

from harness.checks import core
from harness.grading.hints_used import hints_cell, hints_used
from harness.grading.jobs import GradeResult
from harness.grading.layout import REPO_ROOT, graded_tasks
from harness.grading.summary import write_grades_csv

LESSON = "00_welcome"


def _printed(capsys, *calls: tuple) -> list:
    """The stream output a cell running `hint(*call)` for each call keeps, printed by the real hint()."""
    for call in calls:
        core.hint(*call)
    return [nbformat.v4.new_output("stream", name="stdout", text=capsys.readouterr().out)]


def test_the_hints_asked_in_own_cells_are_read_and_the_lessons_demonstration_is_not(capsys, monkeypatch):
    monkeypatch.setattr(core, "_hints_shown", {})
    release = nbformat.read(REPO_ROOT / "notebooks" / LESSON / f"{LESSON}.ipynb", as_version=4)
    submitted = nbformat.read(REPO_ROOT / "notebooks" / LESSON / f"{LESSON}.ipynb", as_version=4)
    demo = next(c for c in submitted.cells if c.cell_type == "code" and "level=1" in c.source)
    demo.outputs = _printed(capsys, ("00-make-batch", 1))  # the lesson's own demonstration, run by the student
    own = nbformat.v4.new_code_cell('hint("00-accuracy")\nhint("00-accuracy")\nhint("00-count-params", 3)')
    own.outputs = _printed(capsys, ("00-accuracy",), ("00-accuracy",), ("00-count-params", 3))
    other = nbformat.v4.new_code_cell('print("Hint 3/3 for 99-elsewhere: not this lesson")')
    other.outputs = [nbformat.v4.new_output("stream", name="stdout", text="Hint 3/3 for 99-elsewhere: x\n")]
    submitted.cells += [own, other]
    used = hints_used(submitted, release, graded_tasks(REPO_ROOT / "solutions" / LESSON))
    assert used == {"00-accuracy": 2, "00-count-params": 3}
    assert hints_cell(used) == "00-accuracy: 2; 00-count-params: 3"


def test_a_notebook_without_hints_records_none():
    release = nbformat.read(REPO_ROOT / "notebooks" / LESSON / f"{LESSON}.ipynb", as_version=4)
    assert hints_used(release, release, graded_tasks(REPO_ROOT / "solutions" / LESSON)) == {}
    assert hints_cell({}) == ""


def test_the_record_travels_in_the_result_and_an_older_result_still_loads():

    result = GradeResult("ada", LESSON, "ok", hints={"00-accuracy": 3})
    assert GradeResult.from_json(result.to_json()).hints == {"00-accuracy": 3}
    older = json.loads(result.to_json())
    del older["hints"]
    assert GradeResult.from_json(json.dumps(older)).hints == {}


def test_hints_used_reach_grades_csv_as_a_column(tmp_path):
    result = GradeResult("ada", LESSON, "ok", {"00-accuracy": [2.0, 2.0]}, hints={"00-accuracy": 3})
    write_grades_csv([json.loads(result.to_json())], tmp_path / "grades.csv", ["00-accuracy"], {"00-accuracy": 2.0})
    [row] = csv.DictReader((tmp_path / "grades.csv").open())
    assert row["hints"] == "00-accuracy: 3" and row["total"] == "2.0"
