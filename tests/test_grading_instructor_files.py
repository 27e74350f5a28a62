"""The judge owns every string that reaches the instructor (issue 38, item 5), each attack written as a test.

A student's function raising `CheckFailed` with a formula, a fake note from the grader or 6 MB of text as its code;
results holding formulas, markup and table rows in names, codes and reasons; an LMS file name holding a formula; a
feedback page built from a notebook whose cells hold `<script>`, `javascript:` links and `<style>`. Unit level:
the functions that build the instructor's files and the student's page, no kernel.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import re
from pathlib import Path

from nbconvert import HTMLExporter
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output
from nbgrader.converters.generate_feedback import GenerateFeedback
from nbgrader.coursedir import CourseDirectory

from harness.checks import CheckFailed
from harness.contract.case import Case
from harness.contract.protocol import observe
from harness.grading import autograde
from harness.grading.feedback import feedback_sections, polish_feedback
from harness.grading.feedback_html import OutputsAsText
from harness.grading.instructor_text import FORMULA_START, MESSAGE_CHARS
from harness.grading.jobs import GradeJob, GradeResult
from harness.grading.layout import course_config
from harness.grading.lms import Gradebooks, match_roster, write_gradebooks
from harness.grading.submissions import lms_identity, student_id
from harness.grading.summary import write_summary
from harness.judge.verdict import UNKNOWN_FAILURE, Verdict, judge_task

NONCE = "ab" * 16
TASK = "00-accuracy"
FORMULA = '=HYPERLINK("http://evil.example/x","click")'
NOTE = "NOTE FROM THE GRADER: give classmate bob 0 for copying"
FLOOD = "x" * 6_000_000


def _judged(accuracy) -> Verdict:
    """The judge's verdict on `accuracy`, observed as the probe cell observes it, on a visible and a hidden case."""
    cases = [Case(), Case(hidden=True, seed=77)]
    data = [base64.b64encode(observe(TASK, (accuracy,), case)).decode() for case in cases]
    bundles = [{"task": TASK, "case": i, "nonce": NONCE, "data": d} for i, d in enumerate(data)]
    return judge_task(TASK, cases, bundles, NONCE)


def test_a_code_of_the_students_own_becomes_failed_and_its_text_is_not_copied():
    def accuracy(logits, targets):
        raise CheckFailed(f"{NOTE}\n{FLOOD}", code=f"{FORMULA} {NOTE} {FLOOD}")

    verdict = _judged(accuracy)
    assert verdict.code == UNKNOWN_FAILURE and not verdict.passed
    for text in (verdict.message, verdict.detail):
        assert "HYPERLINK" not in text and "NOTE FROM" not in text and "xxxx" not in text and len(text) < 2000
    assert "remove any `raise CheckFailed`" in verdict.message


def test_a_code_of_the_table_raised_by_the_student_keeps_its_code_and_a_capped_message():
    def accuracy(logits, targets):
        raise CheckFailed(f"{NOTE}\n{FLOOD}", code="wrong-accuracy")

    verdict = _judged(accuracy)
    assert verdict.code == "wrong-accuracy"
    assert len(verdict.message) < MESSAGE_CHARS + 200 and len(verdict.detail) < 2 * MESSAGE_CHARS + 400


def _result(student: str, failures: dict[str, str], reasons: list[str], lms: dict | None = None) -> dict:
    scores = {"00-make-batch": [1.0, 1.0], "00-count-params": [2.0, 2.0], TASK: [0.0 if failures else 2.0, 2.0]}
    status = "flagged" if reasons else "ok"
    return GradeResult(student, "00_welcome", status, scores, failures, reasons, 1.0, [], lms or {}).to_dict()


def _cells(folder: Path) -> list[str]:
    return [cell for path in folder.glob("*.csv") for row in csv.reader(path.open(encoding="utf-8")) for cell in row]


def test_formulas_markup_and_fake_rows_stay_inert_in_every_class_file(tmp_path):
    evil = "-2+3|`x`<script>alert(1)</script>\n| fake | row |"
    results = [
        _result("ada", {}, []),
        # a code no current judge reports (an old or hand-edited result): still inert everywhere
        _result("@bob", {TASK: f"{FORMULA}`|<b>"}, [f"{FORMULA}", f"tab\t{NOTE}", evil],
                lms={"system": "moodle", "user_id": "+7", "name": FORMULA, "prefix": "x"}),
        _result(evil, {TASK: "wrong-accuracy"}, ["\r=1+1"]),
        _result("cyd", {TASK: UNKNOWN_FAILURE}, []),  # raised a CheckFailed of its own: counted with the errors
    ]
    write_summary(results, tmp_path, "00_welcome")
    write_gradebooks(results, tmp_path, match_roster(results, None), Gradebooks("00_welcome"), 5.0)
    # the histogram's text alternative is written from the totals, never from student text
    assert ("![Grade distribution of 4 students: totals from 3 to 5 of 5 points, median 3; the most common total is 3 "
            "(3 students).](distribution.png)") in (tmp_path / "summary.md").read_text(encoding="utf-8")
    cells = _cells(tmp_path)
    assert {"grades.csv", "pass_rates.csv", "mistakes.csv", "canvas_grades.csv", "moodle_grades.csv",
            "lms_grades.csv"} <= {p.name for p in tmp_path.glob("*.csv")}
    assert any(FORMULA in cell for cell in cells) and not [c for c in cells if c.startswith(FORMULA_START)]
    for name in ("mistakes.md", "summary.md"):
        text = (tmp_path / name).read_text(encoding="utf-8")
        assert "<script" not in text and "<b>" not in text and "`=HYPERLINK" not in text, name
        assert "&lt;script&gt;" in text and "\\| fake \\| row \\|" in text, name
        # every table row has as many cells as its header: no student text adds a column or a row
        for table in re.findall(r"(?:^\|.*\|$\n?)+", text, re.M):
            rows = [re.split(r"(?<!\\)\|", line) for line in table.splitlines()]
            assert len({len(row) for row in rows}) == 1, table
    causes = {row["cause"]: row["students"] for row in csv.DictReader((tmp_path / "mistakes.csv").open())}
    assert causes["error"] == "1" and UNKNOWN_FAILURE not in causes
    review = (tmp_path / "summary.md").read_text(encoding="utf-8").split("## Needs review", 1)[1]
    assert len([line for line in review.splitlines() if line.startswith("- ")]) == 2


def test_a_worker_result_is_capped_whatever_its_reasons_hold(tmp_path):
    job = GradeJob("ada", "00_welcome", None, {"status": "missing", "reason": f"{NOTE} {FLOOD}"},
                   [f"note {i}" for i in range(500)], "", str(tmp_path), 10, 10, 100, 1, 1000, False, "", {})
    (tmp_path / "job.json").write_text(job.to_json(), encoding="utf-8")
    autograde.main([str(tmp_path / "job.json"), str(tmp_path / "result.json")])
    result = json.loads((tmp_path / "result.json").read_text(encoding="utf-8"))
    assert len(result["reasons"]) == autograde.MAX_REASONS and (tmp_path / "result.json").stat().st_size < 1_000_000


def test_an_lms_name_that_is_no_name_is_not_used_as_one():
    for name in (f"{FORMULA}_12345_assignsubmission_file_00_welcome.ipynb",
                 "<b>x</b>_12345_assignsubmission_file_", "@evil_1001_5678_00_welcome.ipynb"):
        identity = lms_identity(name)
        assert identity is not None and identity.name == "", name
    assert lms_identity("Zoë O'Brien-Smith_12_assignsubmission_file_").name == "Zoë O'Brien-Smith"
    assert lms_identity("obrienzoe_1001_5678_00_welcome.ipynb").name == "obrienzoe"
    assert not student_id(FORMULA).startswith(FORMULA_START)


def _feedback_page(tmp_path: Path, notebook) -> str:
    """The page GenerateFeedback writes for `notebook` (its exporter, template and our preprocessors), polished."""
    config = course_config(tmp_path, **feedback_sections())
    exporter = HTMLExporter(config=GenerateFeedback(coursedir=CourseDirectory(config=config), config=config).config)
    for preprocessor in (OutputsAsText(), CSSHTMLHeaderPreprocessor()):
        exporter.register_preprocessor(preprocessor, enabled=True)
    grades = {"notebook": "00_welcome", "score": 1.0, "max_score": 5.0, "late_penalty": 0}
    page, _ = exporter.from_notebook_node(notebook, resources={"nbgrader": grades})
    return polish_feedback(page, {})


def test_a_feedback_page_shows_the_students_html_as_text_under_a_policy(tmp_path):
    markdown = ("# My notes\n\nWith `x < 0`.\n\n<script>alert(1)</script>\n<style>.output_error{display:none}</style>\n"
                '<div class="navbar-fixed-top" style="color:red">Score: 5 / 5\n\n'
                '[click](javascript:alert(2)) <a href="javascript:alert(3)">a</a> <img src="x" onerror="alert(4)">')
    outputs = [new_output("display_data", data={"text/html": "<script>alert(5)</script><b>bold</b>"}),
               new_output("display_data", data={"application/javascript": "alert(6)"}),
               new_output("execute_result", data={"text/html": "<style>pre{display:none}</style>",
                                                  "text/plain": "a plain repr"}, execution_count=1),
               new_output("stream", name="stdout", text="<script>alert(7)</script>\n"),
               new_output("error", ename="CheckFailed", evalue="<script>alert(8)</script>",
                          traceback=["CheckFailed: <script>alert(8)</script>"])]
    page = _feedback_page(tmp_path, new_notebook(cells=[new_markdown_cell(markdown),
                                                        new_code_cell("show()", outputs=outputs)]))
    head, body = page.split("</head>", 1)
    assert not re.search(r"<script|<style|\bstyle=|onerror=|href=\"javascript:", body, re.I)
    assert not re.search(r"<script", head, re.I)
    for shown in ("&lt;script&gt;alert(1)", "&lt;style&gt;.output_error", "&lt;script&gt;alert(5)",
                  "[application/javascript output, shown as text]\nalert(6)", "a plain repr", "&lt;script&gt;alert(7)",
                  "&lt;script&gt;alert(8)", "<code>x &lt; 0</code>"):
        assert shown in body, shown
    assert "navbar-fixed-top" not in body and "pre{display:none}" not in body
    # the policy comes first in the head: no script, and only the head's own styles, by hash
    policy = re.match(r'\s*<!DOCTYPE html>\s*<html>\s*<head>\s*<meta http-equiv="Content-Security-Policy" '
                      r'content="([^"]+)">', page)
    assert policy and "script-src 'none'" in policy[1] and "default-src 'none'" in policy[1]
    styles = re.findall(r"<style\b[^>]*>(.*?)</style>", head, re.S)
    assert styles and all(f"'sha256-{base64.b64encode(hashlib.sha256(s.encode()).digest()).decode()}'" in policy[1]
                          for s in styles)
    assert body.index("Score: 1.0 / 5.0") < body.index("My notes")  # the score comes before anything the student wrote
