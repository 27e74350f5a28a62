"""The student course (`harness release --student`): built from an allowlist, it holds no solution, hidden test,
judge or grading secret, and its lessons run from it with its own harness."""

from __future__ import annotations

import json
import os
import re
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
                     "requirements.txt", ".gitignore", "LICENSE", ".jupyter"}
    assert not (tree / "harness" / "judge").exists() and not (tree / "harness" / "grading").exists()
    assert sorted(p.name for p in (tree / "notebooks").iterdir()) == discover_assignments()
    requirements = (tree / "requirements.txt").read_text()
    assert "torch==" in requirements and "nbgrader==" in requirements and "onnxscript==" in requirements
    for tool in ("pytest", "ruff", "dask", "distributed", "playwright"):
        assert tool not in requirements, tool
    licence = (tree / "LICENSE").read_text()
    assert "MIT License" in licence and "CC BY 4.0" in licence
    assert "*.egg-info/" in (tree / ".gitignore").read_text().splitlines()


def test_the_readme_covers_every_machine_the_lessons_submitting_drills_and_troubleshooting(tree):
    readme = (tree / "README.md").read_text()
    for machine in ("### Your laptop", "### Your university's JupyterHub", "### Google Colab", "### Kaggle"):
        assert machine in readme, machine
    for lesson in discover_assignments():
        assert f"| {lesson[:2]} |" in readme, lesson
    for words in ("check(", "hint(", "**Validate**", "Submit", "harness drill check", "harness doctor",
                  "MIT", "CC BY 4.0", "OMP_NUM_THREADS=1", "--allow-root",
                  "--index-url https://download.pytorch.org/whl/cpu",
                  "%run ../../harness/install.py", "python3 harness/install.py"):
        assert words in readme, words
    pinned = dict(line.split("==") for line in (tree / "requirements.txt").read_text().splitlines()
                  if line.startswith(("torch==", "torchvision==")))
    assert f"torch=={pinned['torch']} torchvision=={pinned['torchvision']} --index-url" in readme


def test_the_makefile_does_what_the_readme_says(tree):
    """`make -n` prints the commands the README promises: the CPU-only pair first, --allow-root as root, the
    course's JupyterLab settings."""
    setup = subprocess.run(["make", "-n", "setup", "CPU=1"], cwd=tree, capture_output=True, text=True, check=True)
    first_install = [line for line in setup.stdout.splitlines() if "pip install" in line][0]
    assert first_install.endswith("torch==2.14.1 torchvision==0.29.1 --index-url https://download.pytorch.org/whl/cpu")
    plain = subprocess.run(["make", "-n", "setup"], cwd=tree, capture_output=True, text=True, check=True).stdout
    assert "download.pytorch.org" not in plain and "pip install --quiet --no-deps -e ." in plain
    lab = subprocess.run(["make", "--no-print-directory", "-n", "lab"], cwd=tree, capture_output=True, text=True,
                         check=True).stdout
    assert lab.strip().splitlines()[-1].endswith("--allow-root") == (os.getuid() == 0)
    shown = subprocess.run(["make", "-p", "-n", "lab"], cwd=tree, capture_output=True, text=True).stdout
    assert f"JUPYTER_CONFIG_DIR := {tree}/.jupyter" in shown


@pytest.mark.slow
def test_the_student_jupyterlab_has_validate_and_the_assignment_list_only(tree):
    """The tree's .jupyter/ (what `make lab` points JupyterLab at) turns off Formgrader, Create Assignment and
    Course List, server and lab side, keeps Validate and the Assignment List, and wraps messages between words."""
    code = """
import json
from jupyter_server.serverapp import ServerApp
app = ServerApp()
app.initialize(argv=["--port=0", "--no-browser"])
enabled = sorted(n for n, e in app.extension_manager.extensions.items() if e.enabled and "nbgrader" in n)
from jupyterlab_server.config import get_page_config
from jupyter_core.paths import jupyter_config_path
page = get_page_config([p + "/labconfig" for p in jupyter_config_path()], "", None)
disabled = sorted(page.get("disabledExtensions", {}))
print(json.dumps([enabled, disabled]))
"""
    environment = {**os.environ, "JUPYTER_CONFIG_DIR": str(tree / ".jupyter")}
    done = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=120,
                          cwd=tree)
    assert done.returncode == 0, done.stderr[-2000:]
    enabled, disabled = json.loads(done.stdout.strip().splitlines()[-1])
    assert enabled == ["nbgrader.server_extensions.assignment_list", "nbgrader.server_extensions.validate_assignment"]
    assert {"@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment",
            "@jupyter/nbgrader:course-list"} <= set(disabled)
    assert "@jupyter/nbgrader:validate-assignment" not in disabled
    assert "@jupyter/nbgrader:assignment-list" not in disabled
    assert "word-break: normal" in (tree / ".jupyter" / "custom" / "custom.css").read_text()


@pytest.mark.slow
def test_the_hosted_runtime_line_installs_the_harness_without_a_restart(tree, tmp_path):
    """The README's hosted-runtime line, `%run ../../harness/install.py` from a lesson's folder, in one Python
    process that has no harness: it installs only what is missing (nothing here but the harness itself), as an
    ordinary package, and the same process imports it and runs lesson 00's checks at once. Into a folder on
    sys.path (`--target`) rather than this environment's site-packages, which the rest of the suite uses."""
    target = tmp_path / "site"
    lesson = tree / "notebooks" / "00_welcome"
    code = f"""
{WITHOUT_THE_REPOSITORY}
import sys, importlib.util
sys.path.insert(0, {str(target)!r})
assert importlib.util.find_spec("harness") is None
sys.argv = ["../../harness/install.py", "--target", {str(target)!r}]
import runpy
runpy.run_path("../../harness/install.py", run_name="__main__")
import harness, torch
from harness.checks import check
assert harness.__file__.startswith({str(target)!r}), harness.__file__
check("00-make-batch", lambda n, device: torch.zeros(n, 3, 8, 8, device=device))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=lesson,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "keeping this runtime's torch" in done.stdout and "every requirement is already installed" in done.stdout
    assert "no restart needed" in done.stdout and "test kernel ok" in done.stdout
    assert "\u2714" in done.stdout, done.stdout
    assert not list(target.glob("*.egg-link")) and not list(target.glob("__editable__*")), "not an editable install"


def test_no_solution_hidden_test_judge_or_secret_reaches_students(tree):
    texts = _texts(tree)
    for path, text in texts.items():
        for marker in ("BEGIN HIDDEN TESTS", "hidden=True", "BEGIN SOLUTION", SECRET,
                       "HARNESS_GRADING_SECRET", "draw_cases"):
            assert marker not in text, f"{marker!r} in {path}"
        assert not re.search(r"harness\.judge\b", text), f"the secret judge package is named in {path}"
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
