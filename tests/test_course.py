"""`harness course`: a real lesson executed and graded, a broken one reported while the rest still run."""

from __future__ import annotations

import argparse
import base64
import io
import re

import matplotlib.pyplot as plt
import nbformat
import pytest

from harness import course


def test_course_grades_lessons_reports_failures_and_writes_html(tmp_path, capsys):
    args = argparse.Namespace(out=tmp_path, lessons=["no_such_lesson", "04_training_loop"], skip_showcase=True)

    assert course.run(args) == 1  # the missing lesson fails the run

    printed = capsys.readouterr().out
    assert "[1/2] no_such_lesson" in printed
    assert "could not be graded: ValueError: no lesson 'no_such_lesson' in solutions/" in printed
    assert "[2/2] 04_training_loop" in printed or "[1/2] 04_training_loop" in printed
    assert "not full marks or failed: no_such_lesson" in printed
    page = (tmp_path / "index.html").read_text()
    assert "1 of 2 lessons at full marks" in page
    assert re.search(r'<tr class="ok"><td><a href="#04_training_loop">04_training_loop</a></td>'
                     r'<td>(\d+) / \1</td>', page)
    assert '<tr class="error"><td><a href="#no_such_lesson">' in page
    figures = sorted((tmp_path / "figures").glob("04_training_loop-*.png"))
    assert figures, "lesson 04 draws training curves: they should be in the report"
    assert f'src="figures/{figures[0].name}"' in page
    assert figures[0].read_bytes().startswith(b"\x89PNG")


def test_save_figures_writes_each_png_output_with_its_alt_text_into_the_report(tmp_path):
    figure = plt.figure()
    plt.plot([1, 2, 3])
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    png = base64.b64encode(buffer.getvalue()).decode()
    described = nbformat.v4.new_code_cell("plot()", outputs=[  # as harness.figures shows a figure
        nbformat.v4.new_output("display_data", data={"image/png": png, "text/html": "<img>", "text/plain": "<Figure>"},
                               metadata={"text/html": {"alt": "loss falls from 2 to 1 by epoch 3"}}),
        nbformat.v4.new_output("stream", text="done\n")])
    bare = nbformat.v4.new_code_cell("plot()", outputs=[
        nbformat.v4.new_output("display_data", data={"image/png": png, "text/plain": "<Figure>"})])
    notebook = tmp_path / "nb.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# hi"), described, bare]), notebook)

    figures = course.save_figures(notebook, tmp_path / "figures", "lesson")

    assert [figure.path.name for figure in figures] == ["lesson-1.png", "lesson-2.png"]
    assert figures[0].path.read_bytes() == buffer.getvalue()
    assert [figure.alt for figure in figures] == ["loss falls from 2 to 1 by epoch 3",
                                                  "lesson, figure 2: drawn without a text description"]
    page = course.write_html(tmp_path, {"python": "3.11"}, [{
        "assignment": "lesson", "status": "ok", "scores": {"t": [1, 1]}, "failures": {}, "wall_seconds": 1.0,
        "figures": figures}], None).read_text()
    assert page.startswith("<!doctype html><html lang='en'>")
    assert '<img src="figures/lesson-1.png" alt="loss falls from 2 to 1 by epoch 3">' in page


@pytest.mark.parametrize(("scores", "status", "expected", "shown"), [
    ({"t": [2.0, 2.0]}, "ok", "ok", "ok"),
    ({"t": [1.0, 2.0]}, "ok", "FAILED", "FAILED (ok)"),
    ({"t": [2.0, 2.0]}, "flagged", "FAILED", "FAILED (flagged)"),
    ({}, "invalid", "error", "error (invalid)"),
    ({}, "error", "error", "error"),
])
def test_verdict_needs_full_marks_and_a_clean_status(scores, status, expected, shown):
    result = {"scores": scores, "status": status}
    assert course.verdict(result) == expected
    assert course.status_text(result) == shown
