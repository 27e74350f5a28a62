"""Grades and feedback in the forms an LMS imports, beside `grades.csv`.

Who a student is comes from the LMS's own naming of the submissions (`submissions.LmsIdentity`: the Canvas
user id, the Moodle participant id, the Blackboard username, the Gradescope submitter), or from a roster
(`--roster roster.csv`: a Canvas gradebook export, a Moodle grading worksheet, or any CSV with a name and
an id column). Every graded student is matched against the roster by LMS id, else by name; the report
names the matched, the unmatched and the ambiguous (a name that fits several roster entries), and the
roster's students without a submission.

Written into the output folder:

- `canvas_grades.csv`: Canvas's gradebook import (Student, ID, SIS User ID, SIS Login ID, Section, then the
  assignment's column "Name (assignment id)", and the "Points Possible" row); the column is the one a Canvas
  gradebook export given as the roster holds for the assignment, or named by its id (`canvas_target`), so the
  import updates it; without either the bare name would make a new column, and the console says so;
- `moodle_grades.csv`: Moodle's offline grading worksheet (Identifier "Participant N", Full name, Email
  address, Status, Grade, Maximum Grade, Grade can be changed, Last modified (submission), Last modified
  (grade), Feedback comments);
- `lms_grades.csv`: a generic CSV (id, name, points, percent, late, status, how the student was matched, and the
  points before the late penalty, the days late and the penalty); every file's points are after the penalty
  (`late`: the course file's policy), Moodle's comment says it;
- `feedback_<lms>.zip`: each student's feedback HTML named as that LMS's bulk upload expects: the name the
  student's submission had in the download (Canvas `name[_LATE]_<user id>_<submission id>_...`, Moodle
  `Full Name_<id>_assignsubmission_file_...`), and `feedback_other.zip` by student id for the rest.
"""

from __future__ import annotations

import csv
import re
import unicodedata
import zipfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.grading.instructor_text import csv_writer
from harness.grading.late import Late

CANVAS_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
MOODLE_COLUMNS = ("Identifier", "Full name", "Email address", "Status", "Grade", "Maximum Grade",
                  "Grade can be changed", "Last modified (submission)", "Last modified (grade)", "Feedback comments")
GENERIC_COLUMNS = ("student", "lms", "user_id", "name", "email", "section", "points", "max_points", "percent",
                   "late", "status", "matched", "points_before_penalty", "late_days", "penalty")
# roster column names accepted for each field, lower case (Canvas export, Moodle worksheet, a plain CSV)
ROSTER_FIELDS = {"name": ("student", "full name", "name"), "user_id": ("id", "identifier", "user id", "user_id"),
                 "sis_user_id": ("sis user id",), "sis_login_id": ("sis login id", "username", "login"),
                 "section": ("section",), "email": ("email address", "email")}
CANVAS_COLUMN = re.compile(r"(?P<title>.+) \((?P<id>\d+)\)")  # a gradebook export's assignment column


@dataclass(frozen=True)
class RosterEntry:
    """One student of the class list."""

    name: str
    user_id: str = ""
    sis_user_id: str = ""
    sis_login_id: str = ""
    section: str = ""
    email: str = ""


@dataclass
class Matching:
    """Each graded student's roster entry, and who could not be matched."""

    entries: dict[str, RosterEntry] = field(default_factory=dict)  # student id -> entry (matched or from the LMS)
    how: dict[str, str] = field(default_factory=dict)  # student id -> "lms id", "name", "lms name" or "unmatched"
    unmatched: list[str] = field(default_factory=list)
    ambiguous: dict[str, list[str]] = field(default_factory=dict)  # student id -> the roster names it fits
    absent: list[str] = field(default_factory=list)  # roster names with no submission

    def report(self) -> list[str]:
        """Lines for the terminal: matched, unmatched, ambiguous, and the roster's students without submission."""
        matched = sum(how in ("lms id", "name") for how in self.how.values())
        lines = [f"roster: {matched} matched, {len(self.unmatched)} unmatched, {len(self.ambiguous)} ambiguous, "
                 f"{len(self.absent)} on the roster without a submission"]
        lines += [f"  unmatched: {', '.join(self.unmatched)} (not in the LMS files: add them to the roster, "
                  "or rename the submission as the LMS does)"] if self.unmatched else []
        lines += [f"  ambiguous: {student} fits {' / '.join(names)}" for student, names in self.ambiguous.items()]
        lines += [f"  no submission: {', '.join(self.absent)}"] if self.absent else []
        return lines


def read_roster(path: Path) -> list[RosterEntry]:
    """The roster in a CSV: a Canvas gradebook export, a Moodle grading worksheet, or name and id columns.

    Raises:
        ValueError: no name column, saying which columns were found.
    """
    with path.open(newline="", encoding="utf-8-sig") as handle:
        rows = list(csv.DictReader(handle))
    columns = {name.strip().lower(): name for name in (rows[0].keys() if rows else [])}
    chosen = {key: next((columns[c] for c in names if c in columns), None) for key, names in ROSTER_FIELDS.items()}
    if chosen["name"] is None:
        raise ValueError(f"{path} has no name column (Student, Full name or name); its columns are: "
                         f"{', '.join(columns.values()) or 'none'}")
    entries = []
    for row in rows:
        values = {key: (row.get(column) or "").strip() if column else "" for key, column in chosen.items()}
        if not values["name"] or values["name"].lower() in ("points possible", "test student"):
            continue
        values["user_id"] = values["user_id"].removeprefix("Participant ").strip()
        entries.append(RosterEntry(**values))
    return entries


def name_keys(name: str) -> set[str]:
    """The forms a name takes in LMS file names: letters only, lower case, given-family and family-given."""
    def letters(text: str) -> str:
        return "".join(ch for ch in unicodedata.normalize("NFC", text).lower() if ch.isalnum())

    if "," in name:
        family, _, given = name.partition(",")
        parts = [given, family]
    else:
        parts = re.split(r"[\s_-]+", name.strip())
    return {letters("".join(parts)), letters("".join(reversed(parts)))} - {""}


def match_roster(results: list[dict[str, Any]], roster: list[RosterEntry] | None) -> Matching:
    """Each result's roster entry: by LMS id, else by name (unique), else unmatched. Without a roster, the
    LMS identity in the submission's name is the entry."""
    matching = Matching()
    by_id = {entry.user_id: entry for entry in roster or [] if entry.user_id}
    by_name: dict[str, list[RosterEntry]] = {}
    for entry in roster or []:
        for key in name_keys(entry.name):
            by_name.setdefault(key, []).append(entry)
    for result in results:
        student, lms = result["student"], result.get("lms") or {}
        fallback = RosterEntry(lms.get("name") or student, lms.get("user_id", ""), email=lms.get("email", ""))
        if roster is None:
            matching.entries[student] = fallback
            matching.how[student] = "lms name" if lms else "unmatched"
            continue
        found = by_id.get(lms.get("user_id", "")) if lms.get("user_id") else None
        if found is not None:
            matching.entries[student], matching.how[student] = found, "lms id"
            continue
        candidates = list({id(e): e for key in name_keys(lms.get("name") or student)
                           for e in by_name.get(key, [])}.values())
        if len(candidates) == 1:
            matching.entries[student], matching.how[student] = candidates[0], "name"
        else:
            matching.entries[student], matching.how[student] = fallback, "unmatched"
            if candidates:
                matching.ambiguous[student] = [e.name for e in candidates]
            else:
                matching.unmatched.append(student)
    used = {id(matching.entries[s]) for s, how in matching.how.items() if how in ("lms id", "name")}
    matching.absent = [entry.name for entry in roster or [] if id(entry) not in used]
    return matching


@dataclass(frozen=True)
class Gradebooks:
    """What to name the assignment in the LMS's files."""

    assignment: str
    title: str = ""  # the assignment's name in the LMS (default: the assignment's folder name)
    canvas_id: str = ""  # Canvas's assignment id: the column is "Title (id)" so the import updates that column

    def canvas_header(self) -> str:
        """The assignment's column in `canvas_grades.csv`: "Title (id)", or the bare title without an id."""
        return f"{self.title or self.assignment}" + (f" ({self.canvas_id})" if self.canvas_id else "")


def assignment_columns(path: Path) -> list[tuple[str, str]]:
    """(title, id) of each assignment column of a Canvas gradebook export (`Title (id)`); [] for another CSV."""
    with path.open(newline="", encoding="utf-8-sig") as handle:
        header = next(csv.reader(handle), [])
    return [(match["title"], match["id"]) for name in header if (match := CANVAS_COLUMN.fullmatch(name.strip()))]


def canvas_target(names: Gradebooks, columns: list[tuple[str, str]] | None) -> tuple[Gradebooks, str]:
    """`names` with the Canvas column the import will update, and a sentence for the console saying which.

    With `--canvas-assignment-id`, that column; else, from a roster's assignment `columns` (None: no roster),
    the one titled `--lms-title` or the assignment's folder name (case aside), or the only one there is. When
    none is found the bare title is kept, and the sentence says Canvas will create a new column and how not to.
    """
    title = names.title or names.assignment
    if names.canvas_id:
        return names, f"Canvas column: {names.canvas_header()} (the assignment id given)"
    columns = columns or []
    matching = [column for column in columns if column[0].casefold() == title.casefold()]
    chosen = matching if len(matching) == 1 else columns if not matching and len(columns) == 1 else []
    if chosen:
        found = replace(names, title=chosen[0][0], canvas_id=chosen[0][1])
        why = "its title" if matching else f"the roster's only assignment column, though not titled {title}"
        return found, f"Canvas column: {found.canvas_header()} (from the roster: {why})"
    offered = f" (the roster's assignment columns: {', '.join(f'{t} ({i})' for t, i in columns)})" if columns else ""
    return names, (f"Canvas column: {title}, with no assignment id: Canvas's import will create a NEW column{offered}. "
                   "To fill the assignment's own column, give a Canvas gradebook export (Grades > Export) as --roster "
                   "with --lms-title TITLE, or --canvas-assignment-id ID (make grade ... ROSTER=export.csv "
                   "LMS_TITLE=... or CANVAS_ID=...)")


def _points(result: dict[str, Any]) -> tuple[float, float]:
    return (sum(score for score, _ in result["scores"].values()),
            sum(top for _, top in result["scores"].values()))


def _comment(result: dict[str, Any], points: float, top: float, late: Late | None) -> str:
    failed = "; ".join(f"{task} [{code}]" for task, code in result["failures"].items())
    failed = f"; not passed: {failed}" if failed else ""
    penalty = f"; late {late.days} day(s), {late.percent:g}% off: {late.final:g}/{top:g}" if late and late.percent \
        else ""
    return f"{points:g}/{top:g} points{failed}{penalty}; details in the feedback file"


def write_gradebooks(results: list[dict[str, Any]], out: Path, matching: Matching, names: Gradebooks,
                     maximum: float, lates: dict[str, Late] | None = None) -> dict[str, Path]:
    """Write the Canvas, Moodle and generic CSVs into `out`; return their paths. With `lates` (`late.assess`), each
    file carries the points after the late penalty; Moodle's comment and the generic file also the points before."""
    paths = {"canvas": out / "canvas_grades.csv", "moodle": out / "moodle_grades.csv",
             "generic": out / "lms_grades.csv"}
    column = names.canvas_header()
    lates = lates or {}
    rows = [(r, matching.entries[r["student"]], *_points(r), lates.get(r["student"])) for r in results]
    with paths["canvas"].open("w", newline="", encoding="utf-8") as handle:
        writer = csv_writer(handle)
        writer.writerow([*CANVAS_COLUMNS, column])
        writer.writerow(["Points Possible", "", "", "", "", f"{maximum:g}"])
        for _, entry, points, _, late in rows:
            writer.writerow([entry.name, entry.user_id, entry.sis_user_id, entry.sis_login_id, entry.section,
                             f"{late.final if late else points:g}"])
    with paths["moodle"].open("w", newline="", encoding="utf-8") as handle:
        writer = csv_writer(handle)
        writer.writerow(MOODLE_COLUMNS)
        for result, entry, points, top, late in rows:
            identifier = f"Participant {entry.user_id}" if entry.user_id else ""
            writer.writerow([identifier, entry.name, entry.email, "Submitted for grading",
                             f"{late.final if late else points:g}", f"{maximum:g}", "Yes", "", "",
                             _comment(result, points, top, late)])
    with paths["generic"].open("w", newline="", encoding="utf-8") as handle:
        writer = csv_writer(handle)
        writer.writerow(GENERIC_COLUMNS)
        for result, entry, earned, _, late in rows:
            lms, points = result.get("lms") or {}, late.final if late else earned
            writer.writerow([result["student"], lms.get("system", ""), entry.user_id, entry.name, entry.email,
                             entry.section, f"{points:g}", f"{maximum:g}",
                             round(100 * points / maximum, 1) if maximum else 0.0, "yes" if lms.get("late") else "",
                             result["status"], matching.how[result["student"]], f"{earned:g}",
                             late.days if late else 0, f"{late.percent:g}%" if late else "0%"])
    return paths


def feedback_name(result: dict[str, Any], page: Path) -> tuple[str, str]:
    """(archive, name in it) of one feedback page: the LMS's bulk-upload naming, or `other` by student id."""
    lms = result.get("lms") or {}
    if lms.get("system") in ("canvas", "moodle", "blackboard") and lms.get("prefix"):
        separator = "" if lms["prefix"].endswith("_") else "_"
        return lms["system"], f"{lms['prefix']}{separator}{page.stem}_feedback.html"
    return "other", f"{result['student']}/{page.name}"


def write_feedback_archives(results: list[dict[str, Any]], out: Path, assignment: str) -> list[Path]:
    """`feedback_<lms>.zip` in `out`, each student's feedback named for that LMS's bulk upload; their paths."""
    members: dict[str, list[tuple[Path, str]]] = {}
    for result in results:
        for page in sorted((out / "feedback" / result["student"] / assignment).glob("*.html")):
            archive, name = feedback_name(result, page)
            members.setdefault(archive, []).append((page, name))
    paths = []
    for archive, files in sorted(members.items()):
        path = out / f"feedback_{archive}.zip"
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zipped:
            for page, name in files:
                zipped.write(page, name)
        paths.append(path)
    return paths
