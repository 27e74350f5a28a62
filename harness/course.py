"""`harness course --out build/course` (`make course`): the whole course, headless, and an HTML report.

What an instructor runs to verify a machine or a JupyterHub image before class. Every lesson's solution is
executed (real training, under the grading budget) and graded through the same nbgrader batch grader that
`harness grade` uses, two lessons at a time. A progress line is printed as each lesson finishes; a lesson
that fails is reported with its reasons and the others still run. Then the showcase training run, and
`index.html`: the environment, each lesson's score, status and run time, the figures its graded notebook
drew (the training curves), and the showcase's curves and run report. Exit status 1 unless every lesson
gets full marks and the showcase runs.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import secrets
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, NamedTuple

import nbformat

from harness.grading.layout import discover_assignments
from harness.grading.release import answered_release


def grade_lesson(out: Path, assignment: str, secret: bytes) -> dict[str, Any]:
    """Execute and autograde one lesson's solution answers; always returns a result, never raises.

    `secret` draws the hidden cases, as `harness grade` draws them from the instructor's secret.

    Returns:
        The batch grader's result ("status", "scores" {task: [points, max]}, "failures", "reasons") plus
        "wall_seconds" and "figures" (`SavedFigure`s: what the graded notebook drew, under `out`/figures).
    """
    from harness.grading.batch import Limits, grade_batch
    from harness.grading.submissions import Submission

    started = time.perf_counter()
    try:
        known = discover_assignments()
        if assignment not in known:
            raise ValueError(f"no lesson {assignment!r} in solutions/ (the lessons: {', '.join(known)})")
        folder = out / "submissions" / assignment
        folder.mkdir(parents=True, exist_ok=True)
        notebook = folder / f"{assignment}.ipynb"
        nbformat.write(answered_release(assignment), notebook)
        [result] = grade_batch([Submission("solution", notebook)], assignment, out / "grading" / assignment,
                               workers=1, limits=Limits(cell_timeout=300, submission_seconds=900), secret=secret)
        figures = save_figures(out / "grading" / assignment / "autograded" / "solution" / assignment /
                               f"{assignment}.ipynb", out / "figures", assignment)
    except Exception as error:  # one broken lesson must not stop the others: report it and go on
        last = traceback.format_exception_only(error)[-1].strip()
        result, figures = {"assignment": assignment, "status": "error", "scores": {}, "failures": {},
                           "reasons": [f"could not be graded: {last}"]}, []
    return {**result, "wall_seconds": time.perf_counter() - started, "figures": figures}


def grade_solutions(out: Path, assignments: list[str], workers: int = 2,
                    progress: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Grade every assignment, `workers` at a time; a progress line as each finishes; results in input order.

    The hidden cases are drawn from a fresh random secret: every run of the course checks the solutions
    against other hidden inputs, as a class would be graded.
    """
    secret = secrets.token_bytes(32)
    results: dict[str, dict[str, Any]] = {}
    with ThreadPoolExecutor(max_workers=workers) as pool:  # each grade_batch runs its own worker process
        futures = {pool.submit(grade_lesson, out, assignment, secret): assignment for assignment in assignments}
        for done, future in enumerate(as_completed(futures), start=1):
            result = results[futures[future]] = future.result()
            progress(f"[{done}/{len(assignments)}] {progress_line(result)}")
    return [results[assignment] for assignment in assignments]


def progress_line(result: dict[str, Any]) -> str:
    """`04_training_loop   10/10  ok      12 s`, with the reasons when the lesson is not fully right."""
    points, maximum = totals(result)
    line = f"{result['assignment']:<24} {points:>4g}/{maximum:<4g} {verdict(result):<7} {result['wall_seconds']:4.0f} s"
    problems = list(result.get("reasons", [])) + [f"{task}: {message}" for task, message in result["failures"].items()]
    return line + "".join(f"\n    {problem}" for problem in problems if verdict(result) != "ok")


def totals(result: dict[str, Any]) -> tuple[float, float]:
    """(points scored, points possible) of one graded lesson."""
    return (sum(points for points, _ in result["scores"].values()),
            sum(maximum for _, maximum in result["scores"].values()))


def verdict(result: dict[str, Any]) -> str:
    """"ok" only for full marks with no reasons to review; else "FAILED" (or "error" when it could not run)."""
    points, maximum = totals(result)
    if result["status"] == "error" or not result["scores"]:
        return "error"
    return "ok" if points == maximum and result["status"] == "ok" else "FAILED"


def status_text(result: dict[str, Any]) -> str:
    """The verdict, with the grader's own status when it says more ("FAILED (flagged)")."""
    shown = verdict(result)
    return shown if result["status"] in (shown, "error") else f"{shown} ({html.escape(result['status'])})"


class SavedFigure(NamedTuple):
    """A figure of a graded notebook, written to a PNG file, and its text alternative."""

    path: Path
    alt: str


def save_figures(notebook: Path, folder: Path, prefix: str) -> list[SavedFigure]:
    """Write every PNG output of an executed notebook to `folder`/`prefix`-N.png; the figures in order.

    Each figure's alt text is the one the kernel gave it (`harness.figures`: the output's metadata
    `{"text/html": {"alt": ...}}`); an output without one says so in its alt text.
    """
    folder.mkdir(parents=True, exist_ok=True)
    cells = [cell for cell in nbformat.read(notebook, as_version=4).cells if cell.cell_type == "code"]
    outputs = [output for cell in cells for output in cell.get("outputs", []) if "image/png" in output.get("data", {})]
    figures = []
    for number, output in enumerate(outputs, start=1):
        path = folder / f"{prefix}-{number}.png"
        path.write_bytes(base64.b64decode(output["data"]["image/png"]))
        alt = output.get("metadata", {}).get("text/html", {}).get("alt")
        figures.append(SavedFigure(path, alt or f"{prefix}, figure {number}: drawn without a text description"))
    return figures


def run_showcase_safely(out: Path) -> dict[str, Any]:
    """The showcase training run; {"error": ...} instead of raising."""
    import torch

    from harness.showcase import run_showcase

    print("showcase: training a small CNN on procedural shapes (the precision `harness doctor` recommends, "
          "clipping, warm-up and cosine, early stopping, checkpoints), a line per epoch", flush=True)
    # one intra-op thread, as each lesson was graded: where other work shares the cores, a second thread
    # spin-waits for its turn (on a loaded 2-core machine an epoch took 30 to 70 s with two threads, 1.5 s with one)
    torch.set_num_threads(1)
    try:
        return run_showcase(out / "showcase")
    except Exception as error:
        return {"error": traceback.format_exception_only(error)[-1].strip()}


def write_html(out: Path, report: dict[str, Any], results: list[dict[str, Any]],
               showcase: dict[str, Any] | None) -> Path:
    """`out`/index.html: environment, per-lesson score/status/time, each lesson's figures, the showcase."""

    def link(path: Path) -> str:
        return html.escape(str(Path(path).resolve().relative_to(out.resolve())))

    def row(cells: list[Any], *, header: bool = False) -> str:
        opening, closing = ('<th scope="col">', "</th>") if header else ("<td>", "</td>")
        return "<tr>" + "".join(f"{opening}{html.escape(str(cell))}{closing}" for cell in cells) + "</tr>"

    def image(path: Path, alt: str) -> str:
        return f'<img src="{link(path)}" alt="{html.escape(alt)}">'

    ok = sum(verdict(r) == "ok" for r in results)
    parts = [f"<h1>PyTorch Training Lab: course run</h1><p>{ok} of {len(results)} lessons at full marks.</p>",
             "<h2>Lessons</h2><table>", row(["lesson", "score", "status", "run time (s)", "problems"], header=True)]
    for r in results:
        points, maximum = totals(r)
        problems = list(r.get("reasons", [])) + [f"{task}: {message}" for task, message in r["failures"].items()]
        parts.append(f'<tr class="{verdict(r)}"><td><a href="#{r["assignment"]}">{r["assignment"]}</a></td>'
                     f"<td>{points:g} / {maximum:g}</td><td>{status_text(r)}</td>"
                     f"<td>{r['wall_seconds']:.0f}</td><td>{'<br>'.join(map(html.escape, problems))}</td></tr>")
    parts.append("</table>")
    for r in results:
        parts.append(f'<h3 id="{r["assignment"]}">{r["assignment"]}</h3>')
        figures = [image(figure.path, figure.alt) for figure in r["figures"]]
        parts += figures or ["<p>No figures.</p>"]
    parts.append("<h2>Showcase</h2>")
    if showcase is None:
        parts.append("<p>Skipped (--skip-showcase).</p>")
    elif "error" in showcase:
        parts.append(f'<p class="FAILED">The showcase failed: {html.escape(showcase["error"])}</p>')
    else:
        accuracy = showcase["test_metrics"]["accuracy"]
        parts.append(f"<p>Test accuracy {accuracy:.3f} in {showcase['seconds']:.0f} s on {showcase['device']}: "
                     f'<a href="{link(showcase["report"])}">run report</a>, '
                     f'<a href="{link(showcase["history"])}">history (CSV)</a>.</p>'
                     + image(showcase["curves"], showcase["curves_alt"]))
    parts += ["<h2>Environment</h2><table>", row(["setting", "value"], header=True),
              *[row([key, value]) for key, value in report.items()], "</table>"]
    style = ("body{font-family:sans-serif;max-width:70em;margin:auto}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left}img{max-width:32em;margin:.3em}"
             ".ok td:nth-child(3){color:green}.FAILED,.FAILED td:nth-child(3),.error td:nth-child(3){color:#b00}")
    path = out / "index.html"
    path.write_text(f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>Course run</title>"
                    f"<style>{style}</style></head><body><main>{''.join(parts)}</main></body></html>\n")
    return path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `harness course`."""
    parser.add_argument("--out", type=Path, default=Path("build/course"), help="output folder (default build/course)")
    parser.add_argument("--lessons", nargs="+", metavar="NN_name", help="only these lessons (default: all)")
    parser.add_argument("--skip-showcase", action="store_true", help="grade the lessons only")


def run(args: argparse.Namespace) -> int:
    """Run the course; 1 if any lesson misses a point or the showcase fails."""
    from harness.env import environment_report

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    report = environment_report()
    (out / "environment.json").write_text(json.dumps(report, indent=1, default=str))
    assignments = args.lessons or discover_assignments()
    print(f"grading {len(assignments)} lessons (their solutions, executed and autograded) into {out}", flush=True)
    results = grade_solutions(out, assignments, progress=lambda line: print(line, flush=True))
    showcase = None if args.skip_showcase else run_showcase_safely(out)
    page = write_html(out, report, results, showcase)
    failed = [r["assignment"] for r in results if verdict(r) != "ok"]
    if showcase and "error" in showcase:
        failed.append("showcase")
    print(f"report: {page}")
    print(f"not full marks or failed: {', '.join(failed)}" if failed else "every lesson at full marks")
    return 1 if failed else 0
