"""Join shard folders into one grading: `harness grade merge OUT_0 OUT_1 ... --out OUT`.

The shards must be of one grading (same assignment, source version, secret fingerprint, number of shards
and class; a difference is refused, naming it and the folders). A student found in two folders with the
same result is merged once, with different results refused unless the submissions are on this machine and one
of the two is of the current notebook (it is kept); a result whose notebook changed since its shard graded it
is `stale`, and `harness grade merge` grades it again (by content, as `regrade`) and says so. Students of the
class with no result (a shard not merged, or not finished) are reported by shard. The merged results are
written as a whole batch writes them: `gradebook.db` (through `batch.merge_into_gradebook`), `grades.csv` and
the class summary (`summary`, with the similarity flags over the whole class), `results/`, and the `feedback/`,
`autograded/`, `logs/`, `observations/` and `answers/` trees.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from harness.grading.batch import RESULTS, course_template, merge_into_gradebook
from harness.grading.jobs import GradeResult, write_atomically
from harness.grading.layout import REPO_ROOT
from harness.grading.shards import ShardManifest, ShardMismatch, read_manifest, read_results, shard_of
from harness.grading.submissions import collect, notebook_sha256
from harness.grading.summary import write_summary

TREES = ("feedback", "autograded", "logs", "observations", "answers")


@dataclass(frozen=True)
class Merged:
    """The outcome of a merge: one result per student, and the students still missing."""

    manifest: ShardManifest  # the first shard's: the grading all shards share
    results: list[GradeResult]  # one per student, sorted by student id
    missing: dict[str, list[str]]  # "i/N (not merged)" or "i/N (not finished)" -> students without a result
    duplicates: list[str]  # students found in several folders with the same result, merged once
    stale: list[str] = field(default_factory=list)  # students whose notebook changed since their result: grade again
    source: str = ""  # the submissions the notebooks were compared with ("" when no shard's source is here)
    fresher: list[str] = field(default_factory=list)  # in two folders with different notebooks: the current one kept


def _check_same_grading(shards: list[tuple[Path, ShardManifest]]) -> None:
    first_folder, first = shards[0]
    for folder, manifest in shards[1:]:
        if differences := first.differences(manifest):
            raise ShardMismatch(f"{folder} (shard {manifest.label()}) is not of the same grading as {first_folder} "
                                f"(shard {first.label()}): {'; '.join(differences)}. Nothing was merged.")


def _what_differs(one: GradeResult, other: GradeResult) -> str:
    names = ("status", "scores", "failures", "reasons")
    return ", ".join(name for name in names if getattr(one, name) != getattr(other, name))


def current_digests(shards: list[ShardManifest]) -> tuple[str, dict[str, str]]:
    """The submissions folder the shards were graded from (the first recorded one that exists on this machine,
    else "") and each of its students' notebook digest now (`notebook_sha256`)."""
    for manifest in shards:
        if manifest.source and Path(manifest.source).exists():
            with tempfile.TemporaryDirectory(prefix="harness-merge-") as tmp:
                found = collect(Path(manifest.source), manifest.assignment, Path(tmp))
                return manifest.source, {s.student: notebook_sha256(s) for s in found}
    return "", {}


def collect_shards(folders: list[Path]) -> Merged:
    """Read and check the shard folders; one result per student.

    Where the shards' submissions are on this machine (`current_digests`), a result whose notebook's digest is
    not the notebook's now is `stale` (to grade again), and of a student's two different results in two folders
    the one of the current notebook is kept (`fresher`).

    Raises:
        ShardMismatch: shards of different gradings, or one student graded differently in two folders.
        FileNotFoundError: a folder that is not a shard folder.
        ValueError: no folders.
    """
    if not folders:
        raise ValueError("no shard folders given: harness grade merge OUT_0 OUT_1 ... --out OUT")
    shards = [(folder, read_manifest(folder)) for folder in folders]
    _check_same_grading(shards)
    first = shards[0][1]
    source, now = current_digests([manifest for _, manifest in shards])
    found: dict[str, tuple[Path, GradeResult]] = {}
    duplicates, fresher = [], []
    for folder, manifest in shards:
        for student, result in read_results(folder).items():
            if result.student != student or result.assignment != manifest.assignment:
                raise ShardMismatch(f"{folder}/results/{student}.json is a result of {result.student!r} for "
                                    f"{result.assignment!r}, not of {student!r} for {manifest.assignment!r}")
            if student not in found:
                found[student] = (folder, result)
            elif found[student][1].same_grade(result):
                duplicates.append(student)
            elif len(current := [one for one in (found[student], (folder, result))
                                 if student in now and one[1].notebook_sha256 == now[student]]) == 1:
                found[student] = current[0]  # the other is of an older notebook; two of this one that differ: refused
                fresher.append(student)
            else:
                raise ShardMismatch(f"{student} was graded in {found[student][0]} and in {folder} with different "
                                    f"results ({_what_differs(found[student][1], result)}): remove the wrong "
                                    f"results/{student}.json and merge again. Nothing was merged.")
    merged_shards = {manifest.shard for _, manifest in shards}
    missing: dict[str, list[str]] = {}
    for student in first.roster:
        if student not in found:
            shard = shard_of(student, first.count)
            state = "not finished" if shard in merged_shards else "not merged"
            missing.setdefault(f"{shard}/{first.count} ({state})", []).append(student)
    stale = sorted(s for s, (_, result) in found.items() if s in now and result.notebook_sha256 != now[s])
    return Merged(first, [found[s][1] for s in sorted(found)], dict(sorted(missing.items())), sorted(duplicates),
                  stale, source, sorted(fresher))


def merge_shards(folders: list[Path], out: Path, repo_root: Path = REPO_ROOT) -> Merged:
    """Merge the shard folders into `out`: gradebook, grades CSV, class summary, feedback and autograded trees.

    Raises:
        ShardMismatch, FileNotFoundError: as `collect_shards`; nothing is written then.
    """
    merged = collect_shards(folders)
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    for folder in folders:
        for tree in TREES:
            if (folder / tree).is_dir():
                shutil.copytree(folder / tree, out / tree, dirs_exist_ok=True)
    (out / RESULTS).mkdir(exist_ok=True)
    for result in merged.results:
        write_atomically(out / RESULTS / f"{result.student}.json", result.to_json())
    results = [r.to_dict() for r in merged.results]
    with course_template(merged.manifest.assignment, repo_root) as (template, _):
        note = merge_into_gradebook(out / "gradebook.db", template, results)
    if note:
        print(note)
    write_summary(results, out, merged.manifest.assignment)
    return merged
