"""The grader's source scan: every lesson's solution scans clean, each forbidden reach is found with its line."""

from __future__ import annotations

import nbformat
import pytest

from harness.grading.layout import REPO_ROOT
from harness.grading.scan import DEFAULT_ALLOWED, scan_notebook, scan_source

LESSONS = sorted(p.name for p in (REPO_ROOT / "solutions").iterdir() if (p / f"{p.name}.ipynb").is_file())


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_solution_notebook_scans_clean(lesson):
    solution = nbformat.read(REPO_ROOT / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    assert scan_notebook(solution) == []


@pytest.mark.parametrize(("source", "line", "found"), [
    ("x = 1\nimport importlib\n", 2, "imports importlib"),
    ("m = __import__('os')", 1, "uses __import__"),
    ("exec(''.join(parts))", 1, "calls exec on code that is not a literal"),
    ("eval(text)", 1, "calls eval"),
    ("getattr(torch, name)", 1, "calls getattr with a name that is not a literal"),
    ("import sys\nsys.modules['harness.judge']", 2, "uses sys.modules"),
    ("with torch._C.DisableTorchFunction():\n    pass", 1, "uses torch._C"),
    ("from torch._C import DisableTorchFunction", 1, "imports torch._C.DisableTorchFunction"),
    ("y = torch.nn.functional._canonical_mask(x)", 1, "private torch name torch.nn.functional._canonical_mask"),
    ("from harness.drills.bank.loop import reference", 1, "imports harness.drills.bank.loop.reference"),
    ("import harness.contract.registry as r", 1, "imports harness.contract.registry"),
    ("from harness.judges.lesson04 import reference", 1, "imports harness.judges.lesson04.reference"),
    ("from harness.diagnose import find_bug", 1, "imports harness.diagnose.find_bug"),
    # library functions that are an exercise's answer: allowed only by name, where the lesson's cells import them
    ("from harness.metrics import accuracy", 1, "imports harness.metrics.accuracy"),  # 00-accuracy
    ("from harness.repro import seed_worker", 1, "imports harness.repro.seed_worker"),  # 03-worker-init
    ("import harness\nstep = harness.train.train_one_epoch", 2, "uses harness.train.train_one_epoch"),
    ("from harness import train as t\nt.train_one_epoch(model)", 1, "imports harness.train"),
    ("import harness.repro as r\nworker = r.seed_worker", 2, "uses harness.repro.seed_worker"),
    ("import harness\nf = getattr(harness.data, 'split_indices')", 2, "uses harness.data.split_indices"),
])
def test_each_forbidden_reach_is_found_with_its_line(source, line, found):
    hits = scan_source(source, DEFAULT_ALLOWED)
    assert any(at == line and found in what for at, what in hits), hits


def test_literal_names_magics_and_allowed_modules_are_not_flagged():
    source = ("%matplotlib inline\n!ls\nfrom harness.checks import check, hint\nfrom harness.data import shapes\n"
              "w = getattr(model, 'weight')\nz = eval('1 + 1')\nx = torch.zeros(3).__len__()\n"
              "import harness.plots\nharness.plots.plot_history(history)\nharness.repro.seed_everything(0)\n")
    assert scan_source(source, DEFAULT_ALLOWED) == []
    assert scan_source("from harness.diagnose import find_bug", (*DEFAULT_ALLOWED, "harness.diagnose")) == []


def _answered(lesson: str, task: str, source: str) -> list:
    """The scan's findings on `lesson`'s release with `task`'s solution cell replaced by `source`."""
    release = nbformat.read(REPO_ROOT / "notebooks" / lesson / f"{lesson}.ipynb", as_version=4)
    [cell] = [c for c in release.cells if c.metadata.get("nbgrader", {}).get("grade_id") == f"{task}-code"]
    cell.source = source
    return scan_notebook(release)


def test_a_name_the_lessons_cells_import_is_allowed_below_them_only():
    """Lesson 04 imports harness.train's fit in a demonstration after its exercises: its 04-fit answer may not call
    it. Lesson 10 imports fit before its exercises: 10-train may (the capstone trains with the course's loop)."""
    [finding] = _answered("04_training_loop", "04-fit", "from harness.train import fit as shipped\nfit = shipped")
    assert finding.task == "04-fit" and "harness.train.fit" in finding.what and finding.line == 1
    assert not _answered("10_capstone", "10-train", "from harness.train import fit\ntrain = fit")
    assert _answered("10_capstone", "10-train", "import harness\nstep = harness.train.train_one_epoch")
    # a student's own `accuracy` beside the accuracy lesson 04 imports below: a value, not harness.metrics
    assert not _answered("04_training_loop", "04-evaluate", "def evaluate(model, loader, loss_fn, device):\n"
                         "    accuracy = torch.tensor(1.0)\n    return 0.0, accuracy.item()")


def test_the_install_cells_import_is_followed_into_the_answers():
    """Every lesson's first cell binds `harness` (`import harness` in a `try` whose `except` is a `%run` line): the
    magic reads as `pass`, so the cell parses, and an answer that reaches a withheld name through that binding,
    without an import of its own, is found."""
    findings = _answered("04_training_loop", "04-fit", "fit = harness.train.fit")
    assert {(finding.task, finding.line) for finding in findings} == {("04-fit", 1)}, findings
    assert any("uses harness.train.fit" in finding.what for finding in findings), findings
    assert scan_source("try:\n    import harness\nexcept ModuleNotFoundError:\n    %run ../../harness/install.py\n"
                       "step = harness.train.train_one_epoch", DEFAULT_ALLOWED)
