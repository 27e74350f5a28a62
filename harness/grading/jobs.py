"""The contract every grading backend runs: one job record in, one result record out, both versioned JSON.

A `GradeJob` is all a worker needs to grade one submission (the student, the notebook, the template course,
the limits and each task's cases, drawn by the parent from the secret, never the secret itself); a
`GradeResult` is what it reports (points per task, failure codes, status, reasons). Files travel as paths in
a folder both sides see (the template course, the submitted notebook, the output folder); records are
plain JSON, never pickles, and are written by the grader's own worker, never by the sandboxed kernel. A
record of another contract version is refused with a message saying which versions met.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TypeVar

CONTRACT_VERSION = 1
NOT_ATTEMPTED = "not attempted"  # the status of a blank notebook (every solution cell as released): never run

Record = TypeVar("Record")


class ContractError(ValueError):
    """A job or result record that this harness cannot read: another version, or missing or unknown fields."""


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file renamed over it: readers see all of it or nothing."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def record_to_json(record: Any) -> str:
    """A record dataclass (with its `version` field) as JSON text."""
    return json.dumps(asdict(record), indent=1, ensure_ascii=False)


def record_from_json(cls: type[Record], text: str) -> Record:
    """The `cls` record in `text`.

    Raises:
        ContractError: not a JSON object, another contract version, or missing or unknown fields.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ContractError(f"a {cls.__name__} record is not JSON ({error})") from None
    if not isinstance(data, dict):
        raise ContractError(f"a {cls.__name__} record is a JSON object, got {type(data).__name__}")
    if data.get("version") != CONTRACT_VERSION:
        raise ContractError(f"{cls.__name__} record of contract version {data.get('version')!r}; this harness reads "
                            f"version {CONTRACT_VERSION}: grade and merge with the same harness version everywhere")
    names = {f.name for f in fields(cls)}
    required = {f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING}
    if unknown := sorted(data.keys() - names):
        raise ContractError(f"{cls.__name__} record has unknown fields: {', '.join(unknown)}")
    if missing := sorted(required - data.keys()):
        raise ContractError(f"{cls.__name__} record lacks fields: {', '.join(missing)}")
    return cls(**data)


@dataclass(frozen=True)
class GradeJob:
    """One submission to grade, and everything the worker needs for it (the secret excepted)."""

    student: str
    assignment: str
    notebook: str | None  # the submitted notebook's path; None when `problem` says why there is none
    problem: dict[str, str] | None  # {"status": "missing" | "invalid", "reason": ...}: nothing to run
    notes: list[str]  # sentences for the result's reasons (extra files, re-uploads)
    template: str  # the template course directory (sources, release, gradebook)
    out: str  # the output folder: feedback/ and autograded/ trees are copied there
    timeout: int  # per-cell limit (s)
    submission_seconds: int  # whole-submission limit (s)
    memory_mb: int
    threads: int
    max_output_bytes: int
    sandboxed: bool
    data_dir: str
    cases: dict[str, list[dict[str, Any]]]  # task -> [{"hidden": bool, "seed": int}]
    scratch: str = ""  # a folder for the worker's private course copy (the batch removes it)
    private_mounts: bool = False  # the worker runs in a mount namespace of its own (`grading.runtime_folder`)
    lms: dict[str, Any] = field(default_factory=dict)  # who the LMS says submitted it (`submissions.LmsIdentity`)
    notebook_sha256: str = ""  # the submitted notebook's digest ("" without one): a regrade re-runs it if it changes
    points: dict[str, float] = field(default_factory=dict)  # each graded task's points, in order
    version: int = CONTRACT_VERSION

    def to_json(self) -> str:
        """The record as JSON text."""
        return record_to_json(self)

    @classmethod
    def from_json(cls, text: str) -> GradeJob:
        """The record in `text`; ContractError if it is of another version or has other fields."""
        return record_from_json(cls, text)

    def stamp(self, result: GradeResult) -> GradeResult:
        """`result` with what the parent knows of this job: the LMS identity, the notebook's digest, and for a
        result with no points (nothing judged: missing, invalid, not attempted, error) 0 of each task's points,
        so its total is out of the assignment's points everywhere."""
        scores = result.scores or {task: [0.0, top] for task, top in self.points.items()}
        return replace(result, lms=self.lms, notebook_sha256=self.notebook_sha256, scores=scores)


@dataclass(frozen=True)
class GradeResult:
    """One submission's outcome: points per task ([score, max score]), failure codes, status and reasons."""

    student: str
    assignment: str
    status: str  # ok, flagged, not attempted, invalid, missing, error (summary.STATUS_MEANING)
    scores: dict[str, list[float]] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    seconds: float = 0.0
    untouched: list[str] = field(default_factory=list)  # tasks whose solution cell is as released: not attempted
    lms: dict[str, Any] = field(default_factory=dict)  # the job's LMS identity, copied back for the gradebooks
    notebook_sha256: str = ""  # the graded notebook's digest (`GradeJob.notebook_sha256`), copied back likewise
    # the hints the student's saved outputs show they asked for (task -> highest level, `hints_used`): for the
    # instructor's information, never part of a grade
    hints: dict[str, int] = field(default_factory=dict)
    version: int = CONTRACT_VERSION

    def to_json(self) -> str:
        """The record as JSON text."""
        return record_to_json(self)

    @classmethod
    def from_json(cls, text: str) -> GradeResult:
        """The record in `text`; ContractError if it is of another version or has other fields."""
        return record_from_json(cls, text)

    def to_dict(self) -> dict[str, Any]:
        """The result as the plain dict `grade_batch` returns and the summary reads."""
        return asdict(self)

    def same_grade(self, other: GradeResult) -> bool:
        """Whether `other` grades the same submission the same way (timings aside)."""
        return {**asdict(self), "seconds": 0.0} == {**asdict(other), "seconds": 0.0}
