"""What an instructor reads after grading: the grades CSV and the class summary.

`grades.csv`: one row per student (student, assignment, status, total, max, points per task, failure
codes, reasons). `pass_rates.csv` / `summary.md`: per task, the share of students who got its full points,
over the notebooks that were run and judged (`mistakes.judged`: blank, missing and invalid notebooks and the
grader's errors are left out, and the summary says how many), the grade distribution
(`distribution.png`), the mistake report (`mistakes`: causes per exercise, a reteach list, item analysis)
the flagged submissions with why, and the answer cells similar to shipped code or a classmate's (`similarity`:
a `similar` column and a section, for review; no points change).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.describe import describe_distribution
from harness.grading.hints_used import hints_cell
from harness.grading.instructor_text import csv_writer, markdown_text
from harness.grading.layout import assignment_titles
from harness.grading.mistakes import judged, left_out, plural, write_mistakes
from harness.grading.similarity import find_similar, grades_column, read_answers, section_lines

STATUS_MEANING = {
    "ok": "graded, nothing unusual",
    "flagged": "graded, with repairs, limits hit or tampering: review the reasons",
    "not attempted": "every solution cell as released (a blank notebook): not run, 0 points",
    "invalid": "not a readable notebook: 0 points",
    "missing": "no notebook found: 0 points",
    "error": "the grader failed or the submission overran its time limit: 0 points, grade by hand",
}


SUMMARY_FILES = ("grades.csv", "pass_rates.csv", "distribution.png", "mistakes.md", "mistakes.csv", "summary.md")


def task_ids(results: list[dict[str, Any]]) -> list[str]:
    """The graded tasks, in the order the results list them."""
    return list(dict.fromkeys(task for r in results for task in r["scores"]))


def max_points(results: list[dict[str, Any]]) -> dict[str, float]:
    """Each task's points, from any result that has it."""
    return {task: score[1] for r in results for task, score in r["scores"].items()}


def write_grades_csv(results: list[dict[str, Any]], path: Path, tasks: list[str], maxima: dict[str, float],
                     similar: dict[str, str] | None = None) -> None:
    """One row per student, with points per task, the reasons behind the status, the cells flagged as similar
    to shipped code or a classmate's (`similar`, student -> `similarity.grades_column`'s text; for review) and the
    hints the student's saved outputs show (`hints`: task and highest level; information, never a grade)."""
    similar = similar or {}
    with path.open("w", newline="") as handle:
        writer = csv_writer(handle)
        writer.writerow(["student", "assignment", "status", "total", "max_total", *tasks,
                         "failures", "reasons", "similar", "hints", "seconds"])
        for r in results:
            points = [r["scores"].get(t, [0.0])[0] for t in tasks]
            failures = "; ".join(f"{t}: {code}" for t, code in r["failures"].items())
            writer.writerow([r["student"], r["assignment"], r["status"], sum(points), sum(maxima.values()), *points,
                             failures, " | ".join(r["reasons"]), similar.get(r["student"], ""),
                             hints_cell(r.get("hints") or {}), round(r.get("seconds", 0.0), 1)])


def pass_rates(results: list[dict[str, Any]], tasks: list[str], maxima: dict[str, float]) -> dict[str, float]:
    """Share of the `judged` notebooks with full points on each task."""
    results = judged(results)
    return {t: sum(r["scores"].get(t, [0.0])[0] >= maxima[t] for r in results) / max(len(results), 1) for t in tasks}


def plot_distribution(totals: list[float], maximum: float, path: Path) -> None:
    """Histogram of total points."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    figure, axis = plt.subplots(figsize=(6, 3.5))
    axis.yaxis.set_major_locator(MaxNLocator(integer=True))  # whole students
    bins = [x - 0.5 for x in range(int(maximum) + 2)] if maximum <= 40 else 20
    axis.hist(totals, bins=bins, color="#4C72B0", edgecolor="white")
    axis.set(xlabel=f"total points (out of {maximum:g})", ylabel="students", title="Grade distribution")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def write_summary(results: list[dict[str, Any]], out: Path, assignment: str,
                  late: list[str] | None = None) -> dict[str, Path]:
    """Write grades.csv, pass_rates.csv, distribution.png, mistakes.md/.csv and summary.md into `out`; return
    their paths. `late`: the summary's section on late submissions (`late.summary_section`), if any."""
    tasks, maxima = task_ids(results), max_points(results)
    paths = {name: out / name for name in SUMMARY_FILES}
    answers = read_answers(out, [r["student"] for r in results])
    flags = find_similar(answers, assignment)
    write_grades_csv(results, paths["grades.csv"], tasks, maxima, grades_column(flags))
    rates = pass_rates(results, tasks, maxima)
    with paths["pass_rates.csv"].open("w", newline="") as handle:
        writer = csv_writer(handle)
        writer.writerow(["task", "points", "passed_share"])
        writer.writerows([t, maxima[t], round(rates[t], 3)] for t in tasks)
    totals = [sum(r["scores"].get(t, [0.0])[0] for t in tasks) for r in results]
    plot_distribution(totals, sum(maxima.values()), paths["distribution.png"])
    apart = left_out(results)
    lines = [f"# Grades: {assignment}", "", f"{plural(len(results), 'submission')}; mean "
             f"{sum(totals) / max(len(totals), 1):.2f} of {sum(maxima.values()):g} points.", "",
             f"![{describe_distribution(totals, sum(maxima.values()))}](distribution.png)", "",
             f"Passed: the share of the "
             f"{plural(len(judged(results)), 'judged notebook')} with the task's full points"
             f"{f' (left out: {apart})' if apart else ''}.", "", "| task | points | passed |", "|---|---|---|"]
    lines += [f"| {t} | {maxima[t]:g} | {rates[t]:.0%} |" for t in tasks]
    similar = section_lines(flags, len(answers), len(results))
    lines += ["", *write_mistakes(results, out, assignment, tasks, maxima, assignment_titles(assignment), similar)]
    lines += ["", *similar]
    lines += ["", *late] if late else []
    counts = {s: sum(r["status"] == s for r in results) for s in STATUS_MEANING}
    lines += ["", "| status | submissions | meaning |", "|---|---|---|"]
    lines += [f"| {s} | {n} | {STATUS_MEANING[s]} |" for s, n in counts.items() if n]
    review = [r for r in results if r["status"] != "ok"]
    lines += ["", "## Needs review", ""] + ([f"- **{markdown_text(r['student'])}** ({r['status']}): "
                                             f"{markdown_text('; '.join(r['reasons']))}"
                                             for r in review] or ["Nothing: every submission graded cleanly."])
    paths["summary.md"].write_text("\n".join(lines) + "\n")
    return paths
