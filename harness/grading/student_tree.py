"""The student course: what students receive, written from an allowlist of the instructor's repository.

The repository (solutions, hidden tests, the judge, the grading pipeline, the test suite) is the
instructor's and stays private. `write_student_tree` copies only what a student needs to run the lessons:
the released notebooks, the `harness` package without `harness/judge` (hidden cases, grading secret,
verdicts) and `harness/grading` (the instructor's pipeline), a student README, the requirements a student
needs, the packaging files to install the harness (`harness/install.py` for hosted runtimes), the course's
LICENSE and the student JupyterLab's settings (`.jupyter/`: no Formgrader, Create Assignment or Course List).
Hand it out by git, a zip, nbgitpuller or nbgrader's exchange.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from harness.grading.layout import REPO_ROOT

# Top-level files and folders of the repository a student gets, as they are.
ALLOWED = ("notebooks", "harness", "pyproject.toml", "nbgrader_config.py", "LICENSE")
# Inside them, what stays with the instructor.
WITHHELD = ("harness/judge", "harness/grading", "harness/course.py", "harness/kit.py", "harness/checks/testing.py",
            "harness/drills/notebook.py")
# Requirements only the instructor needs (tests, the browser test).
INSTRUCTOR_ONLY = ("pytest", "pytest-xdist", "pytest-timeout", "playwright", "ruff", "dask", "distributed")

# The files only the student tree has (README, Makefile, .gitignore, JupyterLab settings), as they are copied.
TEMPLATE = Path(__file__).with_name("student_template")

def student_requirements(text: str) -> str:
    """The instructor's requirements.txt without the packages only the instructor needs."""
    kept = [line for line in text.splitlines()
            if not line.strip().startswith("#") and line.split("==")[0].strip() not in INSTRUCTOR_ONLY]
    return ("# The course environment, pinned (`make setup`; `make setup CPU=1` takes the CPU-only torch pair).\n"
            + "\n".join(line for line in kept if line.strip()) + "\n")


def write_student_tree(target: Path, repo_root: Path = REPO_ROOT) -> list[Path]:
    """Write the student course into `target` (which must not exist, or be empty); return the files written."""
    if target.exists() and any(target.iterdir()):
        raise FileExistsError(f"{target} is not empty: give a new folder for the student tree")
    target.mkdir(parents=True, exist_ok=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints")
    for name in ALLOWED:
        source = repo_root / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=ignore)
        elif source.is_file():
            shutil.copy2(source, target / name)
    for name in WITHHELD:
        withheld = target / name
        if withheld.is_dir():
            shutil.rmtree(withheld)
        elif withheld.exists():
            withheld.unlink()
    if not (repo_root / "LICENSE").is_file():
        raise FileNotFoundError(f"{repo_root / 'LICENSE'} is missing: the student tree must carry the course's licence")
    shutil.copytree(TEMPLATE, target, dirs_exist_ok=True, ignore=ignore)
    (target / "gitignore").rename(target / ".gitignore")  # a dot-file template would be hidden from packaging tools
    (target / "requirements.txt").write_text(student_requirements((repo_root / "requirements.txt").read_text()))
    return sorted(p for p in target.rglob("*") if p.is_file())
