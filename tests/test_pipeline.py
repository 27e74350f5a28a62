"""The nbgrader pipeline, for every assignment in solutions/ (lessons that land later are covered automatically).

(a) the committed release is what GenerateAssignment makes; (b) every cell of the solution runs without an
error under autograde (nbgrader's Validator, the same criterion as students run it, runs on the first lesson:
running every lesson twice more would cost minutes and prove nothing new); (c) autograde gives the solution
full marks and the release zero (every solution cell of every release is nbgrader's stub, which raises; the
release is graded where its stubs differ in kind: the first lesson, whose functions raise, and a lesson whose
cells are a bare stub, as lesson 11's; grading the others would repeat that at a minute of CPU each; each
solution cell gets a comment line, or the untouched release would be a blank notebook, never run); (d) the
planted bugs (the mistakes marked planted in tests/checks), together in one submission, lose exactly their
exercises' points, each with its failure code;
(e) hidden tests reach neither notebooks/ nor the feedback students get. Each assignment's submissions are
graded as one parallel batch (2 workers), in an xdist group of its own (one worker grades it; the two workers
share the lessons).
"""

from __future__ import annotations

import html
import re
import secrets
import shutil
from pathlib import Path

import nbformat
import pytest

from harness.checks.testing import planted_cells
from harness.grading.batch import Limits, grade_batch
from harness.grading.layout import REPO_ROOT, discover_assignments
from harness.grading.release import answered_release, release_differences
from harness.grading.submissions import Submission
from tests.exercises import lesson_tests

ASSIGNMENTS = discover_assignments()
pytestmark = pytest.mark.slow
each_assignment = pytest.mark.parametrize(
    "assignment", [pytest.param(a, marks=pytest.mark.xdist_group(f"pipeline-{a}")) for a in ASSIGNMENTS])


def planted(assignment: str) -> dict[str, tuple[str, str]]:
    """Task -> (buggy solution cell, failure code): the mistakes marked planted in the lesson's
    tests/checks/test_lessonNN.py, one per exercise (each bug written once, and run there as a mistake too)."""
    return planted_cells(getattr(lesson_tests(assignment), "MISTAKES", []))


def planted_submissions(assignment: str) -> dict[str, set[str]]:
    """The planted-bug submissions to grade: student name -> the tasks whose cells it replaces.

    The bugs are independent (each is one that the other exercises' checks do not depend on), so one
    submission carries them all and must lose exactly their points.
    """
    together = set(planted(assignment))
    return {"planted-together": together} if together else {}


def _release(assignment: str) -> nbformat.NotebookNode:
    return nbformat.read(REPO_ROOT / "notebooks" / assignment / f"{assignment}.ipynb", as_version=4)


def _attempted(release: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """`release` with a comment added to each solution cell: its stubs run, as a student's who wrote nothing that
    works (an untouched release is a blank notebook, which is never run)."""
    for cell in release.cells:
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source += "\n# tried"
    return release


def _stubs(assignment: str) -> list[str]:
    """The code of each solution cell of the release."""
    return [cell.source for cell in _release(assignment).cells
            if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution")]


def _bare(stub: str) -> bool:
    """Whether a solution cell is nothing but nbgrader's stub (no function around it)."""
    return all(line.strip().startswith("#") or "raise NotImplementedError" in line
               for line in stub.splitlines() if line.strip())


RELEASE_GRADED = {ASSIGNMENTS[0]} | {a for a in ASSIGNMENTS if any(_bare(stub) for stub in _stubs(a))}
_cache: dict[str, tuple[dict, Path]] = {}


@pytest.fixture
def graded(assignment: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, dict], Path]:
    """Results of the assignment's batch: solution, untouched release and one submission per planted bug."""
    if assignment not in _cache:
        root = tmp_path_factory.mktemp(f"pipeline-{assignment}")
        notebooks = {"solution": answered_release(assignment)}
        if assignment in RELEASE_GRADED:
            notebooks["release"] = _attempted(_release(assignment))
        bugs = planted(assignment)
        notebooks |= {student: answered_release(assignment, {task: bugs[task][0] for task in tasks})
                      for student, tasks in planted_submissions(assignment).items()}
        submissions = []
        for student, notebook in notebooks.items():
            (root / "in" / student).mkdir(parents=True)
            nbformat.write(notebook, root / "in" / student / f"{assignment}.ipynb")
            submissions.append(Submission(student, root / "in" / student / f"{assignment}.ipynb"))
        results = grade_batch(submissions, assignment, root / "out", workers=2,
                              limits=Limits(cell_timeout=300, submission_seconds=900), secret=secrets.token_bytes(32))
        _cache[assignment] = ({r["student"]: r for r in results}, root / "out")
    return _cache[assignment]


@each_assignment
def test_release_is_generated_from_solutions(assignment):
    assert release_differences(assignment) == []


@each_assignment
def test_every_cell_of_the_solution_runs_without_an_error(assignment, graded):
    _, out = graded
    notebook = nbformat.read(out / "autograded" / "solution" / assignment / f"{assignment}.ipynb", as_version=4)
    errors = [f"cell {index}: {output.get('ename')}: {output.get('evalue')}"
              for index, cell in enumerate(notebook.cells) if cell.cell_type == "code"
              for output in cell.get("outputs", []) if output.get("output_type") == "error"]
    assert not errors, "\n".join(errors)


@pytest.mark.xdist_group(f"pipeline-{ASSIGNMENTS[0]}")
def test_validator_passes_solution_and_fails_release(tmp_path, monkeypatch):
    from nbgrader.validator import Validator
    from traitlets.config import Config

    config = Config()
    config.Execute.timeout = 300  # as in nbgrader_config.py; the Validator's own default is 30 s per cell
    monkeypatch.setenv("HARNESS_BUDGET", "grading")
    assignment = ASSIGNMENTS[0]
    for kind in ("solutions", "notebooks"):  # copies: executing must never write into the repository
        shutil.copy(REPO_ROOT / kind / assignment / f"{assignment}.ipynb", tmp_path / f"{kind}.ipynb")
    solution = Validator(config=config).validate(str(tmp_path / "solutions.ipynb"))
    release = Validator(config=config).validate(str(tmp_path / "notebooks.ipynb"))
    assert not solution.get("failed") and not solution.get("changed"), solution
    assert release.get("failed"), release


@each_assignment
def test_solution_full_marks_release_zero(assignment, graded):
    results, _ = graded
    solution = results["solution"]
    assert solution["status"] == "ok", solution["reasons"]
    assert solution["scores"] and all(score == maximum for score, maximum in solution["scores"].values()), solution
    stubs = _stubs(assignment)
    assert stubs and all("raise NotImplementedError()" in stub for stub in stubs), "a solution cell without the stub"
    if assignment in RELEASE_GRADED:
        release = results["release"]
        assert release["scores"].keys() == solution["scores"].keys()
        assert all(score == 0 for score, _ in release["scores"].values()), release


@each_assignment
def test_each_planted_bug_loses_exactly_its_points(assignment, graded):
    results, _ = graded
    full = results["solution"]["scores"]
    bugs = planted(assignment)
    for student, tasks in planted_submissions(assignment).items():
        result = results[student]
        lost = {t for t, (score, maximum) in result["scores"].items() if score < maximum}
        assert lost == tasks, f"{student}: planted bugs in {sorted(tasks)} lost points on {sorted(lost)}"
        for task in tasks:
            assert result["scores"][task][0] == 0 and full[task][0] > 0
            code = bugs[task][1]
            assert result["failures"].get(task) == code, (
                f"{task}: expected failure code {code}, got {result['failures']}")


def _visible_text(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", page))


@each_assignment
def test_hidden_tests_never_reach_students(assignment, graded):
    _, out = graded
    release_text = (REPO_ROOT / "notebooks" / assignment / f"{assignment}.ipynb").read_text()
    assert "HIDDEN TESTS" not in release_text and "hidden=True" not in release_text
    pages = sorted((out / "feedback").glob(f"*/{assignment}/*.html"))
    assert len(pages) == 1 + (assignment in RELEASE_GRADED) + len(planted_submissions(assignment))
    source = nbformat.read(REPO_ROOT / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
    hidden_lines = {line.strip() for cell in source.cells
                    for block in re.findall(r"### BEGIN HIDDEN TESTS(.*?)### END HIDDEN TESTS", cell.source, re.S)
                    for line in block.splitlines() if line.strip()}
    assert hidden_lines, "the assignment has no hidden tests"
    for page in pages:
        text = _visible_text(page.read_text())
        assert "HIDDEN TESTS" not in text and "(hidden tests)" not in text, page
        leaked = [line for line in hidden_lines if line in text]
        assert not leaked, f"{page} shows hidden test code: {leaked}"
    log = (out / "logs" / "solution.log").read_text()
    judged = set(re.findall(r"^\[judge\] (\S+): passed$", log, re.M))
    assert judged == set(graded[0]["solution"]["scores"]), "the judge decided every task of the solution"
    assert log.count("(hidden):") == len(judged), "the instructor's log shows the hidden case of every task"
