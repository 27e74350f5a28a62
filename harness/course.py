"""`harness course --out build/course` (`make course`): the whole course, headless, with a README of results.

Writes the environment report, grades each assignment in solutions/ (its solution answers, autograded under
the grading budget through the same batch grader instructors use), runs the showcase training run when
`harness.showcase` exists, and writes `README.md` with per-lesson scores and times and the showcase's files.
Exit status 1 if any solution misses a point. Lessons are discovered, so it works while they are landing.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import nbformat

from harness.grading.layout import discover_assignments
from harness.grading.release import answered_release


def grade_solutions(out: Path, assignments: list[str], workers: int = 2) -> list[dict[str, Any]]:
    """Autograde each assignment's solution answers, `workers` assignments at a time; one result each."""
    from harness.grading.batch import Limits, grade_batch
    from harness.grading.submissions import Submission

    def grade(assignment: str) -> dict[str, Any]:
        folder = out / "submissions" / assignment
        folder.mkdir(parents=True, exist_ok=True)
        notebook = folder / f"{assignment}.ipynb"
        nbformat.write(answered_release(assignment), notebook)
        started = time.perf_counter()
        [result] = grade_batch([Submission("solution", notebook)], assignment, out / "grading" / assignment,
                               workers=1, limits=Limits(cell_timeout=300, submission_seconds=900))
        return {**result, "wall_seconds": time.perf_counter() - started}

    with ThreadPoolExecutor(max_workers=workers) as pool:  # each grade_batch runs its own worker process
        return list(pool.map(grade, assignments))


def _showcase(out: Path) -> str:
    """Run the showcase training run; a Markdown section on what it wrote."""
    from harness.showcase import run_showcase

    summary = run_showcase(out / "showcase")
    files = sorted(p.relative_to(out) for p in (out / "showcase").rglob("*") if p.is_file())
    return (f"```\n{json.dumps(summary, indent=1, default=str)[:3000]}\n```\n\nFiles:\n" +
            "\n".join(f"- [{f}]({f})" for f in files) + "\n")


def write_readme(out: Path, report: dict[str, Any], results: list[dict[str, Any]], showcase: str) -> Path:
    """build/course/README.md: environment, per-lesson score and time, the showcase."""
    lines = ["# PyTorch Training Lab: course run", "", "## Environment", "", "| key | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in report.items()]
    lines += ["", "## Lessons (solutions autograded under the grading budget)", "",
              "| lesson | score | status | time (s) |", "|---|---|---|---|"]
    for r in results:
        score = sum(s for s, _ in r["scores"].values())
        maximum = sum(m for _, m in r["scores"].values())
        lines.append(f"| {r['assignment']} | {score:g} / {maximum:g} | {r['status']} | {r['wall_seconds']:.0f} |")
    lines += ["", "## Showcase", "", showcase]
    path = out / "README.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `harness course`."""
    parser.add_argument("--out", type=Path, default=Path("build/course"), help="output folder (default build/course)")
    parser.add_argument("--skip-showcase", action="store_true", help="grade the lessons only")


def run(args: argparse.Namespace) -> int:
    """Run the course; 1 if any solution does not get full marks."""
    from harness.env import environment_report

    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    report = environment_report()
    (args.out / "environment.json").write_text(json.dumps(report, indent=1, default=str))
    results = grade_solutions(args.out, discover_assignments())
    showcase = "Skipped (--skip-showcase).\n" if args.skip_showcase else _showcase(args.out)
    readme = write_readme(args.out, report, results, showcase)
    failed = [r["assignment"] for r in results if any(s < m for s, m in r["scores"].values()) or not r["scores"]]
    print(readme.read_text())
    if failed:
        print(f"not full marks: {', '.join(failed)}")
    return 1 if failed else 0
