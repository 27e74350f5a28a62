"""Grading throughput: submissions per minute for one assignment with 1 worker against N, and the time to
grade one student's whole course.

Submissions are the solution's answers (every test cell runs its checks in full), graded through the same
`harness.grading.batch.grade_batch` instructors use. Run on a quiet machine:

    .venv/bin/python benchmarks/grading_throughput.py --assignment 04_training_loop --submissions 4 --workers 1 2

`--dask local:2` (or a scheduler address) adds the same batch graded on a Dask cluster (`harness grade --dask`),
its overhead against the local pool of as many workers (goal: within 10%), and the projected time for a class
of 1,000 on N two-core workers from the measured per-student time:

    .venv/bin/python benchmarks/grading_throughput.py --submissions 4 --workers 1 2 --dask local:2 --skip-course

Goals: throughput grows with workers; a full course grades in under two minutes per student (2 cores); the
sandbox and the judge cost at most 1.5x the in-kernel grading they replaced: `--baseline REF` grades the
same whole course, in the same run, with the code of commit REF (default d48df68, the last commit that
graded inside the kernel), checked out in a temporary git worktree.
Writes `build/bench/grading_throughput.csv` (and `grading_dask_projection.csv` with `--dask`) and
`build/bench/grading_course.csv` with the machine record.
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
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import nbformat
import pandas as pd

from harness.grading.batch import Limits, grade_batch
from harness.grading.layout import discover_assignments
from harness.grading.release import answered_release
from harness.grading.submissions import Submission
from harness.speed import machine_record, report_results


def write_submissions(assignment: str, count: int, folder: Path,
                      notebook: nbformat.NotebookNode | None = None) -> list[Submission]:
    """`count` copies of `notebook` (default: the solution's answers), one folder per student."""
    notebook = notebook if notebook is not None else answered_release(assignment)
    submissions = []
    for index in range(count):
        path = folder / f"student{index:03d}" / f"{assignment}.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(notebook, path)
        submissions.append(Submission(f"student{index:03d}", path))
    return submissions


def throughput(assignment: str, count: int, workers: int, dask: str | None = None) -> dict:
    """Grade `count` submissions with `workers` workers (or on the Dask cluster `dask`, whose start is not
    timed); submissions per minute over the whole batch."""
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
        submissions = write_submissions(assignment, count, Path(tmp) / "in")
        with backend(dask, Path(tmp) / "out"):
            started = time.perf_counter()
            results = grade_batch(submissions, assignment, Path(tmp) / "out", workers=workers, limits=Limits(),
                                  secret=secrets.token_bytes(32))
            seconds = time.perf_counter() - started
    full = all(r["status"] == "ok" and all(s == m for s, m in r["scores"].values()) for r in results)
    return {"assignment": assignment, "submissions": count, "backend": f"dask {dask}" if dask else "local pool",
            "workers": workers, "seconds": seconds, "per_minute": 60 * count / seconds, "all_full_marks": full}


def backend(dask: str | None, out: Path) -> AbstractContextManager[object]:
    """The Dask cluster at `dask` for the batches graded within (`harness.grading.cluster.on_dask`), or nothing."""
    if dask is None:
        return nullcontext()
    from harness.grading.cluster import on_dask

    return on_dask(dask, out)


def dask_workers(address: str) -> int:
    """The worker processes of `address`: N of `local:N`, else the scheduler's current count."""
    from distributed import Client

    from harness.grading.cluster import parse_address

    if (count := parse_address(address)) is not None:
        return count
    with Client(address) as client:
        return len(client.scheduler_info()["workers"])


def projection(seconds_per_student: float, class_size: int = 1000, machines: tuple[int, ...] = (1, 10, 50, 100)
               ) -> pd.DataFrame:
    """Hours to grade `class_size` students on N two-core workers, each grading one student every
    `seconds_per_student` (measured with 2 workers on 2 cores), ignoring the scheduler's own cost."""
    return pd.DataFrame({"two_core_workers": list(machines), "class_size": class_size,
                         "seconds_per_student_per_worker": seconds_per_student,
                         "hours": [class_size * seconds_per_student / n / 3600 for n in machines]})


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
    parser.add_argument("--dask", default=None, metavar="ADDRESS",
                        help="also grade the batch on this Dask cluster (local:N or tcp://host:8786)")
    parser.add_argument("--skip-course", action="store_true")
    parser.add_argument("--baseline", default="d48df68",
                        help="commit whose in-kernel grading is the baseline ('' to skip)")
    parser.add_argument("--out", default="build/bench", help="folder for the CSVs and the machine record")
    args = parser.parse_args()
    rows = [throughput(args.assignment, args.submissions, workers) for workers in args.workers]
    if args.dask:
        rows.append(throughput(args.assignment, args.submissions, dask_workers(args.dask), args.dask))
    runs = pd.DataFrame(rows)
    runs["speedup"] = runs["per_minute"] / runs["per_minute"].iloc[0]
    if args.dask:
        dask_run = runs.iloc[-1]
        local = runs[(runs["backend"] == "local pool") & (runs["workers"] == dask_run["workers"])]
        runs["dask_overhead"] = float("nan")
        if not local.empty:  # goal: within 10% of the local pool of as many workers
            runs.loc[runs.index[-1], "dask_overhead"] = dask_run["seconds"] / local["seconds"].iloc[0]
    report_results(runs, "grading_throughput", machine_record("cpu"), args.out,
                   title=f"Grading throughput: {args.submissions} submissions of {args.assignment}")
    if args.dask and (two := runs[(runs["backend"] == "local pool") & (runs["workers"] == 2)]).shape[0]:
        per_student = float(two["seconds"].iloc[0]) / args.submissions  # a two-core machine, 2 at a time
        report_results(projection(per_student), "grading_dask_projection", machine_record("cpu"), args.out,
                       title=f"A class of 1,000 ({args.assignment}) on N two-core workers, projected")
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
