"""Grading overhead per job: what grading one submission costs beyond its kernel's own execution, with the
grading fork server (`harness.grading.forkserver`: the grader imported once per batch, a worker forked per job)
against a fresh worker process per job (the grader imported per job), on the same batch in one run.

Each mode grades the same submissions (the solution's answers) through `batch.grade_jobs`, one worker at a
time, from one template course. The overhead of a mode is its wall time for the jobs (the fork server's start
included) less the time the kernels took (the `execute.KERNEL_SECONDS` line each worker logs: the kernel's
start, its cells and its end), divided by the number of jobs; `after_first_job_s` is the same from the first
job's end to the last's (the once-per-batch start left out: what each further student costs). Goal: under 1 s
per job with the fork server.

    .venv/bin/python benchmarks/grading_overhead.py                      # 4 submissions of 00_welcome
    .venv/bin/python benchmarks/grading_overhead.py --dry                # blank notebooks, no kernel: a smoke run

`--dry` grades blank notebooks (recognised before any kernel starts), so it times the rest of the worker alone.
Writes `build/bench/grading_overhead.csv` and the machine record beside it.
"""

from __future__ import annotations

import argparse
import secrets
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pandas as pd
from grading_throughput import write_submissions  # a sibling script: benchmarks/ is on sys.path

from harness.grading.batch import Limits, absolute, course_template, grade_jobs, make_jobs
from harness.grading.execute import KERNEL_SECONDS
from harness.grading.jobs import GradeResult
from harness.grading.layout import REPO_ROOT
from harness.grading.submissions import Submission
from harness.speed import machine_record, report_results

MODES = {"fresh process": False, "fork server": True}  # mode -> `grade_jobs(forked=...)`


def kernel_seconds(log: Path) -> float:
    """The seconds the worker logged for its kernel's execution (0 when no kernel ran)."""
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.startswith(KERNEL_SECONDS)]
    return sum(float(line.removeprefix(KERNEL_SECONDS)) for line in lines)


def grade_once(submissions: list[Submission], assignment: str, forked: bool, folder: Path) -> dict:
    """Grade `submissions` one at a time in one mode; the wall time of the jobs and the kernels' share of it."""
    limits, out = Limits(), folder / "out"
    with course_template(assignment) as (template, workdir):
        jobs = make_jobs(absolute(submissions), assignment, template, out, secrets.token_bytes(32), limits,
                         workers=1, sandboxed=True)
        ends: list[float] = []
        started = time.perf_counter()
        results: list[GradeResult] = grade_jobs(jobs, workdir, 1, limits.submission_seconds,
                                                lambda _: ends.append(time.perf_counter()), forked=forked)
    kernels = [kernel_seconds(out / "logs" / f"{r.student}.log") for r in results]
    return {"seconds": ends[-1] - started, "kernel_seconds": sum(kernels),
            "statuses": sorted({r.status for r in results}),
            "after_first": (ends[-1] - ends[0] - sum(kernels[1:])) / max(1, len(results) - 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assignment", default="00_welcome")
    parser.add_argument("--submissions", type=int, default=4)
    parser.add_argument("--dry", action="store_true", help="blank notebooks (no kernel): a smoke run")
    parser.add_argument("--out", default="build/bench")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp:
        blank = nbformat.read(REPO_ROOT / "notebooks" / args.assignment / f"{args.assignment}.ipynb", as_version=4)
        submissions = write_submissions(args.assignment, args.submissions, Path(tmp) / "in",
                                        notebook=blank if args.dry else None)
        for mode, forked in MODES.items():
            measured = grade_once(submissions, args.assignment, forked, Path(tmp) / mode.replace(" ", "-"))
            rows.append({"mode": mode, "assignment": args.assignment, "jobs": args.submissions,
                         "jobs_seconds": measured["seconds"], "kernel_seconds": measured["kernel_seconds"],
                         "overhead_per_job_s": (measured["seconds"] - measured["kernel_seconds"]) / args.submissions,
                         "after_first_job_s": measured["after_first"],
                         "statuses": " ".join(measured["statuses"])})
    frame = pd.DataFrame(rows)
    fresh = frame.loc[frame["mode"] == "fresh process", "overhead_per_job_s"].iloc[0]
    frame["vs_fresh"] = frame["overhead_per_job_s"] / fresh
    frame["after_first_vs_fresh"] = frame["after_first_job_s"] / frame["after_first_job_s"].iloc[0]
    report_results(frame, "grading_overhead", machine_record(), args.out,
                   title="Grading overhead per job (everything but the kernel's execution)")
    forked = frame.loc[frame["mode"] == "fork server"].iloc[0]
    print(f"\nfork server: {forked['overhead_per_job_s']:.2f} s per job ({forked['after_first_job_s']:.2f} s after the "
          f"first) against {fresh:.2f} s for a fresh process (ratio {forked['vs_fresh']:.3f}; goal: under 1 s per job)")
    if any(frame["statuses"] != ("not attempted" if args.dry else "ok")):
        sys.exit("some submissions were not graded as expected (see the statuses): the figures are not comparable")


if __name__ == "__main__":
    main()
