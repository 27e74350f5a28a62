"""The student tree's judges without the references that answer exercises (issue 38, item 1).

`withhold_references(target)` runs, in a child process of the instructor's tree, the visible check of every
exercise whose judge calls a `@recorded` reference (`harness.contract.recorded`) on the solution's own answer
(the notebook's imports and solution cells, as the answerability audit builds it) while recording, writes what the
references returned into the tree (`harness/judges/recorded.json`), and removes the body of every marked function
in the tree's `harness` package (the rest of each file unchanged). The tree's local checks then judge the visible
case against the recorded results; the grader's judges, in the instructor's tree, still compute them.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.grading.layout import REPO_ROOT

STUB = ("raise NotImplementedError(\"withheld: this reference stays with the instructor; the student course answers "
        "from what it returned on the visible case (harness/judges/recorded.json)\")")
_RECORD = ("import sys\n"
           "sys.path.insert(0, sys.argv[1])\n"
           "from harness.grading.references import record_solutions\n"
           "record_solutions(sys.argv[1], sys.argv[2])\n")


def _is_marker(decorator: ast.expr) -> bool:
    if isinstance(decorator, ast.Call):  # @recorded(weights=False)
        decorator = decorator.func
    return (isinstance(decorator, ast.Name) and decorator.id == "recorded") or (
        isinstance(decorator, ast.Attribute) and decorator.attr == "recorded")


def marked(source: str) -> list[ast.FunctionDef]:
    """The top-level functions of `source` decorated with `@recorded`."""
    return [node for node in ast.parse(source).body
            if isinstance(node, ast.FunctionDef) and any(_is_marker(d) for d in node.decorator_list)]


def stripped(source: str) -> str:
    """`source` with the body of each `@recorded` function (its docstring included) replaced by `STUB`."""
    lines = source.splitlines(keepends=True)
    for node in sorted(marked(source), key=lambda n: n.lineno, reverse=True):
        first = node.body[0]
        if first.lineno == node.lineno:
            raise ValueError(f"{node.name}: a recorded reference's body must start on its own line")
        indent = " " * first.col_offset
        lines[first.lineno - 1:node.end_lineno] = [f"{indent}{STUB}\n"]
    return "".join(lines)


def record_solutions(repo_root: str, out: str) -> None:
    """Run the visible check of every exercise whose judge calls a recorded reference on the solution, recording;
    save the table to `out`. Runs in a child process (the solutions' code runs there)."""
    import io
    from contextlib import redirect_stdout

    import torch

    from harness.checks import check
    from harness.contract.recorded import MARK, recording, save
    from harness.contract.registry import get
    from harness.grading.answerability import exercises
    from harness.grading.layout import discover_assignments

    root = Path(repo_root)
    table: dict[str, dict[str, object]] = {}
    for assignment in discover_assignments(root):
        for exercise in exercises(assignment, root):
            task = exercise["task"]
            judge = sys.modules[get(task).judge.__module__]
            if not any(hasattr(value, MARK) for value in vars(judge).values()):
                continue
            namespace: dict[str, object] = {"torch": torch, "nn": torch.nn}
            with recording() as calls, redirect_stdout(io.StringIO()):
                exec(compile(exercise["setup"], f"<{task} solution>", "exec"), namespace)
                check(task, *eval(f"({exercise['arguments']},)", namespace))  # noqa: S307 - the course's test cell
            for name, results in calls.items():
                table.setdefault(name, {}).update(results)
    save(table, Path(out))


def withhold_references(target: Path, repo_root: Path = REPO_ROOT) -> list[str]:
    """Record the references on the solutions' visible cases into `target`'s judges and strip their bodies from
    `target`'s harness; the names of the functions stripped."""
    with tempfile.TemporaryDirectory(prefix="recorded-") as scratch:
        out = Path(scratch) / "recorded.json"
        done = subprocess.run([sys.executable, "-c", _RECORD, str(repo_root.resolve()), str(out)],
                              cwd=scratch, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError("recording the judges' references on the solutions' visible cases failed (a solution "
                               f"that no longer passes its check?):\n{done.stderr[-3000:]}")
        (target / "harness" / "judges" / "recorded.json").write_bytes(out.read_bytes())
    names = []
    for path in sorted((target / "harness").rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        found = marked(source) if "recorded" in source else []
        if found:
            path.write_text(stripped(source), encoding="utf-8")
            module = ".".join(path.relative_to(target).with_suffix("").parts)
            names += [f"{module}.{node.name}" for node in found]
    return names
