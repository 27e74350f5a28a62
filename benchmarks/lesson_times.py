"""The course's own time budget: each solution notebook executed top to bottom, at the full budget (what a
student runs) and at the grading budget (what nbgrader runs), the whole course's total, and the wall time of
`harness course` (what `make course` runs: every lesson executed and graded, and the showcase run).

Goals: about a minute per lesson at the full budget on the 2-core CPU machine, a few tens of seconds under
the grading budget, and the whole course under 10 minutes. Run on a quiet machine:

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/lesson_times.py [ASSIGNMENT ...] [--skip-course]

Writes `build/bench/lesson_times.csv` with the machine record.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pandas as pd
from nbclient import NotebookClient

from harness.grading.layout import REPO_ROOT, discover_assignments
from harness.speed import machine_record, report_results

BUDGETS = ("full", "grading")


def execute(assignment: str, budget: str) -> float:
    """Seconds to execute the solution of `assignment` under `budget` ("full" or "grading"), in a temp copy,
    kernel start included."""
    notebook = nbformat.read(REPO_ROOT / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
    os.environ["HARNESS_BUDGET"] = budget  # the kernel inherits it
    with tempfile.TemporaryDirectory(prefix="bench-lesson-") as tmp:
        started = time.perf_counter()
        NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": tmp}}).execute()
        return time.perf_counter() - started


def harness_course() -> float:
    """Wall seconds of `python -m harness course` into a temporary folder (what `make course` runs)."""
    with tempfile.TemporaryDirectory(prefix="bench-course-") as tmp:
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "harness", "course", "--out", str(Path(tmp) / "course")],
                       cwd=REPO_ROOT, check=True, stdout=subprocess.DEVNULL)
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignments", nargs="*", help="lessons to time (default: all)")
    parser.add_argument("--skip-course", action="store_true", help="do not time `harness course`")
    parser.add_argument("--out", default="build/bench", help="folder for the CSV and the machine record")
    args = parser.parse_args()
    rows = [{"lesson": a, **{f"{budget}_budget_s": execute(a, budget) for budget in BUDGETS}}
            for a in args.assignments or discover_assignments()]
    frame = pd.DataFrame(rows)
    total = {"lesson": "whole course (sum)", **frame.drop(columns="lesson").sum().to_dict()}
    frame = pd.concat([frame, pd.DataFrame([total])], ignore_index=True)
    if not args.skip_course:
        course = harness_course()
        course_row = {"lesson": "harness course (make course)", "grading_budget_s": course}
        frame = pd.concat([frame, pd.DataFrame([course_row])], ignore_index=True)
    report_results(frame, "lesson_times", machine_record("cpu"), args.out,
                   title=f"Lesson execution times (OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')})")


if __name__ == "__main__":
    main()
