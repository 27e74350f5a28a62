"""Grading throughput: submissions per minute for one assignment with 1 worker against N, and the time to
grade one student's whole course.

Submissions are the solution's answers (every test cell runs its checks in full), graded through the same
`harness.grading.batch.grade_batch` instructors use. Run on a quiet machine:

    .venv/bin/python benchmarks/grading_throughput.py --assignment 04_training_loop --submissions 4 --workers 1 2

Goals: throughput grows with workers; a full course grades in under two minutes per student (2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat

from harness.grading.batch import Limits, grade_batch
from harness.grading.layout import discover_assignments
from harness.grading.release import answered_release
from harness.grading.submissions import Submission


def write_submissions(assignment: str, count: int, folder: Path) -> list[Submission]:
    """`count` copies of the solution's answers, one folder per student."""
    notebook = answered_release(assignment)
    submissions = []
    for index in range(count):
        path = folder / f"student{index:03d}" / f"{assignment}.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(notebook, path)
        submissions.append(Submission(f"student{index:03d}", path))
    return submissions


def throughput(assignment: str, count: int, workers: int) -> dict:
    """Grade `count` submissions with `workers` workers; submissions per minute over the whole batch."""
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
        submissions = write_submissions(assignment, count, Path(tmp) / "in")
        started = time.perf_counter()
        results = grade_batch(submissions, assignment, Path(tmp) / "out", workers=workers, limits=Limits())
        seconds = time.perf_counter() - started
    full = all(r["status"] == "ok" and all(s == m for s, m in r["scores"].values()) for r in results)
    return {"assignment": assignment, "submissions": count, "workers": workers, "seconds": round(seconds, 1),
            "per_minute": round(60 * count / seconds, 2), "all_full_marks": full}


def whole_course(workers: int) -> dict:
    """One student's whole course: every assignment graded, `workers` assignments at a time."""
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        seconds = list(pool.map(lambda a: throughput(a, 1, 1)["seconds"], discover_assignments()))
    return {"workers": workers, "assignments": len(seconds), "total_seconds": round(time.perf_counter() - started, 1),
            "per_assignment_seconds": dict(zip(discover_assignments(), seconds))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assignment", default="04_training_loop")
    parser.add_argument("--submissions", type=int, default=4)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--skip-course", action="store_true")
    args = parser.parse_args()
    machine = {"platform": platform.platform(), "cpus": os.cpu_count(), "load_average": os.getloadavg()}
    runs = [throughput(args.assignment, args.submissions, workers) for workers in args.workers]
    base = runs[0]["per_minute"]
    for run in runs:
        run["speedup_vs_first"] = round(run["per_minute"] / base, 2)
    report = {"machine": machine, "throughput": runs}
    if not args.skip_course:
        report["whole_course_one_student"] = [whole_course(workers) for workers in args.workers]
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
