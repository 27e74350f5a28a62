"""The course's own time budget: each solution notebook executed top to bottom, at the full budget (what a
student runs) and at the grading budget (what nbgrader runs), with the wall time of each.

Goals: about a minute per lesson at the full budget on the 2-core CPU machine; a few tens of seconds under
the grading budget. Run on a quiet machine:

    .venv/bin/python benchmarks/lesson_times.py [ASSIGNMENT ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from harness.grading.layout import REPO_ROOT, discover_assignments


def execute(assignment: str, budget: str) -> float:
    """Seconds to execute the solution of `assignment` under `budget` ("full" or "grading"), in a temp copy."""
    notebook = nbformat.read(REPO_ROOT / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
    os.environ["HARNESS_BUDGET"] = budget
    with tempfile.TemporaryDirectory(prefix="bench-lesson-") as tmp:
        started = time.perf_counter()
        NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": tmp}}).execute()
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignments", nargs="*")
    args = parser.parse_args()
    rows = {a: {budget: round(execute(a, budget), 1) for budget in ("full", "grading")}
            for a in args.assignments or discover_assignments()}
    machine = {"platform": platform.platform(), "cpus": os.cpu_count(), "load_average": os.getloadavg(),
               "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")}
    print(json.dumps({"machine": machine, "seconds": rows}, indent=1))


if __name__ == "__main__":
    main()
