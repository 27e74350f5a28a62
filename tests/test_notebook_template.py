"""One notebook template for every lesson (CONTRIBUTING.md, "A lesson"), checked without executing anything:

- the title: `# Lesson NN — Name`;
- each exercise: a heading `### Exercise k — title (`task-id`, P points)`, numbered from 1, whose points are
  the test cell's; its text says how to get a hint (`hint("task-id")`); its solution cell (`task-id-code`)
  comes right before its test cell;
- where the introduction sums up `**Graded exercises:** N (P points)`, N and P are the test cells' count and sum.
"""

from __future__ import annotations

import re

import nbformat
import pytest

from harness.grading.layout import REPO_ROOT, discover_assignments

EXERCISE = re.compile(r"^### Exercise (\d+) — (.+) \(`([^`]+)`, (\d+) points?\)$", re.MULTILINE)
SUMMARY = re.compile(r"\*\*Graded exercises:\*\* (\d+) \((\d+) points\)")


def template_problems(notebook: nbformat.NotebookNode, lesson: str) -> list[str]:
    """How `notebook` departs from the template; `lesson` is its two-digit number."""
    cells = notebook.cells
    problems = []
    title = cells[0].source.splitlines()[0] if cells and cells[0].cell_type == "markdown" and cells[0].source else ""
    if not re.fullmatch(rf"# Lesson {lesson} — \S.*", title):
        problems.append(f"the first cell's title is {title!r}, not '# Lesson {lesson} — Name'")
    number, text_since = 0, []
    for index, cell in enumerate(cells):
        nbgrader = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type == "markdown":
            text_since.append(cell.source)
        if not (cell.cell_type == "code" and nbgrader.get("grade") and not nbgrader.get("solution")):
            continue
        task, points = nbgrader.get("grade_id", "?"), nbgrader.get("points")
        number += 1
        before = cells[index - 1] if index else None
        if before is None or before.get("metadata", {}).get("nbgrader", {}).get("grade_id") != f"{task}-code" \
                or not before.metadata["nbgrader"].get("solution"):
            problems.append(f"{task}: the cell before its test cell is not its solution cell ({task}-code)")
        text = "\n".join(text_since)
        headings = [m for m in EXERCISE.finditer(text) if m.group(3) == task]
        if not headings:
            plural = "" if points == 1 else "s"
            problems.append(f"{task}: no heading '### Exercise {number} — title (`{task}`, {points:g} point{plural})' "
                            "in the text since the previous exercise")
        else:
            heading = headings[-1]
            if int(heading.group(1)) != number:
                problems.append(f"{task}: numbered {heading.group(1)}, but it is exercise {number}")
            if points is None or int(heading.group(4)) != points:
                problems.append(f"{task}: the heading says {heading.group(4)} points, the test cell {points}")
            if f'hint("{task}")' not in text[heading.start():]:
                problems.append(f'{task}: its text does not say how to get a hint (`hint("{task}")`)')
        text_since = []
    summary = SUMMARY.search(cells[0].source) if cells else None
    graded = [c.metadata["nbgrader"].get("points") or 0 for c in cells
              if c.get("metadata", {}).get("nbgrader", {}).get("grade") and not c.metadata["nbgrader"].get("solution")]
    if summary and (int(summary.group(1)), int(summary.group(2))) != (len(graded), sum(graded)):
        problems.append(f"the introduction says {summary.group(1)} graded exercises ({summary.group(2)} points), "
                        f"the test cells are {len(graded)} ({sum(graded):g} points)")
    return problems


@pytest.mark.parametrize("assignment", discover_assignments())
def test_every_lesson_follows_the_template(assignment):
    path = REPO_ROOT / "solutions" / assignment / f"{assignment}.ipynb"
    problems = template_problems(nbformat.read(path, as_version=4), assignment[:2])
    assert not problems, "\n".join(problems)


def test_the_template_check_reports_each_departure():
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell

    def graded(task, solution, points):
        cell = code("", metadata={"nbgrader": {"grade_id": task if not solution else f"{task}-code",
                                               "grade": not solution, "solution": solution, "points": points}})
        return cell

    good = nbformat.v4.new_notebook(cells=[
        md("# Lesson 42 — Toys\n\nText."),
        md('### Exercise 1 — a toy (`42-toy`, 2 points)\n\nStuck? Run `hint("42-toy")`.'),
        graded("42-toy", True, 0), graded("42-toy", False, 2),
    ])
    assert template_problems(good, "42") == []
    bad = nbformat.v4.new_notebook(cells=[
        md("# 42 · Toys\n\n**Graded exercises:** 1 (3 points)"),
        md("### Exercise 2 — a toy (`42-toy`, 3 points)"),
        graded("42-toy", True, 0), code("print('a demo between')"), graded("42-toy", False, 2),
    ])
    assert template_problems(bad, "42") == [
        "the first cell's title is '# 42 · Toys', not '# Lesson 42 — Name'",
        "42-toy: the cell before its test cell is not its solution cell (42-toy-code)",
        "42-toy: numbered 2, but it is exercise 1",
        "42-toy: the heading says 3 points, the test cell 2",
        '42-toy: its text does not say how to get a hint (`hint("42-toy")`)',
        "the introduction says 1 graded exercises (3 points), the test cells are 1 (2 points)",
    ]
