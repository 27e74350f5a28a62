"""Grading throughput: submissions per minute for one assignment with 1 worker against N, and the time to
grade one student's whole course.

Submissions are the solution's answers (every test cell runs its checks in full), graded through the same
`harness.grading.batch.grade_batch` instructors use. Run on a quiet machine:

    .venv/bin/python benchmarks/grading_throughput.py --assignment 04_training_loop --submissions 4 --workers 1 2

Goals: throughput grows with workers; a full course grades in under two minutes per student (2 cores); the
sandbox and the judge cost at most 1.5x the in-kernel grading they replaced: `--baseline REF` grades the
same whole course, in the same run, with the code of commit REF (default d48df68, the last commit that
graded inside the kernel), checked out in a temporary git worktree.
Writes `build/bench/grading_throughput.csv` and `build/bench/grading_course.csv` with the machine record.
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pandas as pd

from harness.grading.batch import Limits, grade_batch
from harness.grading.layout import discover_assignments
from harness.grading.release import answered_release
from harness.grading.submissions import Submission
from harness.speed import machine_record, report_results


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
        results = grade_batch(submissions, assignment, Path(tmp) / "out", workers=workers, limits=Limits(),
                              secret=secrets.token_bytes(32))
        seconds = time.perf_counter() - started
    full = all(r["status"] == "ok" and all(s == m for s, m in r["scores"].values()) for r in results)
    return {"assignment": assignment, "submissions": count, "workers": workers, "seconds": seconds,
            "per_minute": 60 * count / seconds, "all_full_marks": full}


def whole_course(workers: int) -> tuple[float, dict[str, float]]:
    """One student's whole course, every assignment graded, `workers` assignments at a time: the wall
    seconds of the whole, and each assignment's."""
    started = time.perf_counter()
    assignments = discover_assignments()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        runs = list(pool.map(lambda a: throughput(a, 1, 1), assignments))
    if not all(run["all_full_marks"] for run in runs):
        raise RuntimeError(f"a solution lost points: {[r['assignment'] for r in runs if not r['all_full_marks']]}")
    seconds = [run["seconds"] for run in runs]
    return time.perf_counter() - started, dict(zip(assignments, seconds, strict=True))


def baseline_course(ref: str, workers: int) -> float:
    """Wall seconds of `whole_course(workers)` with the code of commit `ref`, in a temporary worktree."""
    with tempfile.TemporaryDirectory(prefix="bench-baseline-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), ref], check=True, capture_output=True)
        try:
            code = (f"import sys; sys.path[:0] = [{str(tree)!r}, {str(tree / 'benchmarks')!r}]\n"
                    "from grading_throughput import whole_course\n"
                    f"print(whole_course({workers})[0])")
            # PYTHONPATH: the grading workers the old code starts must import the old harness too
            environment = {**os.environ, "PYTHONPATH": str(tree)}
            done = subprocess.run([sys.executable, "-c", code], cwd=tree, env=environment, capture_output=True,
                                  text=True, check=True)
            return float(done.stdout.split()[-1])
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assignment", default="04_training_loop")
    parser.add_argument("--submissions", type=int, default=4)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--skip-course", action="store_true")
    parser.add_argument("--baseline", default="d48df68",
                        help="commit whose in-kernel grading is the baseline ('' to skip)")
    parser.add_argument("--out", default="build/bench", help="folder for the CSVs and the machine record")
    args = parser.parse_args()
    runs = pd.DataFrame([throughput(args.assignment, args.submissions, workers) for workers in args.workers])
    runs["speedup"] = runs["per_minute"] / runs["per_minute"].iloc[0]
    report_results(runs, "grading_throughput", machine_record("cpu"), args.out,
                   title=f"Grading throughput: {args.submissions} submissions of {args.assignment}")
    if args.skip_course:
        return
    course = pd.DataFrame({"assignment": discover_assignments()})
    totals = {"assignment": "whole course (wall)"}
    for workers in args.workers:
        total, per_assignment = whole_course(workers)
        course[f"seconds_{workers}_at_a_time"] = course["assignment"].map(per_assignment)
        totals[f"seconds_{workers}_at_a_time"] = total
    rows = [totals]
    if args.baseline:
        baseline = {"assignment": f"whole course (wall) at {args.baseline}, in-kernel grading"}
        for workers in args.workers:
            baseline[f"seconds_{workers}_at_a_time"] = baseline_course(args.baseline, workers)
        ratio = {"assignment": "ratio: sandbox and judge / in-kernel (goal <= 1.5)"}
        for workers in args.workers:
            key = f"seconds_{workers}_at_a_time"
            ratio[key] = totals[key] / baseline[key]
        rows += [baseline, ratio]
    course = pd.concat([course, pd.DataFrame(rows)], ignore_index=True)
    report_results(course, "grading_course", machine_record("cpu"), args.out,
                   title="One student's whole course, graded")


if __name__ == "__main__":
    main()
