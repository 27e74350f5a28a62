"""Install the harness from this course folder into the running Python: the set-up of a hosted runtime.

Colab, Kaggle or a JupyterHub kernel brings its own torch and most of the course's packages. Every lesson's first
code cell runs this file from the lesson's folder when `harness` is not importable (`INSTALL_CELL` in
harness/hosted.py), and Run all goes on in the same kernel:

    try:
        import harness
    except ModuleNotFoundError:
        %run ../../harness/install.py

or, in a terminal (a hub), `python3 harness/install.py` from the course folder. It installs what the lessons import:
pyproject.toml's dependencies and its export extra (lesson 16), only those missing or too old, keeping the runtime's
torch (and its torchvision) when torch is within the declared range and saying so when it is not. The `lab` extra
(nbgrader, for JupyterLab's Validate button and Assignment List, which brings JupyterLab, notebook and
jupyter_server) only on a JupyterHub (`JUPYTERHUB_USER` set), whose JupyterLab is the student's: Colab and Kaggle
serve notebooks with their own pinned server packages, which nbgrader's would clash with, and have no Validate
button. A laptop's `make setup` installs the pinned requirements.txt, the lab's packages included, instead.

pip's own output names each package as it downloads and installs it, then the total time is printed. The harness
itself is installed as an ordinary package (not editable) into the interpreter's own site-packages, so the kernel
that ran it imports it at once, with no restart. From a terminal it ends with the device doctor's report; in a
notebook it does not (lesson 00 prints that report in its own cell: once). It uses the standard library only: it
runs before anything is installed.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = ("export",)  # lesson 16's ONNX packages; never `cluster` (the instructor's Dask grading)
HUB_EXTRAS = ("lab",)  # nbgrader (Validate, Assignment List) and the Jupyter server packages it brings: hubs only
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


def extras_for(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The extras of pyproject.toml this runtime gets: EXTRAS everywhere, HUB_EXTRAS on a JupyterHub."""
    environ = os.environ if environ is None else environ
    return EXTRAS + (HUB_EXTRAS if environ.get("JUPYTERHUB_USER") else ())


def read_requirements(root: Path = ROOT, extras: tuple[str, ...] = EXTRAS) -> list[Requirement]:
    """The harness's dependencies and the `extras` named, from the course's pyproject.toml."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: pip vendors the same parser
        from pip._vendor import tomli as tomllib
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    lines = list(project["dependencies"])
    for extra in extras:
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
    """Run this interpreter's `pip install` with its progress shown: in a terminal as pip draws it; elsewhere (a
    notebook, whose cell shows only what this process prints) each line as pip writes it, its stderr merged into
    stdout, so that a notebook shows nothing on stderr.

    Raises:
        RuntimeError: pip failed (its last lines are in the message).
    """
    command = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", *arguments]
    if sys.stdout.isatty():
        if subprocess.run(command).returncode != 0:
            raise RuntimeError(f"pip install {' '.join(arguments)} failed: its output is above")
        return
    last: deque[str] = deque(maxlen=40)  # what the error message quotes
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1) as process:
        for line in process.stdout:
            print(line, end="", flush=True)
            last.append(line)
    if process.returncode != 0:
        raise RuntimeError(f"pip install {' '.join(arguments)} failed; its last lines:\n{''.join(last)}")


def builds_wheels_offline(installed: Callable[[str], str | None] = installed_version) -> bool:
    """Whether this interpreter's setuptools can build the harness's wheel without a downloaded build environment:
    setuptools 70.1 and later carry `bdist_wheel`; older ones (a fresh venv's) need the `wheel` package too."""
    setuptools = installed("setuptools")
    return setuptools is not None and (release(setuptools) >= (70, 1) or installed("wheel") is not None)


def install(root: Path = ROOT, *, target: Path | None = None) -> Plan:
    """Install what `make_plan` lists for this runtime's extras (`extras_for`), then the harness from `root` as an
    ordinary package, into this interpreter (or into `target`, a folder on sys.path); afterwards `import harness`
    works in this process.

    Raises:
        RuntimeError: pip failed (its output is in the message).
    """
    extras = extras_for()
    plan = make_plan(read_requirements(root, extras))
    if not set(HUB_EXTRAS) <= set(extras):
        plan.notes.insert(-1, "leaving out nbgrader (JupyterLab's Validate button, on a laptop or a hub) and the "
                              "Jupyter server packages it brings: this runtime serves its own notebooks")
    for note in plan.notes:
        print(note, flush=True)
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


def in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel (`%run` from a lesson's cell) rather than in a terminal."""
    return "ipykernel" in sys.modules


def main(argv: list[str] | None = None) -> int:
    """`python harness/install.py [--target DIR]`: install, print the time it took, then (from a terminal) the device
    doctor's report."""
    parser = argparse.ArgumentParser(prog="harness/install.py", description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        install(target=args.target)
    except RuntimeError as error:
        print(f"harness install: error: {error}", file=sys.stderr)
        return 1
    minutes, seconds = divmod(round(time.monotonic() - started), 60)
    print(f"harness install: done in {minutes} min {seconds} s", flush=True)
    if in_notebook():
        print("the device doctor's report: lesson 00 prints it, or run `from harness.doctor import doctor; doctor()`")
    else:
        importlib.import_module("harness.doctor").doctor()
    return 0


if __name__ == "__main__":
    status = main(sys.argv[1:])
    if status:
        raise SystemExit(status)
