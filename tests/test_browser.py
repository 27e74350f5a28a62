"""JupyterLab in a real browser (headless Chromium driven by Playwright), as students and instructors use it.

A JupyterLab server runs on a temporary course (tests/browser_lab.py): notebooks/ with lesson 04 answered,
lesson 04 released to an nbgrader exchange, the repository's nbgrader config. A student runs the answered
lesson (Run > Run All Cells), sees every check's feedback and the training curves, and validates it with
nbgrader's Validate button; a student fetches the untouched release from nbgrader's Assignment List and
sees the first check explain what is missing; an instructor finds the Nbgrader menu and the formgrader,
which lists the released lesson.

Accessibility, with axe-core (`serious_violations`), in the same browser: the answered lesson's page and
the course report (`harness course`'s index.html) built from the figures that page drew must have no
serious or critical violation, and the training curves must carry their text alternative as alt text.
JupyterLab's own interface (menus, toolbars, side panels) is not this project's: on the lesson page axe
checks only what the notebook puts there, its cells' outputs and rendered Markdown (`NOTEBOOK_CONTENT`,
given to axe as the part of the page to check); the course report is all ours and is checked whole. A
report with a planted violation shows the check fails when it should.

Needs Chromium (`apt-get install chromium`): skipped without it, failed without it when
HARNESS_REQUIRE_BROWSER=1 (CI). Screenshots go to build/browser/.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import nbformat
import pandas as pd
import pytest
from browser_lab import (
    CHROMIUM_ARGS,
    NOTEBOOK_CONTENT,
    REPO_ROOT,
    RUN_TIMEOUT_MS,
    UI_TIMEOUT_MS,
    Lab,
    LabPage,
    chromium_executable,
    code_cell_ids,
    course_workspace,
    expected_feedback,
    lines,
    running_lab,
    serious_violations,
)
from playwright.sync_api import Browser, Page, expect, sync_playwright

from harness.course import SavedFigure, save_figures, write_html
from harness.grading.release import answered_release
from harness.plots import plot_history

ASSIGNMENT = "04_training_loop"  # quick under the grading budget, and it plots training curves
COURSE_ID = "pytorch-training-lab"  # nbgrader_config.py
pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.xdist_group("browser")]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's headless Chromium (never a Playwright download)."""
    executable = chromium_executable()
    expect.set_options(timeout=UI_TIMEOUT_MS)  # Playwright's assertions wait 5 s by default: too short on CI
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def lab(browser: Browser, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """JupyterLab on a temporary course (needs the browser first: no server is started to be skipped)."""
    base = tmp_path_factory.mktemp("browser")
    (base / "course").mkdir()
    (base / "jupyter").mkdir()
    course_workspace(base / "course", base / "exchange", ASSIGNMENT)
    with running_lab(base / "course", base / "jupyter", base / "exchange") as server:
        yield server


@pytest.fixture
def lab_page(browser: Browser, lab: Lab, request: pytest.FixtureRequest) -> Iterator[LabPage]:
    """A fresh browser context on JupyterLab, in a workspace named after the test."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(UI_TIMEOUT_MS)
    yield LabPage(context.new_page(), lab, request.node.name.removeprefix("test_"))
    context.close()


def test_answered_lesson_shows_every_check_passing_the_training_curves_and_validates(
        lab_page: LabPage, tmp_path: Path) -> None:
    notebook = answered_release(ASSIGNMENT)
    expected = expected_feedback(notebook)
    lab_page.open(f"notebooks/{ASSIGNMENT}/{ASSIGNMENT}.ipynb")
    lab_page.run_all_cells()
    shot = lab_page.screenshot("notebook", whole_notebook=True)

    assert lab_page.stderr_outputs() == [], f"a cell wrote an error or to stderr (screenshot: {shot})"
    prompts = lab_page.prompts()
    assert all(re.fullmatch(r"\[\d+\]:", p) for p in prompts), f"cells that did not run: {prompts} ({shot})"
    ids = code_cell_ids(notebook)
    assert len(prompts) == len(ids), f"{len(prompts)} code cells on the page, {len(ids)} in {ASSIGNMENT} ({shot})"
    for task, text in expected.items():
        assert text.startswith(f"\u2714 {task}: "), f"the check of {task} fails outside the browser: {text}"
        shown = lab_page.output_text(ids.index(task))
        assert lines(shown) == lines(text), f"{task}: the page shows {shown!r}, the check prints {text!r} ({shot})"
    curves_cell = _code_cell_index(notebook, "plot_history(history)")
    curves = lab_page.png_widths(curves_cell)
    assert curves and all(width > 0 for width in curves), f"no rendered training-curve PNG ({shot})"
    [curves_alt] = lab_page.image_alts(curves_cell)
    assert re.match(r"Training curves over epochs 1 to \d+\. Train loss ", curves_alt or ""), curves_alt
    violations = serious_violations(lab_page.page, NOTEBOOK_CONTENT)
    assert violations == [], f"axe, in the notebook's outputs and Markdown ({shot}):\n" + "\n".join(violations)

    # nbgrader's Validate button saves the notebook and runs it as the graders will.
    validate = lab_page.page.locator(".jp-NotebookPanel-toolbar .validate-button")
    with lab_page.waiting_for("nbgrader's validation results"):
        expect(validate).to_have_text("Validate")
        validate.click()
        dialog = lab_page.page.locator(".jp-Dialog")
        expect(dialog).to_contain_text("Validation Results", timeout=RUN_TIMEOUT_MS)
        expect(dialog).to_contain_text("Success! Your notebook passes all the tests.")
    lab_page.screenshot("validated")

    # Validate saved the notebook: the course report of the figures it drew, read by axe in the same browser.
    saved = lab_page.lab.root / "notebooks" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    report = _course_report(tmp_path, save_figures(saved, tmp_path / "figures", ASSIGNMENT))
    lab_page.page.goto(report.as_uri())
    violations = serious_violations(lab_page.page)
    assert violations == [], f"axe, in the course report {report}:\n" + "\n".join(violations)
    assert curves_alt in _image_alts(lab_page.page), "the report's curves lack the alt text the notebook showed"


def test_axe_finds_a_violation_planted_in_the_course_report(browser: Browser, tmp_path: Path) -> None:
    history = pd.DataFrame({"epoch": [1, 2], "train_loss": [1.0, 0.5], "val_loss": [1.2, 0.9], "lr": [0.1, 0.1]})
    figure = plot_history(history, tmp_path / "figures" / "curves.png")
    report = _course_report(tmp_path, [SavedFigure(tmp_path / "figures" / "curves.png", figure.alt_text)])
    planted = tmp_path / "planted.html"  # the same report without its language and its image's alt text
    planted.write_text(re.sub(r' alt="[^"]*"', "", report.read_text().replace(" lang='en'", "", 1), count=1))
    page = browser.new_page()
    try:
        page.goto(report.as_uri())
        assert serious_violations(page) == [] and _image_alts(page) == [figure.alt_text]
        page.goto(planted.as_uri())
        found = {violation.split(" ")[0] for violation in serious_violations(page)}
    finally:
        page.close()
    assert found == {"image-alt", "html-has-lang"}, found


def _course_report(out: Path, figures: list[SavedFigure]) -> Path:
    """`harness course`'s index.html in `out`, for a lesson at full marks with `figures` and one that failed."""
    passed = {"assignment": ASSIGNMENT, "status": "ok", "scores": {"04-train-step": [2.0, 2.0]}, "failures": {},
              "wall_seconds": 31.0, "figures": figures}
    failed = {"assignment": "05_mixed_precision", "status": "error", "scores": {}, "failures": {},
              "reasons": ["could not be graded: TimeoutError: the cell ran past 300 s"], "wall_seconds": 300.0,
              "figures": []}
    return write_html(out, {"python": "3.11.2", "torch": "2.14.1"}, [passed, failed],
                      {"error": "RuntimeError: the showcase ran out of memory"})


def _image_alts(page: Page) -> list[str | None]:
    """The alt attribute of every image on `page`."""
    return page.locator("img").evaluate_all("images => images.map(image => image.getAttribute('alt'))")


def _code_cell_index(notebook: nbformat.NotebookNode, source_start: str) -> int:
    """Index among the code cells of the one whose source starts with `source_start`."""
    sources = [c.source for c in notebook.cells if c.cell_type == "code"]
    found = [i for i, source in enumerate(sources) if source.startswith(source_start)]
    assert len(found) == 1, f"{len(found)} code cells of {ASSIGNMENT} start with {source_start!r}"
    return found[0]


def test_student_fetches_the_release_and_the_first_check_explains_what_is_missing(lab_page: LabPage) -> None:
    release = nbformat.read(REPO_ROOT / "notebooks" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    task, failure = next(iter(expected_feedback(release).items()))
    assert failure.startswith(f"CheckFailed: {task} failed [raised]"), f"the release's {task} does not fail: {failure}"
    page = lab_page.page
    lab_page.open()
    lab_page.menu("Nbgrader", "Assignment List")
    with lab_page.waiting_for(f"{ASSIGNMENT} in the Assignment List's released assignments, and fetching it"):
        released = page.locator("#released_assignments_list .list_item", has_text=ASSIGNMENT)
        expect(released).to_contain_text(COURSE_ID)
        released.get_by_role("button", name="fetch").click()
    with lab_page.waiting_for(f"{ASSIGNMENT} in the downloaded assignments, and opening its notebook"):
        fetched = page.locator("#fetched_assignments_list > .list_item", has_text=ASSIGNMENT)
        fetched.locator("a.assignment-notebooks-link").click()
        fetched.locator(".assignment-notebooks a", has_text=ASSIGNMENT).click()
    lab_page.wait_for_idle_kernel()
    lab_page.run_all_cells()  # stops at the first check: the solution cells still raise NotImplementedError
    check_cell = code_cell_ids(release).index(task)
    lab_page.code_cells().nth(check_cell).scroll_into_view_if_needed()
    shot = lab_page.screenshot("notebook")

    shown = lab_page.output_text(check_cell)
    assert lines(failure) in lines(shown), f"{task}: the page shows {shown!r}, the check raises {failure!r} ({shot})"


def test_nbgrader_extensions_load_for_the_instructor(lab_page: LabPage) -> None:
    page = lab_page.page
    lab_page.open()
    with lab_page.waiting_for("the Nbgrader menu"):
        page.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader").click()
        expect(page.locator(".lm-Menu .lm-Menu-itemLabel")).to_contain_text(
            ["Assignment List", "Course List", "Formgrader"])
    lab_page.screenshot("menu")
    page.keyboard.press("Escape")

    lab_page.menu("Nbgrader", "Formgrader")
    formgrader = page.frame_locator("#formgrader-iframe iframe")
    with lab_page.waiting_for(f"the formgrader to list {ASSIGNMENT}, released"):
        expect(formgrader.get_by_role("heading", name="Manage Assignments")).to_be_visible()
        expect(formgrader.locator("tr", has_text=ASSIGNMENT)).to_contain_text("released")
    lab_page.screenshot("formgrader")
