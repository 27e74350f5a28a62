"""The instructor's week, graded for real: a synthetic class of lesson 00 in a known mix of the course's planted
mistakes, as a Canvas download (user ids, a LATE file, a blank notebook), graded once through `harness grade`
with a roster, then regraded after one task's check changed, and graded again after one student fixed a notebook.

The mix (the planted mistakes of tests/checks/test_lesson00.py, plus an exception and an untouched release):

| student (Canvas name) | id | what | expected |
|---|---|---|---|
| adaamos | 1001 | count-params planted | counts-frozen |
| benbrown LATE | 1002 | accuracy planted | wrong-accuracy |
| carlcole | 1003 (roster row without id) | accuracy planted | wrong-accuracy |
| dinadoe | 1004 | make-batch raises, count-params planted | error, counts-frozen |
| evaeast | 1005 | the release untouched | not attempted (never run) |
| zedzorn | 1099 (not on the roster) | the solution | passes |
"""

from __future__ import annotations

import csv
import functools
import re
import shutil
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

import nbformat
import pytest

from harness.checks import core
from harness.checks.testing import planted_cells
from harness.cli import main
from harness.contract import registry
from harness.grading.layout import REPO_ROOT
from harness.grading.lms import CANVAS_COLUMNS, MOODLE_COLUMNS
from harness.grading.release import answered_release
from tests.exercises import lesson_tests

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("lms")]  # one worker grades the class once
ASSIGNMENT = "00_welcome"
SECRET = bytes(range(32))
PLANTED = planted_cells(lesson_tests(ASSIGNMENT).MISTAKES)
RAISES = "def make_batch(n, device):\n    raise RuntimeError('not finished')\n"
# Canvas file name prefix -> the solution cells replaced (None: the release, untouched)
CLASS = {"adaamos_1001_5001": {"00-count-params": PLANTED["00-count-params"][0]},
         "benbrown_LATE_1002_5002": {"00-accuracy": PLANTED["00-accuracy"][0]},
         "carlcole_1003_5003": {"00-accuracy": PLANTED["00-accuracy"][0]},
         "dinadoe_1004_5004": {"00-make-batch": RAISES, "00-count-params": PLANTED["00-count-params"][0]},
         "evaeast_1005_5005": None,
         "zedzorn_1099_5099": {}}
ROSTER = [("Amos, Ada", "1001", "s-1", "ada@example.org", "A"), ("Brown, Ben", "1002", "s-2", "ben@example.org", "A"),
          ("Cole, Carl", "", "s-3", "carl@example.org", "B"), ("Doe, Dina", "1004", "s-4", "dina@example.org", "B"),
          ("East, Eva", "1005", "s-5", "eva@example.org", "B"), ("Green, Gus", "1007", "s-7", "gus@example.org", "A")]
# the mistake report's counts, from the mix: (task, cause) -> students
EXPECTED = {("00-make-batch", "error"): 1, ("00-make-batch", "not attempted"): 1,
            ("00-count-params", "counts-frozen"): 2, ("00-count-params", "not attempted"): 1,
            ("00-accuracy", "wrong-accuracy"): 2, ("00-accuracy", "not attempted"): 1}


@dataclass(frozen=True)
class Graded:
    """The class graded once through the command line: its folder, output and printed lines."""

    source: Path
    out: Path
    printed: str
    status: int
    secret_file: Path


def _rows(path: Path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> Graded:
    root = tmp_path_factory.mktemp("lms")
    release = nbformat.read(REPO_ROOT / "notebooks" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    (root / "in").mkdir()
    for prefix, bugs in CLASS.items():
        notebook = release if bugs is None else answered_release(ASSIGNMENT, bugs)
        nbformat.write(notebook, root / "in" / f"{prefix}_{ASSIGNMENT}.ipynb")
    with (root / "roster.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section"])
        writer.writerow(["Points Possible", "", "", "", ""])
        for name, user_id, sis, login, section in ROSTER:
            writer.writerow([name, user_id, sis, login, section])
    secret_file = root / "secret"
    secret_file.write_text(SECRET.hex())
    pytest_capture = _Capture()
    with pytest_capture:
        status = main(["grade", str(root / "in"), "--assignment", ASSIGNMENT, "--out", str(root / "out"),
                       "--secret-file", str(secret_file), "--roster", str(root / "roster.csv"), "--timeout", "60",
                       "--submission-limit", "300", "--memory-mb", "3072"])
    return Graded(root / "in", root / "out", pytest_capture.text, status, secret_file)


class _Capture:
    """stdout of the block, for a module-scoped fixture (capsys is function-scoped)."""

    def __enter__(self) -> _Capture:
        import contextlib
        import io

        self._buffer = io.StringIO()
        self._redirect = contextlib.redirect_stdout(self._buffer)
        self._redirect.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._redirect.__exit__(*exc)
        self.text = self._buffer.getvalue()


def test_progress_is_a_line_per_submission_with_the_time_left(graded):
    assert graded.status == 0, graded.printed
    lines = [line for line in graded.printed.splitlines() if " | graded " in line]
    assert len(lines) == len(CLASS), graded.printed
    assert all(re.match(r"took \d+ s, (about .+ left|all graded) \| graded \d/6: \S+ \w+( \w+)? [\d.]+/5$", line)
               for line in lines), lines
    assert any(line.endswith(": evaeast not attempted 0.0/5") for line in lines), lines
    assert lines[-1].startswith("took ") and "all graded | graded 6/6: " in lines[-1]
    assert "canvas_grades.csv (Canvas: Grades > Import)" in graded.printed


def test_the_mistake_report_counts_the_mix_exactly(graded):
    rows = _rows(graded.out / "mistakes.csv")
    assert rows[0] == ["task", "cause", "students", "share", "requirement", "hint", "section"]
    assert {(task, cause): int(students) for task, cause, students, *_ in rows[1:]} == EXPECTED
    frozen = next(row for row in rows if row[1] == "counts-frozen")
    check = core.get("00-count-params")
    assert frozen[4:] == [check.requires["counts-frozen"].states, check.requires["counts-frozen"].hint,
                          check.hints.section]
    per_task = [row[0] for row in rows[1:]]
    assert per_task == sorted(per_task, key=["00-make-batch", "00-count-params", "00-accuracy"].index)
    report = (graded.out / "mistakes.md").read_text()
    summary = (graded.out / "summary.md").read_text()
    assert "## Reteach" in report and "Exercise 2" in report and "## Mistakes" in summary
    reteach = summary.split("Reteach first", 1)[1].split("Item analysis", 1)[0]
    assert reteach.count("\n1. ") == 1 and "`counts-frozen`, 2 students" in reteach and "`wrong-accuracy`" in reteach
    assert "| discrimination |" in summary
    [eva] = [line for line in summary.splitlines() if line.startswith("- **evaeast** (not attempted): ")]
    assert "not attempted: every solution cell is as released (a blank notebook); it was not run" in eva
    # the instructor's report names the students under each cause, in plurals that agree, numbered once
    assert "| `wrong-accuracy` | 2 students (33%): benbrown, carlcole |" in report, report
    assert "| `not attempted` | 1 student (17%): evaeast |" in report and " 1 students" not in report + summary
    assert not re.search(r"^\d+\. \*\*\d", report + summary, re.M), report
    # the blank notebook is left out of the pass rates and item statistics, which say so
    assert "Over the 5 judged notebooks (left out: 1 not attempted)." in report
    assert "Passed: the share of the 5 judged notebooks with the task's full points (left out: 1 not attempted)." \
        in summary


def test_a_blank_notebook_is_not_run_and_its_student_is_told_what_to_do(graded):
    assert not (graded.out / "autograded" / "evaeast").exists()  # nbgrader's autograde never ran for it
    page = (graded.out / "feedback" / "evaeast" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    assert "Score: 0 / 5" in page and "it was not run" in page and "Write your answers in those cells" in page
    moodle = {row[1]: row for row in _rows(graded.out / "moodle_grades.csv")[1:]}
    assert moodle["East, Eva"][4:6] == ["0", "5"] and moodle["East, Eva"][9].startswith("0/5 points")


def test_canvas_and_moodle_files_have_the_columns_they_import(graded):
    canvas = _rows(graded.out / "canvas_grades.csv")
    assert canvas[0] == [*CANVAS_COLUMNS, ASSIGNMENT] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section",
                                                          ASSIGNMENT]
    assert canvas[1] == ["Points Possible", "", "", "", "", "5"]
    by_id = {row[1]: row for row in canvas[2:]}
    assert by_id["1001"] == ["Amos, Ada", "1001", "s-1", "ada@example.org", "A", "3"]
    assert by_id["1099"][0] == "zedzorn" and by_id["1099"][5] == "5"
    assert by_id[""][0] == "Cole, Carl"  # matched by name: the roster has no id for him
    moodle = _rows(graded.out / "moodle_grades.csv")
    assert moodle[0] == list(MOODLE_COLUMNS) == ["Identifier", "Full name", "Email address", "Status", "Grade",
                                                 "Maximum Grade", "Grade can be changed", "Last modified (submission)",
                                                 "Last modified (grade)", "Feedback comments"]
    assert moodle[1][:2] == ["Participant 1001", "Amos, Ada"] and moodle[1][4:6] == ["3", "5"]
    generic = {row[0]: row for row in _rows(graded.out / "lms_grades.csv")[1:]}
    assert generic["benbrown"][9] == "yes" and generic["adaamos"][9] == ""  # Canvas's LATE flag kept
    # no course file: lateness is shown (1 day: Canvas's names carry no time), never penalised
    assert generic["benbrown"][12:] == ["3", "1", "0%"] and generic["adaamos"][12:] == ["3", "0", "0%"]
    assert "  late: benbrown: 1 day late (Canvas's LATE flag: the download gives no time, counted as 1 day): no " \
        "penalty" in graded.printed, graded.printed
    page = (graded.out / "feedback" / "benbrown" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    assert page.count("<!-- harness:late --><p><strong>Submission 1 day late (Canvas&#x27;s LATE flag") == 1
    assert generic["adaamos"][11] == "lms id" and generic["carlcole"][11] == "name"
    assert generic["zedzorn"][11] == "unmatched"


def test_roster_matching_is_reported(graded):
    assert ("roster: 5 matched, 1 unmatched, 0 ambiguous, 1 on the roster without a submission"
            in graded.printed), graded.printed
    assert "unmatched: zedzorn" in graded.printed and "no submission: Green, Gus" in graded.printed


def test_the_feedback_archive_names_follow_canvas(graded):
    with zipfile.ZipFile(graded.out / "feedback_canvas.zip") as archive:
        names = sorted(archive.namelist())
        page = archive.read(next(n for n in names if n.startswith("adaamos_"))).decode()
    assert names == sorted(f"{prefix}_{ASSIGNMENT}_feedback.html" for prefix in CLASS)
    assert all(re.match(r"^[a-z]+_(LATE_)?\d+_\d+_", name) for name in names)
    assert "white-space: pre-wrap; overflow-wrap: anywhere" in page
    assert ">Exercise 2 \u2014 how big is this model? (<code>00-count-params</code>)</a>" in page
    assert ">Test cell</a>" not in page


def test_another_assignment_is_refused_in_this_folder(graded, capsys):
    status = main(["grade", str(graded.source), "--assignment", "01_tensors_autograd", "--out", str(graded.out),
                   "--secret-file", str(graded.secret_file)])
    out = capsys.readouterr().out
    assert status == 2 and f"holds the grading of {ASSIGNMENT}" in out and "--force" in out, out


def test_a_regrade_rejudges_only_the_changed_check_and_names_who_moved(graded, tmp_path, monkeypatch, capsys):
    out = Path(shutil.copytree(graded.out, tmp_path / "out"))
    before = (out / "results" / "adaamos.json").read_text()
    pages = {student: next((out / "feedback" / student / ASSIGNMENT).glob("*.html"))
             for student in ("adaamos", "benbrown", "carlcole", "dinadoe", "evaeast", "zedzorn")}
    first = {student: page.read_bytes() for student, page in pages.items()}
    assert "wrong-accuracy" in first["benbrown"].decode()
    called = {"00-accuracy": 0, "00-make-batch": 0, "00-count-params": 0}

    def counted(task, judge):
        @functools.wraps(judge)  # the fingerprint follows the wrapped judge: unchanged
        def wrapper(*args, **kwargs):
            called[task] += 1
            return judge(*args, **kwargs)
        return wrapper

    for task in ("00-make-batch", "00-count-params"):
        entry = core.get(task)
        monkeypatch.setitem(registry._REGISTRY, task, replace(entry, judge=counted(task, entry.judge)))

    def lenient_accuracy(seen, *, case):  # a changed check: accepts any accuracy
        called["00-accuracy"] += 1
        return "any accuracy accepted"

    assert main(["grade", "--regrade", str(out)]) == 0  # nothing changed: nothing judged, no notebook run
    printed = capsys.readouterr().out
    assert "nothing to regrade" in printed and "no notebook in" in printed and sum(called.values()) == 0, printed
    assert not (out / "regrade.md").exists()
    monkeypatch.setitem(registry._REGISTRY, "00-accuracy", replace(core.get("00-accuracy"), judge=lenient_accuracy))
    status = main(["grade", "--regrade", str(out)])
    printed = capsys.readouterr().out
    assert status == 0, printed
    assert "judged again from the stored observations (their check changed): 00-accuracy" in printed, printed
    assert "graded again" not in printed and "a line as each one ends" not in printed
    assert called["00-make-batch"] == called["00-count-params"] == 0 and called["00-accuracy"] > 0
    changed = [line.strip() for line in printed.splitlines() if line.startswith("  ") and " points" in line]
    assert changed == ["benbrown: 3 -> 5 points (check changed); 00-accuracy: wrong-accuracy -> passed",
                       "carlcole: 3 -> 5 points (check changed); 00-accuracy: wrong-accuracy -> passed"], printed
    report = (out / "regrade.md").read_text()
    assert "| benbrown | 3 | 5 | check changed | 00-accuracy: wrong-accuracy -> passed |" in report, report
    assert "| carlcole | 3 | 5 | check changed |" in report and "adaamos" not in report
    assert (out / "results" / "adaamos.json").read_text() == before
    assert "feedback keeps" not in printed and "first grading's verdicts" not in printed
    for student in ("benbrown", "carlcole"):  # the new verdict and points, hidden tests still removed
        page = pages[student].read_text()
        assert "wrong-accuracy" not in page and "00-accuracy: any accuracy accepted" in page, student
        assert "(Score: 5.0 / 5.0)" in page and "HIDDEN TESTS" not in page, student
        assert "white-space: pre-wrap" in page and "(<code>00-accuracy</code>)</a>" in page
    for student in ("adaamos", "dinadoe", "evaeast", "zedzorn"):
        assert pages[student].read_bytes() == first[student], student
    with zipfile.ZipFile(out / "feedback_canvas.zip") as archive:
        ben = next(name for name in archive.namelist() if name.startswith("benbrown_"))
        assert archive.read(ben) == pages["benbrown"].read_bytes()
    generic = {row[0]: row for row in _rows(out / "lms_grades.csv")[1:]}
    assert generic["benbrown"][6] == "5" and generic["adaamos"][6] == "3"
    assert main(["grade", "--regrade", str(out)]) == 0
    assert "nothing to regrade" in capsys.readouterr().out
    assert (out / "regrade.md").read_text() == report


def test_grading_again_into_the_folder_grades_only_the_fixed_notebook(graded, tmp_path, capsys):
    out = Path(shutil.copytree(graded.out, tmp_path / "out"))
    source = Path(shutil.copytree(graded.source, tmp_path / "in"))
    nbformat.write(answered_release(ASSIGNMENT, {}), source / f"carlcole_1003_5003_{ASSIGNMENT}.ipynb")  # fixed
    kept = {path.name: path.read_bytes() for path in (out / "results").glob("*.json") if path.stem != "carlcole"}
    status = main(["grade", str(source), "--assignment", ASSIGNMENT, "--out", str(out), "--secret-file",
                   str(graded.secret_file), "--timeout", "60", "--submission-limit", "300", "--memory-mb", "3072"])
    printed = capsys.readouterr().out
    assert status == 0, printed
    assert f"{out} already holds a grading of {ASSIGNMENT}: regrading it by content" in printed, printed
    assert "graded again: carlcole (resubmitted)" in printed and "graded 1/1: carlcole ok 5.0/5" in printed, printed
    assert [line.strip() for line in printed.splitlines() if line.startswith("  ") and " points" in line] == [
        "carlcole: 3 -> 5 points (resubmitted); 00-accuracy: wrong-accuracy -> passed"], printed
    assert {path.name: path.read_bytes() for path in (out / "results").glob("*.json") if path.stem != "carlcole"} \
        == kept
    report = (out / "regrade.md").read_text()
    assert "| carlcole | 3 | 5 | resubmitted | 00-accuracy: wrong-accuracy -> passed |" in report, report
    assert {row[0]: row[3] for row in _rows(out / "grades.csv")[1:]}["carlcole"] == "5.0"
    assert main(["grade", "--regrade", str(out)]) == 0  # from the folder it was graded from: nothing new
    assert "nothing to regrade" in capsys.readouterr().out
    assert main(["grade", "--regrade", str(out), "--student", "nobody"]) == 2
    assert "no submission of nobody" in capsys.readouterr().out
    kept = {path.name: path.read_bytes() for path in (out / "results").glob("*.json") if path.stem != "evaeast"}
    assert main(["grade", "--regrade", str(out), "--student", "evaeast"]) == 0  # one student, changed or not
    printed = capsys.readouterr().out
    assert "graded again: evaeast (regraded on request)" in printed, printed
    assert "  evaeast: 0 -> 0 points (regraded on request)" in printed, printed
    assert {path.name: path.read_bytes() for path in (out / "results").glob("*.json") if path.stem != "evaeast"} \
        == kept
