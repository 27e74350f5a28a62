"""Feedback students may read: nbgrader's feedback HTML with the hidden tests and their output removed.

nbgrader renders the autograded notebook, in which OverwriteCells put the hidden tests back into every
test cell, with their printed results and tracebacks (IPython's tracebacks quote the lines around the
failing one). `StripHiddenTests` runs first in GenerateFeedback: each test cell gets its release source
back, lines printed by hidden checks go, and an error raised by a hidden check becomes a short message
that names the failure code without the hidden inputs; a visible failure keeps its teaching message.
`OutputsAsText` and nbconvert's sanitising (`feedback_html`) keep everything the student wrote inert.
`polish_feedback` then makes the HTML read well: long messages wrap inside their box, and the index names
each test cell by its exercise and task id instead of "Test cell" five times; last, the page gets its
content security policy (`feedback_html.with_policy`). After a regrade,
`regenerate_feedback` writes a student's new verdicts into the autograded notebook and runs the same
GenerateFeedback again, from the grading's gradebook, so the feedback shows the new points and messages.
A submission nothing was judged for (no notebook, a file that is not a notebook, a blank notebook) gets a
page of its own instead (`write_unjudged_feedback`): what was wrong with it, its score and what to do.
A late submission's pages get a note first in their body, written again at every publish (`write_late_notes`).
"""

from __future__ import annotations

import html
import re
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import nbformat
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import NbGraderPreprocessor

from harness.grading.execute import error_output
from harness.grading.feedback_html import EXPORTER, OutputsAsText, with_policy
from harness.grading.layout import course_config, exercise_titles

if TYPE_CHECKING:
    from harness.grading.jobs import GradeResult
    from harness.judge.verdict import Verdict

HIDDEN_BLOCK = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS.*?^[ \t]*### END HIDDEN TESTS[^\n]*\n?", re.M | re.S)
FAILURE_CODE = re.compile(r"failed \[([a-z0-9-]+)\]")
INDEX_ENTRY = re.compile(r'<a href="#([^"]+)">Test cell</a>')
LATE_NOTE = re.compile(r"\n<!-- harness:late -->.*?<!-- /harness:late -->", re.S)  # what `with_late_note` adds
BODY = re.compile(r"<body\b[^>]*>", re.I)
WRAP_CSS = ("<style>/* harness: messages wrap inside their box */ pre, .output_text pre, .output_error pre "
            "{ white-space: pre-wrap; overflow-wrap: anywhere; word-break: normal; }</style>")


def polish_feedback(html: str, titles: dict[str, str]) -> str:
    """nbgrader's feedback HTML with wrapping messages and each index entry named by exercise and task id."""
    def entry(match: re.Match[str]) -> str:
        task = match.group(1)
        name = f"{titles[task]} (<code>{task}</code>)" if task in titles else f"Test cell <code>{task}</code>"
        return f'<a href="#{task}">{name}</a>'

    html = INDEX_ENTRY.sub(entry, html)
    return with_policy(html.replace("</head>", WRAP_CSS + "\n</head>", 1) if WRAP_CSS not in html else html)


def without_hidden_tests(source: str) -> str:
    """`source` with every `### BEGIN HIDDEN TESTS` ... `### END HIDDEN TESTS` block removed."""
    return HIDDEN_BLOCK.sub("", source).rstrip("\n")


def failure_code(text: str) -> str | None:
    """The failure code in a check's error message ("00-accuracy failed [wrong-accuracy] ..."), if any."""
    match = FAILURE_CODE.search(text)
    return match.group(1) if match else None


def _student_error(error: NotebookNode, task: str, visible_passed: bool) -> NotebookNode:
    """The error output a student sees: the visible check's message, or a code-only hidden-test failure."""
    if visible_passed:
        code = failure_code(error.get("evalue", ""))
        detail = f" [{code}]" if code else ""
        return error_output("HiddenTestsFailed", f"{task}: your code passes the visible test but fails the hidden "
                            f"tests{detail}, which run the same check on other inputs (seeds, shapes, edge cases)")
    return error_output(error.get("ename", "Error"), error.get("evalue", ""))


class StripHiddenTests(NbGraderPreprocessor):
    """Remove hidden tests, their printed results and their tracebacks from a notebook's test cells."""

    def preprocess_cell(self, cell: NotebookNode, resources: Any, index: int) -> tuple[NotebookNode, Any]:
        """Clean one cell (only test cells that contain hidden tests change)."""
        nbgrader = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type != "code" or "### BEGIN HIDDEN TESTS" not in cell.source:
            return cell, resources
        task = nbgrader.get("grade_id", "this test")
        cell.source = without_hidden_tests(cell.source)
        visible_passed = any(f"\u2714 {task}:" in o.get("text", "") for o in cell.outputs)
        outputs = []
        for output in cell.outputs:
            if output.output_type == "stream":
                output.text = "".join(line for line in output.text.splitlines(True) if "(hidden tests)" not in line)
                if not output.text:
                    continue
            elif output.output_type == "error":
                output = _student_error(output, task, visible_passed)
            outputs.append(output)
        cell.outputs = outputs
        return cell, resources


def feedback_sections() -> dict[str, dict[str, Any]]:
    """nbgrader's GenerateFeedback configuration, the same at grading and regrading: hidden tests stripped,
    displayed outputs as text, Markdown and HTML sanitised (`feedback_html`)."""
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
    from nbgrader.preprocessors import GetGrades

    return {"GenerateFeedback": {"preprocessors": [StripHiddenTests, OutputsAsText, GetGrades,
                                                   CSSHTMLHeaderPreprocessor]},
            "HTMLExporter": EXPORTER}


def verdict_outputs(verdict: Verdict) -> list[NotebookNode]:
    """A test cell's outputs for the judge's `verdict`: its message printed, or raised as a CheckFailed."""
    if verdict.passed:
        return [nbformat.v4.new_output("stream", name="stdout", text=verdict.message + "\n")]
    return [error_output("CheckFailed", verdict.message)]


def regenerate_feedback(out: Path, template: Path, assignment: str, student: str,
                        verdicts: dict[str, Verdict]) -> str | None:
    """Rewrite `student`'s feedback in the grading at `out` after a regrade judged `verdicts` anew.

    The test cells of `verdicts`' tasks in `out`/autograded get the new messages (the instructor's view); then
    nbgrader's GenerateFeedback runs as in the first grading (`StripHiddenTests`, `GetGrades` from
    `out`/gradebook.db, which must already hold the new points; `polish_feedback`), in a private course
    folder, and its pages replace `out`/feedback/<student>/<assignment>/. Nothing else in `out` changes.

    Args:
        template: the assignment's template course (`batch.course_template`): its release names the exercises.

    Returns:
        None, or why the feedback could not be generated (the old pages are then kept).
    """
    from nbgrader.apps import NbGraderAPI

    graded = out / "autograded" / student / assignment
    for path in graded.glob("*.ipynb"):
        notebook = nbformat.read(path, as_version=4)
        for cell in notebook.cells:
            verdict = verdicts.get(cell.get("metadata", {}).get("nbgrader", {}).get("grade_id"))
            if verdict is not None and cell.cell_type == "code":
                cell.outputs = verdict_outputs(verdict)
        nbformat.write(notebook, path)
    release = nbformat.read(next((template / "notebooks" / assignment).glob("*.ipynb")), as_version=4)
    with tempfile.TemporaryDirectory(prefix="harness-feedback-") as tmp:
        course = Path(tmp)
        shutil.copy(out / "gradebook.db", course / "gradebook.db")
        shutil.copytree(graded, course / "autograded" / student / assignment)
        api = NbGraderAPI(config=course_config(course, **feedback_sections()))  # as the first grading's
        outcome = api.generate_feedback(assignment, student, force=True)
        if not outcome["success"]:
            return f"feedback not regenerated for {student}: {outcome['error'][-200:]}"
        titles = exercise_titles(release)
        pages = course / "feedback" / student / assignment
        for page in pages.glob("*.html"):
            page.write_text(polish_feedback(page.read_text(encoding="utf-8"), titles), encoding="utf-8")
        shutil.copytree(pages, out / "feedback" / student / assignment, dirs_exist_ok=True)
    return None


# what a student whose submission was not judged should do, by status
WHAT_TO_DO = {
    "invalid": "Open your notebook in JupyterLab to check that it opens, save it, then submit the notebook file "
               "itself, {notebook}, as JupyterLab saves it (File > Download): not renamed to another format, not "
               "zipped, not a link or a shortcut. Tell your instructor when you have submitted it again.",
    "missing": "Submit the notebook file itself, {notebook}, as JupyterLab saves it (File > Download), not renamed. "
               "Tell your instructor when you have submitted it again.",
    "not attempted": "Every exercise's solution cell is still as it was handed out (`# YOUR CODE HERE`), so your "
                     "notebook was not run. Write your answers in those cells, run each exercise's `check(...)` "
                     "cell, save, and submit the notebook again.",
}


def unjudged_page(result: GradeResult, reason: str) -> str:
    """The feedback page of a submission nothing was judged for: `reason`, its score and what to do."""
    maximum = sum(top for _, top in result.scores.values())
    todo = WHAT_TO_DO.get(result.status, "Ask your instructor.").format(notebook=f"{result.assignment}.ipynb")
    return with_policy(f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{result.assignment}: "
            f"feedback</title></head>\n<body><main><h1>{result.assignment}: your submission was not graded</h1>\n"
            f"<p><strong>Score: 0 / {maximum:g}</strong></p>\n<h2>What was wrong</h2>\n<p>{html.escape(reason)}</p>\n"
            f"<h2>What to do</h2>\n<p>{html.escape(todo)}</p></main></body></html>\n")


def write_unjudged_feedback(out: Path, result: GradeResult, reason: str) -> Path:
    """Write `unjudged_page` where nbgrader puts a student's feedback: `out`/feedback/<student>/<assignment>/."""
    page = out / "feedback" / result.student / result.assignment / f"{result.assignment}.html"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(unjudged_page(result, reason), encoding="utf-8")
    return page


def with_late_note(page: str, note: str) -> str:
    """`page` with `note` (plain text: escaped here) first in its body, in place of the note an earlier publish
    added; an empty `note` only removes that one."""
    page = LATE_NOTE.sub("", page, count=1)
    match = BODY.search(page)
    if not note or match is None:
        return page
    block = f"\n<!-- harness:late --><p><strong>{html.escape(note)}</strong></p><!-- /harness:late -->"
    return page[:match.end()] + block + page[match.end():]


def write_late_notes(out: Path, assignment: str, notes: dict[str, str]) -> None:
    """Put each student's late note (`late.Late.note`; "" for none) on their feedback pages in `out`."""
    for student, note in notes.items():
        for page in (out / "feedback" / student / assignment).glob("*.html"):
            text = page.read_text(encoding="utf-8")
            if (new := with_late_note(text, note)) != text:
                page.write_text(new, encoding="utf-8")
