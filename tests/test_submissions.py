"""Collecting submissions: every student graded once, under their own name (Unicode ids, LMS re-uploads)."""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path

import nbformat
import pytest

from harness.cli import main
from harness.grading.batch import Limits, grade_batch
from harness.grading.release import answered_release
from harness.grading.submissions import MAX_ID_BYTES, collect, student_id

ASSIGNMENT = "00_welcome"


def _touch(path: Path, text: str = "{}") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_names_in_any_script_stay_distinct_students(tmp_path):
    for name in ("Zoë Smith", "Zoé Smith"):
        _touch(tmp_path / name / f"{ASSIGNMENT}.ipynb")
    for name in ("张伟", "王芳"):
        _touch(tmp_path / f"{name}_1234_5678_{ASSIGNMENT}.ipynb")
    found = {s.student: s for s in collect(tmp_path, ASSIGNMENT)}
    assert found.keys() == {"Zoë-Smith", "Zoé-Smith", "张伟", "王芳"}
    assert all(s.notebook is not None and s.problem is None for s in found.values())


def test_the_same_name_typed_composed_or_decomposed_is_one_student():
    composed, decomposed = unicodedata.normalize("NFC", "Zoë"), unicodedata.normalize("NFD", "Zoë")
    assert composed != decomposed
    assert student_id(composed) == student_id(decomposed) == "Zoë"
    assert student_id("../x y") == "x-y" and student_id("...") == "unnamed"


def test_two_names_for_one_id_are_both_graded_and_flagged(tmp_path):
    _touch(tmp_path / "bob smith" / f"{ASSIGNMENT}.ipynb")
    _touch(tmp_path / "bob  smith" / f"{ASSIGNMENT}.ipynb")
    found = {s.student: s for s in collect(tmp_path, ASSIGNMENT)}
    assert len(found) == 2 and "bob-smith" in found and all(s.notebook for s in found.values())
    assert all(any("make the same id" in note for note in s.notes) for s in found.values())


def test_homoglyph_long_and_non_plain_entries_never_stop_the_batch(tmp_path):
    """Lookalike ids are flagged, a 250-byte name is bounded, links and FIFOs are refused unread."""
    secret = tmp_path / "secret.ipynb"
    secret.write_text("TOP-SECRET-CONTENT")
    for name in ("alice", "\u0430lice", "\uff41\uff4c\uff49\uff43\uff45", "张" * 83):
        _touch(tmp_path / "in" / name / f"{ASSIGNMENT}.ipynb")
    (tmp_path / "in" / "linker").mkdir()
    (tmp_path / "in" / "linker" / f"{ASSIGNMENT}.ipynb").symlink_to(secret)
    (tmp_path / "in" / f"flat_{ASSIGNMENT}.ipynb").symlink_to(secret)
    os.mkfifo(tmp_path / "in" / f"pipe_{ASSIGNMENT}.ipynb")
    found = {s.student: s for s in collect(tmp_path / "in", ASSIGNMENT)}
    assert all(len(student.encode()) <= MAX_ID_BYTES for student in found)
    [long] = [s for s in found.values() if s.student.startswith("张")]
    assert any("张" * 83 in note and "too long" in note for note in long.notes)
    assert any("reads the same as 'alice'" in note for note in found["\u0430lice"].notes)
    full_width = next(s for s in found.values() if s.student.startswith("alice-"))
    assert any("make the same id" in note for note in full_width.notes)
    for student, kind in (("linker", "symbolic link"), ("flat", "symbolic link"), ("pipe", "FIFO")):
        assert found[student].problem["status"] == "invalid" and kind in found[student].problem["reason"]
        assert "TOP-SECRET" not in str(found[student].problem) and found[student].notebook is None
    copied = found["alice"].notebook
    assert copied.read_text() == "{}" and not copied.is_relative_to(tmp_path / "in")


def test_an_lms_re_upload_is_graded_instead_of_the_first_and_said(tmp_path):
    for name in (f"doejane_1234_5678_{ASSIGNMENT}.ipynb", f"doejane_1234_5702_{ASSIGNMENT}-2.ipynb",
                 f"doejane_1234_5690_{ASSIGNMENT}-1.ipynb"):
        _touch(tmp_path / name)
    [submission] = collect(tmp_path, ASSIGNMENT)
    assert submission.notebook.name == f"doejane_1234_5702_{ASSIGNMENT}-2.ipynb"
    assert submission.notes[0].startswith(f"3 uploads of {ASSIGNMENT}.ipynb: graded the newest, doejane_1234_5702")
    assert "extra files ignored" in submission.notes[1]


def test_nbgrader_exchange_records_are_not_a_students_extra_files(tmp_path):
    """`nbgrader collect` writes timestamp.txt and submission_secret.txt beside each submission (a hub's
    submitted/ folder): its records, not files the student handed in, so no note; a student's own extra file is."""
    for name in (f"{ASSIGNMENT}.ipynb", "timestamp.txt", "submission_secret.txt"):
        _touch(tmp_path / "submitted" / "ada" / ASSIGNMENT / name)
    _touch(tmp_path / "submitted" / "ben" / ASSIGNMENT / "notes.txt")
    _touch(tmp_path / "submitted" / "ben" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
    found = {s.student: s for s in collect(tmp_path / "submitted", ASSIGNMENT)}
    assert found["ada"].notes == [] and found["ada"].notebook is not None
    assert found["ben"].notes == ["extra files ignored: notes.txt"]


@pytest.mark.slow
def test_unicode_students_are_graded_under_their_names(tmp_path):
    solution = nbformat.writes(answered_release(ASSIGNMENT))  # the release, answered as the solution
    _touch(tmp_path / "in" / "Zoë Smith" / f"{ASSIGNMENT}.ipynb", solution)
    _touch(tmp_path / "in" / f"张伟_1_2_{ASSIGNMENT}.ipynb", solution)
    limits = Limits(cell_timeout=60, submission_seconds=300, memory_mb=3072, max_output_bytes=100_000)
    results = grade_batch(collect(tmp_path / "in", ASSIGNMENT), ASSIGNMENT, tmp_path / "out", workers=2,
                          limits=limits, secret=bytes(range(32)))
    assert {r["student"]: r["status"] for r in results} == {"Zoë-Smith": "ok", "张伟": "ok"}
    assert all(sum(score for score, _ in r["scores"].values()) == sum(p for _, p in r["scores"].values())
               for r in results)
    for student in ("Zoë-Smith", "张伟"):
        assert list((tmp_path / "out" / "feedback" / student / ASSIGNMENT).glob("*.html"))


@pytest.mark.parametrize(("arguments", "message"), [
    (["MISSING", "--assignment", ASSIGNMENT], "MISSING does not exist: give a folder of submissions"),
    (["IN", "--assignment", "99_nope"], "no assignment '99_nope' in"),
    (["IN", "--assignment", ASSIGNMENT, "--workers", "0"], "--workers 0: use 1 or more grading processes"),
])
def test_bad_input_to_grade_is_one_message_before_anything_is_created(tmp_path, capsys, arguments, message):
    (tmp_path / "IN").mkdir()
    arguments = [str(tmp_path / a) if a in ("MISSING", "IN") else a for a in arguments]
    secret = tmp_path / "secret"
    status = main(["grade", *arguments, "--out", str(tmp_path / "out"), "--secret-file", str(secret)])
    out = capsys.readouterr().out
    assert status == 2 and out.startswith("cannot grade: ") and message in out, out
    assert "Traceback" not in out and not secret.exists() and not (tmp_path / "out").exists()
