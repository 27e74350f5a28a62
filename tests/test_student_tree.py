"""The student course (`harness release --student`): built from an allowlist, it holds no solution, hidden test,
judge or grading secret, its README's commands run as written, its set-up fits the machine, and its lessons run
from it with its own harness."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import tomllib
from traitlets.config.loader import PyFileConfigLoader

from harness.grading.layout import REPO_ROOT, discover_assignments
from harness.grading.release import answered_release
from harness.laptop import CPU_INDEX, index_unreachable, python_verdict, torch_source

pytestmark = pytest.mark.xdist_group("student-tree")
SECRET = "5e" * 32
# The test's interpreter has the repository installed (editable); a student's has only the tree.
WITHOUT_THE_REPOSITORY = ("import sys\nsys.meta_path = [f for f in sys.meta_path if 'Editable' not in type(f).__name__ "
                          "and 'Editable' not in getattr(f, '__name__', '')]\n")


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("student") / "course"
    environment = {**os.environ, "HARNESS_GRADING_SECRET": SECRET}
    # the answerability audit of the tree is tests/test_answerability.py's
    done = subprocess.run([sys.executable, "-m", "harness", "release", "--student", str(target), "--no-audit"],
                          cwd=REPO_ROOT,
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
    for tool in ("pytest", "ruff", "dask", "distributed", "playwright", "hypothesis"):
        assert tool not in requirements, tool
    pyproject = tomllib.loads((tree / "pyproject.toml").read_text())
    instructors = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    assert set(pyproject["tool"]) == {"setuptools"}, "no linter or test-suite settings for a tests/ folder it lacks"
    assert set(pyproject["project"]["optional-dependencies"]) == {"lab", "export"}
    assert pyproject["project"]["dependencies"] == instructors["project"]["dependencies"]
    assert pyproject["project"]["scripts"] == {"harness": "harness.cli:main"}
    assert "cluster" not in (tree / "pyproject.toml").read_text().lower()
    assert "solutions" not in (tree / "nbgrader_config.py").read_text()
    licence = (tree / "LICENSE").read_text()
    assert "MIT License" in licence and "CC BY 4.0" in licence
    assert "*.egg-info/" in (tree / ".gitignore").read_text().splitlines()


def test_the_readme_covers_every_machine_the_lessons_submitting_drills_and_troubleshooting(tree):
    readme = (tree / "README.md").read_text()
    for machine in ("### Your laptop", "### Your university's JupyterHub", "### Google Colab", "### Kaggle"):
        assert machine in readme, machine
    for lesson in discover_assignments():
        assert f"| {lesson[:2]} |" in readme, lesson
    for words in ("check(", "hint(", "**Validate**", "Submit", 'make drill ARGS="check', "make doctor",
                  "MIT", "CC BY 4.0", "OMP_NUM_THREADS=1", "--allow-root", "Ctrl+C twice", "File > Shut Down",
                  "--index-url https://download.pytorch.org/whl/cpu",
                  "%run ../../harness/install.py", "python3 harness/install.py"):
        assert words in readme, words
    pinned = dict(line.split("==") for line in (tree / "requirements.txt").read_text().splitlines()
                  if line.startswith(("torch==", "torchvision==")))
    assert f"torch=={pinned['torch']} torchvision=={pinned['torchvision']} --index-url" in readme


def _make(tree: Path, *arguments: str, threads: str | None = None, prefix: tuple[str, ...] = ()) -> str:
    """What `make -n` (with `arguments`) would run in `tree`: the commands, or its database with -p; OMP_NUM_THREADS
    is `threads` (None: unset)."""
    environ = {key: value for key, value in os.environ.items() if key != "OMP_NUM_THREADS"}
    done = subprocess.run([*prefix, "make", "--no-print-directory", "-n", *arguments], cwd=tree, capture_output=True,
                          text=True, env=environ | ({"OMP_NUM_THREADS": threads} if threads else {}))
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_makefile_does_what_the_readme_says(tree):
    """`make -n` prints the commands the README promises: the Python checked first, torch built for the machine
    (CPU=1 insists on the CPU-only build) before the rest, pip's progress shown, --allow-root as root, the course's
    JupyterLab settings, and the doctor's thread count on two cores or fewer."""
    setup = _make(tree, "setup").splitlines()
    assert setup[0] == "python3 harness/laptop.py check-python"
    assert setup.index(".venv/bin/python harness/laptop.py torch ") < next(
        i for i, line in enumerate(setup) if "-r requirements.txt" in line)
    assert not [line for line in setup if "--quiet" in line or "-q " in line], setup
    assert ".venv/bin/python harness/laptop.py torch --cpu" in _make(tree, "setup", "CPU=1").splitlines()
    assert _make(tree, "setup", "PYTHON=python3.12").splitlines()[0] == "python3.12 harness/laptop.py check-python"
    lab = _make(tree, "lab").strip().splitlines()[-1]
    assert lab.startswith(".venv/bin/jupyter lab --notebook-dir=notebooks")
    assert lab.endswith("--allow-root") == (os.getuid() == 0)
    assert f"JUPYTER_CONFIG_DIR := {tree}/.jupyter" in _make(tree, "-p", "lab")
    if shutil.which("taskset"):  # one core, as the doctor counts them (the process's affinity)
        one_core = _make(tree, "-p", "lab", prefix=("taskset", "-c", "0"))
        assert re.search(r"^OMP_NUM_THREADS = 1$", one_core, re.M)
        own = _make(tree, "-p", "lab", threads="3", prefix=("taskset", "-c", "0"))
        assert re.search(r"^OMP_NUM_THREADS = 3$", own, re.M), "a thread count of the student's own is kept"


def _readme_commands(readme: str) -> list[str]:
    """Every `make ...` command the README shows, inline or in a code block, without its comment."""
    blocks = re.findall(r"```[a-z]*\n(.*?)```", readme, re.S)
    code = blocks + re.findall(r"`([^`\n]+)`", re.sub(r"```[a-z]*\n.*?```", "", readme, flags=re.S))
    lines = [line.split("  #")[0].strip() for block in code for line in block.splitlines()]
    return sorted({line for line in lines if re.match(r"make( |$)", line)})


def test_every_command_of_the_readme_runs_as_written(tree, tmp_path):
    """Each `make X` the student README shows is a target of the tree's Makefile that `make -n` accepts with the
    README's variables; what `make doctor` and the drill commands run (`.venv/bin/harness ...`) runs with the tree's
    own harness (`check` only parsed: it starts the drill checker); each path the README names is in the tree."""
    readme = (tree / "README.md").read_text()
    commands = _readme_commands(readme)
    targets = {line.split(":")[0] for line in (tree / "Makefile").read_text().splitlines()
               if re.match(r"[a-z][\w-]*:", line)}
    assert {"make setup", "make lab", "make doctor", 'make drill ARGS="check loop-loss-stalls"'} <= set(commands)
    for command in commands:
        words = shlex.split(command)[1:]
        assert not words or words[0] in targets, f"{command}: no such target in the student Makefile"
        runs = _make(tree, *words).strip().splitlines()[-1] if words else ""
        if words and words[0] in ("doctor", "drill"):
            argv = shlex.split(runs)
            assert argv[0] == ".venv/bin/harness", runs
            if argv[1:3] == ["drill", "check"]:
                argv[1:] = ["drill", "check", "--help"]
            done = subprocess.run([sys.executable, "-c", WITHOUT_THE_REPOSITORY + "from harness.cli import main\n"
                                   f"raise SystemExit(main({argv[1:]!r}))"], cwd=tmp_path, capture_output=True,
                                  text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(tree),
                                                               "HARNESS_HOME": str(tmp_path / "home")})
            assert done.returncode == 0, f"{command}: {done.stdout[-1000:]}{done.stderr[-1000:]}"
    named = set(re.findall(r"`((?:notebooks|harness)/[\w./]+|requirements\.txt|LICENSE|\.jupyter)`", readme))
    named |= set(re.findall(r"\]\(([\w./]+)\)", readme))
    assert {"notebooks/00_welcome/00_welcome.ipynb", "harness/install.py", "LICENSE"} <= named
    missing = [path for path in named if "NN_name" not in path and not (tree / path).exists()]
    for lesson in discover_assignments():  # a lesson's first cell and the README: `%run ../../harness/install.py`
        missing += [] if (tree / "notebooks" / lesson / "../../harness/install.py").is_file() else [lesson]
    assert not missing, missing


def test_the_student_nbgrader_config_runs_validate_as_grading_does(tree):
    """The tree's nbgrader_config.py (what Validate reads) holds the instructor's execution settings, nothing of
    the instructor's folders."""
    student = PyFileConfigLoader("nbgrader_config.py", path=str(tree)).load_config()
    instructor = PyFileConfigLoader("nbgrader_config.py", path=str(REPO_ROOT)).load_config()
    for section in ("Execute", "ExecutePreprocessor", "IgnorePattern"):
        assert student[section] == instructor[section], section
    assert student.CourseDirectory.course_id == instructor.CourseDirectory.course_id
    assert set(student.CourseDirectory) == {"course_id"} and "ClearSolutions" not in student


def test_setup_refuses_a_python_the_pins_cannot_install_and_warns_past_the_newest_tried():
    ok, line = python_verdict((3, 10, 13))
    assert not ok and "Python 3.10.13 is older" in line and "make setup PYTHON=python3.12" in line
    assert python_verdict((3, 11, 7)) == (True, "Python 3.11.7: supported (3.11 to 3.13)")
    ok, line = python_verdict((3, 14, 0))
    assert ok and "newer than the course was tried with" in line
    done = subprocess.run([sys.executable, str(REPO_ROOT / "harness" / "laptop.py"), "check-python"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "supported" in done.stdout, done.stdout + done.stderr


def test_setup_takes_the_cpu_only_torch_without_a_gpu_and_says_why_when_it_cannot():
    def answers() -> None:
        return None

    def unreachable() -> str:
        return "Temporary failure in name resolution"

    def never() -> str:
        raise AssertionError("the CPU index is asked only where there is no NVIDIA GPU")

    assert torch_source(False, answers, system="Linux")[0] == ["--index-url", CPU_INDEX]
    index, line = torch_source(False, unreachable, system="Linux")
    assert index == [] and "no NVIDIA GPU here (no nvidia-smi)" in line and "did not answer" in line
    assert "Temporary failure in name resolution" in line and "GB" in line and "make setup CPU=1" in line
    assert torch_source(True, never, system="Linux") == ([], "torch: the CUDA build from PyPI (nvidia-smi found an "
                                                           "NVIDIA GPU)")
    assert torch_source(True, answers, force_cpu=True, system="Linux")[0] == ["--index-url", CPU_INDEX]
    refused, line = torch_source(True, unreachable, force_cpu=True, system="Linux")
    assert refused is None and "CPU=1 asks for the CPU-only build" in line and "`make setup` for PyPI's" in line
    assert torch_source(False, never, system="Darwin")[0] == []
    assert "refused" in index_unreachable("http://127.0.0.1:9", timeout=5).lower()  # nothing listens on port 9


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
    assert "no restart needed" in done.stdout and "harness install: done in" in done.stdout
    assert done.stdout.count("test kernel ok") == 1, "the doctor's report, once, from a terminal"
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


def test_no_solution_line_reaches_students_and_hint_3_says_who_releases_it(tree, tmp_path):
    """Without a course file releasing them, the tree carries no level-3 hint (solution line) of any lesson, and
    hint(task, 3) there says who releases it and when. The drill bank's answers (`harness/judges/drills`, lesson 11's
    drills and some that answer another lesson's exercise: 16-save-artefact's line is the export drill's answer) ship
    for self-study until issue 38 item 1 moves them: they are not the hints' to withhold."""
    from harness.contract.registry import get
    from harness.grading.layout import graded_tasks

    lines = {task: get(task).hints.solution for assignment in discover_assignments()
             if not assignment.startswith("11_") for task in graded_tasks(REPO_ROOT / "solutions" / assignment)}
    texts = {path: text for path, text in _texts(tree).items()  # an install's build/lib copy of the bank too
             if "harness/judges/drills/" not in path.relative_to(tree).as_posix()}
    leaked = {task: str(path) for task, line in lines.items() for path, text in texts.items() if line in text}
    assert not leaked, leaked
    assert json.loads((tree / "harness" / "checks" / "released_hints.json").read_text()) == {}
    code = WITHOUT_THE_REPOSITORY + "from harness.checks import hint\nhint('04-fit', 3)\n"
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(tree)},
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Hint 3/3 for 04-fit: the solution line of a graded exercise is withheld" in done.stdout, done.stdout
    assert lines["04-fit"] not in done.stdout


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


@pytest.mark.slow
def test_a_drill_check_in_the_tree_imports_nothing_the_tree_withholds(tree, tmp_path):
    """The tree's harness checks a drill (a correct answer passes, in the sandbox where bubblewrap works, a wrong one
    fails) with only the tree on sys.path: harness.grading and the rest of WITHHELD are absent, so a drill module
    that imported one would fail here."""
    from harness.drills.core import get_drill
    from harness.grading.student_tree import WITHHELD

    withheld = [name.removesuffix(".py").replace("/", ".") for name in WITHHELD]
    solution = get_drill("tensors-pairwise-distances").solution
    code = f"""
{WITHOUT_THE_REPOSITORY}
import sys
import harness
assert harness.__file__.startswith({str(tree)!r}), harness.__file__
from harness.drills.checker import check_source
from harness.drills.core import get_drill
from harness.drills.pool import sandbox_reason
drill = get_drill("tensors-pairwise-distances")
right = check_source(drill, {solution!r})
wrong = check_source(drill, {solution!r}.replace(" ** 2", ""))
loaded = sorted(m for m in sys.modules for w in {withheld!r} if m == w or m.startswith(w + "."))
print(right.passed, right.code, wrong.passed, ",".join(loaded) or "-", sandbox_reason() is None)
"""
    environment = {**os.environ, "PYTHONPATH": str(tree), "HARNESS_HOME": str(tmp_path / "home"),
                   "OMP_NUM_THREADS": "1"}
    environment.pop("HARNESS_DRILL_SANDBOX", None)
    done = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    right, code_, wrong, loaded, sandboxed = done.stdout.split()[-5:]
    assert (right, code_, wrong) == ("True", "passed", "False"), done.stdout
    assert loaded == "-", f"the drill check imported withheld modules: {done.stdout}"
    assert sandboxed == str(shutil.which("bwrap") is not None), done.stdout
