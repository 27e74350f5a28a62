"""Similar code at grade time: each answer cell against the code the student tree ships and against classmates.

Flags are for the instructor's review, never a score: `grades.csv` gets a `similar` column and `mistakes.md` and
`summary.md` a section listing each flag with its source and the share of the answer that matched.

- **Answers** are read from the submitted notebook file by the grader (`save_answers`, into `answers/`), never
  from the kernel: each release solution cell by its `grade_id`, and the code cells a student added, together
  as `own cells`.
- **Tokens**: Python tokens with the names the code binds (functions, arguments, variables) written `V`, so a
  rename changes nothing; comments, docstrings and import lines are left out, so the source's imports and
  a docstring add nothing. A match is a run of `K` equal tokens (a k-gram), so a moved argument or an added
  cast breaks only the runs that cross it.
- **Expected code** is no evidence: every k-gram of the release's code cells (the given code and each cell's
  starter) and of the model solution (`solutions/`) is left out on both sides, so an answer written as the
  lesson teaches it, which may be the shipped reference itself, is never flagged for it.
- **Shipped code** (`shipped_units`): every function and method of the student tree's `harness` (withheld
  paths left out; judges, probes and the drill bank included, as the library is: a reference, not
  boilerplate) and every string in it that is Python code (a hint's solution line, a drill's answer), each a
  unit named by file and function (or the text's name and line).
- **A flag** needs at least `MIN_TOKENS` matched tokens that are `MIN_SHARE` of the answer's own tokens (those
  not expected): a short answer, which honest students write alike, is never flagged. Between classmates, a
  k-gram found in `common_count` answers of the same cell or more is the class's common way of writing it (as
  MOSS ignores passages many submissions share) and counts for no pair.
"""

from __future__ import annotations

import ast
import bisect
import io
import json
import keyword
import math
import re
import tokenize
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from harness.grading.instructor_text import markdown_code, markdown_text
from harness.grading.jobs import write_atomically
from harness.grading.layout import REPO_ROOT
from harness.grading.student_tree import WITHHELD
from harness.grading.submissions import Submission

ANSWERS = "answers"  # answers/<student>.json: cell -> code, as read from the submitted notebook
OWN_CELLS = "own cells"  # the code cells a student added, together
K = 10  # tokens in a k-gram
MIN_TOKENS = 40  # matched tokens a flag needs, at the least
MIN_SHARE = 0.6  # share of the answer's own tokens that must match
CELL_CHARS = 20_000  # a cell's text is cut here: a huge cell costs no more than this
NOTEBOOK_BYTES = 20_000_000  # a larger file is not read for similarity
_SKIPPED = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
            tokenize.ENCODING, tokenize.ENDMARKER}
_WORDS = re.compile(r"\w+|[^\w\s]")
_PROSE = re.compile(r"\s*[A-Z][a-z']* [a-z]")  # "Fraction of ...": a sentence, not code


@dataclass(frozen=True)
class Flag:
    """One answer cell that matched shipped code or a classmate's same cell."""

    student: str
    cell: str  # the release cell's grade_id, or OWN_CELLS
    source: str  # "harness/metrics.py: accuracy" or, for a classmate, their student id
    classmate: bool
    share: float  # of the student's own tokens in the cell (for a pair: the higher of the two)
    tokens: int  # matched tokens

    def text(self) -> str:
        """`00-accuracy-code: 92% (85 tokens) of harness/metrics.py: accuracy`, or `... as classmate bob`."""
        where = f"the same cell of classmate {self.source}" if self.classmate else self.source
        return f"{self.cell}: {self.share:.0%} ({self.tokens} tokens) matches {where}"


def _dropped_lines(tree: ast.Module) -> set[int]:
    """Lines of import statements and docstrings."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value,
                                                                                                     str):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def _bound_names(tree: ast.AST) -> set[str]:
    """The names `tree` binds: functions, classes, arguments, assigned and imported-as names."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, ast.alias) and node.asname:
            names.add(node.asname)
    return names


def _raw_tokens(code: str) -> list[tokenize.TokenInfo]:
    """`code`'s Python tokens without comments, line breaks and indentation (SyntaxError if it has none)."""
    try:
        return [t for t in tokenize.generate_tokens(io.StringIO(code).readline) if t.type not in _SKIPPED]
    except tokenize.TokenError as error:
        raise SyntaxError(str(error)) from None


def _normalised(raw: Iterable[tokenize.TokenInfo], bound: set[str], dropped: set[int]) -> list[str]:
    """The tokens not on a `dropped` line, each name in `bound` written `V`."""
    return ["V" if t.type == tokenize.NAME and t.string in bound and not keyword.iskeyword(t.string) else t.string
            for t in raw if t.start[0] not in dropped]


def tokens(code: str) -> list[str]:
    """`code`'s tokens as compared: bound names as `V`, no comments, docstrings or import lines (the module
    docstring says why). Code that does not parse is compared word by word, its names as they are."""
    code = code[:CELL_CHARS]
    try:
        tree = ast.parse(code)
        return _normalised(_raw_tokens(code), _bound_names(tree), _dropped_lines(tree))
    except (SyntaxError, ValueError, RecursionError):
        return _WORDS.findall(code)


def kgrams(found: list[str]) -> list[int]:
    """The hash of each run of K tokens, in order (within one process: compared only there)."""
    return [hash(tuple(found[i:i + K])) for i in range(len(found) - K + 1)]


@dataclass(frozen=True)
class Answer:
    """An answer cell ready to compare: its k-grams, and which of its tokens are its own (not expected)."""

    grams: list[int]
    own: list[bool]  # per token

    @classmethod
    def of(cls, code: str, expected: set[int]) -> Answer:
        """`code` with every token covered by an `expected` k-gram (`expected_grams`) marked as not its own."""
        found = tokens(code)
        grams = kgrams(found)
        own = [True] * len(found)
        for i, gram in enumerate(grams):
            if gram in expected:
                own[i:i + K] = [False] * K
        return cls(grams, own)

    def matched(self, other: set[int] | frozenset[int]) -> int:
        """How many of this answer's own tokens a k-gram also in `other` covers."""
        covered = [False] * len(self.own)
        for i, gram in enumerate(self.grams):
            if gram in other:
                covered[i:i + K] = [True] * K
        return sum(c and o for c, o in zip(covered, self.own, strict=True))

    def size(self) -> int:
        """The answer's own tokens."""
        return sum(self.own)


def _code_cells(folder: Path) -> list[tuple[str | None, str]]:
    """(solution cell id or None, text) of each code cell of the notebooks in `folder`."""
    cells = []
    for path in sorted(folder.glob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "code":
                meta = cell.get("metadata", {}).get("nbgrader", {})
                cells.append((meta.get("grade_id") if meta.get("solution") else None, "".join(cell["source"])))
    return cells


def release_cells(assignment: str, repo_root: Path = REPO_ROOT) -> tuple[set[str], list[str]]:
    """The release's solution cell ids and the text of all its code cells."""
    cells = _code_cells(repo_root / "notebooks" / assignment)
    return {grade_id for grade_id, _ in cells if grade_id}, [text for _, text in cells]


def expected_grams(assignment: str, repo_root: Path = REPO_ROOT) -> set[int]:
    """The k-grams that are no evidence of copying: the release's code cells (given code and starters) and the
    model solution's (`solutions/`): what an honest answer is expected to hold."""
    cells = _code_cells(repo_root / "notebooks" / assignment) + _code_cells(repo_root / "solutions" / assignment)
    return {gram for _, text in cells for gram in kgrams(tokens(text))}


def answer_cells(notebook: dict, solution_ids: set[str], given: list[str]) -> dict[str, str]:
    """The student-editable code of a notebook (its JSON): each release solution cell by id, and the code cells
    that are neither a release cell nor the same text as one, together under OWN_CELLS."""
    cells: dict[str, str] = {}
    own = []
    released = set(given)
    for cell in notebook.get("cells", []) if isinstance(notebook, dict) else []:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        text = ("".join(s for s in source if isinstance(s, str)) if isinstance(source, list) else str(source))
        meta = cell.get("metadata")
        grade = meta.get("nbgrader") if isinstance(meta, dict) else None
        grade_id = grade.get("grade_id") if isinstance(grade, dict) else None
        if grade_id in solution_ids:
            cells[str(grade_id)] = text[:CELL_CHARS]
        elif grade_id is None and text not in released and text.strip():
            own.append(text)
    if own:
        cells[OWN_CELLS] = "\n".join(own)[:CELL_CHARS]
    return cells


def save_answers(submissions: Iterable[Submission], assignment: str, out: Path, repo_root: Path = REPO_ROOT) -> None:
    """Write each submission's answer cells (`answer_cells`, read from its notebook file) to `out`/answers/;
    a submission without a readable notebook gets none (an earlier one is removed)."""
    solution_ids, given = release_cells(assignment, repo_root)
    (out / ANSWERS).mkdir(parents=True, exist_ok=True)
    for submission in submissions:
        path = out / ANSWERS / f"{submission.student}.json"
        try:
            if submission.notebook is None or submission.notebook.stat().st_size > NOTEBOOK_BYTES:
                raise ValueError("no notebook to read")
            cells = answer_cells(json.loads(submission.notebook.read_bytes()), solution_ids, given)
        except (OSError, ValueError, RecursionError):
            path.unlink(missing_ok=True)
            continue
        write_atomically(path, json.dumps(cells))


def read_answers(out: Path, students: Iterable[str]) -> dict[str, dict[str, str]]:
    """The answers saved in `out` for `students` (those with none are left out)."""
    found = {}
    for student in students:
        path = out / ANSWERS / f"{student}.json"
        if path.is_file():
            cells = json.loads(path.read_text(encoding="utf-8"))
            found[student] = {str(cell): str(code) for cell, code in cells.items()}
    return found


@dataclass(frozen=True)
class Unit:
    """A piece of shipped code: where it is (`file: function`) and its k-grams."""

    where: str
    grams: frozenset[int]


def _code_string(text: str) -> bool:
    """Whether a string constant is Python code worth comparing (a hint's solution line, a drill's answer)."""
    if len(text) < 20 or _PROSE.match(text):
        return False
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return False
    return any(not (isinstance(s, ast.Expr) and isinstance(s.value, (ast.Name, ast.Constant))) for s in tree.body)


def _texts(tree: ast.Module) -> list[tuple[str, ast.Constant]]:
    """Each string constant given as a keyword argument or assigned to a name (alone, or in a tuple or list),
    labelled by that keyword or name."""
    held: list[tuple[str, ast.expr]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg:
            held.append((node.arg, node.value))
        elif isinstance(node, ast.Assign):
            held += [(target.id, node.value) for target in node.targets if isinstance(target, ast.Name)]
    texts = []
    for label, value in held:
        for item in value.elts if isinstance(value, (ast.Tuple, ast.List)) else [value]:
            if isinstance(item, ast.Constant) and isinstance(item.value, str):
                texts.append((label, item))
    return texts


def _file_units(path: Path, name: str) -> list[Unit]:
    """The functions, methods and code texts of one shipped file."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    raw, dropped = _raw_tokens(source), _dropped_lines(tree)
    starts = [t.start[0] for t in raw]
    functions = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.append((node.name, node))
        elif isinstance(node, ast.ClassDef):
            functions += [(f"{node.name}.{item.name}", item) for item in node.body
                          if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))]
    units = []
    for qualname, function in functions:
        first, last = function.lineno, function.end_lineno or function.lineno
        inside = raw[bisect.bisect_left(starts, first):bisect.bisect_right(starts, last)]
        found = _normalised(inside, _bound_names(function), dropped)
        units.append(Unit(f"{name}: {qualname}", frozenset(kgrams(found))))
    units += [Unit(f"{name}: the {label} text at line {node.lineno}", frozenset(kgrams(tokens(node.value))))
              for label, node in _texts(tree) if _code_string(node.value)]
    return [unit for unit in units if unit.grams]


def shipped_units(repo_root: Path = REPO_ROOT) -> tuple[list[Unit], dict[int, list[int]]]:
    """Every unit of the student tree's `harness` (`student_tree.WITHHELD` left out), and an index: k-gram ->
    the units holding it; built once per process and root."""
    return _shipped_units(repo_root.resolve())


@lru_cache(maxsize=2)
def _shipped_units(repo_root: Path) -> tuple[list[Unit], dict[int, list[int]]]:
    units: list[Unit] = []
    for path in sorted((repo_root / "harness").rglob("*.py")):
        name = path.relative_to(repo_root).as_posix()
        if "__pycache__" in path.parts or any(name == w or name.startswith(f"{w}/") for w in WITHHELD):
            continue
        units += _file_units(path, name)
    index: dict[int, list[int]] = defaultdict(list)
    for number, unit in enumerate(units):
        for gram in unit.grams:
            index[gram].append(number)
    return units, dict(index)


def _flagged(answer: Answer, matched: int) -> float | None:
    """The share matched, when `matched` tokens make a flag; else None."""
    size = answer.size()
    share = matched / size if size else 0.0
    return share if matched >= MIN_TOKENS and share >= MIN_SHARE else None


def against_shipped(student: str, cell: str, answer: Answer, repo_root: Path = REPO_ROOT) -> Flag | None:
    """The shipped unit `answer` matches most, if that makes a flag."""
    units, index = shipped_units(repo_root)
    shared: dict[int, int] = defaultdict(int)
    for gram in set(answer.grams):
        for number in index.get(gram, ()):
            shared[number] += 1
    best: Flag | None = None
    for number in sorted(shared, key=lambda n: -shared[n])[:5]:
        matched = answer.matched(units[number].grams)
        share = _flagged(answer, matched)
        if share is not None and (best is None or share > best.share):
            best = Flag(student, cell, units[number].where, False, round(share, 3), matched)
    return best


def common_count(answers: int) -> int:
    """In how many answers of a cell a k-gram must be to be the class's common way of writing it: a quarter of
    the class, and never fewer than 5 (a copy passed around up to 4 students, or 7 of 30, is still flagged)."""
    return max(5, math.ceil(0.25 * answers))


def between_classmates(cell: str, answers: dict[str, Answer]) -> list[Flag]:
    """The pairs of `answers` (student -> the same cell) that match each other enough, once per pair."""
    holders: dict[int, set[str]] = defaultdict(set)
    for student, answer in answers.items():
        for gram in answer.grams:
            holders[gram].add(student)
    common = {gram for gram, students in holders.items() if len(students) >= common_count(len(answers))}
    sets = {student: set(answer.grams) - common for student, answer in answers.items()}
    flags = []
    students = sorted(answers)
    for i, one in enumerate(students):
        for other in students[i + 1:]:
            if len(sets[one] & sets[other]) < 1:
                continue
            pair = [(answers[a].matched(sets[b]), answers[a]) for a, b in ((one, other), (other, one))]
            shares = [(share, matched) for matched, answer in pair if (share := _flagged(answer, matched)) is not None]
            if shares:
                share, matched = max(shares)
                flags.append(Flag(one, cell, other, True, round(share, 3), matched))
                flags.append(Flag(other, cell, one, True, round(share, 3), matched))
    return flags


def find_similar(answers: dict[str, dict[str, str]], assignment: str, repo_root: Path = REPO_ROOT) -> list[Flag]:
    """Every flag of the class's `answers` (student -> cell -> code): against shipped code, then between
    classmates, sorted by student and cell."""
    expected = expected_grams(assignment, repo_root)
    prepared = {student: {cell: Answer.of(code, expected) for cell, code in cells.items()}
                for student, cells in answers.items()}
    flags = [flag for student, cells in prepared.items() for cell, answer in cells.items()
             if (flag := against_shipped(student, cell, answer, repo_root)) is not None]
    by_cell: dict[str, dict[str, Answer]] = defaultdict(dict)
    for student, cells in prepared.items():
        for cell, answer in cells.items():
            by_cell[cell][student] = answer
    for cell, same in sorted(by_cell.items()):
        flags += between_classmates(cell, same)
    return sorted(flags, key=lambda f: (f.student, f.cell, f.classmate, f.source))


def grades_column(flags: list[Flag]) -> dict[str, str]:
    """Student -> the `similar` cell of grades.csv (each flag's `text`, `; `-joined)."""
    column: dict[str, list[str]] = defaultdict(list)
    for flag in flags:
        column[flag.student].append(flag.text())
    return {student: "; ".join(texts) for student, texts in column.items()}


def section_lines(flags: list[Flag], compared: int, students: int) -> list[str]:
    """The `## Similar code` section of mistakes.md and summary.md: over how many of the `students` notebooks
    (`compared`: those with saved answers), then each flag (a classmate pair once) with its source and the
    share that matched, or a sentence saying nothing matched."""
    apart = students - compared
    lines = ["## Similar code (for review: no points changed)", "",
             f"The answer cells of {compared} of {students} notebooks"
             f"{f' ({apart} with no readable notebook, or graded before answers were kept)' if apart else ''}, "
             "as read from the submitted files, compared with the code the student tree ships and with classmates' "
             "same cell; the release's code and the model solution do not count. A flag is a reason to read both "
             f"side by side, not a finding: it needs {MIN_TOKENS} matching tokens or more, at least "
             f"{MIN_SHARE:.0%} of the cell's own code (names ignored).", ""]
    shown = [f for f in flags if not f.classmate or f.student < f.source]
    if not shown:
        return [*lines, "Nothing flagged: no answer cell matched shipped code or a classmate's."]
    lines += ["| student | cell | matches | share | tokens |", "|---|---|---|---|---|"]
    for flag in shown:
        source = f"classmate {markdown_text(flag.source)}" if flag.classmate else f"`{flag.source}`"
        lines.append(f"| {markdown_text(flag.student)} | {markdown_code(flag.cell)} | {source} | {flag.share:.0%} | "
                     f"{flag.tokens} |")
    return lines
