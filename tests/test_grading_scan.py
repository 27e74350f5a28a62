"""The grader's source scan: every lesson's solution scans clean, each forbidden reach is found with its line."""

from __future__ import annotations

import nbformat
import pytest

from harness.grading.layout import REPO_ROOT
from harness.grading.scan import DEFAULT_ALLOWED, allowed_modules, scan_notebook, scan_source

LESSONS = sorted(p.name for p in (REPO_ROOT / "solutions").iterdir() if (p / f"{p.name}.ipynb").is_file())


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_solution_notebook_scans_clean(lesson):
    release = nbformat.read(REPO_ROOT / "notebooks" / lesson / f"{lesson}.ipynb", as_version=4)
    solution = nbformat.read(REPO_ROOT / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    assert scan_notebook(solution, allowed_modules(release)) == []


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
])
def test_each_forbidden_reach_is_found_with_its_line(source, line, found):
    hits = scan_source(source, DEFAULT_ALLOWED)
    assert any(at == line and found in what for at, what in hits), hits


def test_literal_names_magics_and_allowed_modules_are_not_flagged():
    source = ("%matplotlib inline\n!ls\nfrom harness.checks import check, hint\nfrom harness.data import loaders\n"
              "w = getattr(model, 'weight')\nz = eval('1 + 1')\nx = torch.zeros(3).__len__()\n")
    assert scan_source(source, DEFAULT_ALLOWED) == []
    assert scan_source("from harness.diagnose import find_bug", (*DEFAULT_ALLOWED, "harness.diagnose")) == []
