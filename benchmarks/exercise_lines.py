"""Hand-written lines per exercise: for every registered task, the lines an author wrote for it, by part, and the
median over all tasks (issue 42 item 6; the figures are in CONTRIBUTING.md, "Lines per exercise").

    .venv/bin/python benchmarks/exercise_lines.py [--root DIR]

It parses files and imports nothing of the course: it runs in about 2 s on the 2-core machine.

The counting rule
-----------------
- **What is counted**: non-blank lines, docstrings and comments included (an author writes and a reviewer reads
  them). A module's header (its docstring and its imports, `from __future__` included) is counted too, but in a
  column of its own, so that the median is also given without headers.
- **Which files**: a lesson NN's probe side (`harness/checks/lessonNN.py` or `harness/checks/lessonNN/`), its judge
  side (`harness/judges/lessonNN...`), its tests (`tests/checks/test_lessonNN.py`) and its solution notebook
  (`solutions/NN_*/NN_*.ipynb`); any other module of `harness/checks` and `harness/judges` a task reaches
  (`harness/checks/param_groups.py`); and for lesson 11, whose exercises are drills, the drill bank
  (`harness/drills/bank/`) and its judge side (`harness/judges/drills/`). Not counted: the floor every task shares
  (`harness.contract`, `harness.drills`' machinery, and `FLOOR` below: `check`/`hint`, `Mistake`).
- **The tasks** are what the registry registers, found by parsing: a probe side's `@register("NN-task", ...)` (or
  a top-level call of a `..register...` function with the task id first: lesson 11's `_register_drill`).
- **The units**: each module is cut into its top-level statements, each with the comment lines above it. A
  top-level collection (a list, tuple or dict assigned to a name) whose elements name an exercise is cut further
  into those elements: `MISTAKES`' and `CORRECT`'s `Mistake("NN-task", ...)`/`Correct("NN-task", ...)` (the lists
  `tests/exercises.py` reads), the drill bank's whys by drill id.
- **Who a unit belongs to**: a unit that names an exercise (a decorator or call with the id as its first argument,
  or `id=`/`drill_id=` the id, or a dict key) is that exercise's root; from its roots, an exercise reaches every
  top-level definition whose name its units use (in the same module, or imported from another counted module),
  transitively. A unit's lines are divided equally among the exercises that reach it (a lesson's `common`
  function used by three tasks: a third each); "shared" in the table is the part of a task's lines that came
  from such divided units. A module's header is divided among the exercises that reach the module. What no
  exercise reaches: in a lesson's `harness` modules (an `__init__`, a registration loop), it is divided among the
  lesson's tasks; in a lesson's tests, it is the lesson's own behavioural tests, reported apart and not counted
  in any task; in a drill module, it is divided among the module's drills.
- **The notebook**: a task's exercise text, from its heading (`### Exercise k — ... (`NN-task`, ...)`) to its
  solution cell, and the solution cell itself. Not counted: the graded test cell and the hint cell (the same
  four and two lines in every exercise, written by the kit) and the lesson's prose and demos around exercises.
  Lesson 11's notebook is generated from the bank (`harness.drills.notebook`): its prompts and starters are
  counted where they are written, in the bank's `Drill(...)`.
- **Lesson 11's drill-backed tasks** count their lesson-11 modules' share plus their drill's own lines (the bank
  counted as probe, its judge, answers and whys as judge); the table marks them, and the median is also given
  without them.
- **What issue 42 keeps as it is**: its "Done when" asks that every existing mistake, correct variant and message
  keep its result and message. Of each task's lines, the report also gives those: the **words** a student reads
  (the lines of `fail(...)`, `Requirement(...)` and `Hints(...)` calls: messages, requirement tables, hints), the
  **records** (the `Mistake`/`Correct` entries of the tests) and the **text** (the exercise's); and the rest: the
  **answers** (the tests' other lines: the wrong and right answers the records run, and what builds them), the
  **code** (the probe and the judge but their words) and the headers.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("probe", "judge", "tests", "text")
# The same lines by kind: what issue 42's "Done when" keeps as it is (words, records, text), and the rest
KEPT, KINDS = ("words", "records", "text"), ("words", "records", "answers", "code")
TARGET = 200  # issue 42's median
# The floor: harness modules every exercise uses, never written for one
FLOOR = ("harness/checks/__init__.py", "harness/checks/core.py", "harness/checks/testing.py")
_TASK_ID = re.compile(r"\d\d-[a-z0-9-]+")
_ID_KEYWORDS = ("id", "drill_id")
# The calls whose lines are words a student reads: a failure's message, a requirement table, the hints
WORDS = ("fail", "Requirement", "Hints")


@dataclass
class Unit:
    """A piece of a module: its non-blank lines, which part and lesson it is of, the exercises it names (roots), the
    top-level names it binds and the (module, name) it uses; the exercises that reach it are filled in later."""

    path: str
    line: int
    part: str
    lines: int
    header: bool = False
    words: int = 0
    record: bool = False
    names: frozenset[str] = frozenset()
    binds: tuple[str, ...] = ()
    uses: set[tuple[str, str]] = field(default_factory=set)
    reached: set[str] = field(default_factory=set)


def _non_blank(lines: list[str], first: int, last: int) -> int:
    """Non-blank lines among `lines[first - 1:last]` (1-based, inclusive)."""
    return sum(1 for line in lines[first - 1:last] if line.strip())


def _part(path: str) -> str:
    """The part a file is of: probe, judge or tests."""
    if path.startswith("tests/"):
        return "tests"
    return "judge" if path.startswith("harness/judges/") else "probe"


def _module_name(path: str) -> str:
    """The dotted module name of a repository-relative .py path."""
    parts = path.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _named_ids(node: ast.AST, known: set[str]) -> set[str]:
    """The exercises `node` names as a call's first argument or `id=`/`drill_id=` keyword (searched through the
    node), or as a dict key."""
    found = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            candidates = sub.args[:1] + [k.value for k in sub.keywords if k.arg in _ID_KEYWORDS]
            found |= {c.value for c in candidates if isinstance(c, ast.Constant) and c.value in known}
    return found


def _statement_ids(statement: ast.stmt, known: set[str]) -> set[str]:
    """The exercises a top-level statement names: through its decorators for a definition, anywhere for a call."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return set().union(*(_named_ids(d, known) for d in statement.decorator_list))
    return _named_ids(statement, known) if isinstance(statement, (ast.Expr, ast.Assign, ast.AnnAssign)) else set()


def _elements(statement: ast.stmt, known: set[str]) -> list[tuple[ast.AST, set[str]]]:
    """The elements of a top-level collection assignment, each with the exercises it names; [] where none names
    one (the statement stays whole)."""
    value = statement.value if isinstance(statement, (ast.Assign, ast.AnnAssign)) else None
    if isinstance(value, (ast.List, ast.Tuple)):
        found = [(element, _named_ids(element, known)) for element in value.elts]
    elif isinstance(value, ast.Dict):
        found = [(v, {k.value} if isinstance(k, ast.Constant) and k.value in known else set())
                 for k, v in zip(value.keys, value.values, strict=True)]
    else:
        return []
    return found if any(ids for _, ids in found) else []


def _binds(statement: ast.stmt) -> tuple[str, ...]:
    """The top-level names a statement binds."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return (statement.name,)
    targets = statement.targets if isinstance(statement, ast.Assign) else (
        [statement.target] if isinstance(statement, ast.AnnAssign) else [])
    return tuple(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))


def _imports(nodes: Iterable[ast.AST], module: str) -> dict[str, tuple[str, str]]:
    """The names `from M import a as b` binds: b -> (M, a); `import M as b` -> (M, "")."""
    aliases = {}
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module:
            base = node.module
            if node.level:
                base = ".".join(module.split(".")[: -node.level] + [node.module])
            aliases.update({a.asname or a.name: (base, a.name) for a in node.names})
        elif isinstance(node, ast.Import):
            aliases.update({a.asname: (a.name, "") for a in node.names if a.asname})
    return aliases


def _uses(node: ast.AST, aliases: dict[str, tuple[str, str]], module: str, top: set[str],
          own: tuple[str, ...] = ()) -> set[tuple[str, str]]:
    """The (module, name) pairs `node` uses: a top-level name of its own module, or an imported one (a module
    imported under a name is the module itself, with its attributes read as its names). A name bound inside
    `node` (an argument, a local; not `own`, the top-level names it binds) is its own."""
    nodes = list(ast.walk(node))
    local = {sub.arg for sub in nodes if isinstance(sub, ast.arg)}
    local |= {sub.id for sub in nodes if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store)}
    local -= set(own)
    aliases = {**aliases, **_imports(nodes, module)}
    used = set()
    for sub in nodes:
        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id in aliases:
            base, name = aliases[sub.value.id]
            used.add((f"{base}.{name}" if name else base, sub.attr))
        elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
            if sub.id in aliases:
                used.add(aliases[sub.id])
            elif sub.id in top and sub.id not in local:
                used.add((module, sub.id))
    return used


def _word_lines(node: ast.AST) -> set[int]:
    """The line numbers `node`'s WORDS calls span (a call inside another counted once)."""
    spanned = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            name = sub.func.attr if isinstance(sub.func, ast.Attribute) else getattr(sub.func, "id", "")
            if name in WORDS:
                spanned.update(range(sub.lineno, sub.end_lineno + 1))
    return spanned


def _header(statement: ast.stmt, index: int) -> bool:
    """Whether a top-level statement is header: the module's docstring or an import."""
    docstring = index == 0 and isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
    return docstring or isinstance(statement, (ast.Import, ast.ImportFrom))


def parse_module(path: str, text: str, tree: ast.Module, known: set[str]
                 ) -> tuple[list[Unit], dict[str, tuple[str, str]]]:
    """`text`, the module at `path` (parsed: `tree`), cut into units, and the names its imports bind (the rule in
    this module's docstring). Every non-blank line is in exactly one unit; the header's are in one, the last."""
    lines = text.splitlines()
    module, part = _module_name(path), _part(path)
    aliases = _imports(tree.body, module)
    top = {name for statement in tree.body for name in _binds(statement)}
    units, start, header = [], 1, 0
    for index, statement in enumerate(tree.body):
        end = len(lines) if index == len(tree.body) - 1 else statement.end_lineno
        split, inner, element_start = _elements(statement, known), 0, max(start, statement.lineno + 1)
        for element, ids in split:
            if ids:
                counted = _non_blank(lines, element_start, element.end_lineno)
                uses = _uses(element, aliases, module, top)
                units.append(Unit(path, element_start, part, counted, names=frozenset(ids), uses=uses,
                                  record=part == "tests"))
                inner += counted
            element_start = element.end_lineno + 1
        binds, counted = _binds(statement), _non_blank(lines, start, end) - inner
        if _header(statement, index):
            header += counted
        else:
            names = frozenset() if split else frozenset(_statement_ids(statement, known))
            uses = _uses(statement, aliases, module, top, binds)
            words = sum(1 for number in _word_lines(statement) if number >= start and lines[number - 1].strip())
            units.append(Unit(path, start, part, counted, words=words, names=names, binds=binds, uses=uses))
        start = end + 1
    return units + [Unit(path, 1, part, header, header=True)], aliases


def _python_files(root: Path) -> Iterator[str]:
    """The counted modules, repository-relative: harness/checks, harness/judges, the drill bank and the lessons'
    tests, less the floor."""
    for pattern in ("harness/checks/**/*.py", "harness/judges/**/*.py", "harness/drills/bank/**/*.py",
                    "tests/checks/test_lesson*.py"):
        for path in sorted(root.glob(pattern)):
            relative = path.relative_to(root).as_posix()
            if relative not in FLOOR:
                yield relative


def _lesson(path: str) -> str | None:
    """The lesson a lesson module is of ("harness/checks/lesson04/fit.py" -> "04"), None for another."""
    found = re.match(r"(?:harness/(?:checks|judges)/lesson|tests/checks/test_lesson)(\d\d)", path)
    return found.group(1) if found else None


def find_tasks(trees: dict[str, ast.Module], drill_of: dict[str, str]) -> list[str]:
    """The task ids a lesson's harness modules register: the first argument of `@register("NN-task", ...)` or
    `@judges("NN-task", ...)`, or of a call of a function whose name holds "register" or "judge" (lesson 11's
    `_judge_drill("11-task", ...)`), and lesson 11's notebook drills (`drill_of`)."""
    found = set(drill_of)
    for path, tree in trees.items():
        lesson = _lesson(path)
        if lesson is None or not path.startswith("harness/"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                task = node.args[0].value
                if ("register" in name or "judge" in name) and isinstance(task, str) and _TASK_ID.fullmatch(task) \
                        and task[:2] == lesson:
                    found.add(task)
    return sorted(found)


def find_drills(trees: dict[str, ast.Module]) -> set[str]:
    """The drill ids the bank defines: `Drill(id="...")` or `explain(id="...")`."""
    return {k.value.value for path, tree in trees.items() if path.startswith("harness/drills/bank/")
            for node in ast.walk(tree) if isinstance(node, ast.Call)
            for k in node.keywords if k.arg == "id" and isinstance(k.value, ast.Constant)}


def notebook_drills(root: Path) -> dict[str, str]:
    """Lesson 11's task id -> drill id (`harness.drills.lesson.NOTEBOOK_DRILLS`, read from its source)."""
    tree = ast.parse((root / "harness/drills/lesson.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "NOTEBOOK_DRILLS":
            return dict(ast.literal_eval(node.value))
    raise LookupError("harness/drills/lesson.py defines no NOTEBOOK_DRILLS")


def exercise_text(root: Path, task: str) -> int:
    """Non-blank lines of `task`'s exercise text (from its heading to its solution cell) and solution cell, in its
    lesson's solution notebook; 0 where no cell holds its solution (lesson 11's, generated from the bank)."""
    notebooks = sorted(root.glob(f"solutions/{task[:2]}_*/{task[:2]}_*.ipynb"))
    cells = json.loads(notebooks[0].read_text())["cells"] if notebooks else []
    ids = [cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") for cell in cells]
    if f"{task}-code" not in ids:
        return 0
    solution = ids.index(f"{task}-code")
    heading = f"(`{task}`"
    for first in range(solution - 1, -1, -1):
        source = "".join(cells[first]["source"]).splitlines()
        marks = [i for i, line in enumerate(source) if line.startswith("### ") and heading in line]
        if marks:
            text = source[marks[0]:] + [line for cell in cells[first + 1:solution + 1]
                                         for line in "".join(cell["source"]).splitlines()]
            return sum(1 for line in text if line.strip())
    raise LookupError(f"{task}: no heading '### Exercise k — ... ({heading}, P points)' before its solution cell")


@dataclass(frozen=True)
class Share:
    """What one unit gives one task: where it starts, its part ("headers" for a header), its lines and how many
    exercises share them; of its lines, how many are words (in WORDS calls), and whether it is a test record."""

    where: str
    part: str
    lines: int
    owners: int
    words: int = 0
    record: bool = False


@dataclass
class Count:
    """Each task's shares, which tasks are lesson 11's drill-backed ones, and the lessons' behavioural tests' lines,
    counted in no task."""

    shares: dict[str, list[Share]]
    drill_backed: set[str]
    apart: dict[str, int]

    def parts(self, task: str) -> dict[str, float]:
        """`task`'s lines by part (PARTS and "headers"), "shared" (how many came from units others share), and by
        kind (KINDS: what issue 42 keeps as it is, and the rest)."""
        found = dict.fromkeys((*PARTS, "headers", "shared", *KINDS), 0.0)
        for share in self.shares[task]:
            found[share.part] += share.lines / share.owners
            found["shared"] += share.lines / share.owners if share.owners > 1 else 0.0
            if share.part not in ("text", "headers"):  # those are kinds of their own
                kind = "records" if share.record else "answers" if share.part == "tests" else "code"
                found[kind] += (share.lines - share.words) / share.owners
                found["words"] += share.words / share.owners
        return found


def _reach(units: list[Unit], aliases: dict[str, dict[str, tuple[str, str]]], known: set[str]) -> None:
    """Fill in each unit's `reached`: the exercises whose roots reach it through the names units use."""
    by_name: dict[tuple[str, str], Unit] = {}
    for unit in units:
        by_name.update({(_module_name(unit.path), name): unit for name in unit.binds})

    def resolve(ref: tuple[str, str], depth: int = 0) -> Unit | None:
        module, name = ref
        if ref in by_name:
            return by_name[ref]
        if depth < 8 and name in aliases.get(module, {}):  # a name a module imports, used through it
            return resolve(aliases[module][name], depth + 1)
        return None

    for exercise in known:
        todo = [unit for unit in units if exercise in unit.names]
        while todo:
            unit = todo.pop()
            if exercise in unit.reached:
                continue
            unit.reached.add(exercise)
            todo += [found for found in map(resolve, unit.uses) if found is not None]


def count(root: Path = ROOT) -> Count:
    """Every registered task's hand-written lines by part, by this module's rule."""
    texts = {path: (root / path).read_text() for path in _python_files(root)}
    trees = {path: ast.parse(text) for path, text in texts.items()}
    drill_of = notebook_drills(root)
    tasks, drills = find_tasks(trees, drill_of), find_drills(trees)
    known = set(tasks) | drills
    units, aliases = [], {}
    for path, text in texts.items():
        found, aliases[_module_name(path)] = parse_module(path, text, trees[path], known)
        units += found
    _reach(units, aliases, known)
    by_file: dict[str, set[str]] = defaultdict(set)
    for unit in units:
        by_file[unit.path] |= unit.reached
    shares: dict[str, list[Share]] = {exercise: [] for exercise in known}
    apart: dict[str, int] = defaultdict(int)
    for unit in units:
        owners = by_file[unit.path] if unit.header else unit.reached
        lesson = _lesson(unit.path)
        if not owners and lesson is not None:
            if unit.part == "tests":
                apart[lesson] += unit.lines
                continue
            owners = {task for task in tasks if task[:2] == lesson}
        elif not owners:
            owners = by_file[unit.path]
        share = Share(f"{unit.path}:{unit.line}", "headers" if unit.header else unit.part, unit.lines, len(owners),
                      unit.words, unit.record)
        for exercise in owners:
            shares[exercise].append(share)
    for task, drill in drill_of.items():
        shares[task] += shares[drill]
    for task in set(tasks) - set(drill_of):
        where = f"solutions/{task[:2]}_*.ipynb: {task}"
        shares[task].append(Share(where, "text", exercise_text(root, task), 1))
    return Count({task: shares[task] for task in tasks}, set(drill_of), dict(apart))


def total(parts: dict[str, float], *, headers: bool = True) -> float:
    """A task's lines: its parts, with or without headers."""
    return sum(parts[part] for part in PARTS) + (parts["headers"] if headers else 0.0)


def kept_lines(parts: dict[str, float]) -> float:
    """A task's lines that issue 42 keeps as it is: its words, records and text."""
    return sum(parts[kind] for kind in KEPT)


def report(counted: Count) -> str:
    """The table (Markdown) and the medians."""
    parts = {task: counted.parts(task) for task in counted.shares}
    rows = ["| task | probe | judge | tests | text | headers | total | of which shared |", "|---|" + "---:|" * 7]
    for task, found in parts.items():
        mark = " (drill)" if task in counted.drill_backed else ""
        cells = [found[p] for p in (*PARTS, "headers")] + [total(found), found["shared"]]
        rows.append(f"| {task}{mark} | " + " | ".join(f"{c:.0f}" for c in cells) + " |")
    lesson_tasks = [t for t in parts if t not in counted.drill_backed]
    medians = [
        ("all tasks", list(parts), True), ("all tasks, headers left out", list(parts), False),
        ("without lesson 11's drill-backed tasks", lesson_tasks, True),
        ("without them, headers left out", lesson_tasks, False)]
    lines = ["", *rows, ""]
    for label, chosen, headers in medians:
        value = statistics.median(total(parts[t], headers=headers) for t in chosen)
        lines.append(f"median lines per exercise, {label} ({len(chosen)}): {value:.0f}")
    part_medians = ", ".join(f"{p} {statistics.median(c[p] for c in parts.values()):.0f}"
                             for p in (*PARTS, "headers", "shared"))
    lines.append(f"median by part over all tasks: {part_medians}")
    kind_medians = ", ".join(f"{k} {statistics.median(c[k] for c in parts.values()):.0f}"
                             for k in (*KEPT, "answers", "code", "headers"))
    lines.append(f"median by kind over all tasks: {kind_medians}")
    kept = statistics.median(kept_lines(c) for c in parts.values())
    rest = statistics.median(total(c) - kept_lines(c) for c in parts.values())
    lines.append(f"median of what issue 42 keeps as it is (words, records, text): {kept:.0f}; "
                 f"of the rest (answers, code and headers): {rest:.0f}")
    cut = statistics.median(max(0.0, total(c) - TARGET) / (total(c) - kept_lines(c)) for c in parts.values())
    over = [t for t, c in parts.items() if kept_lines(c) > TARGET]
    over_answering = [t for t, c in parts.items() if kept_lines(c) + c["answers"] > TARGET]
    lines.append(f"for a median of {TARGET} with those kept as they are, the median task must lose "
                 f"{cut:.0%} of the rest; over {TARGET} on what is kept alone: {len(over)} tasks, "
                 f"with their answers: {len(over_answering)}")
    largest = sorted(parts, key=lambda t: -total(parts[t]))[:5]
    lines.append("largest: " + ", ".join(f"{t} {total(parts[t]):.0f}" for t in largest))
    lines.append(f"lessons' own behavioural tests, in no task: {sum(counted.apart.values())} lines "
                 f"({', '.join(f'{k} {v}' for k, v in sorted(counted.apart.items()))})")
    return "\n".join(lines)


def itemised(counted: Count, task: str) -> str:
    """Every unit `task` is charged for: where it starts, its part, its lines and the share the task gets."""
    rows = [f"| {s.where} | {s.part} | {s.lines} | 1/{s.owners} | {s.lines / s.owners:.1f} |"
            for s in sorted(counted.shares[task], key=lambda s: (s.part, s.where))]
    return "\n".join(["| unit | part | lines | share | counted |", "|---|---|---:|---:|---:|", *rows,
                      f"total: {total(counted.parts(task)):.0f}"])


def main(argv: list[str] | None = None) -> int:
    """Print the table and the medians, or one task's units."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository (default: this one)")
    parser.add_argument("--task", help="list the units this task is charged for, with their shares")
    arguments = parser.parse_args(argv)
    counted = count(arguments.root)
    if arguments.task is not None and arguments.task not in counted.shares:
        parser.error(f"no task {arguments.task!r}: the tasks are {', '.join(counted.shares)}")
    print(itemised(counted, arguments.task) if arguments.task else report(counted))
    return 0


if __name__ == "__main__":
    sys.exit(main())
