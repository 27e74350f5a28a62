"""Read every student-editable cell's source in the grader's process, before any kernel runs, for reaches
an answer may not make: dynamic code, the judge side and the check machinery, private torch.

Nothing in the kernel can interfere with this: it reads the submitted source with `ast`, never runs it.
A finding names what was found and where (cell, line); `autograde` fails that exercise
(`FORBIDDEN_CODE`) and flags the submission. What is looked for:

- dynamic code: `__import__`, `importlib`, `exec`/`eval`/`compile` of anything but a literal string,
  `getattr`/`setattr`/`delattr` with a name that is not a literal, `sys.modules`, `globals()`/`vars()`
  subscripted by a built name;
- private torch: `torch._C`, `DisableTorchFunction`, any `torch._*` (or `torch.x._y`) name, imported or used;
- harness names outside the allowlist of the cell: `DEFAULT_ALLOWED` plus every harness name the given cells
  above it import (the judge side, drills' answers included, the check machinery and the drill bank's probes
  are never on it), followed through `import harness`, aliases and literal `getattr`.

Cells that are not the student's (given code, tests) are not read: they are the release's, restored.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from nbformat.notebooknode import NotebookNode

FORBIDDEN_CODE = "forbidden-code"
# Harness modules (with all they hold) and names any answer may use, before the names the lesson's own given cells
# import are added. Nothing here answers an exercise: `harness.metrics.accuracy` would answer 00-accuracy,
# `harness.repro.seed_worker` 03-worker-init, `harness.train.train_one_epoch` 04-train-epoch, so those modules are
# allowed only by name, in the lessons whose given cells import them.
DEFAULT_ALLOWED = ("harness.checks", "harness.plots", "harness.env", "harness.budget", "harness.repro.seed_everything",
                   "harness.data.LabeledTensorDataset", "harness.data.SHAPE_CLASSES", "harness.data.shapes",
                   "harness.data.digits", "harness.data.two_moons", "harness.data.spirals", "harness.data.binary_toy",
                   "harness.data.adding_problem")
# Never allowed, even when a release imports a parent package (`import harness`).
WITHHELD = ("harness.contract.registry", "harness.contract.protocol", "harness.grading", "harness.judge",
            "harness.judges", "harness.drills.bank")
DYNAMIC_CALLS = ("exec", "eval", "compile")
PACKAGE = Path(__file__).resolve().parents[1]  # the harness package
NAME_CALLS = ("getattr", "setattr", "delattr")


@dataclass(frozen=True)
class Finding:
    """One forbidden reach in a student cell: what, where, and which exercise it costs (None: no exercise)."""

    task: str | None
    cell: str
    line: int
    what: str

    def sentence(self) -> str:
        """The finding for the grades CSV."""
        return f"{self.cell}, line {self.line}: {self.what}"


def scan_notebook(notebook: NotebookNode) -> list[Finding]:
    """The forbidden reaches in `notebook`'s solution cells (IPython magics and shell lines are skipped).

    A solution cell may use `DEFAULT_ALLOWED` and the harness names the given cells above it import (the
    release's own cells, restored before the scan): lesson 04 imports `harness.train.fit` after its exercises,
    so its 04-fit answer may not call it. A name bound to a harness module in a cell above (`import harness`)
    is followed into the solution cells that use it.
    """
    allowed, bound, findings = DEFAULT_ALLOWED, {}, []
    for index, cell in enumerate(notebook.cells):
        tree = _parsed(cell.source) if cell.cell_type == "code" else None
        if tree is not None and not _is_solution(cell):
            allowed += tuple(name for name, _ in _imports(tree) if name.startswith("harness.") and not _withheld(name))
        elif cell.cell_type == "code" and _is_solution(cell):
            grade_id = str(cell.metadata.get("nbgrader", {}).get("grade_id", ""))
            label = f"cell {index} ({grade_id})" if grade_id else f"cell {index}"
            task = grade_id.removesuffix("-code") if grade_id.endswith("-code") else None
            for line, what in scan_source(cell.source, allowed, bound):
                findings.append(Finding(task, label, line, what))
        if tree is not None:
            bound.update(_harness_bindings(tree))
    return findings


def scan_source(source: str, allowed: tuple[str, ...], bound: dict[str, str] | None = None) -> list[tuple[int, str]]:
    """(line, what) for each forbidden reach in one cell's source; a cell that does not parse is reported.
    `bound` maps names other cells bound to harness modules (this cell's own imports are added)."""
    try:
        tree = ast.parse(_code_lines(source))
    except SyntaxError as error:
        return [(error.lineno or 1, "the cell is not valid Python, so it cannot be checked")]
    found = [(node.lineno, f"imports {name}, which answers may not use") for name, node in _imports(tree)
             if _forbidden_module(name, allowed)]
    bound = {**(bound or {}), **_harness_bindings(tree)}
    for node in ast.walk(tree):
        found += [(node.lineno, what) for what in _node_reaches(node)]
        used = _harness_use(node, bound)
        if used and used != "harness" and _forbidden_module(used, allowed):
            found.append((node.lineno, f"uses {used}, which answers may not use"))
    return sorted(set(found))


def _code_lines(source: str) -> str:
    """The cell's source with each IPython magic or shell line made a `pass` at its indentation: a block whose body
    is a magic (every lesson's install cell: `except ModuleNotFoundError:` then `%run ...`) still parses."""
    return "\n".join(line[:len(line) - len(line.lstrip())] + "pass" if line.lstrip().startswith(("%", "!")) else line
                     for line in source.splitlines())


def _parsed(source: str) -> ast.Module | None:
    try:
        return ast.parse(_code_lines(source))
    except SyntaxError:
        return None


def _harness_bindings(tree: ast.AST) -> dict[str, str]:
    """The names an import binds to harness modules: `import harness.x` binds `harness`, `import harness.x as y`
    binds y to harness.x, `from harness.x import z` binds z to harness.x.z where that is a module (a function or
    a class reaches no other harness name through its attributes; the scan flags `__globals__`)."""
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "harness":
                    bound[alias.asname or "harness"] = alias.name if alias.asname else "harness"
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level \
                and node.module.split(".")[0] == "harness":
            for alias in node.names:
                if _is_module(f"{node.module}.{alias.name}"):
                    bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return bound


def _is_module(dotted: str) -> bool:
    """Whether `dotted` (harness.x.y) names a module or package of the harness, from its files."""
    path = PACKAGE.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _harness_use(node: ast.AST, bound: dict[str, str]) -> str:
    """The harness name an attribute chain (`harness.train.fit`, `t.fit` with t bound to harness.train) or a
    `getattr(t, "fit")` reaches; '' for anything else."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" \
            and len(node.args) >= 2 and _literal(node.args[1]):
        base = _harness_use(node.args[0], bound) or bound.get(_dotted(node.args[0]), "")
        return f"{base}.{node.args[1].value}" if base else ""
    dotted = _dotted(node) if isinstance(node, ast.Attribute) else ""
    head, _, rest = dotted.partition(".")
    return f"{bound[head]}.{rest}" if head in bound and rest else ""


def _is_solution(cell: NotebookNode) -> bool:
    return bool(cell.get("metadata", {}).get("nbgrader", {}).get("solution"))


def _imports(tree: ast.AST) -> list[tuple[str, ast.stmt]]:
    """(module, node) for every import; `from a import b` gives `a.b` (b may be a submodule)."""
    found: list[tuple[str, ast.stmt]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found += [(f"{node.module}.{alias.name}", node) for alias in node.names]
    return found


def _withheld(name: str) -> bool:
    return any(name == w or name.startswith(f"{w}.") for w in WITHHELD)


def _forbidden_module(name: str, allowed: tuple[str, ...]) -> bool:
    """Whether importing `name` (`a.b` for `from a import b`) reaches past what an answer may use."""
    parts = name.split(".")
    if parts[0] == "importlib":
        return True
    if parts[0] == "torch":
        return any(part.startswith("_") for part in parts[1:]) or "DisableTorchFunction" in parts
    if parts[0] == "sys" and parts[1:2] == ["modules"]:
        return True
    if parts[0] != "harness" or name == "harness":
        return False
    if _withheld(name):
        return True
    return not any(name == a or name.startswith(f"{a}.") or a.startswith(f"{name}.") for a in allowed)


def _dotted(node: ast.AST) -> str:
    """`a.b.c` for a chain of attributes on a name, else ''."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else ""


def _literal(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _node_reaches(node: ast.AST) -> list[str]:
    """What one AST node reaches that an answer may not."""
    if isinstance(node, ast.Name) and node.id in ("__import__", "importlib", "DisableTorchFunction"):
        return [f"uses {node.id}"]
    if isinstance(node, ast.Attribute):
        dotted = _dotted(node)
        if node.attr == "DisableTorchFunction" or dotted == "sys.modules" or dotted.startswith("torch._C"):
            return [f"uses {dotted or node.attr}"]
        if dotted.startswith("torch.") and node.attr.startswith("_") and not node.attr.startswith("__"):
            return [f"uses the private torch name {dotted}"]
        if node.attr in ("__import__", "__builtins__", "__globals__", "__code__", "__subclasses__"):
            return [f"uses {node.attr}"]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        name, args = node.func.id, node.args
        if name in DYNAMIC_CALLS and (not args or not _literal(args[0])):
            return [f"calls {name} on code that is not a literal string"]
        if name in NAME_CALLS and (len(args) < 2 or not _literal(args[1])):
            return [f"calls {name} with a name that is not a literal string"]
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name) \
            and node.value.func.id in ("globals", "vars", "locals") and not _literal(node.slice):
        return [f"indexes {node.value.func.id}() with a name that is not a literal string"]
    return []
