"""Hints as policy (issue 38, item 2): the level-3 hint, an exercise's solution line, stays with the instructor.

The judges' hint tables (`Hints.solution`, in `harness/judges/lessonNN`, declared with what each judge enforces) are
the instructor's copy. The student tree ships them blank (`strip_solution_lines`) and carries the lines the course
file releases (`released_lines`) in `harness/checks/released_hints.json`, which `hint(task, 3)` reads; a graded
kernel mounts no judge, so its `hint()` shows no hint at all. Per assignment, the course file's `solution_hints`
says when: "after_due" (the default: once the due date has passed, at the next `harness release --student`),
"always" (a practice assignment) or "never". `--practice` releases every line.
"""

from __future__ import annotations

import ast
import json
from datetime import datetime
from pathlib import Path

from harness.grading.late import Course

RELEASED_FILE = Path("harness") / "checks" / "released_hints.json"  # in the student tree; read by hint()


def lesson_judges(harness: Path) -> list[Path]:
    """The lessons' judge modules under the package folder `harness` (`judges/lessonNN.py`, `judges/lessonNN/**`): the
    hint tables with their solution lines. The drill bank's judges (`judges/drills`) are the drills' own."""
    judges = harness / "judges"
    return sorted(path for path in judges.glob("lesson*") if path.suffix == ".py") + sorted(
        path for folder in judges.glob("lesson*") if folder.is_dir() for path in folder.rglob("*.py"))


def strip_solution_lines(source: str) -> str:
    """`source` (a lesson's judge module) with every literal `solution=` argument (`Hints(..., solution=...)`, a
    lesson's own registering helper) made empty."""
    spans = [keyword.value for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
             for keyword in node.keywords if keyword.arg == "solution" and isinstance(keyword.value, ast.Constant)]
    lines = source.encode().splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    data = source.encode()
    for value in sorted(spans, key=lambda v: (v.lineno, v.col_offset), reverse=True):
        begin = starts[value.lineno - 1] + value.col_offset
        end = starts[value.end_lineno - 1] + value.end_col_offset
        data = data[:begin] + b'""' + data[end:]
    return data.decode()


def released(assignment: str, course: Course, now: datetime, practice: bool = False) -> bool:
    """Whether `assignment`'s solution lines go to students now: a practice release, "always", or "after_due" with
    the due date (the latest extension included) past; never without a due date in the course file."""
    deadline = course.deadlines.get(assignment)
    policy = deadline.solution_hints if deadline else "after_due"
    if practice or policy == "always":
        return True
    if policy == "never" or deadline is None:
        return False
    return now > max([deadline.due, *deadline.extensions.values()])


def released_lines(assignments: list[str], course: Course, now: datetime, practice: bool = False) -> dict[str, str]:
    """Task id -> solution line for the graded tasks of the assignments `released` lets out now."""
    from harness.contract.registry import get
    from harness.grading.layout import REPO_ROOT, graded_tasks

    lines = {}
    for assignment in assignments:
        if released(assignment, course, now, practice):
            for task in graded_tasks(REPO_ROOT / "solutions" / assignment):
                lines[task] = get(task).hints.solution
    return lines


def write_released(tree: Path, lines: dict[str, str]) -> Path:
    """Write the released solution lines into the student tree at `tree`; return the file."""
    path = tree / RELEASED_FILE
    path.write_text(json.dumps(lines, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path
