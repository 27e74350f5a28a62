"""Collect submissions: a folder with one folder per student, or the zip an LMS exports.

Accepted layouts (document them to students as "submit the notebook file, unrenamed"):

- `SUBMISSIONS/<student>/<anything>.ipynb`, also nbgrader's own `submitted/<student>/<assignment>/*.ipynb`;
- flat files `<student>_<anything>.ipynb`, as Canvas (`doejane_1234_5678_04_training_loop.ipynb`) and
  Moodle's "download all" export them, in a folder or a `.zip` (extracted safely: no path escapes).

What the LMS's naming says about the student is kept (`LmsIdentity`, `lms_identity`), so grades and
feedback go back to the right account: Canvas `name[_LATE]_<user id>_<submission id>_<file>`; Moodle
`Full Name_<participant id>_assignsubmission_file_[<file>]` (a folder per student or flat files); Blackboard
`<assignment>_<username>_attempt_<yyyy-mm-dd-hh-mm-ss>[_<file>]`; Gradescope's `submission_<id>/` folders
with their `submission_metadata.yml`. A name there that does not read as a person's name (`person_name`: a
formula, markup) is never used as one.

The notebook picked in a student's files is the one named like the assignment's, else the only notebook;
other files are reported as ignored, and a student with no notebook gets a "missing" result. When an LMS
kept several uploads of the assignment's notebook (Canvas renames later ones `name-1.ipynb`, `name-2.ipynb`),
the newest is graded and the result says so.

Student ids keep every script's letters ("Zoë-Smith", "张伟"), in Unicode's NFKC form so that the same name
typed on two systems (composed, decomposed, full-width) is one student, and at most `MAX_ID_BYTES` long (a
longer name is cut and given a short hash suffix; the original name is kept in the result's notes, so in
`grades.csv`). Two different names that would become the same id are both graded, the later one under the
id with a hash suffix, and both are flagged; ids that read the same once common Cyrillic and Greek lookalikes
are folded (`alice` and Cyrillic `аlice`) are flagged too. Nothing about a name stops the batch.

Submissions are plain files: every entry is examined with `lstat`, and symbolic links, devices, FIFOs and
sockets are refused with a reason (never followed, never read; a reason never quotes what a file holds).
The chosen notebook is copied (opened without following links) into a private folder before anything reads
it, so what is graded cannot change or point elsewhere afterwards.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import tempfile
import unicodedata
import zipfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

_UNSAFE = re.compile(r"[^\w.-]+")  # \w is Unicode: letters and digits of every script are kept
_UPLOAD = re.compile(r"-(\d+)$")  # Canvas's suffix on a student's later upload of the same file name
# What nbgrader's exchange writes beside every collected submission (`nbgrader collect`): its own records, not the
# student's files, so never "extra files".
NBGRADER_RECORDS = ("timestamp.txt", "submission_secret.txt")
# What an LMS's submission names say: Canvas files, Moodle files or folders, Blackboard files, Gradescope folders.
CANVAS = re.compile(r"^(?P<name>[^_]+)_(?P<late>LATE_)?(?P<id>\d+)_(?P<submission>\d+)_(?P<file>.+)$")
MOODLE = re.compile(r"^(?P<name>.+?)_(?P<id>\d+)_assignsubmission_(?:file|onlinetext)_(?P<file>.*)$")
BLACKBOARD = re.compile(r"^(?P<assignment>.+)_(?P<id>[^_]+)_attempt_(?P<when>\d{4}(?:-\d\d){5})(?:_(?P<file>.+))?$")
GRADESCOPE = re.compile(r"^submission_(?P<id>\d+)$")
# A person's name as an LMS writes it: a letter of any script first, then letters, digits, spaces and . , ' ’ -
PERSON = re.compile(r"[^\W\d_][\w .,'\u2019-]{0,119}")
MAX_ID_BYTES = 64  # a student id's longest UTF-8 form: it names folders and files (255 bytes at most each)
MAX_NOTEBOOK_BYTES = 64 * 2**20  # a submitted notebook larger than this is refused unread
# Common Cyrillic and Greek lookalikes of Latin letters (after NFKC), for the "reads the same" warning.
CONFUSABLES = str.maketrans("аеорсухіјѕԁһӏкмнтвАВЕКМНОРСТХІЈЅαοрνιτκΑΒΕΖΗΙΚΜΝΟΡΤΥΧ",
                            "aeopcyxijsdhlkmhtbABEKMHOPCTXIJSaopvitkABEZHIKMNOPTYX")


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
    submitted: str = ""  # when it was submitted, ISO 8601, where the export says (Blackboard: local time, no zone)

    def to_dict(self) -> dict[str, Any]:
        """The identity as plain data (a job's and a result's `lms` field)."""
        return asdict(self)


def person_name(text: str) -> str:
    """`text` when it reads as a person's name (`PERSON`), else "": a file name holding a formula, markup or
    anything else is never used as a name (the student's id stands in for it in the LMS files)."""
    text = unicodedata.normalize("NFKC", text).strip()
    return text if PERSON.fullmatch(text) else ""


def lms_identity(name: str) -> LmsIdentity | None:
    """The LMS identity in a file or folder name of an export, or None for a name no LMS wrote."""
    if match := MOODLE.match(name):
        prefix = f"{match['name']}_{match['id']}_assignsubmission_file_"
        return LmsIdentity("moodle", match["id"], person_name(match["name"]), prefix=prefix)
    if match := CANVAS.match(name):
        prefix = name[: match.start("file")].rstrip("_")
        return LmsIdentity("canvas", match["id"], person_name(match["name"]), bool(match["late"]), prefix)
    if match := BLACKBOARD.match(name):
        day, time = match["when"][:10], match["when"][11:].replace("-", ":")
        return LmsIdentity("blackboard", match["id"], person_name(match["id"]), prefix=name[: match.end("when")],
                           submitted=f"{day}T{time}")
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
                                             person_name(fields["name"]), prefix=current,
                                             email=fields.get("email", ""),
                                             submitted=gradescope_time(fields.get("created_at", "")))
            current, fields = line.strip().rstrip(":").strip("'\""), {}
        elif match := re.match(r"^[\s-]*:(name|sid|email|created_at):\s*(.*)$", line):
            fields.setdefault(match[1], match[2].strip().strip("'\""))
    return found


def gradescope_time(text: str) -> str:
    """Gradescope's `created_at` (`2026-03-03 10:15:07.811011000 -05:00`) in ISO 8601; "" when it is not one."""
    match = re.fullmatch(r"(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d)(?:\.\d+)? ?([+-]\d\d:?\d\d|Z)", text.strip())
    return f"{match[1]}T{match[2]}{match[3]}" if match else ""


@dataclass
class Submission:
    """One student's submission: the notebook to grade, or the problem that prevents grading."""

    student: str
    notebook: Path | None
    problem: dict[str, str] | None = None
    notes: list[str] = field(default_factory=list)
    lms: LmsIdentity | None = None


def notebook_sha256(submission: Submission) -> str:
    """The SHA-256 of `submission`'s notebook file ("" when it has none): a regrade compares it with the graded one."""
    return hashlib.sha256(submission.notebook.read_bytes()).hexdigest() if submission.notebook else ""


def student_id(name: str) -> str:
    """A student id nbgrader and file systems accept, from a folder or file-name prefix.

    The name in NFKC form, each run of characters other than letters, digits, `_`, `.` and `-` (path
    separators, spaces, punctuation) turned into one `-`; "unnamed" when nothing is left; longer than
    `MAX_ID_BYTES` in UTF-8, cut and suffixed with 8 hex digits of the name's hash.
    """
    cleaned = _UNSAFE.sub("-", unicodedata.normalize("NFKC", name).strip()).strip("-.") or "unnamed"
    if len(cleaned.encode()) <= MAX_ID_BYTES:
        return cleaned
    return f"{_cut(cleaned, MAX_ID_BYTES - 9)}-{_digest(name)}"


def _cut(text: str, size: int) -> str:
    """The longest prefix of `text` whose UTF-8 form has at most `size` bytes."""
    return text.encode()[:size].decode(errors="ignore").rstrip("-.")


def _digest(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8", errors="surrogatepass")).hexdigest()[:8]


def reads_as(student: str) -> str:
    """How an id reads: lower case, common Cyrillic and Greek lookalikes folded to Latin letters."""
    return student.translate(CONFUSABLES).casefold()


def plain_file_problem(path: Path) -> str | None:
    """Why `path` is not a plain file a submission may be (None when it is); `lstat` only: nothing followed."""
    try:
        mode = path.lstat().st_mode
    except OSError as error:
        return f"{path.name} cannot be examined ({error.strerror})"
    if stat.S_ISREG(mode):
        return None
    kind = ("a symbolic link" if stat.S_ISLNK(mode) else "a FIFO" if stat.S_ISFIFO(mode) else
            "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else
            "not a regular file")
    return f"{path.name} is {kind}, not a plain file: refused unread (submit the notebook file itself)"


def _plain_files(folder: Path) -> tuple[list[Path], list[str]]:
    """The regular files under `folder` (links never followed), and why each other entry was refused."""
    files, refused = [], []
    for directory, folders, names in os.walk(folder, followlinks=False):
        for name in sorted(names) + [f for f in folders if os.path.islink(os.path.join(directory, f))]:
            path = Path(directory) / name
            if problem := plain_file_problem(path):
                refused.append(problem)
            else:
                files.append(path)
    return sorted(files), refused


def private_copy(path: Path, into: Path) -> Path:
    """Copy the plain file `path` into the private folder `into` (opened without following a link).

    Raises:
        ValueError: `path` is not a plain file, or is larger than `MAX_NOTEBOOK_BYTES` (nothing of it is quoted).
    """
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:
        raise ValueError(plain_file_problem(path) or f"{path.name} cannot be opened ({error.strerror})") from None
    with os.fdopen(descriptor, "rb") as source:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{path.name} is not a plain file: refused unread")
        if info.st_size > MAX_NOTEBOOK_BYTES:
            raise ValueError(f"{path.name} is {info.st_size / 2**20:.0f} MiB, over the {MAX_NOTEBOOK_BYTES // 2**20} "
                             "MiB a notebook may be: refused unread")
        target = into / hashlib.sha256(str(path).encode("utf-8", errors="surrogatepass")).hexdigest()[:16] / path.name
        target.parent.mkdir(mode=0o700)
        with open(target, "xb") as copy:
            shutil.copyfileobj(source, copy)
    return target


def private_copies(submissions: list[Submission], into: Path) -> list[Submission]:
    """`submissions` with each notebook read from a private copy under `into`; one that cannot be copied
    becomes that student's "invalid" result."""
    copied = []
    for submission in submissions:
        if submission.notebook is None:
            copied.append(submission)
            continue
        try:
            copied.append(replace(submission, notebook=private_copy(submission.notebook, into)))
        except ValueError as error:
            copied.append(replace(submission, notebook=None, problem={"status": "invalid", "reason": str(error)}))
    return copied


def extract_zip(archive: Path, into: Path) -> Path:
    """Extract `archive` into `into`, refusing members that would land outside it."""
    with zipfile.ZipFile(archive) as zipped:
        for member in zipped.namelist():
            target = (into / member).resolve()
            if not target.is_relative_to(into.resolve()):
                raise ValueError(f"{archive} contains {member!r}, which points outside the extraction folder")
        zipped.extractall(into)
    return into


def _choose(student: str, files: list[Path], assignment: str, refused: list[str] | None = None) -> Submission:
    """The submission among one student's plain files (`refused`: why their other entries were not read)."""
    refused = refused or []
    notebooks = [f for f in files if f.suffix == ".ipynb" and ".ipynb_checkpoints" not in f.parts]
    named = [f for f in notebooks if _UPLOAD.sub("", f.stem).endswith(assignment)]
    chosen = max(named, key=_upload_number) if named else (notebooks[0] if len(notebooks) == 1 else None)
    notes = []
    if len(named) > 1:
        notes.append(f"{len(named)} uploads of {assignment}.ipynb: graded the newest, {chosen.name} (an LMS numbers "
                     "later uploads -1, -2...)")
    others = sorted(f.name for f in files if f != chosen and ".ipynb_checkpoints" not in f.parts
                    and f.name not in NBGRADER_RECORDS)
    if others:
        notes.append(f"extra files ignored: {', '.join(others)}")
    notes += refused
    if chosen is None and refused:
        return Submission(student, None, {"status": "invalid", "reason": refused[0]}, notes[:-len(refused)] +
                          refused[1:])
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

    Nothing is followed or read here but folder listings (`lstat`); a student's entry that is a link or
    another non-regular file becomes that student's "invalid" result.
    """
    by_student: dict[str, list[Path]] = {}
    refusals: dict[str, list[str]] = {}
    notes: dict[str, list[str]] = {}
    named_by: dict[str, str] = {}  # id -> the NFC name it was made from
    identities: dict[str, LmsIdentity] = {}
    gradescope = gradescope_identities(folder) if not plain_file_problem(folder / "submission_metadata.yml") else {}
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith(".") or entry.name == "__MACOSX" or entry.name == "submission_metadata.yml":
            continue
        identity = gradescope.get(entry.name) if GRADESCOPE.match(entry.name) else lms_identity(entry.name)
        mode = entry.lstat().st_mode
        refused: list[str] = []
        if stat.S_ISDIR(mode):
            name = identity.name if identity and identity.name and identity.system in ("moodle", "gradescope") \
                else entry.name
            nested = entry / assignment if (entry / assignment).is_dir() and not (entry / assignment).is_symlink() \
                else entry
            files, refused = _plain_files(nested)
        else:
            name = identity.name if identity and identity.name else entry.name.split("_")[0] if "_" in entry.name \
                else entry.stem
            problem = plain_file_problem(entry)
            files, refused = ([], [problem]) if problem else ([entry], [])
        student = _unique_id(name, named_by, notes)
        if identity is not None:
            identities[student] = _latest(identities.get(student), identity)
        by_student.setdefault(student, []).extend(files)
        refusals.setdefault(student, []).extend(refused)
    _warn_lookalikes(list(by_student), notes)
    chosen = [_choose(student, files, assignment, refusals[student]) for student, files in sorted(by_student.items())]
    return [replace(c, notes=notes.get(c.student, []) + c.notes, lms=identities.get(c.student)) for c in chosen]


def _unique_id(name: str, named_by: dict[str, str], notes: dict[str, list[str]]) -> str:
    """The id of `name`; one another name already took gets a hash suffix, and both are noted."""
    normal = unicodedata.normalize("NFC", name)  # full-width and other compatibility forms stay distinct names
    student = student_id(name)
    if len(unicodedata.normalize("NFKC", name).encode()) > MAX_ID_BYTES:
        notes.setdefault(student, []).append(f"the name {name!r} is too long for an id: graded as {student!r}")
    first = named_by.setdefault(student, normal)
    if first == normal:
        return student
    other = f"{_cut(student, MAX_ID_BYTES - 9)}-{_digest(name)}"
    named_by[other] = normal
    notes.setdefault(student, []).append(f"{first!r} and {name!r} make the same id: {name!r} is graded as {other!r}")
    notes.setdefault(other, []).append(f"{name!r} and {first!r} make the same id {student!r}: graded as {other!r}; "
                                       "check which account is whose")
    return other


def _warn_lookalikes(students: list[str], notes: dict[str, list[str]]) -> None:
    """Note ids that read the same once lookalike letters are folded (`alice`, Cyrillic `аlice`)."""
    groups: dict[str, list[str]] = {}
    for student in students:
        groups.setdefault(reads_as(student), []).append(student)
    for group in (g for g in groups.values() if len(g) > 1):
        for student in group:
            others = ", ".join(repr(o) for o in group if o != student)
            notes.setdefault(student, []).append(f"the id {student!r} reads the same as {others} (lookalike letters "
                                                 "from another script): check they are different students")


def _latest(known: LmsIdentity | None, found: LmsIdentity) -> LmsIdentity:
    """One student's identity over several files: the same account, late if any file is late, submitted when the
    last one was."""
    if known is None:
        return found
    return replace(known, late=known.late or found.late, submitted=max(known.submitted, found.submitted))


def collect(source: Path, assignment: str, workdir: Path | None = None) -> list[Submission]:
    """Every submission in `source` (a folder or a .zip; zips are extracted under `workdir`), each notebook
    copied into a private folder (under `workdir`, else a new temporary folder) before anything reads it."""
    if not source.exists():
        raise FileNotFoundError(f"{source} does not exist: give a folder of submissions or an LMS .zip export")
    if source.is_file():
        if not zipfile.is_zipfile(source):
            raise ValueError(f"{source} is neither a folder nor a .zip archive of submissions")
        workdir = workdir or Path(tempfile.mkdtemp(prefix="harness-submissions-"))
        source = extract_zip(source, workdir)
    submissions = collect_folder(source, assignment)  # before the private folder exists: never a student of its own
    return private_copies(submissions, Path(tempfile.mkdtemp(prefix="harness-private-", dir=workdir)))
