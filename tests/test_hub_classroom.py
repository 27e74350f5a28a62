"""A JupyterHub classroom, end to end, in a real browser: release to returned feedback, three students.

JupyterHub runs with the README's hub config (hub/jupyterhub_config.py: PAM logins of system users, each user's
JupyterLab as that user, the pinned configurable-http-proxy, nbgrader's exchange) for one instructor and three
students, throwaway system users (tests/hub_classroom.py). The instructor releases lesson 04 with nbgrader; in
headless Chromium each student logs in, fetches it from the Assignment List, types their answers into the solution
cells (ada: the solutions; ben: the same with train_step's zero_grad left out, a mistake the lesson's first check
names; cy: nothing), saves and submits from the Assignment List. The instructor collects with nbgrader, grades
with `harness grade` (bubblewrap sandbox, as on any grader) and returns the feedback through the exchange
(hub/return-feedback); each student fetches it in the Assignment List, opens it and reads their score: full marks,
the missing zero_grad, not attempted. The commands are the README's ("A JupyterHub classroom").

Needs root (useradd), Chromium, node and `make hub`: skipped without them, failed without them when
HARNESS_REQUIRE_BROWSER=1 (CI). Screenshots go to build/browser/.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import nbformat
import pytest
from browser_lab import CHROMIUM_ARGS, UI_TIMEOUT_MS, Lab, LabPage, chromium_executable, code_cell_ids
from hub_classroom import REPO_ROOT, Hub, User, as_user, class_users, reachable_prefix, requirements_met, running_hub
from playwright.sync_api import Browser, expect, sync_playwright

from harness.grading.release import answered_release

ASSIGNMENT = "04_training_loop"
COURSE_ID = "pytorch-training-lab"
SPAWN_TIMEOUT_MS = 180_000  # a user's first JupyterLab on a loaded 2-core machine
pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.xdist_group("browser")]


def _answers() -> dict[str, dict[str, str]]:
    """What each student types: solution cell grade id -> code (ben: train_step without zero_grad; cy: nothing)."""
    solved = answered_release(ASSIGNMENT)
    correct = {cell.metadata.nbgrader.grade_id: cell.source for cell in solved.cells
               if cell.get("metadata", {}).get("nbgrader", {}).get("solution")}
    zero_grad = "    optimizer.zero_grad(set_to_none=True)\n"
    assert zero_grad in correct["04-train-step-code"], "lesson 04's train_step solution no longer calls zero_grad"
    mistaken = dict(correct, **{"04-train-step-code": correct["04-train-step-code"].replace(zero_grad, "")})
    return {"ada": correct, "ben": mistaken, "cy": {}}


# Each student's total and failure codes in the instructor's grades.csv, and what they must read in their feedback.
GRADED = {"ada": ("14.0", ""), "ben": ("11.0", "04-train-step: missing-zero-grad"), "cy": ("0.0", "")}
EXPECTED = {"ada": ["Score: 14.0 / 14.0"],
            "ben": ["Score: 11.0 / 14.0", "04-train-step failed [missing-zero-grad]"],
            "cy": ["Score: 0 / 14", "not attempted"]}


def _require_classroom() -> str:
    """Chromium's path, once everything the classroom needs is here; else skip (fail with HARNESS_REQUIRE_BROWSER=1)."""
    executable = chromium_executable()
    missing = requirements_met()
    if missing:
        if os.environ.get("HARNESS_REQUIRE_BROWSER") == "1":
            pytest.fail(f"HARNESS_REQUIRE_BROWSER=1 but {missing}")
        pytest.skip(missing)
    return executable


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's headless Chromium (never a Playwright download)."""
    executable = _require_classroom()
    expect.set_options(timeout=UI_TIMEOUT_MS)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def exchange() -> Iterator[Path]:
    """nbgrader's exchange, as on a hub: a folder every user can write, sticky (mode 1777), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="hub-exchange-", dir="/tmp"))
    folder.chmod(0o1777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _instructor_course(teacher: User) -> Path:
    """The instructor's course root in their home: the lesson's release and source, and nbgrader's config."""
    course = teacher.home / "course"
    ignore = shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__")
    shutil.copytree(REPO_ROOT / "notebooks" / ASSIGNMENT, course / "notebooks" / ASSIGNMENT, ignore=ignore)
    shutil.copytree(REPO_ROOT / "solutions" / ASSIGNMENT, course / "solutions" / ASSIGNMENT, ignore=ignore)
    shutil.copy(REPO_ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
    for path in [course, *course.rglob("*")]:
        os.chown(path, teacher.uid, teacher.gid)
    return course


def _instructor(teacher: User, prefix: list[str], course: Path, *command: str) -> str:
    """Run one of the README's instructor commands as the instructor in the course root; its output."""
    done = as_user(teacher, list(command), course, prefix)
    output = done.stdout[-3000:] + done.stderr[-3000:]
    assert done.returncode == 0, f"{' '.join(command)} failed as the instructor ({done.returncode}):\n{output}"
    return done.stdout + done.stderr


class Student:
    """One student's browser page on the hub: log in, the Assignment List, the notebook, the feedback."""

    def __init__(self, browser: Browser, hub: Hub, user: User, role: str) -> None:
        self.user, self.role = user, role
        self.context = browser.new_context(viewport={"width": 1400, "height": 900})
        self.context.set_default_timeout(UI_TIMEOUT_MS)
        self.lab = LabPage(self.context.new_page(), Lab(hub.url, "", hub.log, user.home), f"hub_classroom-{role}")
        self.page = self.lab.page

    def log_in(self) -> None:
        """Sign in on the hub's login page (the hub then starts the student's JupyterLab: `wait_for_lab`)."""
        self.page.goto(f"{self.lab.lab.url}hub/login")
        with self.lab.waiting_for(f"the hub's login page for {self.role}"):
            self.page.locator("#username_input").fill(self.user.name)
            self.page.locator("#password_input").fill(self.user.password)
            self.page.locator("#login_submit").click()

    def wait_for_lab(self) -> None:
        """Wait for the student's JupyterLab, started by the hub after the login."""
        with self.lab.waiting_for(f"{self.role}'s JupyterLab after logging in"):
            self.page.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader").wait_for(timeout=SPAWN_TIMEOUT_MS)

    def nbgrader_menu(self) -> list[str]:
        """The items of the Nbgrader menu."""
        with self.lab.waiting_for(f"{self.role}'s Nbgrader menu"):
            self.page.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader").click()
            items = self.page.locator(".lm-Menu .lm-Menu-itemLabel")
            expect(items.first).to_be_visible()
            labels = items.all_text_contents()
        self.page.keyboard.press("Escape")
        return labels

    def assignment_list(self) -> None:
        """Open (or show again) Nbgrader > Assignment List."""
        self.lab.menu("Nbgrader", "Assignment List")

    def fetch_and_open(self) -> None:
        """Fetch the released lesson in the Assignment List and open its notebook."""
        self.assignment_list()
        with self.lab.waiting_for(f"{ASSIGNMENT} in {self.role}'s released assignments, and fetching it"):
            released = self.page.locator("#released_assignments_list .list_item", has_text=ASSIGNMENT)
            expect(released).to_contain_text(COURSE_ID)
            released.get_by_role("button", name="fetch").click()
        with self.lab.waiting_for(f"{ASSIGNMENT} in {self.role}'s downloaded assignments, and opening its notebook"):
            fetched = self.page.locator("#fetched_assignments_list > .list_item", has_text=ASSIGNMENT)
            fetched.locator("a.assignment-notebooks-link").click()
            fetched.locator(".assignment-notebooks a", has_text=ASSIGNMENT).click()
        self.lab.wait_for_idle_kernel()

    def type_answers(self, answers: dict[str, str], ids: list[str]) -> None:
        """Replace each answered solution cell's text as a student does: click in it, select all, type."""
        for grade_id, code in answers.items():
            editor = self.lab.code_cells().nth(ids.index(grade_id)).locator(".cm-content")
            with self.lab.waiting_for(f"{self.role} typing into {grade_id}"):
                editor.scroll_into_view_if_needed()
                editor.click()
                self.page.keyboard.press("Control+a")
                self.page.keyboard.insert_text(code)  # as typed, without the editor's auto-indent and brackets

    def save(self) -> None:
        """Save the notebook (Ctrl+S) and wait until JupyterLab says it is saved."""
        self.page.keyboard.press("Control+s")
        with self.lab.waiting_for(f"{self.role}'s notebook to be saved"):
            expect(self.page.locator(".jp-mod-current.jp-mod-dirty")).to_have_count(0)

    def submit(self) -> None:
        """Submit from the Assignment List and wait for the submission to be listed."""
        self.assignment_list()
        with self.lab.waiting_for(f"{self.role}'s submission of {ASSIGNMENT} to be listed"):
            fetched = self.page.locator("#fetched_assignments_list > .list_item", has_text=ASSIGNMENT)
            fetched.get_by_role("button", name="Submit").click()
            expect(self.page.locator("#submitted_assignments_list .list_item", has_text=ASSIGNMENT)).to_have_count(1)
        self.lab.screenshot("submitted")

    def feedback_text(self) -> str:
        """Fetch the returned feedback in the Assignment List, open it, and return what the page shows."""
        self.page.reload()
        with self.lab.waiting_for(f"{self.role}'s JupyterLab again"):
            self.page.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader").wait_for()
        self.assignment_list()
        submitted = self.page.locator("#submitted_assignments_list .list_item", has_text=ASSIGNMENT)
        with self.lab.waiting_for(f"feedback for {self.role} to fetch, fetching it and opening its folder"):
            expect(submitted).to_contain_text("feedback available to fetch")
            submitted.get_by_role("button", name="Fetch Feedback").click()
            submitted.get_by_text("(view feedback)").click()
        with self.lab.waiting_for(f"{self.role}'s feedback page"):
            self.page.locator(".jp-DirListing-item", has_text=f"{ASSIGNMENT}.html").dblclick()
            body = self.page.frame_locator(".jp-HTMLViewer iframe").locator("body")
            expect(body).to_contain_text("Score")
            text = body.text_content() or ""
        self.lab.screenshot("feedback")
        return re.sub(r"\s+", " ", text)


def test_a_class_on_jupyterhub_from_release_to_returned_feedback(browser: Browser, exchange: Path,
                                                                tmp_path: Path) -> None:
    prefix = reachable_prefix(tmp_path)
    answers = _answers()
    with class_users(["teach", *answers]) as users:
        teacher = users["teach"]
        course = _instructor_course(teacher)
        ex = f"--Exchange.root={exchange}"
        _instructor(teacher, prefix, course, "nbgrader", "release_assignment", ASSIGNMENT, ex)

        with running_hub(tmp_path / "hub", [teacher.name], [users[r].name for r in answers], exchange, prefix) as hub:
            ids = code_cell_ids(nbformat.read(REPO_ROOT / "notebooks" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", 4))
            students = {role: Student(browser, hub, users[role], role) for role in answers}
            for student in students.values():  # the hub starts their servers side by side, as in a class
                student.log_in()
            for role, student in students.items():
                student.wait_for_lab()
                menu = student.nbgrader_menu()  # the student tree's JupyterLab: no instructor tools
                tools = sorted({"Formgrader", "Course List", "Create assignment"} & set(menu))
                assert "Assignment List" in menu and not tools, \
                    f"{role}'s Nbgrader menu should hold the Assignment List and no instructor tool: {menu}"
                student.fetch_and_open()
                student.type_answers(answers[role], ids)
                student.save()
                saved = nbformat.read(users[role].home / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", 4)
                typed = {c.metadata.nbgrader.grade_id: c.source for c in saved.cells
                         if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") in answers[role]}
                assert typed == answers[role], f"{role}'s saved notebook does not hold what was typed"
                student.submit()

            _instructor(teacher, prefix, course, "nbgrader", "collect", ASSIGNMENT, ex)
            grades = f"grades/{ASSIGNMENT}"
            _instructor(teacher, prefix, course, "harness", "grade", "submitted", "--assignment", ASSIGNMENT,
                        "--out", grades, "--workers", "2")  # in bubblewrap's sandbox: it refuses to grade without
            rows = {row["student"]: row for row in csv.DictReader((course / grades / "grades.csv").open())}
            got = {role: (rows[users[role].name]["total"], rows[users[role].name]["failures"]) for role in answers}
            assert got == GRADED, f"{got}\n{(course / grades / 'grades.csv').read_text()}"
            statuses = {role: rows[users[role].name]["status"] for role in answers}
            assert statuses == {"ada": "ok", "ben": "ok", "cy": "not attempted"}, (  # nbgrader's records: no flag
                f"{statuses}\n{(course / grades / 'grades.csv').read_text()}")
            _instructor(teacher, prefix, course, str(REPO_ROOT / "hub" / "return-feedback"), ASSIGNMENT, grades,
                        str(exchange))

            for role, student in students.items():
                shown = student.feedback_text()
                for expected in EXPECTED[role]:
                    assert expected in shown, f"{role}'s feedback page lacks {expected!r}: {shown[:1500]}"
                student.context.close()
