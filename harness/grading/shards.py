"""Grade one deterministic slice of a class: `harness grade SUBMISSIONS --assignment A --shard i/N --out OUT_i`.

Student s is in shard `sha256(s) mod N`: the same slice on every machine, whatever order the files were
collected in, and a late submission moves no one else. Any scheduler can run the N shards (a Slurm array,
a Kubernetes Indexed Job, an ssh loop); nothing is shared between them but the submissions. A shard folder
holds:

- `shard.json`, its `ShardManifest`: the assignment, the source version (a hash of `solutions/<assignment>`
  and the grading code), the secret's fingerprint (a hash, never the secret), i/N, the class and the slice;
- `results/<student>.json`, each student's `GradeResult`, written atomically as soon as it is graded, with its
  notebook's digest; a re-run skips the students who have one for the same notebook, so a run after a crash
  grades only what is missing, and a notebook that changed since (a resubmission) is graded again, saying so;
  the manifest keeps where the submissions were (`source`), so a merge can find the notebooks that changed
  after their shard graded them;
- `answers/<student>.json`, each graded notebook's answer cells for the merge's similarity flags (`similarity`);
- `feedback/`, `autograded/` and `logs/`, as a whole batch writes them.

`merge` joins shard folders into one gradebook.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.grading.batch import RESULTS, Limits, absolute, check_batch, course_template, grade_jobs, make_jobs
from harness.grading.jobs import CONTRACT_VERSION, GradeResult, record_from_json, record_to_json, write_atomically
from harness.grading.layout import REPO_ROOT
from harness.grading.similarity import save_answers
from harness.grading.submissions import Submission, notebook_sha256

MANIFEST = "shard.json"
# the code that decides a grade besides the assignment's source: a change in any of it changes the version
GRADING_CODE = ("harness/grading", "harness/judge", "harness/judges", "harness/checks", "harness/contract")


class ShardMismatch(ValueError):
    """Shard folders (or a folder and the shard asked to grade into it) of different gradings."""


@dataclass(frozen=True)
class ShardManifest:
    """What a shard folder holds results of: which grading, which slice of which class."""

    assignment: str
    source_version: str
    secret_fingerprint: str
    shard: int
    count: int
    students: list[str]  # this shard's slice, sorted
    roster: list[str] = field(default_factory=list)  # every student of the class, sorted
    source: str = ""  # the submissions graded, as given on the grading machine ("" unknown): a merge re-reads them
    version: int = CONTRACT_VERSION

    def to_json(self) -> str:
        """The manifest as JSON text."""
        return record_to_json(self)

    @classmethod
    def from_json(cls, text: str) -> ShardManifest:
        """The manifest in `text`; ContractError if it is of another version or has other fields."""
        return record_from_json(cls, text)

    def label(self) -> str:
        """`i/N`."""
        return f"{self.shard}/{self.count}"

    def differences(self, other: ShardManifest) -> list[str]:
        """What makes `other` a different grading from this one (its slice aside), one phrase each."""
        compared = (("assignment", self.assignment, other.assignment),
                    ("source version", self.source_version, other.source_version),
                    ("secret fingerprint", self.secret_fingerprint, other.secret_fingerprint),
                    ("shard count N", self.count, other.count))
        found = [f"{name} {mine} vs {theirs}" for name, mine, theirs in compared if mine != theirs]
        if self.roster != other.roster:
            only_one = sorted(set(self.roster) ^ set(other.roster))
            found.append(f"class of {len(self.roster)} vs {len(other.roster)} students, collected from different "
                         f"submissions (in one only: {', '.join(only_one[:5])}{' ...' if len(only_one) > 5 else ''})")
        return found


def parse_shard(text: str) -> tuple[int, int]:
    """`"i/N"` as (i, N) with 0 <= i < N.

    Raises:
        ValueError: another form, saying the expected one.
    """
    index, _, count = text.partition("/")
    if not (index.strip().isdigit() and count.strip().isdigit()) or not 0 <= int(index) < int(count):
        raise ValueError(f"--shard {text}: use i/N with 0 <= i < N, e.g. --shard 0/10 (Slurm: "
                         "$SLURM_ARRAY_TASK_ID/10, Kubernetes: $JOB_COMPLETION_INDEX/10)")
    return int(index), int(count)


def shard_of(student: str, count: int) -> int:
    """The shard (0..count-1) that grades `student`: a stable hash of the id, the same on every machine."""
    return int.from_bytes(hashlib.sha256(student.encode("utf-8")).digest()[:8], "big") % count


def source_version(assignment: str, repo_root: Path = REPO_ROOT) -> str:
    """A hash of `solutions/<assignment>` and the grading code: shards graded from other sources differ."""
    digest = hashlib.sha256()
    folders = [repo_root / "solutions" / assignment, *(repo_root / folder for folder in GRADING_CODE)]
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            skipped = {"__pycache__", ".ipynb_checkpoints"} & set(path.parts)
            if path.is_file() and not skipped and path.suffix in (".py", ".ipynb"):
                digest.update(path.relative_to(repo_root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def secret_fingerprint(secret: bytes) -> str:
    """A hash that tells two secrets apart without revealing either."""
    return hashlib.sha256(b"harness grading secret fingerprint\0" + secret).hexdigest()[:16]


def read_manifest(folder: Path) -> ShardManifest:
    """The manifest of the shard folder `folder`.

    Raises:
        FileNotFoundError: `folder` is not a shard folder.
        ContractError: the manifest is of another version.
    """
    path = folder / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{folder} is not a shard folder (no {MANIFEST}): grade into it with --shard i/N")
    return ShardManifest.from_json(path.read_text(encoding="utf-8"))


def read_results(folder: Path) -> dict[str, GradeResult]:
    """The results recorded in `folder` (a shard's or a whole grading's), by student id (the file's name)."""
    return {path.name.removesuffix(".json"): GradeResult.from_json(path.read_text(encoding="utf-8"))
            for path in sorted((folder / RESULTS).glob("*.json"))}


def grade_shard(submissions: list[Submission], assignment: str, out: Path, shard: tuple[int, int], *,
                secret: bytes, limits: Limits, workers: int = 2, sandboxed: bool = True,
                repo_root: Path = REPO_ROOT, progress: Callable[[int], Callable[[GradeResult], None]] | None = None,
                source: Path | None = None) -> tuple[list[GradeResult], list[str]]:
    """Grade the slice `shard` = (i, N) of `submissions` into the shard folder `out`, skipping finished students.

    Returns the results graded now (in slice order) and the students skipped because `out` already had
    their result for the same notebook (`notebook_sha256`); one whose notebook changed is graded again, and a
    line says who. `source`: where `submissions` were collected from, kept in the manifest for `merge`.
    `progress`, given the number to grade, returns what to call with each result as it ends (`progress.Progress`).

    Raises:
        ShardMismatch: `out` holds a shard of another grading or slice (the message names what differs).
        ValueError, SandboxUnavailable: as `batch.check_batch`.
    """
    index, count = shard
    check_batch(submissions, workers, sandboxed)
    mine = [s for s in submissions if shard_of(s.student, count) == index]
    manifest = ShardManifest(assignment, source_version(assignment, repo_root), secret_fingerprint(secret), index,
                             count, sorted(s.student for s in mine), sorted(s.student for s in submissions),
                             str(source.resolve()) if source else "")
    out = out.resolve()
    if (out / MANIFEST).is_file():
        before = read_manifest(out)
        differences = before.differences(manifest)
        if before.shard != index:
            differences.append(f"shard index {before.shard} vs {index}")
        if differences:
            raise ShardMismatch(f"{out} holds shard {before.label()} of another grading or slice "
                                f"({'; '.join(differences)}): grade into an empty folder, or remove this one")
    (out / RESULTS).mkdir(parents=True, exist_ok=True)
    write_atomically(out / MANIFEST, manifest.to_json())
    done = read_results(out)
    todo = [s for s in mine if s.student not in done or done[s.student].notebook_sha256 != notebook_sha256(s)]
    if not todo:
        return [], [s.student for s in mine]
    if changed := [s.student for s in todo if s.student in done]:
        print(f"shard {index}/{count}: graded again, their notebook changed since their result here: "
              f"{', '.join(changed)}")

    save_answers(todo, assignment, out, repo_root)
    report = progress(len(todo)) if progress else None

    def record(result: GradeResult) -> None:
        write_atomically(out / RESULTS / f"{result.student}.json", result.to_json())
        if report is not None:
            report(result)

    with course_template(assignment, repo_root) as (template, workdir):
        jobs = make_jobs(absolute(todo), assignment, template, out, secret, limits, workers, sandboxed)
        graded = grade_jobs(jobs, workdir, workers, limits.submission_seconds, on_result=record)
    regraded = {s.student for s in todo}
    return graded, [s.student for s in mine if s.student not in regraded]
