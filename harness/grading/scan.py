"""Read every cell of a submission that differs from the release, in the grader's process, before any kernel runs,
for reaches an answer may not make: dynamic code and imports, the judge side and the check machinery, private torch.

Nothing in the kernel can interfere with this: it reads the submitted source with `ast`, never runs it.
A finding names what was found and where (cell, line); `autograde` fails the exercise it costs
(`FORBIDDEN_CODE`) and flags the submission. What is looked for:

- dynamic code and imports: `__import__`, the modules that import or reach objects by name (`importlib`, `pkgutil`,
  `pydoc`, `runpy`, `builtins`, `ctypes`, `timeit`, ..., and `inspect`, `gc` and `pdb` but for their harmless names),
  `pickle.loads` and the like, `exec`/`eval`/`compile` of anything but a literal string (a literal is read as code),
  `getattr`/`setattr`/`delattr` with a name that is not a literal or that names a dunder that reaches code or
  namespaces (`getattr(builtins, "__import__")`), `sys.modules` and the frame hooks,
  `globals()`/`vars()`/`locals()` subscripted by a built name, `vars()` of a module, and literal strings naming
  those dunders or a withheld module (`vars(builtins)["__import__"]`, `pydoc.locate("harness.judges...")`);
- private torch: `torch._C`, `DisableTorchFunction`, any `torch._*` (or `torch.x._y`) name, imported or used, under
  any alias (`import torch as T; T._C`, `from torch import nn; nn._reduction`, `t = torch; t._C`);
- harness names outside the allowlist of the cell: `DEFAULT_ALLOWED` plus every harness name the release's own
  cells above it import (the judge side, drills' answers included, the check machinery and the drill bank's probes
  are never on it), followed through `import harness`, aliases and literal `getattr`; a chain that leaves an
  allowed module through a module it imports (`harness.env.importlib`, `harness.checks.core.get`) is not allowed.

Which cells are read: every code cell that is not an unchanged copy of one of the release's own cells, that is the
solution cells and every cell the student added or edited. Only the release's own cells widen the allowlist; a
finding in a solution cell costs its exercise, one in the student's own cell every exercise whose solution cell
comes after it (what that cell defines or changes reaches all of them).
"""

from __future__ import annotations

import ast
import difflib
import importlib
import types
from dataclasses import dataclass
from pathlib import Path

from nbformat.notebooknode import NotebookNode

FORBIDDEN_CODE = "forbidden-code"
# Harness modules (with all they hold) and names any answer may use, before the names the lesson's own given cells
# import are added. Nothing here answers an exercise: `harness.metrics.accuracy` would answer 00-accuracy,
# `harness.repro.seed_worker` 03-worker-init, `harness.train.train_one_epoch` 04-train-epoch, so those modules are
# allowed only by name, in the lessons whose given cells import them. `harness.checks` is allowed by its four
# notebook names only: its modules hold the registry, the probes and the protocol.
DEFAULT_ALLOWED = ("harness.checks.check", "harness.checks.hint", "harness.checks.demonstrate",
                   "harness.checks.CheckFailed", "harness.plots", "harness.env", "harness.budget",
                   "harness.repro.seed_everything", "harness.data.LabeledTensorDataset", "harness.data.SHAPE_CLASSES",
                   "harness.data.shapes", "harness.data.digits", "harness.data.two_moons", "harness.data.spirals",
                   "harness.data.binary_toy", "harness.data.adding_problem")
# Never allowed, even when a release imports a parent package (`import harness`).
WITHHELD = ("harness.contract.registry", "harness.contract.protocol", "harness.grading", "harness.judge",
            "harness.judges", "harness.drills.bank")
# Modules whose use reaches code or objects by name (imports, frames, the object graph, raw memory, the REPL).
# (`timeit`, `bdb`, `cProfile`, `profile` and `trace` run code given as a string, like exec.)
DYNAMIC_MODULES = ("importlib", "pkgutil", "pydoc", "runpy", "imp", "zipimport", "builtins", "ctypes", "code", "codeop",
                   "marshal", "__main__", "timeit", "bdb", "cProfile", "profile", "trace")
# Modules ordinary code uses for something harmless (`gc.collect()`, `inspect.signature`, a leftover `pdb.set_trace()`):
# these names of theirs only; the rest reaches frames, the object graph or runs code given as a string.
HARMLESS_NAMES = {"gc": ("collect", "disable", "enable", "isenabled", "get_count", "get_threshold", "set_threshold",
                         "freeze", "unfreeze"),
                  "inspect": ("signature", "Signature", "Parameter", "isclass", "isfunction", "ismethod", "isgenerator",
                              "isgeneratorfunction", "iscoroutinefunction", "getdoc", "cleandoc", "getsource"),
                  "pdb": ("set_trace", "post_mortem", "pm")}
# Names that run or import code named by data, in modules an answer may otherwise use.
DYNAMIC_NAMES = ("pickle.loads", "pickle.load", "pickle.Unpickler", "sys.modules", "sys._getframe", "sys.meta_path",
                 "sys.path_hooks", "sys.path_importer_cache", "sys.settrace", "sys.setprofile", "sys._current_frames",
                 "operator.attrgetter", "operator.methodcaller")
DYNAMIC_CALLS = ("exec", "eval", "compile")
# Attributes (and attribute names given to getattr, or written in strings) that reach code, namespaces or frames.
REACHING_DUNDERS = ("__import__", "__builtins__", "__globals__", "__code__", "__closure__", "__subclasses__",
                    "__bases__", "__base__", "__mro__", "__dict__", "__loader__", "__spec__", "__func__", "__self__",
                    "__getattribute__", "__reduce__", "__reduce_ex__", "__wrapped__", "f_globals", "f_locals",
                    "f_builtins", "f_back", "tb_frame", "gi_frame", "cr_frame", "ag_frame")
# Private torch classes that code checks types against (`isinstance(m, nn.modules.batchnorm._BatchNorm)`): nothing
# past them is.
TYPE_BASES = ("torch.nn.modules.batchnorm._BatchNorm", "torch.nn.modules.batchnorm._NormBase",
              "torch.nn.modules.conv._ConvNd", "torch.nn.modules.loss._Loss", "torch.optim.lr_scheduler._LRScheduler")
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
        """The finding for the grades CSV (a student's own cell costs every exercise after it: each is named)."""
        costs = f" (it costs {self.task})" if self.task and not self.cell.endswith("-code)") else ""
        return f"{self.cell}, line {self.line}: {self.what}{costs}"


def scan_notebook(notebook: NotebookNode, release: NotebookNode) -> list[Finding]:
    """The forbidden reaches in every cell of `notebook` that is not an unchanged copy of one of `release`'s own
    cells (IPython magics and shell lines are skipped).

    A cell may use `DEFAULT_ALLOWED` and the harness names the release's own cells above it import: lesson 04 imports
    `harness.train.fit` after its exercises, so its 04-fit answer may not call it, and a student's copy of that
    import above the exercise is the student's cell, which widens nothing. A name bound to a module in any cell above
    (`import harness`, `import torch as T`) is followed into the cells that use it.

    Args:
        notebook: the submission, restored on the release (`restore.restore_cells`).
        release: the notebook the student received.
    """
    given, edited = _aligned(notebook, release)
    tasks_after = _tasks_after(notebook)
    allowed, bound, findings = DEFAULT_ALLOWED, {}, []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        tree = _parsed(cell.source)
        if index in given:
            allowed += _allowed_imports(tree)
        else:
            grade_id = str(cell.metadata.get("nbgrader", {}).get("grade_id", "")) if _is_solution(cell) else ""
            label = f"cell {index} ({grade_id})" if grade_id else f"cell {index} (your own cell)"
            costs = [grade_id.removesuffix("-code") if grade_id.endswith("-code") else None] if grade_id \
                else tasks_after[index] or [None]
            # an edited release cell may keep what the release's cell imported there (a changed epoch count in a
            # demonstration that imports harness.train.fit is not a reach), and widens nothing below it
            own = allowed + (_allowed_imports(_parsed(release.cells[edited[index]].source)) if index in edited else ())
            findings += [Finding(task, label, line, what) for line, what in scan_source(cell.source, own, bound)
                         for task in costs]
        if tree is not None:
            bound.update(_bindings(tree, bound))
    return findings


def _key(cell: NotebookNode) -> str:
    """What identifies a cell when a submission is aligned on its release: a solution cell by its grade id (its
    source is the student's), any other by its type and source."""
    if _is_solution(cell):
        return f"solution:{cell.metadata['nbgrader'].get('grade_id', '')}"
    return f"{cell.cell_type}:{cell.source}"


def _aligned(notebook: NotebookNode, release: NotebookNode) -> tuple[set[int], dict[int, int]]:
    """`notebook` aligned on `release`: the indexes of its code cells that are the release's own non-solution cells,
    unchanged and in the release's order (a student's duplicate of a release cell elsewhere is the student's own
    cell), and, for each cell that takes the place of one such release cell, edited, that cell's index there."""
    ours, theirs = [_key(c) for c in notebook.cells], [_key(c) for c in release.cells]
    matcher = difflib.SequenceMatcher(None, ours, theirs, autojunk=False)
    given, edited = set(), {}
    for op, a1, a2, b1, b2 in matcher.get_opcodes():
        for offset in range(a2 - a1):
            cell = notebook.cells[a1 + offset]
            if cell.cell_type != "code" or _is_solution(cell):
                continue
            if op == "equal":
                given.add(a1 + offset)
            elif op == "replace" and a2 - a1 == b2 - b1 and release.cells[b1 + offset].cell_type == "code" \
                    and not _is_solution(release.cells[b1 + offset]):
                edited[a1 + offset] = b1 + offset
    return given, edited


def _allowed_imports(tree: ast.Module | None) -> tuple[str, ...]:
    """The harness names a release cell imports, which answers below it may use (never a withheld one)."""
    if tree is None:
        return ()
    return tuple(name for name, _ in _imports(tree) if name.startswith("harness.") and not _withheld(name))


def _tasks_after(notebook: NotebookNode) -> list[list[str]]:
    """For each cell, the exercises whose solution cell (`<task>-code`) comes after it."""
    tasks: list[str] = []
    after: list[list[str]] = []
    for cell in reversed(notebook.cells):
        after.append(list(reversed(tasks)))
        grade_id = str(cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", ""))
        if _is_solution(cell) and grade_id.endswith("-code"):
            tasks.append(grade_id.removesuffix("-code"))
    return list(reversed(after))


def scan_source(source: str, allowed: tuple[str, ...], bound: dict[str, str] | None = None) -> list[tuple[int, str]]:
    """(line, what) for each forbidden reach in one cell's source; a cell that does not parse is reported.
    `bound` maps names other cells bound to modules (this cell's own imports and aliases are added)."""
    try:
        tree = ast.parse(_code_lines(source))
    except SyntaxError as error:
        return [(error.lineno or 1, "the cell is not valid Python, so it cannot be checked")]
    found = [(node.lineno, f"imports {name}, which answers may not use") for name, node in _imports(tree)
             if _forbidden_module(name, allowed)]
    bound = {**(bound or {}), **_bindings(tree, bound or {})}
    for node in ast.walk(tree):
        found += [(node.lineno, what) for what in _node_reaches(node, bound)]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in DYNAMIC_CALLS \
                and node.args and _literal(node.args[0]):
            found += [(node.lineno, f"runs code that {what}") for _, what in scan_source(node.args[0].value, allowed,
                                                                                       bound)]
        used = _resolved(node, bound)
        if used.startswith("harness.") and _forbidden_module(used, allowed):
            found.append((node.lineno, f"uses {used}, which answers may not use"))
        elif used and not used.startswith("harness") and _forbidden_module(used, allowed):
            found.append((node.lineno, f"uses {used}"))
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


def _bindings(tree: ast.AST, bound: dict[str, str]) -> dict[str, str]:
    """The names a cell binds to modules and module attributes: `import a.b` binds `a`, `import a.b as c` binds c to
    a.b, `from a import b` binds b to a.b, and `t = torch.nn` (a plain alias of a bound name) binds t to torch.nn."""
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                head = alias.name.split(".")[0]
                found[alias.asname or head] = alias.name if alias.asname else head
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                found[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target = _resolved(node.value, {**bound, **found})
            if target:
                found[node.targets[0].id] = target
    return found


def _resolved(node: ast.AST, bound: dict[str, str]) -> str:
    """The full dotted name an attribute chain on a module-bound name (`T._C` with T bound to torch), a name bound to
    one, or a literal `getattr(t, "fit")` reaches; '' for anything else."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" \
            and len(node.args) >= 2 and _literal(node.args[1]):
        base = _resolved(node.args[0], bound)
        return f"{base}.{node.args[1].value}" if base else ""
    dotted = _dotted(node) if isinstance(node, (ast.Attribute, ast.Name)) else ""
    head, _, rest = dotted.partition(".")
    if head not in bound:
        return ""
    return f"{bound[head]}.{rest}" if rest else bound[head]


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
    """Whether importing or using `name` (`a.b` for `from a import b`) reaches past what an answer may use."""
    parts = name.split(".")
    if parts[0] in DYNAMIC_MODULES or any(name == d or name.startswith(f"{d}.") for d in DYNAMIC_NAMES):
        return True
    if parts[0] in HARMLESS_NAMES:
        return len(parts) > 1 and parts[1] not in HARMLESS_NAMES[parts[0]]
    if any(part in REACHING_DUNDERS for part in parts[1:]):
        return True
    if parts[0] == "torch":
        if name in TYPE_BASES:
            return False
        return any(part.startswith("_") and not part.startswith("__") for part in parts[1:]) \
            or "DisableTorchFunction" in parts
    if parts[0] != "harness" or name == "harness":
        return False
    if _withheld(name):
        return True
    if any(name == a or a.startswith(f"{name}.") for a in allowed):
        return False
    within = [a for a in allowed if name.startswith(f"{a}.")]
    return not within or _leaves_module(name, max(within, key=len))


def _leaves_module(name: str, allowed: str) -> bool:
    """Whether `name`, under the allowed `allowed`, goes on through a private name or a module the allowed one
    imports (`harness.env.importlib`, `harness.plots.torch._C`): such a chain reaches what its own name would not."""
    parts = name.split(".")
    depth = len(allowed.split("."))
    module_parts = depth
    while module_parts < len(parts) and _is_module(".".join(parts[:module_parts + 1])):
        module_parts += 1
    if module_parts > depth:
        return True  # a submodule of an allowed name: allowed only by its own name
    if not _is_module(allowed):
        return False  # an allowed function or class: its attributes are its own (dunders are flagged apart)
    try:
        value: object = importlib.import_module(allowed)
    except ImportError:
        return True
    for part in parts[depth:]:
        if part.startswith("_") or not hasattr(value, part):
            return part.startswith("_")
        value = getattr(value, part)
        if isinstance(value, types.ModuleType):
            return True
    return False


def _is_module(dotted: str) -> bool:
    """Whether `dotted` (harness.x.y) names a module or package of the harness, from its files."""
    path = PACKAGE.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _dotted(node: ast.AST) -> str:
    """`a.b.c` for a chain of attributes on a name, else ''."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else ""


def _literal(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _named_in_text(text: str) -> str:
    """What a literal string names that an answer may not reach by name ('' for nothing)."""
    for dunder in REACHING_DUNDERS:
        if dunder in text and dunder.startswith("__"):
            return dunder
    for module in WITHHELD:
        if module in text:
            return module
    stripped = text.strip()
    if stripped == "_C" or stripped.startswith(("torch._", "torch:_")):
        return stripped
    return ""


def _node_reaches(node: ast.AST, bound: dict[str, str]) -> list[str]:
    """What one AST node reaches that an answer may not (names resolved through `bound`)."""
    if isinstance(node, ast.Name) and node.id in ("__import__", "__builtins__", "importlib", "DisableTorchFunction"):
        return [f"uses {node.id}"]
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
        named = _named_in_text(node.value if isinstance(node.value, str) else node.value.decode("latin-1"))
        return [f"writes {named!r} in a string, a name answers may not reach"] if named else []
    if isinstance(node, ast.Attribute):
        dotted = _dotted(node)
        if node.attr == "DisableTorchFunction" or dotted == "sys.modules" or dotted.startswith("torch._C"):
            return [f"uses {dotted or node.attr}"]
        if dotted.startswith("torch.") and node.attr.startswith("_") and not node.attr.startswith("__") \
                and dotted not in TYPE_BASES:
            return [f"uses the private torch name {dotted}"]
        if node.attr in REACHING_DUNDERS:
            return [f"uses {node.attr}"]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        name, args = node.func.id, node.args
        if name in DYNAMIC_CALLS and (not args or not _literal(args[0])):
            return [f"calls {name} on code that is not a literal string"]
        if name in NAME_CALLS and (len(args) < 2 or not _literal(args[1])):
            return [f"calls {name} with a name that is not a literal string"]
        if name == "vars" and args and _resolved(args[0], bound):
            return [f"calls vars() on the module {_resolved(args[0], bound)}"]
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name) \
            and node.value.func.id in ("globals", "vars", "locals") and not _literal(node.slice):
        return [f"indexes {node.value.func.id}() with a name that is not a literal string"]
    return []
