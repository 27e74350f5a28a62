"""Collect submissions: a folder with one folder per student, or the zip an LMS exports.

Accepted layouts (document them to students as "submit the notebook file, unrenamed"):

- `SUBMISSIONS/<student>/<anything>.ipynb`, also nbgrader's own `submitted/<student>/<assignment>/*.ipynb`;
- flat files `<student>_<anything>.ipynb`, as Canvas (`doejane_1234_5678_04_training_loop.ipynb`) and
  Moodle's "download all" export them, in a folder or a `.zip` (extracted safely: no path escapes).

What the LMS's naming says about the student is kept (`LmsIdentity`, `lms_identity`), so grades and
feedback go back to the right account: Canvas `name[_LATE]_<user id>_<submission id>_<file>`; Moodle
`Full Name_<participant id>_assignsubmission_file_[<file>]` (a folder per student or flat files); Blackboard
`<assignment>_<username>_attempt_<yyyy-mm-dd-hh-mm-ss>[_<file>]`; Gradescope's `submission_<id>/` folders
with their `submission_metadata.yml`.

The notebook picked in a student's files is the one named like the assignment's, else the only notebook;
other files are reported as ignored, and a student with no notebook gets a "missing" result. When an LMS
kept several uploads of the assignment's notebook (Canvas renames later ones `name-1.ipynb`, `name-2.ipynb`),
the newest is graded and the result says so.

Student ids keep every script's letters ("Zoë-Smith", "张伟"), in Unicode's NFC form so that the same name
typed on two systems is one student; two different names that would become the same id stop the batch
before anything is graded, with an error naming both.
"""

from __future__ import annotations

import re
import tempfile
import unicodedata
import zipfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

_UNSAFE = re.compile(r"[^\w.-]+")  # \w is Unicode: letters and digits of every script are kept
_UPLOAD = re.compile(r"-(\d+)$")  # Canvas's suffix on a student's later upload of the same file name
# What an LMS's submission names say: Canvas files, Moodle files or folders, Blackboard files, Gradescope folders.
CANVAS = re.compile(r"^(?P<name>[^_]+)_(?P<late>LATE_)?(?P<id>\d+)_(?P<submission>\d+)_(?P<file>.+)$")
MOODLE = re.compile(r"^(?P<name>.+?)_(?P<id>\d+)_assignsubmission_(?:file|onlinetext)_(?P<file>.*)$")
BLACKBOARD = re.compile(r"^(?P<assignment>.+)_(?P<id>[^_]+)_attempt_(?P<when>\d{4}(?:-\d\d){5})(?:_(?P<file>.+))?$")
GRADESCOPE = re.compile(r"^submission_(?P<id>\d+)$")


@dataclass(frozen=True)
class LmsIdentity:
    """Who an LMS says made a submission, read from its export's naming.

    `prefix` is the part of the name the LMS matches when feedback files are uploaded back in bulk.
    """

    system: str  # canvas, moodle, blackboard, gradescope
    user_id: str  # Canvas user id, Moodle participant id, Blackboard username, Gradescope submission id
    name: str  # the name as the LMS wrote it (Canvas: lastfirst; Moodle: full name)
    late: bool = False  # Canvas marks a submission after the due date LATE
    prefix: str = ""
    email: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The identity as plain data (a job's and a result's `lms` field)."""
        return asdict(self)


def lms_identity(name: str) -> LmsIdentity | None:
    """The LMS identity in a file or folder name of an export, or None for a name no LMS wrote."""
    if match := MOODLE.match(name):
        prefix = f"{match['name']}_{match['id']}_assignsubmission_file_"
        return LmsIdentity("moodle", match["id"], match["name"], prefix=prefix)
    if match := CANVAS.match(name):
        prefix = name[: match.start("file")].rstrip("_")
        return LmsIdentity("canvas", match["id"], match["name"], bool(match["late"]), prefix)
    if match := BLACKBOARD.match(name):
        return LmsIdentity("blackboard", match["id"], match["id"], prefix=name[: match.end("when")])
    return None


def gradescope_identities(folder: Path) -> dict[str, LmsIdentity]:
    """`submission_<id>` folder -> its submitter, from Gradescope's `submission_metadata.yml` (empty without it).

    Read with a pattern for the few keys used (`:name:`, `:sid:`, `:email:`), so no YAML library is needed.
    """
    metadata = folder / "submission_metadata.yml"
    if not metadata.is_file():
        return {}
    found: dict[str, LmsIdentity] = {}
    current, fields = "", {}
    for line in [*metadata.read_text(encoding="utf-8", errors="replace").splitlines(), "end:"]:
        if not line.startswith((" ", "-")) and line.rstrip().endswith(":"):
            if current and fields.get("name"):
                found[current] = LmsIdentity("gradescope", fields.get("sid") or current.removeprefix("submission_"),
                                             fields["name"], prefix=current, email=fields.get("email", ""))
            current, fields = line.strip().rstrip(":").strip("'\""), {}
        elif match := re.match(r"^[\s-]*:(name|sid|email):\s*(.*)$", line):
            fields.setdefault(match[1], match[2].strip().strip("'\""))
    return found


@dataclass
class Submission:
    """One student's submission: the notebook to grade, or the problem that prevents grading."""

    student: str
    notebook: Path | None
    problem: dict[str, str] | None = None
    notes: list[str] = field(default_factory=list)
    lms: LmsIdentity | None = None


def student_id(name: str) -> str:
    """A student id nbgrader and file systems accept, from a folder or file-name prefix.

    The name in NFC form, each run of characters other than letters, digits, `_`, `.` and `-` (path
    separators, spaces, punctuation) turned into one `-`; "unnamed" when nothing is left.
    """
    cleaned = _UNSAFE.sub("-", unicodedata.normalize("NFC", name).strip()).strip("-.")
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
    named = [f for f in notebooks if _UPLOAD.sub("", f.stem).endswith(assignment)]
    chosen = max(named, key=_upload_number) if named else (notebooks[0] if len(notebooks) == 1 else None)
    notes = []
    if len(named) > 1:
        notes.append(f"{len(named)} uploads of {assignment}.ipynb: graded the newest, {chosen.name} (an LMS numbers "
                     "later uploads -1, -2...)")
    others = sorted(f.name for f in files if f != chosen and ".ipynb_checkpoints" not in f.parts)
    if others:
        notes.append(f"extra files ignored: {', '.join(others)}")
    if chosen is None:
        reason = (f"no notebook submitted (expected {assignment}.ipynb)" if not notebooks else
                  f"{len(notebooks)} notebooks and none named {assignment}.ipynb: "
                  f"{', '.join(f.name for f in notebooks)}")
        return Submission(student, None, {"status": "missing", "reason": reason}, notes)
    return Submission(student, chosen, None, notes)


def _upload_number(path: Path) -> int:
    """0 for a first upload, n for the n-th re-upload an LMS renamed `name-n.ipynb`."""
    match = _UPLOAD.search(path.stem)
    return int(match.group(1)) if match else 0


def collect_folder(folder: Path, assignment: str) -> list[Submission]:
    """Submissions in an extracted folder (student folders and/or flat `<student>_...` files).

    Raises:
        ValueError: two different student names map to one student id.
    """
    by_student: dict[str, list[Path]] = {}
    named_by: dict[str, dict[str, str]] = {}  # id -> the names it was made from -> the first entry with that name
    identities: dict[str, LmsIdentity] = {}
    gradescope = gradescope_identities(folder)
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith(".") or entry.name == "__MACOSX" or entry.name == "submission_metadata.yml":
            continue
        identity = gradescope.get(entry.name) if GRADESCOPE.match(entry.name) else lms_identity(entry.name)
        if entry.is_dir():
            name = identity.name if identity and identity.system in ("moodle", "gradescope") else entry.name
            nested = entry / assignment if (entry / assignment).is_dir() else entry
            files = [p for p in sorted(nested.rglob("*")) if p.is_file()]
        elif entry.is_file():
            name = identity.name if identity else entry.name.split("_")[0] if "_" in entry.name else entry.stem
            files = [entry]
        else:
            continue
        student = student_id(name)
        if identity is not None:
            identities[student] = _latest(identities.get(student), identity)
        names = named_by.setdefault(student, {})
        names.setdefault(unicodedata.normalize("NFC", name), entry.name)
        if len(names) > 1:
            first, second = names.values()
            raise ValueError(f"{first!r} and {second!r} would both be graded as student {student!r}: rename one of "
                             "them (an id keeps letters, digits, '_', '.' and '-'; other characters become '-'). "
                             "Nothing was graded.")
        by_student.setdefault(student, []).extend(files)
    return [replace(_choose(student, files, assignment), lms=identities.get(student))
            for student, files in sorted(by_student.items())]


def _latest(known: LmsIdentity | None, found: LmsIdentity) -> LmsIdentity:
    """One student's identity over several files: the same account, late if any file is late."""
    if known is None:
        return found
    return replace(known, late=known.late or found.late)


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
