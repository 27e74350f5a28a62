"""Repair a submission's structure against the release before nbgrader grades it.

nbgrader's OverwriteCells restores the source of edited test cells, but a test cell a student deleted is
never run (its points silently vanish), a moved one runs before the code it tests, and a duplicated one
is dropped by DeduplicateIds without a word; and a moved exercise must not take the cells it needs (the
imports, which have no grade id) along with it. `restore_cells` rebuilds the notebook in the release's order,
one cell per grade id: solution cells carry the student's code, every other nbgrader cell (tests, locked
cells) comes from the release, the release's other cells the student kept unchanged (imports, demos, text)
go back to their place, and the student's own or edited cells stay where they were relative to the release
cell before them. Every repair is returned as a sentence for the grades CSV.
"""

from __future__ import annotations

import copy

from nbformat.notebooknode import NotebookNode


def _grade_id(cell: NotebookNode) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _is_solution(cell: NotebookNode) -> bool:
    return bool(cell.get("metadata", {}).get("nbgrader", {}).get("solution"))


Key = str | tuple[str, int]  # a grade id, or ("release", i) for the release's i-th cell without one


def _keys(student: NotebookNode, release: NotebookNode) -> list[Key | None]:
    """Each student cell's place in the release: its grade id, the release cell it is an unchanged copy of
    (cells without a grade id: imports, demos, text), or None for the student's own cells."""
    graded = {_grade_id(c) for c in release.cells if _grade_id(c)}
    free: dict[str, list[int]] = {}  # source -> positions of release cells without a grade id
    for i, cell in enumerate(release.cells):
        if not _grade_id(cell):
            free.setdefault(cell.source, []).append(i)
    keys: list[Key | None] = []
    for cell in student.cells:
        grade_id = _grade_id(cell)
        if grade_id in graded:
            keys.append(grade_id)
        elif not grade_id and free.get(cell.source):
            keys.append(("release", free[cell.source].pop(0)))
        else:
            keys.append(None)
    return keys


def _anchored(student: NotebookNode, keys: list[Key | None]) -> tuple[dict[Key | None, list], list[Key], list[str]]:
    """Student cells grouped by the release cell they follow, the order of known cells, and the duplicates."""
    anchors: dict[Key | None, list] = {None: []}
    order: list[Key] = []
    duplicates: list[str] = []
    anchor: Key | None = None
    for cell, key in zip(student.cells, keys, strict=True):
        if key is None:
            anchors.setdefault(anchor, []).append(cell)
        elif key in order:
            duplicates.append(key)
        else:
            order.append(key)
            anchor = key
            anchors.setdefault(anchor, [])
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
    """The submission rebuilt on the release's cells, and the repairs made (empty when untouched).

    Args:
        student: the submitted notebook.
        release: the notebook the student received (`notebooks/NN_name/NN_name.ipynb`).
    """
    keys = _keys(student, release)
    anchors, order, duplicates = _anchored(student, keys)
    student_cells: dict[Key, NotebookNode] = {}
    for cell, key in zip(student.cells, keys, strict=True):
        if key is not None:
            student_cells.setdefault(key, cell)
    repairs = [f"a duplicate of cell {g!r} was removed" for g in dict.fromkeys(duplicates)]
    release_keys = [_grade_id(c) or ("release", i) for i, c in enumerate(release.cells)]
    if order != [k for k in release_keys if k in student_cells]:
        repairs.append("cells had been moved: the release's order was restored")
    cells = [_free_cell(c, repairs) for c in anchors[None]]
    for key, original in zip(release_keys, release.cells, strict=True):
        theirs = student_cells.get(key)
        if isinstance(key, tuple):  # a cell without a grade id: kept where the release has it, if they kept it
            if theirs is not None:
                cells.append(copy.deepcopy(theirs))
        elif theirs is None:
            what = "solution cell (graded as unanswered)" if _is_solution(original) else "cell"
            repairs.append(f"the deleted {what} {key!r} was restored from the release")
            cells.append(copy.deepcopy(original))
        elif _is_solution(original):
            cell = copy.deepcopy(original)
            cell.source = theirs.source
            cells.append(cell)
        else:
            if theirs.source != original.source:
                repairs.append(f"the edited cell {key!r} was restored from the release")
            cells.append(copy.deepcopy(original))
        cells += [_free_cell(c, repairs) for c in anchors.get(key, [])]
    restored = copy.deepcopy(release)
    restored.cells = cells
    return restored, repairs
