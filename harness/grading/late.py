"""Due dates, extensions and the late policy, as data: the course file (`course.toml`), applied at publish time.

The course file (read with `tomllib`; `docs/course.example.toml` is a full example):

    [late]
    policy = "per-day"       # "none" (default), "per-day" or "cutoff"
    percent_per_day = 10     # per-day: percent of the points earned lost per day late (a started day counts whole)
    cap_percent = 50         # per-day: the most lost (default 100)
    cutoff_days = 3          # cutoff: 0 points when more than this many days late (0: any lateness)

    [assignments.04_training_loop]
    due = 2026-03-02T23:59:00-05:00               # ISO 8601 with a time zone
    solution_hints = "after_due"                  # level-3 hints: "after_due" (default), "always" or "never"

    [assignments.04_training_loop.extensions]    # by student id (as in grades.csv) or LMS user id
    "1002" = 2                                   # extra days
    carlcole = 2026-03-05T12:00:00-05:00         # a new due date

How late a submission was comes from the LMS's submission time where the download carries one (Blackboard's
`attempt_<time>` file names, read in the due date's time zone; Gradescope's `created_at`), else from Canvas's
`LATE` flag: the flag says late but not by how much, so a flagged submission counts as 1 day late, the policy's
one-day penalty; with an extension in the course file it counts as on time (the download cannot say whether it came
within the extension: check Canvas's submission page). Moodle's download carries neither: on time.

The stored result keeps the points earned (`grades.csv`'s total); the penalty is applied only to what is published
(`Late.final`), so a regrade after editing the course file recomputes every penalty from the stored results.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import tomllib

from harness.grading.instructor_text import markdown_text
from harness.grading.jobs import write_atomically

DEFAULT_COURSE_FILE = Path("course.toml")
POLICIES = ("none", "per-day", "cutoff")
SOLUTION_HINTS = ("after_due", "always", "never")  # when an assignment's solution lines (level-3 hints) are released
RECORD = "late.json"  # the penalties last published: what the next publish's moves are measured against
DAY = timedelta(days=1)


class CourseFileError(ValueError):
    """The course file cannot be used: the message says where, what is wrong and what to write instead."""


@dataclass(frozen=True)
class Policy:
    """The late policy: none, a percent per day late up to a cap, or zero after a cutoff."""

    kind: str = "none"
    percent_per_day: float = 0.0
    cap_percent: float = 100.0
    cutoff_days: int = 0

    def percent(self, days: int) -> float:
        """The percent of the points earned lost `days` (whole days) late."""
        if days <= 0 or self.kind == "none":
            return 0.0
        if self.kind == "cutoff":
            return 100.0 if days > self.cutoff_days else 0.0
        return min(self.percent_per_day * days, self.cap_percent)

    def describe(self) -> str:
        """The policy in words, for the summary."""
        if self.kind == "per-day":
            return (f"{self.percent_per_day:g}% of the points earned per day late (a started day counts whole), "
                    f"at most {self.cap_percent:g}%")
        if self.kind == "cutoff":
            return f"0 points when more than {self.cutoff_days} days late"
        return "no penalty"


@dataclass(frozen=True)
class Deadline:
    """One assignment's due date and its students' own due dates (student id or LMS user id -> due date)."""

    due: datetime
    extensions: dict[str, datetime] = field(default_factory=dict)
    solution_hints: str = "after_due"  # when the level-3 hints go to students (`harness.grading.solution_hints`)


@dataclass(frozen=True)
class Course:
    """What the course file says: the late policy and each assignment's deadline (empty without a file)."""

    policy: Policy = Policy()
    deadlines: dict[str, Deadline] = field(default_factory=dict)
    path: Path | None = None


def _when(value: Any, where: str) -> datetime:
    """A date and time with a time zone from a TOML datetime or an ISO 8601 string."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise CourseFileError(f"{where} = {value!r} is not an ISO 8601 date and time: write it as "
                                  "2026-03-02T23:59:00-05:00") from None
    if not isinstance(value, datetime):
        raise CourseFileError(f"{where} = {value!r} is not a date and time: write it as 2026-03-02T23:59:00-05:00")
    if value.tzinfo is None:
        raise CourseFileError(f"{where} = {value.isoformat()} has no time zone: add its offset, e.g. "
                              f"{value.isoformat()}-05:00 or {value.isoformat()}Z")
    return value


def _unknown(table: dict[str, Any], allowed: tuple[str, ...], where: str) -> None:
    if extra := sorted(set(table) - set(allowed)):
        raise CourseFileError(f"{where}: unknown key {', '.join(extra)} (allowed: {', '.join(allowed)})")


def _number(table: dict[str, Any], key: str, default: float, top: float, where: str) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= top:
        raise CourseFileError(f"{where}.{key} = {value!r}: give a number from 0 to {top:g}")
    return float(value)


def _policy(table: dict[str, Any], where: str) -> Policy:
    _unknown(table, ("policy", "percent_per_day", "cap_percent", "cutoff_days"), where)
    kind = table.get("policy", "none")
    if kind not in POLICIES:
        raise CourseFileError(f"{where}.policy = {kind!r}: give one of {', '.join(repr(p) for p in POLICIES)}")
    cutoff = table.get("cutoff_days", 0)
    if isinstance(cutoff, bool) or not isinstance(cutoff, int) or cutoff < 0:
        raise CourseFileError(f"{where}.cutoff_days = {cutoff!r}: give a whole number of days, 0 or more")
    return Policy(kind, _number(table, "percent_per_day", 0.0, 100.0, where),
                  _number(table, "cap_percent", 100.0, 100.0, where), cutoff)


def _deadline(table: Any, where: str) -> Deadline:
    if not isinstance(table, dict) or "due" not in table:
        raise CourseFileError(f"{where}: give the assignment's due date, due = 2026-03-02T23:59:00-05:00")
    _unknown(table, ("due", "extensions", "solution_hints"), where)
    due = _when(table["due"], f"{where}.due")
    hints = table.get("solution_hints", "after_due")
    if hints not in SOLUTION_HINTS:
        raise CourseFileError(f"{where}.solution_hints = {hints!r}: give one of "
                              f"{', '.join(repr(h) for h in SOLUTION_HINTS)}")
    extensions = {}
    for student, value in table.get("extensions", {}).items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            if value <= 0:
                raise CourseFileError(f"{where}.extensions.{student} = {value!r}: give extra days above 0, or a date")
            extensions[student] = due + value * DAY
        else:
            extensions[student] = _when(value, f"{where}.extensions.{student}")
    return Deadline(due, extensions, hints)


def read_course(path: Path) -> Course:
    """The course file at `path`.

    Raises:
        CourseFileError: not TOML, an unknown key, a policy or number out of range, a date without a time zone.
    """
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise CourseFileError(f"{path} cannot be read as TOML: {error}") from None
    _unknown(data, ("late", "assignments"), str(path))
    assignments = data.get("assignments", {})
    deadlines = {name: _deadline(table, f"{path} [assignments.{name}]") for name, table in assignments.items()}
    return Course(_policy(data.get("late", {}), f"{path} [late]"), deadlines, path)


def course_file(given: Path | None) -> Course:
    """The course file `given` (`--course`), else `course.toml` here when present, else no policy and no dates.

    Raises:
        CourseFileError: `given` does not exist, or the file cannot be used (`read_course`).
    """
    if given is not None and not given.is_file():
        raise CourseFileError(f"--course {given} does not exist: give the course file (see docs/course.example.toml)")
    path = given or (DEFAULT_COURSE_FILE if DEFAULT_COURSE_FILE.is_file() else None)
    return read_course(path) if path else Course()


@dataclass(frozen=True)
class Late:
    """One student's lateness and what it costs: the points earned are kept, `final` is what is published."""

    student: str
    points: float  # earned, before any penalty
    days: int  # whole days late (0: on time)
    how: str  # how the lateness was found: a submission time, Canvas's LATE flag, nothing
    percent: float  # the penalty
    flagged: bool = False  # the LMS marked it late (Canvas's LATE), whatever the course file then decided

    @property
    def final(self) -> float:
        """The points after the penalty."""
        return round(self.points * (1 - self.percent / 100), 2)

    @property
    def when(self) -> str:
        """`2 days late`, `1 day late` or `on time`."""
        return f"{self.days} day{'s' if self.days != 1 else ''} late" if self.days else "on time"

    def note(self, top: float) -> str:
        """What the student's feedback page says of it ("" when on time and not flagged)."""
        if not (self.days or self.flagged):
            return ""
        cost = (f"late penalty {self.percent:g}%: {self.points:g} points become {self.final:g} of {top:g}"
                if self.percent else "no late penalty")
        return f"Submission {self.when} ({self.how}): {cost}."

    def line(self) -> str:
        """`benbrown: 1 day late (Canvas's LATE flag ...): -10%, 3 -> 2.7 points`."""
        cost = f"-{self.percent:g}%, {self.points:g} -> {self.final:g} points" if self.percent else "no penalty"
        return f"{self.student}: {self.when} ({self.how}): {cost}"


def _submitted(text: str | None) -> datetime | None:
    """The submission time an LMS identity holds, or None when it holds none that reads as one."""
    try:
        return datetime.fromisoformat(text) if text else None
    except ValueError:
        return None


def _lateness(result: dict[str, Any], ids: set[str], deadline: Deadline | None) -> tuple[int, str]:
    """(whole days late, how that was found) for one result, whose student has the `ids`."""
    lms = result.get("lms") or {}
    own = next((deadline.extensions[key] for key in sorted(ids) if deadline and key in deadline.extensions), None)
    due = own or (deadline.due if deadline else None)
    if due is not None and (submitted := _submitted(lms.get("submitted"))):
        submitted = submitted if submitted.tzinfo else submitted.replace(tzinfo=due.tzinfo)  # the LMS's local time
        days = max(0, math.ceil((submitted - due) / DAY))
        return days, f"submitted {submitted.isoformat(' ', 'minutes')}, due {due.isoformat(' ', 'minutes')}"
    if lms.get("late") and own is not None:
        return 0, (f"Canvas's LATE flag, with an extension to {own.isoformat(' ', 'minutes')}: counted on time, "
                   "the download gives no time")
    if lms.get("late"):
        return 1, "Canvas's LATE flag: the download gives no time, counted as 1 day"
    return 0, "on time" if due is not None else "no due date"


def assess(results: list[dict[str, Any]], course: Course, assignment: str, ids: dict[str, set[str]],
           known: set[str]) -> dict[str, Late]:
    """Each result's `Late`, under `course`'s policy and `assignment`'s deadline.

    Args:
        ids: each student's ids an extension may name (student id, LMS user id, the matched roster entry's id).
        known: every id of the class (`ids`' and the roster's): an extension for another id is an error.

    Raises:
        CourseFileError: an extension names a student this grading and its roster do not know.
    """
    deadline = course.deadlines.get(assignment)
    if deadline and (unknown := sorted(set(deadline.extensions) - known)):
        raise CourseFileError(f"{course.path} [assignments.{assignment}.extensions]: no student of this grading or "
                              f"its roster has the id {', '.join(unknown)}: write the student id of grades.csv or "
                              "the LMS user id (a student who has not submitted: give the roster, --roster)")
    lates = {}
    for result in results:
        days, how = _lateness(result, ids.get(result["student"], {result["student"]}), deadline)
        points = sum(score for score, _ in result["scores"].values())
        lates[result["student"]] = Late(result["student"], points, days, how, course.policy.percent(days),
                                        bool((result.get("lms") or {}).get("late")))
    return lates


def moved(out: Path, lates: dict[str, Late]) -> list[str]:
    """`student: before -> after points` for each student whose points earned are those `out`'s last publish
    recorded (`late.json`) but whose penalised points are not: the course file moved them. Nothing on a first
    publish; a student whose points earned moved is reported by the regrade itself."""
    path = out / RECORD
    if not path.is_file():
        return []
    before = json.loads(path.read_text(encoding="utf-8"))
    return [f"{student}: {before[student]['final']:g} -> {late.final:g} points ({late.how})"
            for student, late in lates.items() if student in before
            and before[student]["points"] == late.points and before[student]["final"] != late.final]


def record(out: Path, lates: dict[str, Late]) -> None:
    """Write the published penalties into `out`/late.json, for the next publish's `moved`."""
    data = {student: {"points": late.points, "days": late.days, "percent": late.percent, "final": late.final}
            for student, late in lates.items()}
    write_atomically(out / RECORD, json.dumps(data, indent=1, sort_keys=True))


def summary_section(lates: dict[str, Late], course: Course) -> list[str]:
    """The summary's `## Late` section: the policy and a row per late or flagged student ([] with neither)."""
    late = [item for item in lates.values() if item.days or item.flagged]
    if not late and course.path is None:
        return []
    lines = ["## Late", "", f"Policy ({course.path or 'no course file'}): {course.policy.describe()}. The points "
             "earned stay in grades.csv; the LMS files carry the points after the penalty.", ""]
    if not late:
        return [*lines, "No late submission."]
    lines += ["| student | days late | how | penalty | points | after penalty |", "|---|---|---|---|---|---|"]
    return lines + [f"| {markdown_text(item.student)} | {item.days} | {item.how} | {item.percent:g}% | "
                    f"{item.points:g} | {item.final:g} |" for item in late]
