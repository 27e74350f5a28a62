"""JupyterLab in a subprocess and headless Chromium, for tests/test_browser.py.

`course_workspace` lays out a temporary course the way the repository is laid out (notebooks/, solutions/,
nbgrader_config.py) and releases one lesson to a temporary nbgrader exchange; `running_lab` serves it with
JupyterLab on a free localhost port and always stops it, kernels included; `LabPage` does what a student
does in JupyterLab (menus, Run All) and reads what they see. `expected_feedback` runs a lesson's exercises
and checks in this process: the exact text the page must show. `serious_violations` runs axe-core on a page.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import linecache
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, NoReturn

import nbformat
import psutil
import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Locator, Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

REPO_ROOT = Path(__file__).resolve().parents[1]
SCREENSHOTS = REPO_ROOT / "build" / "browser"
INSTALL_HINT = "Chromium is not installed: `apt-get install chromium` (Debian) puts it at /usr/bin/chromium."
# A closed network: without these, Chromium stalls on refused connections (updates, sync, QUIC probes).
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# Generous: CI has two cores, shared with another test worker and the notebook kernels.
START_TIMEOUT_S = 60
UI_TIMEOUT_MS = 60_000
RUN_TIMEOUT_MS = 120_000
STDERR_MIME = "application/vnd.jupyter.stderr"  # JupyterLab renders errors and stderr streams with it
# What a notebook puts on a JupyterLab page: its cells' outputs and rendered Markdown (the rest is JupyterLab's).
NOTEBOOK_CONTENT = [".jp-NotebookPanel .jp-OutputArea-output", ".jp-NotebookPanel .jp-MarkdownOutput"]


def chromium_executable() -> str:
    """Path of Debian's Chromium; skips the test (fails it when HARNESS_REQUIRE_BROWSER=1) without one."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if os.environ.get("HARNESS_REQUIRE_BROWSER") == "1":
        pytest.fail(f"HARNESS_REQUIRE_BROWSER=1 but {INSTALL_HINT}")
    pytest.skip(INSTALL_HINT)


# ----------------------------------------------------------------------------------------------------
# The course and the server.


def course_workspace(root: Path, exchange: Path, assignment: str) -> None:
    """Lay out a course at `root` and release `assignment` to the nbgrader exchange at `exchange`.

    `root` gets a copy of notebooks/ (the student releases) with `assignment` answered, the assignment's
    nbgrader source under solutions/ (what the formgrader lists) and the repository's nbgrader_config.py,
    whose course root is the folder it sits in. The exchange holds the untouched release, for students
    to fetch from the Assignment List.
    """
    from nbgrader.apps import NbGraderAPI

    from harness.grading.layout import course_config
    from harness.grading.release import answered_release

    ignore = shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__")
    shutil.copytree(REPO_ROOT / "notebooks", root / "notebooks", ignore=ignore)
    shutil.copytree(REPO_ROOT / "solutions" / assignment, root / "solutions" / assignment, ignore=ignore)
    shutil.copy(REPO_ROOT / "nbgrader_config.py", root / "nbgrader_config.py")
    exchange.mkdir()
    exchange.chmod(0o777)  # what nbgrader requires of an exchange (shared by every user); else it complains
    outcome = NbGraderAPI(config=course_config(root, Exchange={"root": str(exchange)})).release_assignment(assignment)
    assert outcome["success"], f"nbgrader could not release {assignment}: {outcome.get('error')}\n{outcome.get('log')}"
    nbformat.write(answered_release(assignment), root / "notebooks" / assignment / f"{assignment}.ipynb")


@dataclass(frozen=True)
class Lab:
    """A running JupyterLab: its base URL (ending in /), token, server log and the folder it serves."""

    url: str
    token: str
    log: Path
    root: Path

    def page_url(self, workspace: str, path: str = "") -> str:
        """URL of JupyterLab in the workspace `workspace` (new: every test names its own), opening `path`.

        No `?reset`: JupyterLab routes the URL again when its #fragment changes (nbgrader's links set it),
        and would reset the workspace, closing every tab.
        """
        tree = f"/tree/{path}" if path else ""
        return f"{self.url}lab/workspaces/{workspace}{tree}?token={self.token}"


def _jupyter_environment(home: Path, exchange: Path) -> dict[str, str]:
    """The server's environment: private Jupyter folders, the exchange, the lessons' grading budget."""
    dirs = {"JUPYTER_CONFIG_DIR": home / "config", "JUPYTER_DATA_DIR": home / "data",
            "JUPYTER_RUNTIME_DIR": home / "runtime", "IPYTHONDIR": home / "ipython"}
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    # The nbgrader server extensions (assignment list, validate) read it from the Jupyter config path.
    (dirs["JUPYTER_CONFIG_DIR"] / "nbgrader_config.py").write_text(f"c.Exchange.root = {str(exchange)!r}\n")
    # No "get notified about Jupyter news?" toast over the page: there is no network to fetch news from.
    settings = dirs["JUPYTER_CONFIG_DIR"] / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false"}))
    env = dict(os.environ, **{name: str(path) for name, path in dirs.items()})
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    # The grading budget: the lesson trains for 2 epochs instead of 40; what it shows is the same.
    env["HARNESS_BUDGET"] = "grading"
    return env


def _serving_url(runtime_dir: Path, pid: int, token: str) -> str | None:
    """The server's base URL once its runtime file is written and /api/status answers."""
    try:
        url = json.loads((runtime_dir / f"jpserver-{pid}.json").read_text())["url"]
        with urllib.request.urlopen(f"{url}api/status?token={token}", timeout=5) as response:
            return url if response.status == 200 else None
    except (OSError, ValueError, KeyError):  # not written yet, half written, or not answering yet
        return None


def stop_process_group(process: subprocess.Popen, grace_s: float = 20) -> None:
    """Stop a server started in a process group of its own, and anything it started (JupyterLab's kernels and
    JupyterHub's user servers run in process groups of their own): SIGTERM to its group (each server shuts down
    what it started on SIGTERM), SIGKILL after `grace_s`, then whatever of its children is still running."""
    started = []
    with contextlib.suppress(psutil.NoSuchProcess):
        started = psutil.Process(process.pid).children(recursive=True)
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=grace_s)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    _, alive = psutil.wait_procs(started, timeout=10)
    for child in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()


@contextlib.contextmanager
def running_lab(root: Path, home: Path, exchange: Path) -> Iterator[Lab]:
    """Serve `root` with JupyterLab on a free localhost port with a token; stop it, kernels included, on exit.

    Jupyter's config, data and runtime folders live under `home` (the user's settings, workspaces and other
    servers play no part) and so does the server log, lab.log. The working directory is `root`, where
    nbgrader finds the course's nbgrader_config.py.
    """
    env = _jupyter_environment(home, exchange)
    token = secrets.token_hex(16)
    log = home / "lab.log"
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
               "--ServerApp.port=0",  # the server binds a free port and writes it into its runtime file
               f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", "--LabApp.news_url=None",
               "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    with log.open("w") as output:
        process = subprocess.Popen(command, cwd=root, env=env, stdout=output, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while (url := _serving_url(Path(env["JUPYTER_RUNTIME_DIR"]), process.pid, token)) is None:
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"JupyterLab did not start (exit code {process.poll()}):\n{log.read_text()[-4000:]}")
            time.sleep(0.25)
        yield Lab(url, token, log, root)
    finally:
        stop_process_group(process)


# ----------------------------------------------------------------------------------------------------
# The oracle: what the checks print for a notebook's answers.


def _run_as_a_cell(source: str, namespace: dict, index: int) -> None:
    """Run `source` as IPython runs a cell: under a name of its own whose lines the checks can quote."""
    name = f"<ipython-input-{index}>"
    linecache.cache[name] = (len(source), None, source.splitlines(keepends=True), name)
    exec(compile(source, name, "exec"), namespace)


def expected_feedback(notebook: nbformat.NotebookNode) -> dict[str, str]:
    """Grade id -> what each graded test cell of `notebook` shows: the check's output, or its failure.

    Runs the notebook's solution cells and graded test cells in this process, with the names the lesson's
    exercises use; a CheckFailed is reported as JupyterLab shows it ("CheckFailed: <message>").
    """
    import torch
    from torch import nn

    from harness.checks import CheckFailed, check

    namespace = {"copy": copy, "torch": torch, "nn": nn, "check": check}
    feedback = {}
    for index, cell in enumerate(notebook.cells):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution"):
            _run_as_a_cell(cell.source, namespace, index)
        elif meta.get("grade") and cell.cell_type == "code":
            printed = io.StringIO()
            try:
                with contextlib.redirect_stdout(printed):
                    _run_as_a_cell(cell.source, namespace, index)
                feedback[meta["grade_id"]] = printed.getvalue()
            except CheckFailed as failure:
                feedback[meta["grade_id"]] = f"CheckFailed: {failure}"
    return feedback


def code_cell_ids(notebook: nbformat.NotebookNode) -> list[str]:
    """The nbgrader grade id of each code cell, in order ("" for cells without one)."""
    return [c.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
            for c in notebook.cells if c.cell_type == "code"]


def lines(text: str) -> str:
    """`text` with trailing spaces dropped from every line: JupyterLab may or may not render them."""
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


# ----------------------------------------------------------------------------------------------------
# Accessibility: axe-core, the engine of the browsers' accessibility checkers.


def serious_violations(page: Page, include: list[str] | None = None) -> list[str]:
    """axe-core's serious and critical violations on `page`, one line each: rule, impact, help and element.

    Args:
        page: the page, loaded.
        include: CSS selectors of the parts to check (axe's context: what they match, and what is inside
            it); None checks the whole page. axe raises when they match nothing: an empty scope never passes.

    Returns:
        "image-alt (critical): Images must have alternative text: ['img']", one line per element; empty
        when axe finds nothing serious. Minor and moderate findings are left out.
    """
    results = Axe().run(page, context={"include": include} if include else None,
                        options={"resultTypes": ["violations"]})
    return [f"{rule['id']} ({node['impact']}): {rule['help']}: {node['target']}"
            for rule in results.response["violations"] for node in rule["nodes"]
            if node["impact"] in ("serious", "critical")]


# ----------------------------------------------------------------------------------------------------
# The page: what a student does and sees.

_RUN_FINISHED = """([stderr]) => {
    const prompts = [...document.querySelectorAll('.jp-NotebookPanel .jp-CodeCell .jp-InputPrompt')]
        .map(p => p.textContent.trim());
    const running = prompts.some(p => p === '[*]:');
    const finished = prompts.length > 0 && prompts.every(p => /^\\[\\d+\\]:$/.test(p));
    const failed = document.querySelector(`.jp-NotebookPanel [data-mime-type="${stderr}"]`) !== null;
    return finished || (failed && !running);
}"""


class LabPage:
    """One browser page on JupyterLab; its screenshots are build/browser/`name`-<label>.png."""

    def __init__(self, page: Page, lab: Lab, name: str) -> None:
        self.page, self.lab, self.name = page, lab, name
        for old in SCREENSHOTS.glob(f"{name}-*.png"):  # from an earlier run: they would mislead
            old.unlink()

    def screenshot(self, label: str, *, whole_notebook: bool = False) -> Path:
        """Save a full-page screenshot and return its path.

        JupyterLab scrolls inside its own panels, so with `whole_notebook` the window is first made as tall
        as the open notebook and the notebook scrolled to its top: every cell is on the picture.
        """
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{self.name}-{label}.png"
        size = self.page.viewport_size
        if whole_notebook:
            self._fit_window_to_notebook()
        self.page.screenshot(path=path, full_page=True)
        self.page.set_viewport_size(size)
        return path

    def _fit_window_to_notebook(self) -> None:
        """Grow the window until the whole notebook fits (at most 16000 px, Chromium's texture limit).

        Cells out of view are laid out with estimated heights, so the notebook's height is measured
        again after each growth until it no longer changes.
        """
        width, height = self.page.viewport_size["width"], 0
        for _ in range(5):
            needed = self.page.evaluate("""() => new Promise(done => {
                document.querySelector('.jp-NotebookPanel .jp-WindowedPanel-outer').scrollTop = 0;
                // measured after the next layout and paint
                requestAnimationFrame(() => requestAnimationFrame(() => done(
                    document.querySelector('.jp-NotebookPanel .jp-WindowedPanel-inner').scrollHeight)));
            })""")
            needed = min(needed + 150, 16_000)  # + the menu, toolbar and status bars
            if needed <= height:
                return
            height = needed
            self.page.set_viewport_size({"width": width, "height": height})

    def fail(self, message: str) -> NoReturn:
        """Fail the test with `message`, a screenshot of the page and the end of the server log."""
        path = self.screenshot("failure")
        pytest.fail(f"{message}\nscreenshot: {path}\nserver log:\n{self.lab.log.read_text()[-2000:]}")

    @contextlib.contextmanager
    def waiting_for(self, what: str) -> Iterator[None]:
        """Turn a Playwright timeout (or other error) inside the block into a failure with a screenshot."""
        try:
            yield
        except PlaywrightError as error:
            self.fail(f"waiting for {what}: {error.message.splitlines()[0]}")
        except AssertionError as error:  # Playwright's expect(): what it waited for never came
            self.fail(f"waiting for {what}: {str(error).splitlines()[0]}")

    def open(self, path: str = "") -> None:
        """Open JupyterLab in a fresh workspace (on notebook `path`, then wait for its kernel to be idle)."""
        self.page.goto(self.lab.page_url(self.name, path))
        with self.waiting_for("JupyterLab's menu bar"):
            self.page.locator(".lm-MenuBar-itemLabel", has_text="Run").wait_for()
        if path:
            self.wait_for_idle_kernel()

    def wait_for_idle_kernel(self) -> None:
        """Wait for the status bar to show the notebook's kernel idle ("Python 3 (ipykernel) | Idle").

        The toolbar's indicator says idle before the kernel is connected, and Run All does nothing then
        (JupyterLab skips the cells); the status bar says "No Kernel" until the kernel is there.
        """
        idle = self.page.locator(".jp-StatusBar-TextItem", has_text=re.compile(r"^(?!No Kernel).+ \| Idle$"))
        with self.waiting_for("the kernel to be idle"):
            idle.wait_for()

    def menu(self, menu: str, item: str) -> None:
        """Click `item` in the main menu `menu` (e.g. "Run", "Run All Cells")."""
        label = self.page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(item)}$"))
        with self.waiting_for(f"menu {menu} > {item}"):
            for _ in range(3):  # a click while the menu bar still closes another menu can leave this one shut
                self.page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{re.escape(menu)}$")).click()
                try:
                    label.wait_for(state="visible", timeout=10_000)
                    break
                except PlaywrightTimeoutError:
                    continue
            label.click()

    def run_all_cells(self) -> None:
        """Run > Run All Cells, then wait until every code cell ran or one failed and the run stopped."""
        self.menu("Run", "Run All Cells")
        with self.waiting_for("the run to finish"):
            self.page.wait_for_function(_RUN_FINISHED, arg=[STDERR_MIME], timeout=RUN_TIMEOUT_MS)

    def code_cells(self) -> Locator:
        """The open notebook's code cells, in order."""
        return self.page.locator(".jp-NotebookPanel .jp-CodeCell")

    # Text is read from the DOM (textContent), not as laid out (innerText): JupyterLab skips the layout of
    # cells out of view, whose innerText is then empty.

    def prompts(self) -> list[str]:
        """Each code cell's execution prompt ("[3]:", "[*]:", "[ ]:")."""
        return self.page.locator(".jp-NotebookPanel .jp-CodeCell .jp-InputPrompt").evaluate_all(
            "prompts => prompts.map(p => p.textContent.trim())")

    def output_text(self, index: int) -> str:
        """What the outputs of code cell `index` show, as text, one output after the other."""
        return "\n".join(self.code_cells().nth(index).locator(".jp-OutputArea-output").evaluate_all(
            "outputs => outputs.map(o => o.textContent)"))

    def stderr_outputs(self) -> list[str]:
        """Text of every error or stderr output of the notebook."""
        return self.page.locator(f'.jp-NotebookPanel [data-mime-type="{STDERR_MIME}"]').evaluate_all(
            "outputs => outputs.map(o => o.textContent)")

    def image_alts(self, index: int) -> list[str | None]:
        """The alt attribute of each image in the outputs of code cell `index` (None where it has none)."""
        return self.code_cells().nth(index).locator(".jp-OutputArea-output img").evaluate_all(
            "images => images.map(image => image.getAttribute('alt'))")

    def png_widths(self, index: int) -> list[int]:
        """Natural width of each PNG image (a data: URL) in the outputs of code cell `index`, once decoded."""
        images = self.code_cells().nth(index).locator(".jp-OutputArea-output img")
        with self.waiting_for(f"the images in the outputs of code cell {index} to be shown"):
            images.first.scroll_into_view_if_needed()
            expect(images.first).to_be_visible()
            # decode() waits for the picture to be decoded, and fails on a broken PNG
            return images.evaluate_all("""images => Promise.all(images
                .filter(image => image.src.startsWith('data:image/png;base64,'))
                .map(image => image.decode().then(() => image.naturalWidth)))""")
