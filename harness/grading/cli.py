"""`harness grade`: autograde a folder or LMS zip of submissions in parallel; grades CSV and class summary."""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from harness.grading.layout import check_assignment


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `harness grade`."""
    parser.add_argument("submissions", type=Path,
                        help="folder with one folder per student, or flat <student>_*.ipynb files, or an LMS .zip")
    parser.add_argument("--assignment", required=True, help="assignment to grade, e.g. 04_training_loop")
    parser.add_argument("--workers", type=int, default=2, help="parallel grading processes (default 2)")
    parser.add_argument("--out", type=Path, default=Path("build/grades"), help="output folder (default build/grades)")
    parser.add_argument("--timeout", type=int, default=120, help="per-cell timeout in seconds (default 120)")
    parser.add_argument("--submission-limit", type=int, default=900,
                        help="wall-clock limit for one submission in seconds (default 900)")
    parser.add_argument("--memory-mb", type=int, default=4096, help="memory limit of each kernel in MiB (default 4096)")
    parser.add_argument("--max-output-kb", type=int, default=1000, help="output kept per cell in KiB (default 1000)")
    parser.add_argument("--secret-file", type=Path, default=None,
                        help="the instructor's grading secret (default: $HARNESS_GRADING_SECRET, else "
                        "~/.config/harness/grading-secret, created when missing)")
    parser.add_argument("--no-sandbox", action="store_true",
                        help="run kernels without the sandbox (only where bubblewrap cannot run: submissions can then "
                        "read and write this machine's files)")


def run(args: argparse.Namespace) -> int:
    """Grade, write the summary, print where everything is."""
    from harness.grading import sandbox
    from harness.grading.batch import Limits, grade_batch
    from harness.grading.submissions import collect
    from harness.grading.summary import write_summary
    from harness.judge.secret import load_or_create

    try:  # bad input: the message alone, before anything is created
        assignment = check_assignment(args.assignment)
        if not args.submissions.exists():
            raise ValueError(f"{args.submissions} does not exist: give a folder of submissions or an LMS .zip export")
        if args.workers < 1:
            raise ValueError(f"--workers {args.workers}: use 1 or more grading processes")
    except ValueError as error:
        print(f"cannot grade: {error}")
        return 2
    if args.no_sandbox:
        print("WARNING: grading without the sandbox (--no-sandbox): each submission's kernel runs as you, with your "
              "files and network; the judge still decides every point.")
    elif reason := sandbox.unavailable_reason():
        print(f"cannot grade: the kernel sandbox cannot be made here: {reason}")
        return 2
    secret, where = load_or_create(args.secret_file)
    print(where)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="harness-extract-") as tmp:
        try:
            submissions = collect(args.submissions, assignment, Path(tmp))
        except (OSError, ValueError) as error:  # a missing folder, a bad zip, two names for one student id
            print(f"cannot grade: {error}")
            return 2
        if not submissions:
            print(f"no submissions found in {args.submissions}")
            return 1
        limits = Limits(args.timeout, args.submission_limit, args.memory_mb, args.max_output_kb * 1024)
        results = grade_batch(submissions, assignment, args.out, workers=args.workers, limits=limits, secret=secret,
                              sandboxed=not args.no_sandbox)
    paths = write_summary(results, args.out, assignment)
    for r in results:
        total = sum(score for score, _ in r["scores"].values())
        print(f"{r['student']:>24}  {r['status']:<8} {total:5.1f}  {'; '.join(r['reasons'])[:100]}")
    print(f"\n{len(results)} submissions graded in {time.perf_counter() - started:.0f} s with {args.workers} workers.")
    for name, path in paths.items():
        print(f"{name:>18}: {path}")
    print(f"{'feedback':>18}: {args.out / 'feedback'} (hidden tests removed: safe to return to students)")
    print(f"{'gradebook':>18}: {args.out / 'gradebook.db'}")
    return 0
