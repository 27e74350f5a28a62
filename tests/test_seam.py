"""The seam between a lesson task's two halves is public (issue 42, item 2): a lesson judge takes from its probe
only public names, named for what they are (the case's inputs, the setting, the builders), so the two halves can
be read, and changed, one at a time.

Every module under harness/judges/lesson* is parsed (not imported); the test fails naming file, line and name for
each private name (one leading underscore) that crosses from harness.checks: `from harness.checks... import _x`,
or an attribute `probe._x` of a harness.checks module bound by `import harness.checks... as probe`, by
`from harness.checks... import probe` or by the dotted path itself.

Lessons only: the drills side (harness/judges/drills, which takes from harness/drills/bank) has its own seam.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JUDGES = ROOT / "harness" / "judges"
PROBES = "harness.checks"


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _dotted(node: ast.expr) -> str | None:
    """`a.b.c` of a chain of attributes over a name; None for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def private_crossings(path: Path) -> list[tuple[int, str]]:
    """(line, name) of each private name `path` takes from a harness.checks module."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    modules: dict[str, str] = {}  # a local name bound to a harness.checks module -> that module
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith(PROBES):
            for alias in node.names:
                if _private(alias.name):
                    found.append((node.lineno, alias.name))
                elif _is_module(f"{node.module}.{alias.name}"):
                    modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):  # without `as`, the dotted path itself is read below
            modules.update({alias.asname: alias.name for alias in node.names
                            if alias.asname and alias.name.startswith(PROBES)})
    for node in ast.walk(tree):
        owner = _dotted(node.value) if isinstance(node, ast.Attribute) and _private(node.attr) else None
        if owner is None:
            continue
        head, _, rest = owner.partition(".")
        module = owner if owner.startswith(PROBES) else ".".join(filter(None, [modules.get(head), rest]))
        if module.startswith(PROBES) and _is_module(module):
            found.append((node.lineno, node.attr))
    return sorted(found)


def _judge_modules() -> list[Path]:
    return sorted([*JUDGES.glob("lesson*/**/*.py"), *JUDGES.glob("lesson*.py")])


def test_the_scan_sees_every_kind_of_crossing(tmp_path: Path) -> None:
    """The parser finds a private name imported, and one read as an attribute of a probe module bound each way,
    and lets public names, dunders and a judge's own privates pass."""
    module = tmp_path / "judge.py"
    module.write_text(
        "import harness.checks.lesson00.accuracy as probe\n"
        "import harness.checks.lesson00.count_params\n"
        "from harness.checks.lesson00 import make_batch\n"
        "from harness.checks.lesson00.accuracy import accuracy_cases, _hidden\n"
        "def _own(): return probe._one, harness.checks.lesson00.count_params._two, make_batch._three\n"
        "x = probe.__name__, probe.accuracy_cases, _own\n",
        encoding="utf-8")
    assert private_crossings(module) == [(4, "_hidden"), (5, "_one"), (5, "_three"), (5, "_two")]


def test_lesson_judges_take_only_public_names_from_their_probes() -> None:
    """No lesson judge module imports or reads a private name of a harness.checks module (issue 42, item 2)."""
    problems = [f"{path.relative_to(ROOT).as_posix()}:{line}: imports the private name {name} from harness.checks: "
                "make it public in the probe module, named for what it is, and import that"
                for path in _judge_modules() for line, name in private_crossings(path)]
    assert not problems, "\n".join(problems)
