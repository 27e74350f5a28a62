"""The student course: what students receive, written from an allowlist of the instructor's repository.

The repository (solutions, hidden tests, the judge, the grading pipeline, the test suite) is the
instructor's and stays private. `write_student_tree` copies only what a student needs to run the lessons:
the released notebooks, the `harness` package without `harness/judge` (hidden cases, grading secret,
verdicts) and `harness/grading` (the instructor's pipeline), the judges' solution lines (level-3 hints) but those the
course file releases, a student README and Makefile, the requirements a
student needs, pyproject.toml without the instructor's tools (`harness/install.py` for hosted runtimes), the
student's nbgrader configuration (what Validate runs), the course's LICENSE and the student JupyterLab's settings
(`.jupyter/`: no Formgrader, Create Assignment or Course List). Hand it out by git, a zip, nbgitpuller or nbgrader's
exchange.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from harness.grading.held_drills import withhold_drills
from harness.grading.layout import REPO_ROOT
from harness.grading.references import withhold_references
from harness.grading.solution_hints import lesson_judges, strip_solution_lines, write_released

# Top-level files and folders of the repository a student gets, as they are.
ALLOWED = ("notebooks", "harness", "LICENSE")
# Inside them, what stays with the instructor.
WITHHELD = ("harness/judge", "harness/grading", "harness/course.py", "harness/kit.py", "harness/checks/testing.py",
            "harness/drills/notebook.py")
# Requirements only the instructor needs (tests, the browser test, grading on a cluster).
INSTRUCTOR_ONLY = ("pytest", "pytest-xdist", "pytest-timeout", "hypothesis", "playwright", "axe-playwright-python",
                   "ruff", "dask", "distributed", "jupyterhub")
# pyproject.toml's tables and extras only the instructor's tree uses: the linter's and the test suite's settings
# (for a tests/ folder students do not get), grading on a Dask cluster.
INSTRUCTOR_TABLES = ("tool.ruff", "tool.pytest")
INSTRUCTOR_EXTRAS = ("cluster",)

# The files only the student tree has (README, Makefile, nbgrader_config.py, .gitignore, JupyterLab settings), as
# they are copied.
TEMPLATE = Path(__file__).with_name("student_template")


def student_pyproject(text: str) -> str:
    """The instructor's pyproject.toml without INSTRUCTOR_TABLES and INSTRUCTOR_EXTRAS (an extra is one line), each
    with the comment lines right above it."""
    kept: list[str] = []
    dropping = False
    for line in text.splitlines():
        header = re.match(r"\[([^\]]+)\]\s*$", line)
        dropping = header[1].startswith(INSTRUCTOR_TABLES) if header else dropping
        extra = re.match(r"([A-Za-z0-9_-]+)\s*=", line)
        starts = (header is not None and dropping) or (extra is not None and extra[1] in INSTRUCTOR_EXTRAS)
        while starts and kept and kept[-1].startswith("#"):
            kept.pop()
        if not (dropping or starts):
            kept.append(line)
    return "\n".join(kept).rstrip() + "\n"

def student_requirements(text: str) -> str:
    """The instructor's requirements.txt without the packages only the instructor needs."""
    kept = [line for line in text.splitlines()
            if not line.strip().startswith("#") and line.split("==")[0].strip() not in INSTRUCTOR_ONLY]
    return ("# The course environment, pinned (`make setup`; `make setup CPU=1` takes the CPU-only torch pair).\n"
            + "\n".join(line for line in kept if line.strip()) + "\n")


def write_student_tree(target: Path, repo_root: Path = REPO_ROOT, solution_lines: dict[str, str] | None = None,
                       withheld_drills: dict[str, tuple[str, ...]] | None = None) -> list[Path]:
    """Write the student course into `target` (which must not exist, or be empty); return the files written.

    The lesson judges' solution lines (level-3 hints) are blanked; `solution_lines` (task id -> line, what the course
    file releases: `solution_hints.released_lines`) is written beside them for `hint()`. The drills `withheld_drills`
    (a graded release: `answerable.WITHHELD_DRILLS`) lose their answers (`held_drills.withhold_drills`). The judges'
    references that answer exercises are recorded on the visible cases and their bodies removed
    (`references.withhold_references`).
    """
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
    for judge in lesson_judges(target / "harness"):
        judge.write_text(strip_solution_lines(judge.read_text(encoding="utf-8")), encoding="utf-8")
    write_released(target, solution_lines or {})
    withhold_drills(target, withheld_drills or {}, repo_root)
    withhold_references(target, repo_root)
    if not (repo_root / "LICENSE").is_file():
        raise FileNotFoundError(f"{repo_root / 'LICENSE'} is missing: the student tree must carry the course's licence")
    shutil.copytree(TEMPLATE, target, dirs_exist_ok=True, ignore=ignore)
    (target / "gitignore").rename(target / ".gitignore")  # a dot-file template would be hidden from packaging tools
    (target / "requirements.txt").write_text(student_requirements((repo_root / "requirements.txt").read_text()))
    (target / "pyproject.toml").write_text(student_pyproject((repo_root / "pyproject.toml").read_text()))
    return sorted(p for p in target.rglob("*") if p.is_file())
