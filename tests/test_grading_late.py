"""Due dates, extensions and the late policy as data (issue 39, item 2): the policy and the course file as units,
then `publish` and `harness grade --regrade` on stored result records of the six-student Canvas class of
tests/test_grading_lms.py (benbrown's file carries `LATE`), so no notebook is run: a penalty is applied at publish
time, from the stored result."""

from __future__ import annotations

import argparse
import csv
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from harness.cli import main
from harness.grading.batch import RESULTS
from harness.grading.cli import add_arguments, publish
from harness.grading.jobs import GradeResult
from harness.grading.late import DAY, Course, CourseFileError, Deadline, Policy, assess, read_course
from harness.grading.submissions import gradescope_time, lms_identity

ASSIGNMENT = "00_welcome"
EST = timezone(timedelta(hours=-5))
DUE = datetime(2026, 3, 2, 23, 59, tzinfo=EST)
# student -> (Canvas user id, points of 5, LATE in the file name)
CLASS = {"adaamos": ("1001", 3.0, False), "benbrown": ("1002", 3.0, True), "carlcole": ("1003", 3.0, False),
         "dinadoe": ("1004", 1.0, False), "evaeast": ("1005", 0.0, False), "zedzorn": ("1099", 5.0, False)}
COURSE = """\
[late]
policy = "per-day"
percent_per_day = 10
cap_percent = 50

[assignments.00_welcome]
due = 2026-03-02T23:59:00-05:00
{extensions}
"""


def _result(student: str) -> GradeResult:
    user_id, points, late = CLASS[student]
    scores = {"00-make-batch": [min(points, 1.0), 1.0], "00-count-params": [min(max(points - 1, 0), 2.0), 2.0],
              "00-accuracy": [max(points - 3, 0.0), 2.0]}
    prefix = f"{student}_{'LATE_' if late else ''}{user_id}_5{user_id[1:]}"
    return GradeResult(student, ASSIGNMENT, "ok", scores, {}, [], 1.0, [],
                       {"system": "canvas", "user_id": user_id, "name": student, "late": late, "prefix": prefix})


def _class(out: Path) -> list[dict]:
    """The class's stored results, and a feedback page each, as a grading leaves them in `out`."""
    (out / RESULTS).mkdir(parents=True)
    results = [_result(student) for student in CLASS]
    for result in results:
        (out / RESULTS / f"{result.student}.json").write_text(result.to_json(), encoding="utf-8")
        page = out / "feedback" / result.student / ASSIGNMENT / f"{ASSIGNMENT}.html"
        page.parent.mkdir(parents=True)
        page.write_text("<html><head></head><body class=\"jp-Notebook\"><h1>Score: 3 / 5</h1></body></html>")
    return [result.to_dict() for result in results]


def _args(course: Path) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(["--assignment", ASSIGNMENT, "--course", str(course)])


def _rows(path: Path) -> dict[str, dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    return {row.get("student") or row.get("Student") or row["Full name"]: row for row in rows}


def test_the_policy_rounds_started_days_up_and_stops_at_its_cap_or_cutoff():
    per_day = Policy("per-day", percent_per_day=10, cap_percent=25)
    assert [per_day.percent(days) for days in (0, 1, 2, 3, 9)] == [0, 10, 20, 25, 25]
    assert [Policy("cutoff", cutoff_days=2).percent(days) for days in (0, 2, 3)] == [0, 0, 100]
    assert Policy().percent(5) == 0
    course = Course(per_day, {ASSIGNMENT: Deadline(DUE, {"1003": DUE + timedelta(days=2)})})
    results = [_result(s).to_dict() for s in ("adaamos", "benbrown", "carlcole")]
    results[0]["lms"]["submitted"] = (DUE + timedelta(hours=25)).isoformat()  # a started second day: 2 days
    results[2]["lms"]["submitted"] = "2026-03-04T12:00:00"  # Blackboard's local time: read in the due date's zone
    lates = assess(results, course, ASSIGNMENT, {r["student"]: {r["student"], r["lms"]["user_id"]} for r in results},
                   {"1003"})
    assert (lates["adaamos"].days, lates["adaamos"].percent, lates["adaamos"].final) == (2, 20, 2.4)
    assert (lates["benbrown"].days, lates["benbrown"].final) == (1, 2.7) and "LATE flag" in lates["benbrown"].how
    assert (lates["carlcole"].days, lates["carlcole"].final) == (0, 3)  # within the extension
    assert lates["adaamos"].points == 3  # the points earned are kept


def test_the_submission_time_is_read_where_the_download_carries_it():
    identity = lms_identity("04_training_loop_jdoe_attempt_2026-03-03-10-15-00_04_training_loop.ipynb")
    assert identity is not None and identity.submitted == "2026-03-03T10:15:00"
    assert gradescope_time("2026-03-03 10:15:07.811011000 -05:00") == "2026-03-03T10:15:07-05:00"
    canvas = lms_identity("benbrown_LATE_1002_5002_00_welcome.ipynb")
    assert canvas is not None and canvas.late and canvas.submitted == ""  # Canvas's names carry only LATE


@pytest.mark.parametrize(("text", "says"), [
    ("[assignments.00_welcome]\ndue = 2026-03-02T23:59:00\n", "has no time zone: add its offset"),
    ("[assignments.00_welcome]\ndue = 2026-03-02\n", "is not a date and time"),
    ("[assignments.00_welcome]\ndue = \"next monday\"\n", "is not an ISO 8601 date and time"),
    ("[late]\npolicy = \"harsh\"\n", "give one of 'none', 'per-day', 'cutoff'"),
    ("[late]\npercent_per_day = 150\n", "percent_per_day = 150: give a number from 0 to 100"),
    ("[late]\npenalty = 10\n", "unknown key penalty (allowed: policy,"),
    ("[assignments.00_welcome]\ndue = 2026-03-02T23:59:00Z\nextensions = {ada = -1}\n", "give extra days above 0"),
    ("late = [\n", "cannot be read as TOML"),
])
def test_a_malformed_course_file_says_what_is_wrong_and_what_to_write(tmp_path, text, says):
    (tmp_path / "course.toml").write_text(text)
    with pytest.raises(CourseFileError, match="course.toml") as raised:
        read_course(tmp_path / "course.toml")
    assert says in str(raised.value)


def test_penalties_show_everywhere_and_an_extension_moves_only_its_student(tmp_path, capsys):
    out, course = tmp_path / "out", tmp_path / "course.toml"
    results = _class(out)
    course.write_text(COURSE.format(extensions=""))
    assert publish(results, out, ASSIGNMENT, _args(course), None) == 0
    printed = capsys.readouterr().out
    assert "late policy (" in printed and "10% of the points earned per day late" in printed, printed
    assert ("  late: benbrown: 1 day late (Canvas's LATE flag: the download gives no time, counted as 1 day): "
            "-10%, 3 -> 2.7 points") in printed
    assert printed.count("  late: ") == 1 and "points moved by the late policy" not in printed
    canvas, moodle, generic = (_rows(out / name) for name in ("canvas_grades.csv", "moodle_grades.csv",
                                                              "lms_grades.csv"))
    assert canvas["benbrown"]["00_welcome"] == "2.7" and canvas["adaamos"]["00_welcome"] == "3"
    assert moodle["benbrown"]["Grade"] == "2.7" and "late 1 day(s), 10% off: 2.7/5" in moodle["benbrown"][
        "Feedback comments"] and moodle["benbrown"]["Feedback comments"].startswith("3/5 points")
    assert {key: generic["benbrown"][key] for key in ("points", "points_before_penalty", "late_days", "penalty",
                                                      "late")} == {"points": "2.7", "points_before_penalty": "3",
                                                                   "late_days": "1", "penalty": "10%", "late": "yes"}
    assert _rows(out / "grades.csv")["benbrown"]["total"] == "3.0"  # the points earned are never lost
    summary = (out / "summary.md").read_text()
    assert "## Late" in summary and "| benbrown | 1 | Canvas's LATE flag" in summary and "| 10% | 3 | 2.7 |" in summary
    ben = (out / "feedback" / "benbrown" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    assert "Submission 1 day late (Canvas&#x27;s LATE flag" in ben and "3 points become 2.7 of 5" in ben
    assert "harness:late" not in (out / "feedback" / "adaamos" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()

    pages = {s: (out / "feedback" / s / ASSIGNMENT / f"{ASSIGNMENT}.html").read_bytes() for s in CLASS}
    course.write_text(COURSE.format(extensions="[assignments.00_welcome.extensions]\n\"1002\" = 3\n"))
    assert publish(results, out, ASSIGNMENT, _args(course), None) == 0  # what a regrade publishes
    printed = capsys.readouterr().out
    moved = printed.split("points moved by the late policy", 1)[1].splitlines()[1:]
    assert [line for line in moved if " -> " in line and "points (" in line] == [
        "  benbrown: 2.7 -> 3 points (Canvas's LATE flag, with an extension to 2026-03-05 23:59-05:00: counted on "
        "time, the download gives no time)"], printed
    assert _rows(out / "canvas_grades.csv")["benbrown"]["00_welcome"] == "3"
    ben = pages.pop("benbrown")
    now = (out / "feedback" / "benbrown" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    assert now != ben.decode() and now.count("<!-- harness:late -->") == 1 and "no late penalty" in now
    assert {s: (out / "feedback" / s / ASSIGNMENT / f"{ASSIGNMENT}.html").read_bytes() for s in pages} == pages


def test_an_extension_for_an_unknown_student_is_refused_with_what_to_write(tmp_path, capsys):
    out, course = tmp_path / "out", tmp_path / "course.toml"
    results = _class(out)
    course.write_text(COURSE.format(extensions="[assignments.00_welcome.extensions]\nbenbrwn = 2\n"))
    assert publish(results, out, ASSIGNMENT, _args(course), None) == 2
    printed = capsys.readouterr().out
    assert "cannot use the course file:" in printed and "has the id benbrwn: write the student id of grades.csv " \
        "or the LMS user id" in printed, printed
    roster = tmp_path / "roster.csv"  # a student who has not submitted is known from the roster
    roster.write_text("name,id\n\"Green, Gus\",1007\n")
    course.write_text(COURSE.format(extensions="[assignments.00_welcome.extensions]\n\"1007\" = 2\n"))
    args = _args(course)
    args.roster = roster
    assert publish(results, out, ASSIGNMENT, args, None) == 0, capsys.readouterr().out
    course.write_text("[assignments.00_welcome]\ndue = 2026-03-02T23:59:00\n")  # refused before any grading
    assert main(["grade", str(out), "--assignment", ASSIGNMENT, "--out", str(tmp_path / "new"), "--course",
                 str(course)]) == 2
    assert "cannot grade: " in (printed := capsys.readouterr().out) and "has no time zone" in printed, printed


def test_a_regrade_after_editing_the_course_file_republishes_only_the_moved_penalty(tmp_path, capsys):
    out, course = tmp_path / "out", tmp_path / "course.toml"
    course.write_text(COURSE.format(extensions=""))
    assert publish(_class(out), out, ASSIGNMENT, _args(course), None) == 0  # as a grading ends
    capsys.readouterr()
    assert main(["grade", "--regrade", str(out), "--course", str(course)]) == 0
    assert "nothing to regrade" in capsys.readouterr().out  # the course file unchanged: nothing moves
    course.write_text(COURSE.format(extensions="[assignments.00_welcome.extensions]\nbenbrown = "
                                    "2026-03-04T12:00:00-05:00\n"))
    assert main(["grade", "--regrade", str(out), "--course", str(course)]) == 0
    printed = capsys.readouterr().out
    assert "the late penalties changed: publishing" in printed, printed
    assert [line for line in printed.splitlines() if " -> " in line and "points (" in line] == [
        "  benbrown: 2.7 -> 3 points (Canvas's LATE flag, with an extension to 2026-03-04 12:00-05:00: counted on "
        "time, the download gives no time)"], printed
    assert _rows(out / "lms_grades.csv")["benbrown"]["points"] == "3"


def test_the_documented_example_reads_as_it_says():
    course = read_course(Path(__file__).parents[1] / "docs" / "course.example.toml")
    assert course.policy == Policy("per-day", 10.0, 50.0, 0)
    loop = course.deadlines["04_training_loop"]
    assert loop.due == datetime(2026, 3, 2, 23, 59, tzinfo=EST) and loop.extensions["1002"] == loop.due + 2 * DAY
    assert course.deadlines["05_optimizers"].due == datetime(2026, 3, 9, 23, 59, tzinfo=timezone.utc)
