"""Collect submissions: a folder with one folder per student, or the zip an LMS exports.

Accepted layouts (document them to students as "submit the notebook file, unrenamed"):

- `SUBMISSIONS/<student>/<anything>.ipynb`, also nbgrader's own `submitted/<student>/<assignment>/*.ipynb`;
- flat files `<student>_<anything>.ipynb`, as Canvas (`doejane_1234_5678_04_training_loop.ipynb`) and
  Moodle's "download all" export them, in a folder or a `.zip` (extracted safely: no path escapes).

The notebook picked in a student's files is the one named like the assignment's, else the only notebook;
other files are reported as ignored, and a student with no notebook gets a "missing" result.
"""

from __future__ import annotations

import re
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass
class Submission:
    """One student's submission: the notebook to grade, or the problem that prevents grading."""

    student: str
    notebook: Path | None
    problem: dict[str, str] | None = None
    notes: list[str] = field(default_factory=list)


def student_id(name: str) -> str:
    """A student id nbgrader and file systems accept, from a folder or file-name prefix."""
    cleaned = _UNSAFE.sub("-", name.strip()).strip("-.")
    return cleaned or "unnamed"


def extract_zip(archive: Path, into: Path) -> Path:
    """Extract `archive` into `into`, refusing members that would land outside it."""
    with zipfile.ZipFile(archive) as zipped:
        for member in zipped.namelist():
            target = (into / member).resolve()
            if not target.is_relative_to(into.resolve()):
                raise ValueError(f"{archive} contains {member!r}, which points outside the extraction folder")
        zipped.extractall(into)
    return into


def _choose(student: str, files: list[Path], assignment: str) -> Submission:
    """The submission among one student's files."""
    notebooks = [f for f in files if f.suffix == ".ipynb" and ".ipynb_checkpoints" not in f.parts]
    named = [f for f in notebooks if f.name == f"{assignment}.ipynb" or f.stem.endswith(assignment)]
    chosen = named[0] if named else (notebooks[0] if len(notebooks) == 1 else None)
    others = sorted(f.name for f in files if f != chosen and ".ipynb_checkpoints" not in f.parts)
    notes = [f"extra files ignored: {', '.join(others)}"] if others else []
    if chosen is None:
        reason = (f"no notebook submitted (expected {assignment}.ipynb)" if not notebooks else
                  f"{len(notebooks)} notebooks and none named {assignment}.ipynb: {', '.join(f.name for f in notebooks)}")
        return Submission(student, None, {"status": "missing", "reason": reason}, notes)
    return Submission(student, chosen, None, notes)


def collect_folder(folder: Path, assignment: str) -> list[Submission]:
    """Submissions in an extracted folder (student folders and/or flat `<student>_...` files)."""
    by_student: dict[str, list[Path]] = {}
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith(".") or entry.name == "__MACOSX":
            continue
        if entry.is_dir():
            nested = entry / assignment if (entry / assignment).is_dir() else entry
            by_student.setdefault(student_id(entry.name), []).extend(p for p in sorted(nested.rglob("*")) if p.is_file())
        elif entry.is_file():
            by_student.setdefault(student_id(entry.name.split("_")[0] if "_" in entry.name else entry.stem), []).append(entry)
    return [_choose(student, files, assignment) for student, files in sorted(by_student.items())]


def collect(source: Path, assignment: str, workdir: Path | None = None) -> list[Submission]:
    """Every submission in `source` (a folder or a .zip; zips are extracted under `workdir`)."""
    if not source.exists():
        raise FileNotFoundError(f"{source} does not exist: give a folder of submissions or an LMS .zip export")
    if source.is_file():
        if not zipfile.is_zipfile(source):
            raise ValueError(f"{source} is neither a folder nor a .zip archive of submissions")
        workdir = workdir or Path(tempfile.mkdtemp(prefix="harness-submissions-"))
        source = extract_zip(source, workdir)
    return collect_folder(source, assignment)
