"""Install the harness from this course folder into the running Python: the set-up of a hosted runtime.

Colab, Kaggle or a JupyterHub kernel brings its own torch and most of the course's packages. From a lesson's
folder, one cell installs the rest (lesson 00's first cell does it when `harness` is not importable):

    %run ../../harness/install.py

or, in a terminal, `python harness/install.py` from the course folder. It keeps the runtime's torch (and its
torchvision) when torch is within the range pyproject.toml declares, and says so when it is not; installs only
the requirements that are missing or too old, the export extra (lesson 16) included; and installs the harness
itself as an ordinary package (not editable), into the interpreter's own site-packages, so the kernel that ran
it imports it at once, with no restart. It uses the standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = ("export",)  # lesson 16's ONNX packages; never `cluster` (the instructor's Dask grading)
# torchvision's minor version follows torch's: 2.11 pairs with 0.26, 2.14 with 0.29.
TORCHVISION_OFFSET = 15


@dataclass(frozen=True)
class Requirement:
    """One line of pyproject.toml's dependencies: a distribution name and its version bounds."""

    name: str
    lower: tuple[int, ...] | None = None  # >=
    upper: tuple[int, ...] | None = None  # <

    @property
    def spec(self) -> str:
        """As pip reads it: `torch>=2.11`, `nbgrader>=0.9,<0.10`."""
        bounds = [f">={_dotted(self.lower)}"] if self.lower else []
        bounds += [f"<{_dotted(self.upper)}"] if self.upper else []
        return self.name + ",".join(bounds)

    def satisfied_by(self, version: str | None) -> bool:
        """Whether an installed `version` (None: not installed) meets the bounds."""
        if version is None:
            return False
        have = release(version)
        return (self.lower is None or have >= self.lower) and (self.upper is None or have < self.upper)


@dataclass
class Plan:
    """What `install` will do: the requirements to install, the constraints that keep the runtime's torch, and
    the notes to print."""

    install: list[str] = field(default_factory=list)
    constraints: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def release(version: str) -> tuple[int, ...]:
    """The numeric release of a version string: "2.11.0+cu126" -> (2, 11, 0); "0.26.0a0" -> (0, 26, 0)."""
    numbers = []
    for part in version.split("+")[0].split("."):
        digits = re.match(r"\d+", part)
        if not digits:
            break
        numbers.append(int(digits.group()))
        if digits.group() != part:
            break
    return tuple(numbers)


def _dotted(numbers: tuple[int, ...]) -> str:
    return ".".join(map(str, numbers))


def parse_requirement(line: str) -> Requirement:
    """`name>=x[,<y]` (the forms pyproject.toml uses; a trailing comment ignored) as a Requirement."""
    text = line.split("#")[0].strip().replace(" ", "")
    name = re.match(r"[A-Za-z0-9_.\-]+", text).group()
    bounds = dict(re.findall(r"(>=|<)([0-9][0-9.]*)", text[len(name):]))
    return Requirement(name, release(bounds[">="]) if ">=" in bounds else None,
                       release(bounds["<"]) if "<" in bounds else None)


def read_requirements(root: Path = ROOT) -> list[Requirement]:
    """The harness's dependencies and its EXTRAS, from the course's pyproject.toml."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: pip vendors the same parser
        from pip._vendor import tomli as tomllib
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    lines = list(project["dependencies"])
    for extra in EXTRAS:
        lines += project["optional-dependencies"][extra]
    return [parse_requirement(line) for line in lines]


def installed_version(name: str) -> str | None:
    """The version of distribution `name` in this interpreter, or None."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def make_plan(requirements: list[Requirement], installed: Callable[[str], str | None] = installed_version) -> Plan:
    """Decide what to install: torch kept when in range, only what is missing or too old otherwise."""
    plan = Plan()
    by_name = {requirement.name: requirement for requirement in requirements}
    torch_version = installed("torch")
    if by_name["torch"].satisfied_by(torch_version):
        plan.notes.append(f"keeping this runtime's torch {torch_version} (the course supports "
                          f"{by_name['torch'].spec.removeprefix('torch')})")
        plan.constraints.append(f"torch=={torch_version}")
        torch_minor = release(torch_version)[:2]
        pair = Requirement("torchvision", (0, torch_minor[1] + TORCHVISION_OFFSET),
                           (0, torch_minor[1] + TORCHVISION_OFFSET + 1))
        by_name["torchvision"] = pair if not pair.satisfied_by(installed("torchvision")) else by_name["torchvision"]
    elif torch_version is None:
        plan.notes.append(f"no torch here: installing {by_name['torch'].spec} (several GB with CUDA)")
    else:
        plan.notes.append(f"this runtime's torch {torch_version} is older than the course supports "
                          f"({by_name['torch'].spec}): installing a newer torch; restart the kernel afterwards "
                          "if torch was already imported")
    for requirement in by_name.values():
        if not requirement.satisfied_by(installed(requirement.name)):
            plan.install.append(requirement.spec)
    plan.notes.append(f"installing: {', '.join(plan.install)}" if plan.install else
                      "every requirement is already installed")
    return plan


def pip(arguments: list[str]) -> None:
    """Run this interpreter's pip quietly; on failure, raise with pip's own output."""
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                           *arguments], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"pip install {' '.join(arguments)} failed:\n{done.stdout}{done.stderr}")


def builds_wheels_offline(installed: Callable[[str], str | None] = installed_version) -> bool:
    """Whether this interpreter's setuptools can build the harness's wheel without a downloaded build environment:
    setuptools 70.1 and later carry `bdist_wheel`; older ones (a fresh venv's) need the `wheel` package too."""
    setuptools = installed("setuptools")
    return setuptools is not None and (release(setuptools) >= (70, 1) or installed("wheel") is not None)


def install(root: Path = ROOT, *, target: Path | None = None) -> Plan:
    """Install what `make_plan` lists, then the harness from `root` as an ordinary package, into this interpreter
    (or into `target`, a folder on sys.path); afterwards `import harness` works in this process.

    Raises:
        RuntimeError: pip failed (its output is in the message).
    """
    plan = make_plan(read_requirements(root))
    for note in plan.notes:
        print(note)
    where = ["--target", str(target)] if target else []
    with tempfile.TemporaryDirectory() as scratch:
        constraints = Path(scratch) / "constraints.txt"
        constraints.write_text("\n".join(plan.constraints) + "\n")
        if plan.install:
            pip([*where, "--constraint", str(constraints), *plan.install])
        isolation = ["--no-build-isolation"] if builds_wheels_offline() else []
        pip([*where, "--no-deps", "--upgrade", *isolation, str(root)])
    importlib.invalidate_caches()
    sys.modules.pop("harness", None)
    harness = importlib.import_module("harness")
    print(f"installed the harness into {Path(harness.__file__).parent.parent}: no restart needed")
    return plan


def main(argv: list[str] | None = None) -> int:
    """`python harness/install.py [--target DIR]`: install, then print the device doctor's report."""
    parser = argparse.ArgumentParser(prog="harness/install.py", description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        install(target=args.target)
    except RuntimeError as error:
        print(f"harness install: error: {error}", file=sys.stderr)
        return 1
    importlib.import_module("harness.doctor").doctor()
    return 0


if __name__ == "__main__":
    status = main(sys.argv[1:])
    if status:
        raise SystemExit(status)
