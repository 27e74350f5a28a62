"""The hints a student asked for, read from the submitted notebook, for the instructor (issue 38, item 2).

`hint()` prints one line per hint, `Hint N/3 for TASK: ...`; the notebook the student saved keeps it in the
outputs of the cell that asked. `hints_used` reads those lines back from the cells the student wrote (a lesson's
own demonstration, `hint("00-make-batch", level=1)` in a given cell, is not theirs), for the assignment's tasks
only. A record is the student's data: it informs the instructor, never decides a grade, and what reaches the
instructor's files is built here from a task id the assignment has and a level from 1 to 3, never copied text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from nbformat.notebooknode import NotebookNode

HINT_LINE = re.compile(r"^Hint ([123])/3 for (\d\d-[a-z0-9-]+)\b", re.MULTILINE)


def hints_used(submitted: NotebookNode, release: NotebookNode, tasks: Iterable[str]) -> dict[str, int]:
    """Task -> the highest hint level the student's saved outputs show for it, for `tasks` (the assignment's).

    Args:
        submitted: the notebook as the student saved it (with their outputs), before any restoring or execution.
        release: the notebook they received: outputs of its own cells, unchanged, are the lesson's demonstrations.
        tasks: the assignment's task ids; a line naming any other is ignored.
    """
    known, given = set(tasks), {c.source for c in release.cells if c.cell_type == "code"}
    used: dict[str, int] = {}
    for cell in submitted.cells:
        if cell.get("cell_type") != "code" or (cell.get("source") in given and not _is_solution(cell)):
            continue
        for output in cell.get("outputs", []):
            text = output.get("text", "") if output.get("output_type") == "stream" else ""
            for level, task in HINT_LINE.findall(text if isinstance(text, str) else "".join(text)):
                if task in known:
                    used[task] = max(used.get(task, 0), int(level))
    return dict(sorted(used.items()))


def hints_cell(used: dict[str, int]) -> str:
    """The hints used, for a grades.csv cell or a summary line: `04-fit: 3; 04-evaluate: 1`, '' for none."""
    return "; ".join(f"{task}: {level}" for task, level in used.items())


def _is_solution(cell: NotebookNode) -> bool:
    return bool(cell.get("metadata", {}).get("nbgrader", {}).get("solution"))
