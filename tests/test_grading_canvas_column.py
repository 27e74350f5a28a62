"""Grades land in the assignment's own Canvas column (issue 39, item 3): `publish`, the step that writes the LMS
files after grading, run on result records (no notebook is graded) with a Canvas gradebook export as the roster."""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import pytest

from harness.grading.cli import add_arguments, publish
from harness.grading.jobs import GradeResult

ASSIGNMENT = "00_welcome"
EXPORT = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Current Score", "{first}", "{second}"]


def _results() -> list[dict]:
    scores = {"00-make-batch": [1.0, 1.0], "00-count-params": [2.0, 2.0], "00-accuracy": [0.0, 2.0]}
    return [GradeResult(student, ASSIGNMENT, "ok", scores, {"00-accuracy": "wrong-accuracy"}, [], 1.0, [],
                        {"system": "canvas", "user_id": user_id, "name": student}).to_dict()
            for student, user_id in (("adaamos", "1001"), ("benbrown", "1002"))]


def _export(path: Path, first: str, second: str) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow([column.format(first=first, second=second) for column in EXPORT])
        writer.writerow(["Points Possible", "", "", "", "", "", "5", "10"])
        writer.writerow(["Amos, Ada", "1001", "s-1", "ada", "A", "80", "", "9"])
        writer.writerow(["Brown, Ben", "1002", "s-2", "ben", "A", "70", "", "8"])
    return path


def _publish(out: Path, *options: str) -> int:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    out.mkdir()
    return publish(_results(), out, ASSIGNMENT, parser.parse_args(["--assignment", ASSIGNMENT, *options]), None)


def _header(out: Path) -> list[str]:
    with (out / "canvas_grades.csv").open(newline="", encoding="utf-8") as handle:
        return next(csv.reader(handle))


@pytest.mark.parametrize(("title", "first", "second", "column"), [
    ("", "00_welcome (77001)", "01_tensors_autograd (77002)", "00_welcome (77001)"),  # the folder's name
    ("Lesson 1", "00_welcome (77001)", "lesson 1 (77002)", "lesson 1 (77002)"),  # --lms-title, case aside
])
def test_the_roster_export_gives_the_column_the_import_updates(tmp_path, capsys, title, first, second, column):
    roster = _export(tmp_path / "export.csv", first, second)
    assert _publish(tmp_path / "out", "--roster", str(roster), *(["--lms-title", title] if title else [])) == 0
    printed = capsys.readouterr().out
    assert _header(tmp_path / "out")[5:] == [column], printed
    assert f"Canvas column: {column} (from the roster: its title)" in printed and "NEW column" not in printed


def test_the_only_assignment_column_of_a_roster_is_used_and_said(tmp_path, capsys):
    roster = _export(tmp_path / "export.csv", "Welcome quiz (77001)", "Final Score")
    assert _publish(tmp_path / "out", "--roster", str(roster)) == 0
    assert _header(tmp_path / "out")[5:] == ["Welcome quiz (77001)"]
    assert ("Canvas column: Welcome quiz (77001) (from the roster: the roster's only assignment column, though not "
            "titled 00_welcome)") in capsys.readouterr().out


def test_an_assignment_id_names_the_column(tmp_path, capsys):
    assert _publish(tmp_path / "out", "--canvas-assignment-id", "77001", "--lms-title", "Welcome") == 0
    assert _header(tmp_path / "out")[5:] == ["Welcome (77001)"]
    assert "Canvas column: Welcome (77001) (the assignment id given)" in capsys.readouterr().out


def test_without_a_matching_column_the_console_says_a_new_one_will_be_made_and_how_not_to(tmp_path, capsys):
    roster = _export(tmp_path / "export.csv", "03_data (77003)", "04_training_loop (77004)")
    assert _publish(tmp_path / "out", "--roster", str(roster)) == 0
    printed = capsys.readouterr().out
    assert _header(tmp_path / "out")[5:] == [ASSIGNMENT]
    assert ("Canvas column: 00_welcome, with no assignment id: Canvas's import will create a NEW column (the "
            "roster's assignment columns: 03_data (77003), 04_training_loop (77004))") in printed, printed
    assert "--lms-title TITLE, or --canvas-assignment-id ID" in printed and "CANVAS_ID=" in printed
    assert _publish(tmp_path / "bare") == 0  # no roster, no id: the same warning
    assert "Canvas's import will create a NEW column. To fill" in capsys.readouterr().out
