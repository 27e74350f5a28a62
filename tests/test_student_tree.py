"""The student course (`harness release --student`): built from an allowlist, it holds no solution, hidden test,
judge or grading secret, and its lessons run from it with its own harness."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from harness.grading.layout import REPO_ROOT, discover_assignments
from harness.grading.release import answered_release

pytestmark = pytest.mark.xdist_group("student-tree")
SECRET = "5e" * 32
# The test's interpreter has the repository installed (editable); a student's has only the tree.
WITHOUT_THE_REPOSITORY = ("import sys\nsys.meta_path = [f for f in sys.meta_path if 'Editable' not in type(f).__name__ "
                          "and 'Editable' not in getattr(f, '__name__', '')]\n")


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("student") / "course"
    environment = {**os.environ, "HARNESS_GRADING_SECRET": SECRET}
    done = subprocess.run([sys.executable, "-m", "harness", "release", "--student", str(target)], cwd=REPO_ROOT,
                          env=environment, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return target


def _texts(tree: Path) -> dict[Path, str]:
    return {path: path.read_text(errors="replace") for path in tree.rglob("*") if path.is_file()}


def _solution_cells(assignment: str) -> list[str]:
    """Each solution cell as the solution notebook holds it (markers dropped, lines stripped), where it is substantial.

    The whole cell, its `def` line included: the checks' judges recompute references with the same PyTorch
    operations the exercises teach (and the hints state), so the body of a short exercise may match a
    reference; what must not ship is the instructor's notebook answer.
    """
    notebook = nbformat.read(REPO_ROOT / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
    cells = []
    for cell in notebook.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("solution") and cell.cell_type == "code":
            lines = [line.strip() for line in cell.source.splitlines()
                     if line.strip() and not line.strip().startswith("#")]
            if len(lines) >= 3:
                cells.append("\n".join(lines))
    return cells


def test_the_tree_holds_only_what_students_need(tree):
    names = {p.name for p in tree.iterdir()}
    assert names == {"notebooks", "harness", "pyproject.toml", "nbgrader_config.py", "README.md", "Makefile",
                     "requirements.txt", ".gitignore"}
    assert not (tree / "harness" / "judge").exists() and not (tree / "harness" / "grading").exists()
    assert sorted(p.name for p in (tree / "notebooks").iterdir()) == discover_assignments()
    requirements = (tree / "requirements.txt").read_text()
    assert "torch==" in requirements and "nbgrader==" in requirements and "pytest" not in requirements
    readme = (tree / "README.md").read_text()
    assert "make setup" in readme and "make lab" in readme and "jupyter lab --notebook-dir=notebooks" in readme


def test_no_solution_hidden_test_judge_or_secret_reaches_students(tree):
    texts = _texts(tree)
    for path, text in texts.items():
        for marker in ("BEGIN HIDDEN TESTS", "hidden=True", "BEGIN SOLUTION", "harness.judge", SECRET,
                       "HARNESS_GRADING_SECRET", "draw_cases"):
            assert marker not in text, f"{marker!r} in {path}"
    # Notebook 11 is built from the drill bank, whose reference answers ship for self-study (`harness drill
    # solution`); every other lesson's solutions must be nowhere in the tree.
    normalised = {path: "\n".join(line.strip() for line in text.splitlines() if line.strip())
                  for path, text in texts.items()}
    for assignment in discover_assignments():
        if assignment.startswith("11_"):
            continue
        for body in _solution_cells(assignment):
            leaked = [path for path, text in normalised.items() if body in text]
            assert not leaked, f"a solution of {assignment} is in {leaked}"


@pytest.mark.slow
def test_a_lesson_runs_and_checks_from_the_tree_with_its_own_harness(tree, tmp_path):
    """The answered lesson 00 executes in a kernel that imports the tree's harness (not the repository's)."""
    assignment = "00_welcome"
    notebook = tree / "notebooks" / assignment / "answered.ipynb"
    nbformat.write(answered_release(assignment), notebook)
    code = f"""
{WITHOUT_THE_REPOSITORY}
import harness, nbformat
from nbclient import NotebookClient
assert harness.__file__.startswith({str(tree)!r}), harness.__file__
try:
    import harness.judge
    raise SystemExit("the judge is importable from the student tree")
except ModuleNotFoundError:
    pass
notebook = nbformat.read({str(notebook)!r}, as_version=4)
NotebookClient(notebook, timeout=300, resources={{"metadata": {{"path": {str(notebook.parent)!r}}}}}).execute()
ticks = [o["text"] for c in notebook.cells for o in c.get("outputs", [])
         if o.get("name") == "stdout" and "\\u2714" in o["text"]]
print(len(ticks))
"""
    environment = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    tasks = [c for c in nbformat.read(notebook, as_version=4).cells
             if c.get("metadata", {}).get("nbgrader", {}).get("grade") and c.cell_type == "code"]
    assert int(done.stdout.split()[-1]) == len(tasks), done.stdout
    commands = subprocess.run([sys.executable, "-c",
                               WITHOUT_THE_REPOSITORY + "from harness.cli import main; main(['--help'])"],
                              env=environment, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    listed = commands.stdout.split("{")[1].split("}")[0].split(",")
    assert commands.returncode == 0 and "drill" in listed and not {"grade", "course"} & set(listed), commands.stdout
