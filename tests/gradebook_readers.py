"""What two gradings are compared by in the grading tests: the gradebook's scores and grades.csv without timings."""

from __future__ import annotations

import csv
from pathlib import Path


def gradebook_scores(db: Path, assignment: str) -> dict[str, dict[str, float]]:
    """Per student, the score of every graded cell in the nbgrader gradebook at `db`."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{db}", "pytorch-training-lab") as gradebook:
        return {s.student_id: {g.name: g.score for notebook in s.notebooks for g in notebook.grades}
                for s in gradebook.assignment_submissions(assignment)}


def grades_rows(path: Path) -> list[list[str]]:
    """The rows of grades.csv without its last column, the seconds each grading took."""
    rows = list(csv.reader(path.open()))
    assert rows[0][-1] == "seconds"
    return [row[:-1] for row in rows]
