"""Where the course's assignments live, and nbgrader's configuration for a course directory anywhere.

Imports only the standard library at load time (traitlets and nbformat where used): `harness release
--student` copies files with any Python 3.11, before the course environment exists.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from traitlets.config import Config


REPO_ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENT_PATTERN = re.compile(r"^\d\d_[a-z0-9_]+$")
# "### Exercise 2 — how big is this model? (`00-count-params`, 2 points)" (CONTRIBUTING.md, "A lesson")
EXERCISE_HEADING = re.compile(r"^#+\s*(Exercise\s+\d+)\s*[\u2014-]+\s*(.+?)\s*\(`([^`]+)`", re.M)


def discover_assignments(root: Path = REPO_ROOT) -> list[str]:
    """Names of the assignments in `root`/solutions (folders named like `04_training_loop`), sorted."""
    solutions = root / "solutions"
    if not solutions.is_dir():
        raise FileNotFoundError(f"{solutions} does not exist: run this from the course repository.")
    return sorted(p.name for p in solutions.iterdir() if p.is_dir() and ASSIGNMENT_PATTERN.match(p.name))


def check_assignment(name: str, root: Path = REPO_ROOT) -> str:
    """`name` if it is an assignment of the course, else a ValueError listing the ones that exist."""
    known = discover_assignments(root)
    if name not in known:
        raise ValueError(f"no assignment {name!r} in {root / 'solutions'}; the assignments are: {', '.join(known)}")
    return name


def notebook_names(assignment: str, root: Path = REPO_ROOT) -> list[str]:
    """Notebook file names (without .ipynb) of an assignment's source."""
    return sorted(p.stem for p in (root / "solutions" / assignment).glob("*.ipynb"))


def graded_tasks(assignment_dir: Path) -> list[str]:
    """The grade ids of the graded test cells of the notebooks in `assignment_dir`, in order."""
    return list(graded_points(assignment_dir))


def graded_points(assignment_dir: Path) -> dict[str, float]:
    """Grade id -> points of the graded test cells of the notebooks in `assignment_dir`, in order."""
    import nbformat

    points = {}
    for path in sorted(assignment_dir.glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            nbgrader = cell.get("metadata", {}).get("nbgrader", {})
            if cell.cell_type == "code" and nbgrader.get("grade") and not nbgrader.get("solution"):
                points[nbgrader["grade_id"]] = float(nbgrader.get("points", 0))
    return points


def exercise_titles(notebook: Any) -> dict[str, str]:
    """Task id -> "Exercise k — title", from the exercise headings of a lesson notebook (an nbformat node)."""
    titles = {}
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            for number, title, task in EXERCISE_HEADING.findall(cell.source):
                titles[task] = f"{number} \u2014 {title}"
    return titles


def assignment_titles(assignment: str, root: Path = REPO_ROOT) -> dict[str, str]:
    """Task id -> "Exercise k — title" of an assignment, from its released notebook (empty if there is none)."""
    import nbformat

    titles: dict[str, str] = {}
    for path in sorted((root / "notebooks" / assignment).glob("*.ipynb")):
        titles.update(exercise_titles(nbformat.read(path, as_version=4)))
    return titles


def course_config(course_root: Path, repo_root: Path = REPO_ROOT, **sections: dict) -> Config:
    """nbgrader configuration for a course directory at `course_root`.

    The repository's nbgrader_config.py is the base (timeouts, IgnorePattern, code stub), so every
    course directory grades like the instructor's; its root and private gradebook are moved to
    `course_root`. `sections` overrides or adds config sections, e.g. `Execute={"timeout": 5}`.
    """
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(repo_root)).load_config()
    config.CourseDirectory.root = str(course_root)
    config.CourseDirectory.db_url = f"sqlite:///{course_root / 'gradebook.db'}"
    for section, values in sections.items():
        for key, value in values.items():
            setattr(getattr(config, section), key, value)
    return config


def put_environment_tools_on_path() -> None:
    """Put this interpreter's bin directory first on PATH.

    nbgrader's gradebook runs the `alembic` command, and jupyter kernels are found through PATH: when the
    course runs as `.venv/bin/python -m harness ...` without an activated venv, they would be missing.
    """
    bin_dir = str(Path(sys.executable).parent)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
