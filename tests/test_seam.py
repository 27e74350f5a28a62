"""Both seams between a task's two halves are public (issue 42, item 2): a judge takes from its probe side only
public names, named for what they are (the case's inputs, the setting, the builders), so the two halves can be
read, and changed, one at a time.

- The lesson seam: harness/judges/lesson* takes from harness.checks (a lesson's probe modules).
- The drills seam: harness/judges/drills takes from harness.drills (the bank's topic modules, and the drills
  package beside them).

Every judge module is parsed (not imported); the test fails naming file, line and name for each private name (one
leading underscore) that crosses from its probe package: `from harness.checks... import _x`, or an attribute
`probe._x` of a probe module bound by `import harness.checks... as probe`, by `from harness.checks... import probe`
or by the dotted path itself (and the same from harness.drills). A judge's own private names, and a probe module's
privates used within the probe side, are not the seam's business.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
JUDGES = ROOT / "harness" / "judges"


@dataclass(frozen=True)
class Seam:
    """One seam: the judge modules on one side, the package of probe modules they must take only public names from."""

    name: str
    judges: tuple[str, ...]  # globs under harness/judges
    probes: str  # a dotted package

    def judge_modules(self) -> list[Path]:
        return sorted({path for pattern in self.judges for path in JUDGES.glob(pattern)})


LESSONS = Seam("lesson", ("lesson*/**/*.py", "lesson*.py"), "harness.checks")
DRILLS = Seam("drill", ("drills/**/*.py",), "harness.drills")


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


def _within(dotted: str, package: str) -> bool:
    return dotted == package or dotted.startswith(package + ".")


def private_crossings(path: Path, probes: str = LESSONS.probes) -> list[tuple[int, str]]:
    """(line, name) of each private name `path` takes from a module of the package `probes`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    modules: dict[str, str] = {}  # a local name bound to a probe module -> that module
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and _within(node.module or "", probes):
            for alias in node.names:
                if _private(alias.name):
                    found.append((node.lineno, alias.name))
                elif _is_module(f"{node.module}.{alias.name}"):
                    modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):  # without `as`, the dotted path itself is read below
            modules.update({alias.asname: alias.name for alias in node.names
                            if alias.asname and _within(alias.name, probes)})
    for node in ast.walk(tree):
        owner = _dotted(node.value) if isinstance(node, ast.Attribute) and _private(node.attr) else None
        if owner is None:
            continue
        head, _, rest = owner.partition(".")
        module = owner if _within(owner, probes) else ".".join(filter(None, [modules.get(head), rest]))
        if _within(module, probes) and _is_module(module):
            found.append((node.lineno, node.attr))
    return sorted(found)


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


def test_the_drills_scan_sees_the_bank_and_the_drills_package(tmp_path: Path) -> None:
    """On the drills seam the same parser finds a bank module's private name imported or read as an attribute,
    and one of the drills package beside the bank, and leaves harness.checks, and a package whose name only starts
    like it, to others."""
    module = tmp_path / "judge.py"
    module.write_text(
        "import harness.drills.bank.loop as bank\n"
        "from harness.drills.bank.tensors import gather_inputs, _UINT8_STARTER\n"
        "from harness.drills.support import _private_helper\n"
        "from harness.checks.lesson00.accuracy import _hidden\n"
        "from harness.drillsmith import _elsewhere\n"
        "x = bank._seeded, bank.es_plan, gather_inputs\n",
        encoding="utf-8")
    assert private_crossings(module, DRILLS.probes) == [(2, "_UINT8_STARTER"), (3, "_private_helper"),
                                                        (6, "_seeded")]
    assert private_crossings(module) == [(4, "_hidden")]


@pytest.mark.parametrize("seam", [LESSONS, DRILLS], ids=lambda seam: seam.name)
def test_judges_take_only_public_names_from_their_probes(seam: Seam) -> None:
    """No judge module imports or reads a private name of a module on its probe side (issue 42, item 2)."""
    assert seam.judge_modules(), f"no {seam.name} judge module under {JUDGES}: {seam.judges} matched nothing"
    problems = [f"{path.relative_to(ROOT).as_posix()}:{line}: imports the private name {name} from {seam.probes}: "
                "make it public in the probe module, named for what it is, and import that"
                for path in seam.judge_modules() for line, name in private_crossings(path, seam.probes)]
    assert not problems, "\n".join(problems)
