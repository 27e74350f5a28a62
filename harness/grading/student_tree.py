"""The student course: what students receive, written from an allowlist of the instructor's repository.

The repository (solutions, hidden tests, the judge, the grading pipeline, the test suite) is the
instructor's and stays private. `write_student_tree` copies only what a student needs to run the lessons:
the released notebooks, the `harness` package without `harness/judge` (hidden cases, grading secret,
verdicts) and `harness/grading` (the instructor's pipeline), a student README, the requirements a student
needs, and the packaging files to install the harness. Hand it out by git, a zip, nbgitpuller or
nbgrader's exchange.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from harness.grading.layout import REPO_ROOT

# Top-level files and folders of the repository a student gets, as they are.
ALLOWED = ("notebooks", "harness", "pyproject.toml", "nbgrader_config.py", "LICENSE")
# Inside them, what stays with the instructor.
WITHHELD = ("harness/judge", "harness/grading", "harness/course.py", "harness/checks/testing.py",
            "harness/drills/notebook.py")
# Requirements only the instructor needs (tests, the browser test).
INSTRUCTOR_ONLY = ("pytest", "pytest-xdist", "pytest-timeout", "playwright")

README = """# PyTorch Training Lab

A Jupyter notebook course on training neural networks with PyTorch, where everything runs and is checked.

```bash
make setup   # once: creates .venv (Python 3.11) with the course's packages and this harness
make lab     # opens JupyterLab on the lessons (runs the set-up first if needed)
```

Without `make`: `python3 -m venv .venv && .venv/bin/pip install -r requirements.txt && .venv/bin/pip install
--no-deps -e .`, then `.venv/bin/jupyter lab --notebook-dir=notebooks`.

Open the lessons in order, from `00_welcome`. Each exercise is a cell marked `# YOUR CODE HERE` followed by
the test cell that checks it: `check("04-train-step", train_step)` prints what it verified, or what it
observed, what it expected, the likely cause and where to look. `hint("04-train-step")` prints a hint (call
it again for a more explicit one). Before you hand a notebook in, restart the kernel and run all cells, then
press **Validate**.

When your instructor grades, the same checks run on other inputs (hidden tests: other seeds, shapes and
edge cases), and the grade is decided outside your notebook: a solution that only passes the visible
numbers, or changes how the checks run, earns nothing for that exercise.
"""

MAKEFILE = """VENV := .venv
PY := $(VENV)/bin/python

.PHONY: setup lab

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt pyproject.toml
\ttest -x $(PY) || python3 -m venv $(VENV)
\t$(PY) -m pip install --quiet -r requirements.txt
\t$(PY) -m pip install --quiet --no-deps -e .
\ttouch $@

lab: setup
\t$(VENV)/bin/jupyter lab --notebook-dir=notebooks
"""


def student_requirements(text: str) -> str:
    """The instructor's requirements.txt without the packages only the instructor needs."""
    kept = [line for line in text.splitlines()
            if not line.strip().startswith("#") and line.split("==")[0].strip() not in INSTRUCTOR_ONLY]
    return "# The course environment, pinned.\n" + "\n".join(line for line in kept if line.strip()) + "\n"


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
    (target / "README.md").write_text(README)
    (target / "Makefile").write_text(MAKEFILE)
    (target / "requirements.txt").write_text(student_requirements((repo_root / "requirements.txt").read_text()))
    (target / ".gitignore").write_text(".venv/\n__pycache__/\n.ipynb_checkpoints/\nruns/\ndata/\n")
    return sorted(p for p in target.rglob("*") if p.is_file())
