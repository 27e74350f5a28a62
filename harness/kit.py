"""`harness new-exercise NN-task --title T --points P`: a new graded exercise's skeleton, in every place it lives.

One command writes what CONTRIBUTING.md ("A check") asks of an exercise, so that an author fills in the
exercise's content and nothing of its shape:

- the probe module `harness/checks/lessonNN/<task>.py` (a probe that builds its inputs from `case.seeded(...)`
  and records what the student's object returns) and the judge module `harness/judges/lessonNN/<task>.py` (what
  it enforces: the requirement table with one example requirement and the hints; a judge that rebuilds the
  inputs, recomputes a reference and compares through `harness.contract.compare`), both imported by their
  packages' `__init__`;
- the exercise's stubs in `tests/checks/test_lessonNN.py`: five mistakes (one of them the planted bug of the
  pipeline test, written once as a solution cell) and three correct variants, each failing with a TODO until
  it is written;
- the notebook's cells in `solutions/NN_name/NN_name.ipynb`, before the recap: the heading in the template's
  form with its `hint(...)` line, the solution cell and the graded test cell (nbgrader metadata, hidden
  tests), a hint cell; the introduction's count of exercises and points follows.

Nothing is written unless everything can be: an existing task id, a malformed one, or a lesson that does not
exist is refused with what to do instead.
"""

from __future__ import annotations

import argparse
import ast
import re
import secrets
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

from harness.grading.layout import REPO_ROOT

TASK_ID = re.compile(r"^(\d\d)-[a-z][a-z0-9]*(?:-[a-z0-9]+)*$")
SUMMARY = re.compile(r"\*\*Graded exercises:\*\* (\d+) \((\d+) points\)")
RECAP = re.compile(r"^## Recap", re.MULTILINE)
SECTION = re.compile(r"^## (.+)$", re.MULTILINE)
DRILL_LESSON = "11"  # its exercises are the drill bank's drills
LINE = 120


class KitError(Exception):
    """A request the kit refuses, with what to do instead."""


@dataclass(frozen=True)
class Exercise:
    """What the author asks for: the task id, the heading's title, the points, and optionally a new section."""

    task: str
    title: str
    points: int
    section: str | None = None

    @property
    def lesson(self) -> str:
        return self.task[:2]

    @property
    def name(self) -> str:
        """The task's module and function name: "16-top-k" -> "top_k"."""
        return self.task[3:].replace("-", "_")


@dataclass(frozen=True)
class Lesson:
    """Where one lesson's pieces live under a course root."""

    root: Path
    number: str
    assignment: str

    @property
    def notebook(self) -> Path:
        return self.root / "solutions" / self.assignment / f"{self.assignment}.ipynb"

    @property
    def probes(self) -> Path:
        return self.root / "harness" / "checks" / f"lesson{self.number}"

    @property
    def judges(self) -> Path:
        return self.root / "harness" / "judges" / f"lesson{self.number}"

    @property
    def tests(self) -> Path:
        return self.root / "tests" / "checks" / f"test_lesson{self.number}.py"


def find_lesson(exercise: Exercise, root: Path) -> Lesson:
    """The lesson `exercise` goes into, after checking that the request can be carried out."""
    if not TASK_ID.match(exercise.task):
        raise KitError(f"{exercise.task!r} is not a task id: write the lesson's two digits, then lowercase words "
                       "joined by '-' (like 04-train-step).")
    if exercise.points < 1:
        raise KitError(f"--points {exercise.points}: an exercise is worth a whole number of points, at least 1.")
    if not exercise.title.strip() or "\n" in exercise.title or "(`" in exercise.title:
        raise KitError("--title is the heading's title on one line (like '`top_k`'), without '(`'.")
    if exercise.lesson == DRILL_LESSON:
        raise KitError("lesson 11's exercises are the drill bank's drills: add a Drill to harness/drills/bank/ "
                       "instead (CONTRIBUTING.md, 'A drill').")
    found = sorted((root / "solutions").glob(f"{exercise.lesson}_*/{exercise.lesson}_*.ipynb"))
    if not found:
        known = sorted(p.name[:2] for p in (root / "solutions").glob("[0-9][0-9]_*") if p.is_dir())
        raise KitError(f"there is no lesson {exercise.lesson} (no solutions/{exercise.lesson}_name/ notebook); "
                       f"the lessons are {', '.join(known)}.")
    lesson = Lesson(root, exercise.lesson, found[0].parent.name)
    for package in (lesson.probes, lesson.judges):
        if not (package / "__init__.py").is_file():
            raise KitError(f"{package.relative_to(root)}/ is not a package of one module per task: the kit adds "
                           "a task module to it (CONTRIBUTING.md, 'A check').")
    if not lesson.tests.is_file():
        raise KitError(f"{lesson.tests.relative_to(root)} is missing: the kit appends the exercise's mistakes to it.")
    taken = [path.relative_to(root) for path in (lesson.probes / f"{exercise.name}.py",
                                                 lesson.judges / f"{exercise.name}.py")
             if path.exists()]
    taken += [path.relative_to(root) for path in (lesson.notebook, *lesson.probes.glob("*.py"))
              if f'"{exercise.task}"' in path.read_text()]
    if taken:
        raise KitError(f"task {exercise.task} exists already (in {', '.join(map(str, taken))}): pick another id.")
    return lesson


# ------------------------------------------------------------------------------------------------ python
def import_line(module: str, names: list[str], comment: str = "") -> str:
    """`from module import names  # comment`, on one line when it fits, else one name per line."""
    single, note = f"from {module} import {', '.join(names)}", f"  # {comment}" if comment else ""
    if len(single) <= LINE:
        return f"{single}{note}\n"
    return f"from {module} import ({note}\n" + "".join(f"    {name},\n" for name in names) + ")\n"


def add_import(source: str, module: str, name: str, comment: str = "") -> str:
    """`source` with `name` added (sorted) to its `from module import ...` statement."""
    tree = ast.parse(source)
    node = next((n for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == module), None)
    if node is None:
        raise KitError(f"no 'from {module} import ...' line to add {name} to")
    names = sorted({alias.name for alias in node.names} | {name})
    lines = source.splitlines(keepends=True)
    return "".join(lines[:node.lineno - 1]) + import_line(module, names, comment) + "".join(lines[node.end_lineno:])


def list_end(source: str, variable: str) -> int:
    """The line index (0-based) of the closing bracket of the module-level list `variable = [...]`."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == variable for t in node.targets) \
                and isinstance(node.value, ast.List):
            return node.end_lineno - 1
    raise KitError(f"no module-level list {variable} = [...] in the lesson's tests")


def list_start(source: str, variable: str) -> int:
    """The line index (0-based) where the module-level assignment `variable = ...` starts."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == variable for t in node.targets):
            return node.lineno - 1
    raise KitError(f"no module-level {variable} in the lesson's tests")


def probe_module(exercise: Exercise) -> str:
    """The probe side's skeleton: the inputs and the probe (the instrument and what it records)."""
    task, name, seed = exercise.task, exercise.name, zlib.crc32(exercise.task.encode()) % 9000 + 1000
    return f'''"""{task}, the probe.

TODO({task}): what the probe calls and what it records, in a sentence.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from harness.contract.case import Case
from harness.contract.registry import register


def task_inputs(case: Case) -> torch.Tensor:
    """The case's inputs, built alike by the probe and the judge (hidden cases: other shapes)."""
    generator = torch.Generator().manual_seed(case.seeded({seed} + (1 if case.hidden else 0)))
    rows, columns = (7, 5) if case.hidden else (4, 3)
    return torch.randn(rows, columns, generator=generator)


@register("{task}")
def probe_{name}({name}: Callable[..., Any], *, case: Case) -> dict:
    """Call `{name}` on the case's inputs; record what it returned (data only, never the expected value)."""
    return {{"returned": {name}(task_inputs(case))}}
'''


def judge_module(exercise: Exercise, section: str) -> str:
    """The judge side's skeleton: the requirement table and the hints it enforces, a judge that rebuilds the
    inputs, recomputes the reference and compares through the vocabulary."""
    task, name, lesson = exercise.task, exercise.name, exercise.lesson
    return f'''"""{task}, the judge.

TODO({task}): what the judge verifies, in a sentence.
"""

from __future__ import annotations

import torch

from harness.checks.lesson{lesson}.{name} import task_inputs
from harness.contract.case import Case
from harness.contract.compare import close_values, type_name
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges


def reference(inputs: torch.Tensor) -> torch.Tensor:
    """TODO({task}): the expected result, recomputed by the judge with its own torch."""
    return inputs * 2


@judges(
    "{task}",
    hints=Hints(
        nudge="TODO({task}): the first hint, a nudge",
        concept="TODO({task}): the idea behind the exercise, and why it matters",
        solution="TODO({task}): the solution, in a line or two",
        section="{section}",
    ),
    requires={{
        # One entry per requirement the exercise's text states, keyed by the failure code its violation gets.
        "wrong-output": Requirement(
            "TODO({task}): returns the inputs doubled, as the text states it",
            hint="TODO({task}): what a student reads after this failure (a nudge, never the solution)"),
    }},
)
def judge_{name}(seen: dict, *, case: Case) -> str:
    """TODO({task}): what is verified, in a sentence."""
    got, want = seen.get("returned"), reference(task_inputs(case))
    if not close_values(got, want):
        fail("wrong-output", observed=f"{name} returned {{type_name(got)}}"
             + (f" of shape {{tuple(got.shape)}}, {{got.dtype}}" if isinstance(got, torch.Tensor) else ""),
             expected=f"the inputs doubled: shape {{tuple(want.shape)}}, {{want.dtype}}",
             cause="TODO({task}): the likely causes, as candidates", where="the return statement of {name}")
    return "TODO({task}): what was verified, in a few words"
'''


def test_stubs(exercise: Exercise) -> tuple[str, str, str]:
    """(the block before MISTAKES, the MISTAKES entries, the CORRECT entries) of the lesson's tests."""
    task, name = exercise.task, exercise.name
    planted, todo = f"{name.upper()}_PLANTED", f"{name}_todo"
    block = (f"# {'-' * 64} {task}\n"
             f"# TODO({task}): the solution, two other right answers and five mistakes written from how people get\n"
             "# it wrong. Every stub below fails until it is written. The planted one is a solution cell (its source,\n"
             "# as in the notebook): the pipeline test plants it in the notebook, and this file runs it as a mistake.\n"
             f"{planted} = solution_cell(\n"
             f'    "def {name}(inputs):\\n"\n'
             f'    "    raise NotImplementedError(\'TODO({task}): the solution cell with one bug\')\\n",\n'
             f'    "{name}")\n\n\n'
             f"def {todo}(what: str):\n"
             f'    """A stub of {task}\'s tests: fails until it is written."""\n'
             f'    return lambda: pytest.fail(f"TODO({task}): write {{what}}")\n\n\n')
    mistakes = (f"    # {task}: TODO, one mistake per requirement at least\n"
                f'    Mistake("{task}", "wrong-output", "TODO", {planted}, story="TODO: the planted bug",\n'
                "            planted=True),\n"
                + "".join(f'    Mistake("{task}", "wrong-output", "TODO", {todo}("mistake {n}"), story="TODO"),\n'
                          for n in range(2, 6)))
    correct = "".join(f'    Correct("{task}", {todo}("{what}"), story="TODO"),\n'
                      for what in ("the solution", "right answer 2", "right answer 3"))
    return block, mistakes, correct


def add_test_stubs(source: str, exercise: Exercise) -> str:
    """The lesson's tests with the exercise's stubs: its block before MISTAKES, its entries in both lists."""
    block, mistakes, correct = test_stubs(exercise)
    source = add_import(source, "harness.checks.testing", "solution_cell")
    lines = source.splitlines(keepends=True)
    inserts = [(list_end(source, "CORRECT"), correct), (list_end(source, "MISTAKES"), mistakes),
               (list_start(source, "MISTAKES"), block)]
    for index, text in sorted(inserts, key=lambda insert: insert[0], reverse=True):
        lines.insert(index, text)
    return "".join(lines)


# ---------------------------------------------------------------------------------------------- notebook
def _code_cell(source: str, nbgrader: dict | None = None):
    import nbformat

    return nbformat.v4.new_code_cell(source, metadata={"nbgrader": nbgrader} if nbgrader else {})


def add_notebook_cells(notebook, exercise: Exercise) -> str:
    """Insert the exercise's cells before the notebook's recap (after its last exercise); the section they join."""
    import nbformat

    cells, task, name = notebook.cells, exercise.task, exercise.name
    graded = [i for i, c in enumerate(cells) if c.cell_type == "code"
              and c.metadata.get("nbgrader", {}).get("grade") and not c.metadata["nbgrader"].get("solution")]
    after = graded[-1] + 1 if graded else 1
    at = next((i for i in range(after, len(cells)) if cells[i].cell_type == "markdown"
               and RECAP.search(cells[i].source)), len(cells))
    ids = {c.get("id") for c in cells}

    def new_id() -> str:
        while (cell_id := secrets.token_hex(4)) in ids:
            pass
        ids.add(cell_id)
        return cell_id

    if at < len(cells) and (start := RECAP.search(cells[at].source).start()):  # the recap shares a cell: split it
        before, recap = cells[at].source[:start].rstrip() + "\n", cells[at].source[start:]
        cells[at].source = before.rstrip("\n")
        cells.insert(at + 1, nbformat.v4.new_markdown_cell(recap))
        cells[at + 1].id, at = new_id(), at + 1
    sections = [m.group(1).strip() for c in cells[:at] if c.cell_type == "markdown" for m in SECTION.finditer(c.source)]
    section = exercise.section or (sections[-1] if sections else "")
    points = f"{exercise.points} point{'s' if exercise.points != 1 else ''}"
    text = (f"### Exercise {len(graded) + 1} — {exercise.title} (`{task}`, {points})\n\n"
            f"TODO({task}): what to write, stated so that every requirement of the check's table can be read "
            "here:\nwhat it takes, what it returns (types, shapes, dtypes), what it must not change.\n\n"
            f'Stuck? Run `hint("{task}")` in a new cell; run it again for a more explicit hint.')
    if exercise.section:
        text = f"## {exercise.section}\n\nTODO({task}): the section's idea, a small demo before the exercise.\n\n{text}"
    new = [nbformat.v4.new_markdown_cell(text),
           _code_cell(f'def {name}(inputs: torch.Tensor) -> torch.Tensor:\n    """TODO({task}): what it returns."""\n'
                      f'    ### BEGIN SOLUTION\n    raise NotImplementedError("TODO({task}): the solution")\n'
                      "    ### END SOLUTION",
                      {"grade": False, "grade_id": f"{task}-code", "locked": False, "schema_version": 3,
                       "solution": True}),
           _code_cell(f'check("{task}", {name})\n### BEGIN HIDDEN TESTS\ncheck("{task}", {name}, hidden=True)\n'
                      "### END HIDDEN TESTS",
                      {"grade": True, "grade_id": task, "locked": True, "points": exercise.points,
                       "schema_version": 3, "solution": False}),
           _code_cell(f'# Stuck? Uncomment and run for a hint; each run prints a more explicit one.\n# hint("{task}")',
                      )]
    for cell in new:
        cell.id = new_id()
    cells[at:at] = new
    summary = SUMMARY.search(cells[0].source) if cells else None
    if summary:
        total = sum(c.metadata["nbgrader"].get("points") or 0 for c in cells if c.cell_type == "code"
                    and c.metadata.get("nbgrader", {}).get("grade") and not c.metadata["nbgrader"].get("solution"))
        cells[0].source = SUMMARY.sub(f"**Graded exercises:** {len(graded) + 1} ({total:g} points)", cells[0].source)
    return section


# ------------------------------------------------------------------------------------------------- command
def new_exercise(exercise: Exercise, root: Path = REPO_ROOT) -> list[Path]:
    """Write the exercise's skeleton under `root` (a course checkout); the files written or changed.

    Raises:
        KitError: the request cannot be carried out (nothing is written then).
    """
    import nbformat

    lesson = find_lesson(exercise, root)
    notebook = nbformat.read(lesson.notebook, as_version=4)
    section = add_notebook_cells(notebook, exercise)
    if not section:
        raise KitError(f"{lesson.notebook.relative_to(root)} has no '## ' section heading: pass --section.")
    comment = "noqa: F401 (registers them)"
    writes = {
        lesson.probes / f"{exercise.name}.py": probe_module(exercise),
        lesson.judges / f"{exercise.name}.py": judge_module(exercise, section),
        lesson.probes / "__init__.py": add_import((lesson.probes / "__init__.py").read_text(),
                                                  f"harness.checks.lesson{lesson.number}", exercise.name, comment),
        lesson.judges / "__init__.py": add_import((lesson.judges / "__init__.py").read_text(),
                                                  f"harness.judges.lesson{lesson.number}", exercise.name, comment),
        lesson.tests: add_test_stubs(lesson.tests.read_text(), exercise),
        lesson.notebook: nbformat.writes(notebook) + "\n",
    }
    for path, text in writes.items():
        path.write_text(text)
    return list(writes)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `harness new-exercise`."""
    parser.add_argument("task", help="the new task's id, NN-short-name (NN: an existing lesson)")
    parser.add_argument("--title", required=True, help="the heading's title, e.g. '`top_k`'")
    parser.add_argument("--points", required=True, type=int, help="the test cell's points")
    parser.add_argument("--section", help="start a new section (a '## ' heading) for the exercise; by default it "
                        "joins the lesson's last section")
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help="the course checkout to write into")


def run(args: argparse.Namespace) -> int:
    """Write the skeleton and say what to fill in; 2 (and why) when the request is refused."""
    exercise = Exercise(args.task, args.title, args.points, args.section)
    try:
        written = new_exercise(exercise, args.root)
    except KitError as error:
        print(f"harness new-exercise: {error}", file=sys.stderr)
        return 2
    print(f"{exercise.task}: wrote the skeleton of its exercise (every TODO({exercise.task}) is yours to fill in):")
    for path in written:
        print(f"  {path.relative_to(args.root)}")
    print("Then: the exercise's text and solution in the notebook; the requirement table, hints and probe; the\n"
          "judge; five mistakes (one planted) and three correct variants. Check with\n"
          f"  pytest tests/checks/test_every_exercise.py -k {exercise.task}\n"
          f"  pytest tests/checks/test_lesson{exercise.lesson}.py tests/test_requirements.py "
          "tests/test_notebook_template.py\nand regenerate the release with `make release`.")
    return 0
