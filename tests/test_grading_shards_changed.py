"""A changed notebook is graded again, in a shard and in a merge, and the grader says so (issue 38, item 6).

The class's notebooks are files that are not notebooks: each is graded "invalid" for real, through the same
jobs and workers as any submission, but no kernel starts, so the test takes seconds. What is checked is
which students are graded again and what is said, not the grade.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.cli import main
from harness.grading.batch import Limits
from harness.grading.jobs import GradeResult
from harness.grading.merge import collect_shards
from harness.grading.shards import RESULTS, grade_shard, read_manifest
from harness.grading.submissions import collect, notebook_sha256

pytestmark = pytest.mark.slow  # grading workers run (no kernel starts)
ASSIGNMENT = "00_welcome"
SECRET = bytes(range(32))
LIMITS = Limits(cell_timeout=60, submission_seconds=300, memory_mb=3072, max_output_bytes=100_000)


def _submit(source: Path, student: str, text: str) -> None:
    (source / student).mkdir(parents=True, exist_ok=True)
    (source / student / f"{ASSIGNMENT}.ipynb").write_text(text)


def _shard(source: Path, folder: Path) -> tuple[list[GradeResult], list[str]]:
    return grade_shard(collect(source, ASSIGNMENT), ASSIGNMENT, folder, (0, 1), secret=SECRET, limits=LIMITS,
                       workers=1, sandboxed=False, source=source)


def _digest(source: Path, student: str) -> str:
    return next(notebook_sha256(s) for s in collect(source, ASSIGNMENT) if s.student == student)


def test_a_shard_and_a_merge_grade_a_changed_notebook_again_and_say_so(tmp_path, capsys):
    source, shard = tmp_path / "in", tmp_path / "shard"
    _submit(source, "cat", "cat's first try, not a notebook")
    _submit(source, "dan", "dan's first try, not a notebook")
    first, skipped = _shard(source, shard)
    assert [r.student for r in first] == ["cat", "dan"] and skipped == []
    assert read_manifest(shard).source == str(source.resolve())
    assert _shard(source, shard) == ([], ["cat", "dan"])  # nothing changed: nothing graded again
    assert "graded again" not in capsys.readouterr().out

    _submit(source, "cat", "cat's second try, still not a notebook")  # resubmitted before the shard ran again
    again, skipped = _shard(source, shard)
    assert [r.student for r in again] == ["cat"] and skipped == ["dan"]
    assert "graded again, their notebook changed since their result here: cat" in capsys.readouterr().out
    stored = GradeResult.from_json((shard / RESULTS / "cat.json").read_text())
    assert stored.notebook_sha256 == _digest(source, "cat")

    before = Path(shutil.copytree(shard, tmp_path / "before"))  # dan's first result, kept in another folder
    _submit(source, "dan", "dan's second try, after the shard ran")
    assert collect_shards([shard]).stale == ["dan"]
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET.hex())
    status = main(["grade", "merge", str(shard), "--out", str(tmp_path / "out"), "--secret-file", str(secret_file),
                   "--no-sandbox", "--workers", "1"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert f"notebook changed in {source.resolve()} since its shard graded it, grading again: dan" in out, out
    assert "dan: 0 -> 0 points (regraded on request)" in out, out
    merged = GradeResult.from_json((tmp_path / "out" / RESULTS / "dan.json").read_text())
    assert merged.notebook_sha256 == _digest(source, "dan")
    assert "cat" not in out.split("grading again:")[1].split("\n")[0]

    _shard(source, shard)  # the shard graded dan's new notebook too: of two different results, the current one
    merged_two = collect_shards([before, shard])
    assert merged_two.fresher == ["dan"] and merged_two.stale == [], merged_two
    assert next(r for r in merged_two.results if r.student == "dan").notebook_sha256 == _digest(source, "dan")
