"""The release-time answerability audit (issue 38, item 3): does anything a student tree ships answer an exercise?

For each graded exercise (a `check("NN-task", ...)` call of the lesson's notebook), every top-level function and
class of the tree's `harness` package whose kind and signature can fill the exercise's slot (`Shape.fits`, read from
source) or can through a one-line wrapper (`answerability_worker.wrappers`: its arguments rearranged, a factory
curried, a scheduler read at a step), every drill answer the tree carries, and every code snippet its texts show
(markdown, notebooks' given cells, drill prompts, starters and hints, the probe tables' hints:
`answerability_worker.snippets`, each tried as the solution cell, renamed, or as the body of the exercise's stub),
is passed to the exercise's visible check in place of the student's object, inside the tree (`answerability_worker`,
one subprocess per lesson in bubblewrap, every file read-only but its scratch folder, each check time-bounded). A
candidate counts as a hit when it earns the points: the visible check passes on it in the tree, and the grading
check does too (the exercise's probe on a hidden case, in the tree beside the candidate, judged here by the
instructor's judge, as `harness grade` does). A recorded reference (`harness.contract.recorded`) answers only the
visible case, so it passes the first and fails the second. Importing and pasting are the same test: a pasted copy is
the same code, and where a candidate needs its module's globals the import route covers it.
`harness release --student` fails unless every hit is declared (`harness.grading.answerable`).
"""

from __future__ import annotations

import ast
import base64
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.contract.case import Case
from harness.contract.protocol import decide, preserved_state
from harness.grading.answerability_worker import shapes
from harness.grading.answerable import ALLOWED, KNOWN_ANSWERABLE
from harness.grading.layout import REPO_ROOT, discover_assignments
from harness.judge.cases import draw_cases

WORKER = Path(__file__).with_name("answerability_worker.py")
# The hidden case a visible hit is confirmed on: drawn as the grader draws one, from a fixed key (the audit's own).
AUDIT_KEY = b"answerability audit"


def isolated(scratch: str) -> list[str]:
    """The bubblewrap command line the worker runs under.

    The worker runs shipped functions on arguments they were never written for (a process id of 0 or -1, a folder
    to install into): every file it reaches is read-only but `scratch`, its temporary and home folder (the course's
    installer, called as a candidate, once uninstalled the instructor's editable install); in its own PID namespace,
    a signal sent to every process reaches only the audit's own, and the worker is that namespace's first process
    (`--as-pid-1`), which such a signal spares (a candidate called with a process id of -1 once killed it); it has
    no network.
    """
    return ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/dev/shm",
            "--bind", scratch, scratch, "--unshare-pid", "--as-pid-1", "--unshare-net", "--unshare-ipc",
            "--die-with-parent", "--new-session"]


# The worker sees the tree's harness, never the instructor's editable install of the repository.
_BOOTSTRAP = ("import runpy, sys\n"
              "sys.path.insert(0, sys.argv[2])\n"
              "sys.meta_path = [f for f in sys.meta_path if 'Editable' not in type(f).__name__ "
              "and 'Editable' not in getattr(f, '__name__', '')]\n"
              "sys.argv = [sys.argv[1], sys.argv[3]]\n"
              "runpy.run_path(sys.argv[0], run_name='__main__')\n")


@dataclass(frozen=True)
class Hit:
    """A shipped object (`source`: `module.name`, or `drill answer <id>`) that passes `task`'s check, and its file."""

    task: str
    source: str
    file: str


@dataclass(frozen=True)
class Limits:
    """The audit's time bounds: one check, one lesson's worker."""

    per_check_s: int = 20
    screen_s: int = 2
    per_lesson_s: int = 600


@dataclass(frozen=True)
class Scope:
    """What to audit: the lessons (empty: every one) and their exercises (empty: every one), the modules whose objects
    are candidates (prefixes of their names) and the files whose texts are (prefixes of their paths in the tree);
    neither named: every module, drill answer and text of the tree."""

    assignments: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    texts: tuple[str, ...] = ()  # prefixes of the files whose texts are candidates (naming modules or texts narrows)
    tasks: tuple[str, ...] = ()  # the exercises of those lessons to audit (empty: every one)


@dataclass
class AuditResult:
    """What the audit found: the hits, how many candidates it tried and how long it took."""

    hits: list[Hit] = field(default_factory=list)
    tried: int = 0
    checked: int = 0  # candidates that passed the screen and ran the check
    timed_out: list[str] = field(default_factory=list)  # "task: source" whose check ran past its bound
    visible_only: list[str] = field(default_factory=list)  # "task: source" that the grading check refused
    unaudited: dict[str, str] = field(default_factory=dict)  # task -> why it could not be audited
    cpu_s: float = 0.0

    def keys(self) -> set[tuple[str, str]]:
        """(task, source) of every hit."""
        return {(hit.task, hit.source) for hit in self.hits}


def _code_cells(assignment: str, repo_root: Path) -> list[dict[str, Any]]:
    notebook = json.loads((repo_root / "solutions" / assignment / f"{assignment}.ipynb").read_text(encoding="utf-8"))
    return [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]


def _parsed(source: str | list[str]) -> ast.Module | None:
    text = "".join(source) if isinstance(source, list) else source
    lines = [line for line in text.splitlines() if not line.lstrip().startswith(("%", "!")) and "### " not in line]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


def _unmarked(source: str) -> str:
    """A solution cell's source without nbgrader's marker lines."""
    return "\n".join(line for line in source.splitlines() if "### " not in line) + "\npass"


def _imports(cells: list[dict[str, Any]]) -> str:
    """The notebook's top-level import statements, each guarded (one that fails in the tree is skipped)."""
    found = []
    for cell in cells:
        tree = _parsed(cell["source"])
        for node in tree.body if tree else []:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.append(f"try:\n    {ast.unparse(node)}\nexcept Exception:\n    pass")
    return "\n".join(dict.fromkeys(found))


def _runnable(source: str) -> str:
    """A code cell as plain Python: IPython's magic and shell lines become `pass`, so the blocks they sit in stay."""
    return "\n".join(line[:len(line) - len(line.lstrip())] + "pass" if line.lstrip().startswith(("%", "!")) else line
                      for line in source.splitlines())


def _given(cells: list[dict[str, Any]], task: str) -> list[str]:
    """The code cells a student's Run all executes before `task`'s solution cell (given cells and the solution cells
    above it; test cells left out), each as plain Python: where the check needs given objects, what the solution and
    each candidate run after."""
    found = []
    for cell in cells:
        nbgrader = cell.get("metadata", {}).get("nbgrader", {})
        if nbgrader.get("grade_id") == f"{task}-code":
            break
        if not (nbgrader.get("grade") and not nbgrader.get("solution")):
            found.append(_runnable("".join(cell["source"])))
    return found


def _release_cell(assignment: str, task: str, repo_root: Path) -> str:
    """`task`'s solution cell as the release notebook hands it out (the stub in place of the answer)."""
    release = repo_root / "notebooks" / assignment / f"{assignment}.ipynb"
    cells = json.loads(release.read_text(encoding="utf-8"))["cells"] if release.is_file() else []
    return next(("".join(c["source"]) for c in cells
                 if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == f"{task}-code"), "")


def stubs(assignment: str, task: str, repo_root: Path = REPO_ROOT) -> dict[str, str]:
    """Function name -> its signature line(s), as `task`'s stub in the release notebook declares it (decorators and
    `def ...:`), where a text's single line is tried as the body."""
    tree = _parsed(_release_cell(assignment, task, repo_root))
    found = {}
    for node in tree.body if tree else []:
        if isinstance(node, ast.FunctionDef):
            node.body = [ast.Pass()]
            found[node.name] = ast.unparse(node).rsplit("\n", 1)[0]
    return found


def _around_answer(source: str) -> str:
    """A solution cell's given code: its lines outside the answer's markers (what uses an answer that is a value)."""
    kept, inside = [], False
    for line in source.splitlines():
        inside = (inside or line.lstrip().startswith("### BEGIN SOLUTION")) and not line.lstrip().startswith(
            "### END SOLUTION")
        if not inside and "### " not in line:
            kept.append(line)
    return _runnable("\n".join(kept))


def assigned_answers(source: str) -> list[str]:
    """The names a solution cell's answer binds by plain assignment at the top level (`CONFIG = dict(...)` between
    the markers): an answer that is a value, which the cell's given code then uses."""
    lines = source.splitlines()
    begins = [n for n, line in enumerate(lines) if line.startswith("### BEGIN SOLUTION")]
    ends = [n for n, line in enumerate(lines) if line.startswith("### END SOLUTION")]
    found = []
    for begin, end in zip(begins, ends, strict=False):
        tree = _parsed("\n".join(lines[begin + 1:end]))
        found += [target.id for node in (tree.body if tree else []) if isinstance(node, ast.Assign)
                  for target in node.targets if isinstance(target, ast.Name)]
    return list(dict.fromkeys(found))


def exercises(assignment: str, repo_root: Path = REPO_ROOT) -> list[dict[str, Any]]:
    """The graded exercises of `assignment`, as the worker takes them: the task, its test cell's check() arguments,
    the solution's own answer (`setup`: the notebook's imports and the solution cells; or, for a check that needs the
    given cells' objects, `given`: the code cells above the solution cell, then `solution`), what a text candidate
    runs after (`imports`: the notebook's imports and the answers above the exercise's), and its slots (name ->
    `Shape` fields; an explain drill's answer variable -> its drill; `values`: an answer that is a value, such as a
    config, which the solution cell's given code, `around`, then uses to make what check() receives)."""
    from harness.drills.lesson import NOTEBOOK_DRILLS, answer_name

    cells = _code_cells(assignment, repo_root)
    imports = _imports(cells)
    solutions = {cell["metadata"]["nbgrader"]["grade_id"]: "".join(cell["source"]) for cell in cells
                 if cell.get("metadata", {}).get("nbgrader", {}).get("solution")}
    # every answer of the lesson, in order, as the answered notebook defines them (a later one may call an earlier)
    guarded = {grade_id: f"try:\n{textwrap.indent(_unmarked(source), '    ')}\nexcept Exception:\n    pass"
               for grade_id, source in solutions.items()}
    answers = "\n".join(guarded.values())
    found = []
    for cell in cells:
        tree = _parsed(cell["source"])
        for node in ast.walk(tree) if tree else []:
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "check"
                    and node.args and isinstance(node.args[0], ast.Constant)):
                continue
            task = node.args[0].value
            solution = _unmarked(solutions.get(f"{task}-code", ""))
            defined = shapes(solution)
            arguments = ", ".join(ast.unparse(a) for a in node.args[1:])
            used = {n.id for a in node.args[1:] for n in ast.walk(a) if isinstance(n, ast.Name)}
            slots = defined if "globals" in used else {n: s for n, s in defined.items() if n in used}
            explain = {answer_name(t): drill for t, drill in NOTEBOOK_DRILLS if t == task and answer_name(t) in used}
            values = [] if slots or explain else assigned_answers(solutions.get(f"{task}-code", ""))
            above = list(guarded)[:list(guarded).index(f"{task}-code")] if f"{task}-code" in guarded else []
            found.append({"task": task, "arguments": arguments, "setup": f"{imports}\n{answers}",
                          "imports": "\n".join([imports, *(guarded[grade_id] for grade_id in above)]),
                          "given": _given(cells, task), "solution": solution,
                          "stubs": {n: s for n, s in stubs(assignment, task, repo_root).items() if n in slots},
                          "slots": {n: {**vars(s), "names": sorted(s.names),
                                        "required_keywords": sorted(s.required_keywords)} for n, s in slots.items()},
                          "text_slots": explain, "values": values,
                          "around": _around_answer(solutions.get(f"{task}-code", "")) if values else ""})
    return list({exercise["task"]: exercise for exercise in found}.values())


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def hidden_case(assignment: str, task: str) -> Case:
    """The hidden case on which the audit confirms a visible hit of `task`."""
    return draw_cases(AUDIT_KEY, assignment, "answerability-audit", task)[1]


def earns(task: str, observation: str, case: Case) -> bool:
    """Whether the instructor's judge passes `observation` (base64 wire bytes of `task`'s probe on `case`)."""
    try:
        with preserved_state():
            decide(task, base64.b64decode(observation), case)
    except Exception:  # noqa: BLE001 - a failure, a forged or malformed observation, a reference that raised
        return False
    return True


def audit_lesson(tree: Path, assignment: str, result: AuditResult, limits: Limits, scope: Scope,
                 repo_root: Path) -> None:
    """Run the worker on `assignment`'s exercises inside `tree`; add what it found to `result`: a candidate the
    visible check passes is a hit when the instructor's judge passes its hidden observation too."""
    request = {"tree": str(tree.resolve()), "per_check_s": limits.per_check_s, "screen_s": limits.screen_s,
               "modules": list(scope.modules), "texts": list(scope.texts),
               "exercises": [{**exercise, "hidden_seed": hidden_case(assignment, exercise["task"]).seed}
                             for exercise in exercises(assignment, repo_root)
                             if not scope.tasks or exercise["task"] in scope.tasks]}
    with tempfile.TemporaryDirectory(prefix="audit-") as scratch:
        report = Path(scratch) / "report.jsonl"
        # given cells run as the grader runs them: the grading budget, plots drawn off screen
        environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1",
                       "HARNESS_BUDGET": "grading", "MPLBACKEND": "Agg", "TMPDIR": scratch, "HOME": scratch,
                       "MPLCONFIGDIR": f"{scratch}/matplotlib"}
        try:
            ran = subprocess.run([*isolated(scratch), sys.executable, "-I", "-c", _BOOTSTRAP, str(WORKER),
                                  str(tree.resolve()), str(report)],
                                 input=json.dumps(request), text=True, capture_output=True, env=environment,
                                 timeout=limits.per_lesson_s)
            if ran.returncode != 0 and not report.is_file():
                result.unaudited[assignment] = ("its worker did not start: "
                                                f"{(ran.stderr.strip().splitlines() or ['no message'])[-1][:300]}")
        except subprocess.TimeoutExpired:
            result.unaudited[assignment] = f"its worker ran past {limits.per_lesson_s} s: the rest was not tried"
        seen, finished = set(), set()
        for line in (report.read_text().splitlines() if report.is_file() else []):
            record = json.loads(line)
            seen.add(record["task"])
            if "done" in record:
                finished.add(record["task"])
                continue
            if "unaudited" in record:
                result.unaudited[record["task"]] = record["unaudited"]
                continue
            result.tried += 1
            result.checked += not record["screened"]
            what = f"{record['task']}: {record['label']}"
            if record["hit"] and record["hidden"] is None:
                result.timed_out.append(what)  # its probe on the hidden case ran past the bound
            elif record["hit"] and earns(record["task"], record["hidden"], hidden_case(assignment, record["task"])):
                result.hits.append(Hit(record["task"], record["label"], record["file"]))
            elif record["hit"]:
                result.visible_only.append(what)
            elif record["timed_out"]:
                result.timed_out.append(what)
        for exercise in request["exercises"]:
            task = exercise["task"]
            if task not in finished and task not in result.unaudited and assignment not in result.unaudited:
                result.unaudited[task] = ("its worker stopped while trying its candidates" if task in seen else
                                          "its worker stopped before reaching it")


def audit(tree: Path, scope: Scope = Scope(), limits: Limits = Limits(), repo_root: Path = REPO_ROOT) -> AuditResult:
    """Audit the student tree `tree` (within `scope`); the hits and the CPU time it took.

    Raises:
        RuntimeError: bubblewrap, which the worker runs in, is not installed.
    """
    if shutil.which("bwrap") is None:
        raise RuntimeError("the answerability audit runs what the tree ships in bubblewrap, which is not installed: "
                           "install it (`make bubblewrap`, or `apt-get install bubblewrap`), or give --no-audit")
    result = AuditResult()
    started = _children_cpu()
    for assignment in scope.assignments or discover_assignments(repo_root):
        audit_lesson(tree, assignment, result, limits, scope, repo_root)
    result.cpu_s = _children_cpu() - started
    return result


def undeclared(result: AuditResult) -> list[str]:
    """A message per hit neither allowed nor known: exercise, shipped object, file, and what to do."""
    return [f"{hit.task} is answered by {hit.source} ({hit.file}): its visible check passes on it. Withhold it from "
            "the student tree, or declare it in harness/grading/answerable.py (ALLOWED, with the reason)"
            for hit in result.hits if (hit.task, hit.source) not in ALLOWED | KNOWN_ANSWERABLE]


def stale(result: AuditResult) -> list[str]:
    """A message per declaration the whole audit no longer bears out: an allowed or known hit that is gone (the tables
    only shrink: a closed hit leaves them). Only for a whole audit."""
    unsure = {key for key in set(ALLOWED) | set(KNOWN_ANSWERABLE)  # not tried to the end: neither hit nor gone
              if f"{key[0]}: {key[1]}" in result.timed_out
              or any(key[0] == what or (what[2:3] == "_" and key[0][:2] == what[:2])  # a task, or a whole lesson
                     for what in result.unaudited)}
    gone = sorted((set(ALLOWED) | set(KNOWN_ANSWERABLE)) - result.keys() - unsure)
    return [f"{task} is no longer answered by {source}: remove it from harness/grading/answerable.py"
            for task, source in gone]


def summary(result: AuditResult) -> str:
    """One line: how many exercises shipped code answers, declared allowed or known, and where to read them."""
    tasks = {hit.task for hit in result.hits}
    allowed = sum((hit.task, hit.source) in ALLOWED for hit in result.hits)
    known = sum((hit.task, hit.source) in KNOWN_ANSWERABLE for hit in result.hits)
    line = (f"{len(tasks)} exercises answerable by shipped code ({len(result.hits)} hits of {result.tried} tried, "
            f"{result.checked} of them checked: "
            f"{allowed} declared allowed, {known} known, each with the work that will close it, "
            f"{len(result.hits) - allowed - known} undeclared; see harness/grading/answerable.py; "
            f"{len(result.visible_only)} more passed the visible check only, not the grading one); "
            f"audit CPU time {result.cpu_s:.0f} s")
    if result.unaudited:
        line += f"; not audited: {', '.join(f'{t} ({why})' for t, why in sorted(result.unaudited.items()))}"
    return line
