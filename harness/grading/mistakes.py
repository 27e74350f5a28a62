"""What a class got wrong, by cause: the mistake report and the item analysis of one assignment.

Every graded task of every student falls in one outcome: passed, a failure code of the check (the
requirement it enforces, the hint the student got and the lesson section that teaches it, from the check
registry: `harness.checks.core.get(task)`), "not attempted" (the solution cell is as released), "error" (the
student's code raised, or the probe sent nothing the judge could use) or "no notebook" (missing, unreadable,
or the grader failed: the status says which). `mistakes.md` and `mistakes.csv` count the students per
exercise and outcome, most common first; the reteach list is the class's three most common causes.

`mistakes.md` is the instructor's: it names the students under each cause.

The item analysis gives each exercise's pass rate and its discrimination: the correlation, over the
students, of the exercise's score with the rest of the assignment's score (high: the exercise separates
students who learnt the material from those who did not; near zero or negative: look at the exercise). Both,
and the class summary's pass rates, are over the notebooks that were run and judged (`judged`): a blank
notebook, a missing or invalid one and a grader's error are left out, and the reports say how many.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.grading.instructor_text import csv_writer, markdown_code, markdown_text
from harness.grading.jobs import NOT_ATTEMPTED

ERROR = "error"
JUDGED = ("ok", "flagged")  # the statuses of a notebook that was run and judged
NO_NOTEBOOK = "no notebook"
# failure codes that say the code could not be judged, not which requirement it broke ("failed": the student's code
# raised a CheckFailed of its own, `harness.judge.verdict.UNKNOWN_FAILURE`)
ERROR_CODES = frozenset({"raised", "no-observation", "forged-observation", "failed"})
APART = {NOT_ATTEMPTED: "the solution cell is as released",
         ERROR: "the code raised, or the probe sent nothing the judge could use",
         NO_NOTEBOOK: "no gradable notebook (missing, unreadable, or the grader failed)"}


@dataclass(frozen=True)
class Mistake:
    """One row of the report: how many students of an exercise had one outcome, and what it means."""

    task: str
    cause: str  # a failure code, or NOT_ATTEMPTED, ERROR, NO_NOTEBOOK
    students: int
    share: float  # of the class
    requirement: str
    hint: str
    section: str
    names: tuple[str, ...] = ()  # the students, sorted


@dataclass(frozen=True)
class Item:
    """One exercise's item analysis."""

    task: str
    pass_rate: float
    discrimination: float | None  # None when the exercise or the rest has the same score for every student


def plural(count: int, noun: str) -> str:
    """`1 student`, `2 students`."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def judged(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The results of notebooks that were run and judged: what pass rates and item statistics are over."""
    return [r for r in results if r["status"] in JUDGED]


def left_out(results: list[dict[str, Any]]) -> str:
    """Which results `judged` leaves out, by status (`1 not attempted, 2 invalid`), or '' when none."""
    counts = Counter(r["status"] for r in results if r["status"] not in JUDGED)
    return ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))


def outcome(result: dict[str, Any], task: str) -> str | None:
    """What happened to `task` in one result: None (passed), a failure code, or one of the counted-apart causes."""
    if result["status"] in ("missing", "invalid", "error") or task not in result["scores"]:
        return NO_NOTEBOOK
    if task in result.get("untouched", []):
        return NOT_ATTEMPTED
    code = result["failures"].get(task)
    if code is None:
        score, top = result["scores"][task]
        return None if score >= top else ERROR
    return ERROR if code in ERROR_CODES else code


def _explained(task: str, cause: str) -> tuple[str, str, str]:
    """The requirement, hint and section of a failure code, from the check registry ('' where unknown)."""
    try:
        from harness.checks.core import get

        check = get(task)
    except (ImportError, KeyError):
        return "", "", ""
    section = check.hints.section
    if cause in APART:
        return APART[cause], "", section if cause != NO_NOTEBOOK else ""
    requirement = check.requires.get(cause)
    if requirement is None:
        return "(not in the requirement table)", "", section
    return requirement.states, requirement.hint, section


def mistakes(results: list[dict[str, Any]], tasks: list[str]) -> list[Mistake]:
    """Every (exercise, cause) with at least one student, exercise by exercise, most common first."""
    rows = []
    for task in tasks:
        names: dict[str, list[str]] = {}
        for r in results:
            if (cause := outcome(r, task)) is not None:
                names.setdefault(cause, []).append(r["student"])
        for cause, who in sorted(names.items(), key=lambda item: (-len(item[1]), item[0])):
            rows.append(Mistake(task, cause, len(who), len(who) / max(len(results), 1), *_explained(task, cause),
                                names=tuple(sorted(who))))
    return rows


def reteach(rows: list[Mistake], count: int = 3) -> list[Mistake]:
    """The `count` most common causes in the class that a requirement names (not attempted and errors aside)."""
    causes = [row for row in rows if row.cause not in APART]
    return sorted(causes, key=lambda row: -row.students)[:count]


def _correlation(xs: list[float], ys: list[float]) -> float | None:
    """Pearson's correlation of two equally long lists; None when either is constant."""
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    sxx, syy = sum((x - mean_x) ** 2 for x in xs), sum((y - mean_y) ** 2 for y in ys)
    return None if sxx == 0 or syy == 0 else sxy / math.sqrt(sxx * syy)


def item_analysis(results: list[dict[str, Any]], tasks: list[str], maxima: dict[str, float]) -> list[Item]:
    """Pass rate and discrimination of each exercise, over the `judged` notebooks."""
    results = judged(results)
    if not results:
        return [Item(task, 0.0, None) for task in tasks]
    scores = [[r["scores"].get(t, [0.0])[0] for t in tasks] for r in results]
    totals = [sum(row) for row in scores]
    items = []
    for index, task in enumerate(tasks):
        mine = [row[index] for row in scores]
        rest = [total - score for total, score in zip(totals, mine, strict=True)]
        passed = sum(score >= maxima[task] for score in mine) / len(results)
        items.append(Item(task, passed, _correlation(mine, rest)))
    return items


def write_mistakes_csv(rows: list[Mistake], path: Path) -> None:
    """`mistakes.csv`: one row per exercise and cause."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv_writer(handle)
        writer.writerow(["task", "cause", "students", "share", "requirement", "hint", "section"])
        writer.writerows([r.task, r.cause, r.students, round(r.share, 3), r.requirement, r.hint, r.section]
                         for r in rows)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def reteach_lines(rows: list[Mistake], titles: dict[str, str]) -> list[str]:
    """The reteach list as markdown lines (a numbered list, or a sentence when nothing failed)."""
    top = reteach(rows)
    if not top:
        return ["Nothing to reteach: no requirement was missed."]
    return [f"{i}. **{_unnumbered(row.section) or titles.get(row.task, row.task)}**: {row.requirement} "
            f"(`{row.task}` {markdown_code(row.cause)}, {plural(row.students, 'student')}, {row.share:.0%})"
            for i, row in enumerate(top, 1)]


def _unnumbered(section: str) -> str:
    """A section's title without its number ("3. Exercises" -> "Exercises"): a numbered list item numbers it."""
    return re.sub(r"^\d+(\.\d+)*\.?\s+", "", section)


def item_lines(items: list[Item], titles: dict[str, str], results: list[dict[str, Any]]) -> list[str]:
    """The item analysis as a markdown table, after a line saying over which notebooks it is."""
    apart = left_out(results)
    lines = [f"Over the {plural(len(judged(results)), 'judged notebook')}"
             f"{f' (left out: {apart})' if apart else ''}.", "", "| exercise | passed | discrimination |",
             "|---|---|---|"]
    for item in items:
        value = "n/a (same score for everyone)" if item.discrimination is None else f"{item.discrimination:+.2f}"
        lines.append(f"| {_cell(titles.get(item.task, item.task))} (`{item.task}`) | {item.pass_rate:.0%} | {value} |")
    return lines


def mistake_lines(rows: list[Mistake], tasks: list[str], titles: dict[str, str]) -> list[str]:
    """Per exercise, a markdown table of its causes, most common first."""
    lines = []
    for task in tasks:
        mine = [row for row in rows if row.task == task]
        lines += ["", f"### {_cell(titles.get(task, task))} (`{task}`)", ""]
        if not mine:
            lines.append("Every student passed.")
            continue
        lines += ["| cause | students | requirement | hint the student got | section to reteach |",
                  "|---|---|---|---|---|"]
        lines += [f"| {markdown_code(row.cause)} | {plural(row.students, 'student')} ({row.share:.0%}): "
                  f"{markdown_text(', '.join(row.names))} | {_cell(row.requirement)} | {_cell(row.hint)} "
                  f"| {_cell(row.section)} |" for row in mine]
    return lines


def write_mistakes(results: list[dict[str, Any]], out: Path, assignment: str, tasks: list[str],
                   maxima: dict[str, float], titles: dict[str, str], similar: list[str] | None = None) -> list[str]:
    """Write `mistakes.md` and `mistakes.csv` into `out`; return the summary's section (reteach list, items).
    `similar`: mistakes.md's last section, the similar answer cells (`similarity.section_lines`)."""
    rows = mistakes(results, tasks)
    write_mistakes_csv(rows, out / "mistakes.csv")
    items = item_analysis(results, tasks, maxima)
    report = [f"# Mistakes: {assignment}", "", f"{plural(len(results), 'student')}. Per exercise, every cause of "
              "lost points with the students who lost them, most common first; not attempted, errors and missing "
              "notebooks are counted apart. The instructor's file: it names students.", "", "## Reteach", "",
              *reteach_lines(rows, titles), "", "## Items", "", *item_lines(items, titles, results), "",
              "## By exercise", *mistake_lines(rows, tasks, titles), *(["", *similar] if similar else [])]
    (out / "mistakes.md").write_text("\n".join(report) + "\n", encoding="utf-8")
    return ["## Mistakes", "", "Reteach first (the class's most common causes; per exercise: "
            "[mistakes.md](mistakes.md), [mistakes.csv](mistakes.csv)):", "", *reteach_lines(rows, titles), "",
            "Item analysis (discrimination: the correlation of the exercise's score with the rest of the "
            "assignment):", "", *item_lines(items, titles, results)]
