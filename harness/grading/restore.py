"""Repair a submission's structure against the release before nbgrader grades it.

nbgrader's OverwriteCells restores the source of edited test cells, but a test cell a student deleted is
never run (its points silently vanish), a moved one runs before the code it tests, and a duplicated one
is dropped by DeduplicateIds without a word. `restore_cells` rebuilds the notebook in the release's order,
one cell per grade id: solution cells carry the student's code, every other nbgrader cell (tests, locked
cells) comes from the release, and the student's own added cells stay where they were relative to the
nbgrader cells before them. Every repair is returned as a sentence for the grades CSV.
"""

from __future__ import annotations

import copy

from nbformat.notebooknode import NotebookNode


def _grade_id(cell: NotebookNode) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _is_solution(cell: NotebookNode) -> bool:
    return bool(cell.get("metadata", {}).get("nbgrader", {}).get("solution"))


def _anchored(student: NotebookNode, known: set[str]) -> tuple[dict[str | None, list], list[str], list[str]]:
    """Student cells grouped by the nbgrader cell they follow, the order of known ids, and the duplicates."""
    anchors: dict[str | None, list] = {None: []}
    order: list[str] = []
    duplicates: list[str] = []
    anchor: str | None = None
    for cell in student.cells:
        grade_id = _grade_id(cell)
        if grade_id in known:
            if grade_id in order:
                duplicates.append(grade_id)
                continue
            order.append(grade_id)
            anchor = grade_id
            anchors.setdefault(anchor, [])
            continue
        anchors.setdefault(anchor, []).append(cell)
    return anchors, order, duplicates


def _free_cell(cell: NotebookNode, repairs: list[str]) -> NotebookNode:
    """A student's own cell, stripped of any nbgrader metadata it claims (an unknown grade id grades nothing)."""
    cell = copy.deepcopy(cell)
    if "nbgrader" in cell.get("metadata", {}):
        repairs.append(f"a cell claiming grade id {_grade_id(cell)!r}, unknown to the assignment, was kept as an "
                       "ordinary cell")
        del cell.metadata["nbgrader"]
    return cell


def restore_cells(student: NotebookNode, release: NotebookNode) -> tuple[NotebookNode, list[str]]:
    """The submission rebuilt on the release's nbgrader cells, and the repairs made (empty when untouched).

    Args:
        student: the submitted notebook.
        release: the notebook the student received (`notebooks/NN_name/NN_name.ipynb`).
    """
    release_cells = {_grade_id(c): c for c in release.cells if _grade_id(c)}
    anchors, order, duplicates = _anchored(student, set(release_cells))
    student_cells = {}
    for cell in student.cells:
        student_cells.setdefault(_grade_id(cell), cell)
    repairs = [f"a duplicate of cell {g!r} was removed" for g in dict.fromkeys(duplicates)]
    expected_order = [g for g in release_cells if g in order]
    if order != expected_order:
        repairs.append("cells graded by nbgrader had been moved: the release's order was restored")
    cells = [_free_cell(c, repairs) for c in anchors[None]]
    for grade_id, original in release_cells.items():
        theirs = student_cells.get(grade_id)
        if theirs is None:
            what = "solution cell (graded as unanswered)" if _is_solution(original) else "cell"
            repairs.append(f"the deleted {what} {grade_id!r} was restored from the release")
            cells.append(copy.deepcopy(original))
        elif _is_solution(original):
            cell = copy.deepcopy(original)
            cell.source = theirs.source
            cells.append(cell)
        else:
            if theirs.source != original.source:
                repairs.append(f"the edited cell {grade_id!r} was restored from the release")
            cells.append(copy.deepcopy(original))
        cells += [_free_cell(c, repairs) for c in anchors.get(grade_id, [])]
    restored = copy.deepcopy(release)
    restored.cells = cells
    return restored, repairs
