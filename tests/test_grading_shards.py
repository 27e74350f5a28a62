"""Grading in shards: slices of a class graded anywhere, merged into exactly the gradebook and CSV of one run.

One module-scoped batch (lesson 00_welcome, six students: three correct, two with a planted bug, one with no
notebook; 2 workers) is graded once whole and once as shard 0 of 3, for real. Shards 1 and 2 are assembled
from the whole run's records, as a run of them would write them (the same secret draws the same cases), and
`grade_shard` then confirms there is nothing left to grade in them: seven submissions are graded in all.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from pathlib import Path

import nbformat
import pytest
from gradebook_readers import gradebook_scores, grades_rows

from harness.cli import main
from harness.grading.batch import Limits, grade_batch
from harness.grading.jobs import ContractError, GradeResult
from harness.grading.merge import collect_shards, merge_shards
from harness.grading.release import answered_release
from harness.grading.shards import (
    MANIFEST,
    RESULTS,
    ShardManifest,
    ShardMismatch,
    grade_shard,
    read_manifest,
    secret_fingerprint,
    shard_of,
    source_version,
)
from harness.grading.submissions import Submission, collect
from harness.grading.summary import write_summary

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("shards")]  # one worker grades the class once
ASSIGNMENT = "00_welcome"
SECRET = bytes(range(32))
COUNT = 3
LIMITS = Limits(cell_timeout=60, submission_seconds=300, memory_mb=3072, max_output_bytes=100_000)
WRONG_ACCURACY = "def accuracy(logits, targets):\n    return (logits.argmin(dim=1) == targets).float().mean().item()\n"
WRONG_BATCH = "def make_batch(n, device):\n    return torch.zeros(3, 8, 8, device=device)\n"
# folder name -> planted bugs (None: no notebook); the ids fall in shards 0, 0, 1, 1, 2, 2 of 3
STUDENTS = {"cat": {}, "王芳": {"00-accuracy": WRONG_ACCURACY}, "dan": {"00-make-batch": WRONG_BATCH},
            "Zoë Smith": {}, "amy": {}, "ben": None}


@dataclass(frozen=True)
class Graded:
    """The module's batch: the submissions, the whole run's folder and results, and the shard folders."""

    source: Path
    submissions: list[Submission]
    whole: Path
    results: dict[str, GradeResult]
    shards: list[Path]
    shard0: list[GradeResult]  # shard 0's results, graded for real


def _write_submissions(folder: Path) -> None:
    for name, bugs in STUDENTS.items():
        (folder / name).mkdir(parents=True)
        if bugs is None:
            (folder / name / "notes.txt").write_text("forgot the notebook")
        else:
            nbformat.write(answered_release(ASSIGNMENT, bugs), folder / name / f"{ASSIGNMENT}.ipynb")


def _assemble_shard(folder: Path, index: int, submissions: list[Submission], whole: Path,
                    results: dict[str, GradeResult]) -> None:
    """The shard folder a run of shard `index` writes, from the whole run's records and trees."""
    mine = sorted(s.student for s in submissions if shard_of(s.student, COUNT) == index)
    manifest = ShardManifest(ASSIGNMENT, source_version(ASSIGNMENT), secret_fingerprint(SECRET), index, COUNT, mine,
                             sorted(s.student for s in submissions))
    (folder / RESULTS).mkdir(parents=True)
    (folder / MANIFEST).write_text(manifest.to_json())
    for student in mine:
        (folder / RESULTS / f"{student}.json").write_text(results[student].to_json())
        for tree in ("feedback", "autograded"):
            if (whole / tree / student).is_dir():
                shutil.copytree(whole / tree / student, folder / tree / student)
        if (whole / "answers" / f"{student}.json").is_file():  # the answer cells the merge's similarity reads
            (folder / "answers").mkdir(exist_ok=True)
            shutil.copy(whole / "answers" / f"{student}.json", folder / "answers")


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> Graded:
    root = tmp_path_factory.mktemp("shards")
    _write_submissions(root / "in")
    submissions = collect(root / "in", ASSIGNMENT)
    assert sorted({shard_of(s.student, COUNT) for s in submissions}) == [0, 1, 2]
    whole = root / "whole"
    results = grade_batch(submissions, ASSIGNMENT, whole, workers=2, limits=LIMITS, secret=SECRET)
    write_summary(results, whole, ASSIGNMENT)
    records = {r["student"]: GradeResult(**r) for r in results}
    shards = [root / f"shard-{i}" for i in range(COUNT)]
    shard0, skipped = grade_shard(submissions, ASSIGNMENT, shards[0], (0, COUNT), secret=SECRET, limits=LIMITS)
    assert skipped == []
    for index in range(1, COUNT):
        _assemble_shard(shards[index], index, submissions, whole, records)
        assert grade_shard(submissions, ASSIGNMENT, shards[index], (index, COUNT), secret=SECRET,
                           limits=LIMITS) == ([], read_manifest(shards[index]).students)
    return Graded(root / "in", submissions, whole, records, shards, shard0)


def _copy(folder: Path, into: Path) -> Path:
    return Path(shutil.copytree(folder, into / folder.name))


def test_a_shard_grades_its_slice_as_the_whole_run_does(graded):
    assert [r.student for r in graded.shard0] == ["cat", "王芳"]
    for result in graded.shard0:
        assert result.same_grade(graded.results[result.student]), (result, graded.results[result.student])
    assert graded.results["王芳"].failures == {"00-accuracy": "wrong-accuracy"}
    assert list((graded.shards[0] / "feedback" / "王芳" / ASSIGNMENT).glob("*.html"))


def test_three_shards_merged_give_the_gradebook_and_csv_of_one_run(graded, tmp_path):
    merged = merge_shards(graded.shards, tmp_path / "merged")
    assert not merged.missing and not merged.duplicates
    assert (gradebook_scores(tmp_path / "merged" / "gradebook.db", ASSIGNMENT)
            == gradebook_scores(graded.whole / "gradebook.db", ASSIGNMENT))
    assert grades_rows(tmp_path / "merged" / "grades.csv") == grades_rows(graded.whole / "grades.csv")
    assert (tmp_path / "merged" / "summary.md").read_text() == (graded.whole / "summary.md").read_text()
    for student in ("cat", "Zoë-Smith", "amy"):
        assert list((tmp_path / "merged" / "feedback" / student / ASSIGNMENT).glob("*.html"))


def test_a_shard_run_again_grades_nothing_new(graded, tmp_path, capsys):
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET.hex())
    records = sorted((graded.shards[0] / RESULTS).glob("*.json"))
    before = {p: p.stat().st_mtime_ns for p in records}
    status = main(["grade", str(graded.source), "--assignment", ASSIGNMENT, "--shard", f"0/{COUNT}",
                   "--out", str(graded.shards[0]), "--secret-file", str(secret_file)])
    out = capsys.readouterr().out
    assert status == 0 and "0 graded" in out and "2 already graded with the same notebook (skipped)" in out, out
    assert {p: p.stat().st_mtime_ns for p in sorted((graded.shards[0] / RESULTS).glob("*.json"))} == before


def test_a_shard_run_again_grades_a_changed_notebook_again(graded, tmp_path):
    source, shard = Path(shutil.copytree(graded.source, tmp_path / "in")), _copy(graded.shards[0], tmp_path)
    (source / "cat" / f"{ASSIGNMENT}.ipynb").write_text("not a notebook any more")  # no kernel starts for it
    again, skipped = grade_shard(collect(source, ASSIGNMENT), ASSIGNMENT, shard, (0, COUNT), secret=SECRET,
                                 limits=LIMITS)
    assert [(r.student, r.status) for r in again] == [("cat", "invalid")] and skipped == ["王芳"]
    assert again[0].notebook_sha256 not in ("", graded.results["cat"].notebook_sha256)
    assert GradeResult.from_json((shard / RESULTS / "cat.json").read_text()).status == "invalid"
    # one score everywhere: 0 of the assignment's points; and a page telling the student what was wrong
    assert sum(top for _, top in again[0].scores.values()) == 5 and not any(s for s, _ in again[0].scores.values())
    page = (shard / "feedback" / "cat" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    assert "Score: 0 / 5" in page and "not valid notebook JSON" in page and "submit the notebook file itself" in page
    missing = (graded.whole / "feedback" / "ben" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    assert "Score: 0 / 5" in missing and "no notebook submitted" in missing


def test_a_merge_over_a_missing_shard_names_the_missing_students(graded, tmp_path, capsys):
    status = main(["grade", "merge", str(graded.shards[0]), str(graded.shards[1]), "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert status == 1 and "MISSING: 2 students" in out and "shard 2/3 (not merged): amy, ben" in out, out
    merged = [row[0] for row in grades_rows(tmp_path / "out" / "grades.csv")[1:]]
    assert merged == sorted(["cat", "dan", "Zoë-Smith", "王芳"])
    unfinished = _copy(graded.shards[1], tmp_path)
    (unfinished / RESULTS / "dan.json").unlink()
    assert collect_shards([graded.shards[0], unfinished, graded.shards[2]]).missing == {"1/3 (not finished)": ["dan"]}


@pytest.mark.parametrize(("field", "value", "named"), [
    ("assignment", "01_tensors_autograd", "assignment 00_welcome vs 01_tensors_autograd"),
    ("secret_fingerprint", secret_fingerprint(b"another secret, 32 bytes long..."), "secret fingerprint"),
    ("source_version", "0123456789abcdef", "source version"),
    ("count", 4, "shard count N 3 vs 4"),
])
def test_shards_of_another_grading_are_refused_naming_what_differs(graded, tmp_path, field, value, named):
    other = _copy(graded.shards[1], tmp_path)
    (other / MANIFEST).write_text(replace(read_manifest(other), **{field: value}).to_json())
    with pytest.raises(ShardMismatch, match=f"is not of the same grading as .*{named}"):
        collect_shards([graded.shards[0], other, graded.shards[2]])


def test_a_shard_folder_refuses_a_run_with_another_secret(graded):
    with pytest.raises(ShardMismatch, match="holds shard 0/3 of another grading .*secret fingerprint"):
        grade_shard(graded.submissions, ASSIGNMENT, graded.shards[0], (0, COUNT), secret=b"another secret" * 3,
                    limits=LIMITS)


def test_a_student_in_two_shards_is_merged_once_when_equal_and_refused_when_different(graded, tmp_path):
    twice = _copy(graded.shards[1], tmp_path)
    shutil.copy(graded.shards[0] / RESULTS / "cat.json", twice / RESULTS / "cat.json")
    merged = collect_shards([graded.shards[0], twice, graded.shards[2]])
    assert merged.duplicates == ["cat"]
    assert [r.student for r in merged.results] == sorted(graded.results)
    changed = replace(graded.results["cat"], scores={**graded.results["cat"].scores, "00-accuracy": [0.0, 2.0]})
    (twice / RESULTS / "cat.json").write_text(changed.to_json())
    with pytest.raises(ShardMismatch, match="cat was graded in .* with different results \\(scores\\)"):
        collect_shards([graded.shards[0], twice, graded.shards[2]])


def test_records_of_another_contract_version_or_shape_are_refused():
    result = GradeResult("ada", ASSIGNMENT, "ok", {"00-accuracy": [2.0, 2.0]}, reasons=["fine"], seconds=1.5)
    assert GradeResult.from_json(result.to_json()) == result
    with pytest.raises(ContractError, match="contract version 2; this harness reads version 1"):
        GradeResult.from_json(result.to_json().replace('"version": 1', '"version": 2'))
    with pytest.raises(ContractError, match="unknown fields: pickle"):
        GradeResult.from_json(result.to_json().replace('"version": 1', '"version": 1, "pickle": "x"'))
    with pytest.raises(ContractError, match="lacks fields: status"):
        GradeResult.from_json('{"student": "ada", "assignment": "00_welcome", "version": 1}')
