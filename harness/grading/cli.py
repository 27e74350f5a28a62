"""`harness grade`: autograde a folder or LMS zip of submissions in parallel; grades CSV and class summary.

`--shard i/N` grades one slice of the class into its own folder (`shards`); `harness grade merge OUT...`
joins shard folders into one grading (`merge`); `--dask ADDRESS` (or `local:N`) grades on a Dask cluster
(`cluster`), alone or with `--shard`.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.grading.layout import check_assignment

if TYPE_CHECKING:
    from harness.grading.batch import Limits
    from harness.grading.submissions import Submission

DEFAULT_OUT = Path("build/grades")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `harness grade`."""
    parser.add_argument("submissions", nargs="+", metavar="SUBMISSIONS",
                        help="folder with one folder per student, or flat <student>_*.ipynb files, or an LMS .zip; "
                        "or `merge OUT_0 OUT_1 ...` to join shard folders into --out")
    parser.add_argument("--assignment", help="assignment to grade, e.g. 04_training_loop (required to grade)")
    parser.add_argument("--workers", type=int, default=2, help="parallel grading processes (default 2)")
    parser.add_argument("--out", type=Path, default=None,
                        help="output folder (default build/grades; with --shard i/N, build/grades/shard-i-of-N)")
    parser.add_argument("--shard", default=None, metavar="i/N",
                        help="grade only slice i (0 to N-1) of the class into --out, skipping students already "
                        "graded there; join the N folders with `harness grade merge`")
    parser.add_argument("--dask", default=None, metavar="ADDRESS",
                        help="grade on a Dask cluster: its scheduler's address (tcp://host:8786; the submissions, "
                        "--out and this repository at the same paths on every worker), or local:N for N local worker "
                        "processes (needs the optional extra: pip install .[cluster])")
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
    """Grade (a whole class or one shard) or merge shard folders; print where everything is."""
    if args.submissions[0] == "merge":
        return run_merge([Path(folder) for folder in args.submissions[1:]], args.out or DEFAULT_OUT)
    return run_grade(args)


def run_grade(args: argparse.Namespace) -> int:
    """Grade, write the summary (or the shard's results), print where everything is."""
    from harness.grading import sandbox
    from harness.grading.batch import Limits
    from harness.grading.shards import parse_shard
    from harness.grading.submissions import collect
    from harness.judge.secret import load_or_create

    try:  # bad input: the message alone, before anything is created
        if len(args.submissions) != 1:
            raise ValueError(f"one folder or .zip of submissions, got {len(args.submissions)}: "
                             f"{' '.join(args.submissions)} (to join shard folders: harness grade merge OUT...)")
        source = Path(args.submissions[0])
        if not args.assignment:
            raise ValueError("--assignment is required, e.g. --assignment 04_training_loop")
        assignment = check_assignment(args.assignment)
        if not source.exists():
            raise ValueError(f"{source} does not exist: give a folder of submissions or an LMS .zip export")
        if args.workers < 1:
            raise ValueError(f"--workers {args.workers}: use 1 or more grading processes")
        shard = parse_shard(args.shard) if args.shard else None
        dask_check(args.dask)
    except ValueError as error:
        print(f"cannot grade: {error}")
        return 2
    out = args.out or (DEFAULT_OUT / f"shard-{shard[0]}-of-{shard[1]}" if shard else DEFAULT_OUT)
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
            submissions = collect(source, assignment, Path(tmp))
        except (OSError, ValueError) as error:  # a missing folder, a bad zip, two names for one student id
            print(f"cannot grade: {error}")
            return 2
        if not submissions:
            print(f"no submissions found in {source}")
            return 1
        limits = Limits(args.timeout, args.submission_limit, args.memory_mb, args.max_output_kb * 1024)
        with backend(args.dask, out):
            return _grade(args, submissions, assignment, out, shard, secret, limits, started)


def dask_check(address: str | None) -> None:
    """Refuse a `--dask` address of the wrong form, or `--dask` without the optional extra installed.

    Raises:
        ValueError: saying the expected form, or what to install.
    """
    if address is None:
        return
    try:
        from harness.grading.cluster import parse_address
    except ImportError as error:
        raise ValueError(f"--dask needs the optional extra `cluster` (pip install .[cluster]): {error}") from None
    parse_address(address)


def backend(address: str | None, out: Path) -> AbstractContextManager[object]:
    """Where the jobs run: the Dask cluster at `address` (`cluster.on_dask`), or the local pool when None."""
    if address is None:
        return nullcontext()
    from harness.grading.cluster import on_dask

    print(f"grading on Dask: {address}")
    return on_dask(address, out)


def _grade(args: argparse.Namespace, submissions: list[Submission], assignment: str, out: Path,
           shard: tuple[int, int] | None, secret: bytes, limits: Limits, started: float) -> int:
    """Grade the whole class or one shard of it, print the results and where everything is."""
    from harness.grading.batch import grade_batch
    from harness.grading.shards import grade_shard
    from harness.grading.summary import write_summary

    if shard:
        try:
            graded, skipped = grade_shard(submissions, assignment, out, shard, secret=secret, limits=limits,
                                          workers=args.workers, sandboxed=not args.no_sandbox)
        except ValueError as error:  # the folder holds another grading's shard (ShardMismatch, ContractError)
            print(f"cannot grade: {error}")
            return 2
        _print_results([r.to_dict() for r in graded])
        print(f"\nshard {shard[0]}/{shard[1]}: {len(graded) + len(skipped)} of {len(submissions)} students; "
              f"{len(graded)} graded in {time.perf_counter() - started:.0f} s, {len(skipped)} already graded "
              f"(skipped).\n{'results':>18}: {out / 'results'}\nWhen every shard is done: "
              f"harness grade merge OUT_0 ... OUT_{shard[1] - 1} --out {DEFAULT_OUT}")
        return 0
    results = grade_batch(submissions, assignment, out, workers=args.workers, limits=limits, secret=secret,
                          sandboxed=not args.no_sandbox)
    paths = write_summary(results, out, assignment)
    _print_results(results)
    print(f"\n{len(results)} submissions graded in {time.perf_counter() - started:.0f} s "
          f"{f'on Dask ({args.dask})' if args.dask else f'with {args.workers} workers'}.")
    _print_paths(paths, out)
    return 0


def run_merge(folders: list[Path], out: Path) -> int:
    """Join shard folders into `out`; 1 when students are missing, 2 when the shards cannot be merged."""
    from harness.grading.merge import merge_shards

    try:
        merged = merge_shards(folders, out)
    except (OSError, ValueError) as error:  # not a shard folder, another grading or version, two results
        print(f"cannot merge: {error}")
        return 2
    results = [r.to_dict() for r in merged.results]
    _print_results(results)
    print(f"\n{len(results)} students of {merged.manifest.assignment} merged from {len(folders)} shard folders.")
    if merged.duplicates:
        print(f"graded in two shards with the same result, merged once: {', '.join(merged.duplicates)}")
    _print_paths({name: out / name for name in ("grades.csv", "pass_rates.csv", "distribution.png", "summary.md")},
                 out)
    if merged.missing:
        print(f"\nMISSING: {sum(map(len, merged.missing.values()))} students have no result yet:")
        for shard, students in merged.missing.items():
            print(f"  shard {shard}: {', '.join(students)}")
        print("Run (or re-run) those shards, then merge again.")
        return 1
    return 0


def _print_results(results: list[dict[str, Any]]) -> None:
    for r in results:
        total = sum(score for score, _ in r["scores"].values())
        print(f"{r['student']:>24}  {r['status']:<8} {total:5.1f}  {'; '.join(r['reasons'])[:100]}")


def _print_paths(paths: dict[str, Path], out: Path) -> None:
    for name, path in paths.items():
        print(f"{name:>18}: {path}")
    print(f"{'feedback':>18}: {out / 'feedback'} (hidden tests removed: safe to return to students)")
    print(f"{'gradebook':>18}: {out / 'gradebook.db'}")
