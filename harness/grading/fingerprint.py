"""What decides a task's verdict, as a digest of file contents: the same in every process and on every machine.

A task's fingerprint hashes the source files of the modules its probe and judge are defined in and of every
harness module those import, followed through their imports (`import harness.x`, `from harness.x import y`,
relative imports; judge helpers and the references they recompute included), together with the code every
verdict goes through (`harness.judge.verdict`, and `harness.judge.cases`, which draws the cases) and the
harness version. Lesson 11's checks hand each drill's probe and judge over at run time (`get_drill`), so the
drill's two modules count too. Only the statements are read (`ast`): nothing is imported to follow them, and a
package's `__init__` counts only where it is imported by name, so editing one task's modules leaves its
lesson's other tasks alone. Files are named by their module, never by their path on this machine, and nothing
depends on `repr` or on hash randomisation.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import sys
from pathlib import Path

from harness.grading.layout import REPO_ROOT

# modules every verdict depends on, whatever the task: the decision (`judge_task`) and the drawing of cases
COMMON = ("harness.judge.verdict", "harness.judge.cases")
FOLLOWED = "harness"  # imports of other packages (torch, the standard library) are the environment, not the check


def module_file(name: str, root: Path = REPO_ROOT) -> Path | None:
    """The source file of module `name`: under `root` for the harness, else where it was loaded from (None if
    it has no source file)."""
    parts = name.split(".")
    if parts[0] == FOLLOWED:
        for candidate in (root.joinpath(*parts).with_suffix(".py"), root.joinpath(*parts, "__init__.py")):
            if candidate.is_file():
                return candidate
        return None
    loaded = getattr(sys.modules.get(name), "__file__", None)
    return Path(loaded) if loaded else None


def imported(name: str, source: str, root: Path = REPO_ROOT) -> set[str]:
    """The harness modules that the module `name` (whose text is `source`) imports, by name."""
    path = module_file(name, root)
    package = name if path is not None and path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:  # `from package import module` names a module; else the names live in base
                found.add(f"{base}.{alias.name}" if module_file(f"{base}.{alias.name}", root) else base)
    return {module for module in found if module.split(".")[0] == FOLLOWED and module_file(module, root)}


def closure(modules: set[str], root: Path = REPO_ROOT) -> dict[str, bytes]:
    """`modules` and every harness module they import, transitively: module name -> its source file's bytes."""
    seen: dict[str, bytes] = {}
    todo = sorted(modules)
    while todo:
        name = todo.pop()
        path = module_file(name, root)
        if name in seen or path is None:
            continue
        seen[name] = path.read_bytes()
        todo += sorted(imported(name, seen[name].decode("utf-8"), root) - seen.keys())
    return seen


def defining_modules(task: str) -> set[str]:
    """The modules that define `task`'s probe and judge (wrappers followed), and for a drill task the drill's."""
    from harness.checks.core import get

    check = get(task)
    functions = [check.probe, check.judge]
    if task.startswith("11-"):
        from harness.drills.core import get_drill
        from harness.drills.lesson import NOTEBOOK_DRILLS

        drill = get_drill(dict(NOTEBOOK_DRILLS)[task])
        functions += [drill.probe, drill.judge]
    return {inspect.unwrap(function).__module__ for function in functions if function is not None}


def fingerprint(task: str, root: Path = REPO_ROOT) -> str:
    """A digest of everything that decides `task`'s verdict (the module docstring says what), read under `root`."""
    from harness import __version__

    digest = hashlib.sha256(f"harness {__version__}\0{task}\0".encode())
    for name, text in sorted(closure(defining_modules(task) | set(COMMON), root).items()):
        digest.update(name.encode() + b"\0" + hashlib.sha256(text).digest())
    return digest.hexdigest()[:16]


def fingerprints(tasks: list[str], root: Path = REPO_ROOT) -> dict[str, str]:
    """Each task's `fingerprint`."""
    return {task: fingerprint(task, root) for task in tasks}
