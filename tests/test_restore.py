"""A reordered submission is rebuilt in the release's order, imports and demos included (they have no grade id)."""

from __future__ import annotations

import copy

import nbformat
from nbformat.v4 import new_code_cell

from harness.grading.layout import REPO_ROOT
from harness.grading.release import answered_release
from harness.grading.restore import restore_cells

RELEASE = nbformat.read(REPO_ROOT / "notebooks" / "04_training_loop" / "04_training_loop.ipynb", as_version=4)
ANSWERED = answered_release("04_training_loop")


def test_a_notebook_in_reverse_order_gets_every_cell_back_in_place():
    student = copy.deepcopy(ANSWERED)
    student.cells.reverse()  # the import cell now comes after every exercise that needs it
    restored, repairs = restore_cells(student, RELEASE)
    assert [c.source for c in restored.cells] == [c.source for c in ANSWERED.cells]
    assert repairs == ["cells had been moved: the release's order was restored"]


def test_an_exercise_moved_up_leaves_the_imports_first():
    student = copy.deepcopy(ANSWERED)
    first_two = [i for i, c in enumerate(student.cells) if c.cell_type == "code"][:2]  # the install cell, the imports
    last_test = max(i for i, c in enumerate(student.cells) if c.metadata.get("nbgrader", {}).get("grade"))
    student.cells.insert(0, student.cells.pop(last_test))
    restored, _ = restore_cells(student, RELEASE)
    assert [restored.cells[i].source for i in first_two] == [ANSWERED.cells[i].source for i in first_two]


def test_edited_and_added_cells_stay_after_the_release_cell_they_followed():
    student = copy.deepcopy(ANSWERED)
    demo = next(i for i, c in enumerate(student.cells)
                if c.cell_type == "code" and "nbgrader" not in c.metadata and i > 3)
    student.cells[demo].source += "\n# my change"
    student.cells.insert(demo + 1, new_code_cell("print('my own experiment')"))
    restored, repairs = restore_cells(student, RELEASE)
    assert repairs == []
    assert [c.source for c in restored.cells] == [c.source for c in student.cells]
