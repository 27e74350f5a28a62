"""The grader's source scan: every lesson's solution scans clean, each forbidden reach is found with its line, in a
solution cell and in a cell the student added, and only the release's own cells widen the allowlist."""

from __future__ import annotations

import nbformat
import pytest

from harness.grading.layout import REPO_ROOT
from harness.grading.release import answered_release
from harness.grading.scan import DEFAULT_ALLOWED, scan_notebook, scan_source

LESSONS = sorted(p.name for p in (REPO_ROOT / "solutions").iterdir() if (p / f"{p.name}.ipynb").is_file())


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_solution_notebook_scans_clean(lesson):
    solution = nbformat.read(REPO_ROOT / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    assert scan_notebook(solution, _release(lesson)) == []


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


def _release(lesson: str) -> nbformat.NotebookNode:
    return nbformat.read(REPO_ROOT / "notebooks" / lesson / f"{lesson}.ipynb", as_version=4)


def _grade_id(cell: nbformat.NotebookNode) -> str:
    return cell.metadata.get("nbgrader", {}).get("grade_id", "")


def _answered(lesson: str, task: str, source: str, own: str | None = None) -> list:
    """The scan's findings on `lesson`'s release with `task`'s solution cell replaced by `source`, and `own` (a
    student's own code cell) added right above it."""
    submitted = _release(lesson)
    [at] = [i for i, c in enumerate(submitted.cells) if _grade_id(c) == f"{task}-code"]
    submitted.cells[at].source = source
    if own is not None:
        submitted.cells.insert(at, nbformat.v4.new_code_cell(own))
    return scan_notebook(submitted, _release(lesson))


def test_a_name_the_lessons_cells_import_is_allowed_below_them_only():
    """Lesson 04 imports harness.train's fit in a demonstration after its exercises: its 04-fit answer may not call
    it. Lesson 10 imports fit before its exercises: 10-train may (the capstone trains with the course's loop)."""
    findings = _answered("04_training_loop", "04-fit", "from harness.train import fit as shipped\nfit = shipped")
    assert {(f.task, f.line) for f in findings} == {("04-fit", 1), ("04-fit", 2)}, findings  # the import, its alias
    assert all("harness.train.fit" in f.what for f in findings), findings
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


# The round-4 routes to a name an answer may not use, written as a student would. Each reaches harness.train.fit
# (which 04-fit may not call) or the judge side, or private torch.
DYNAMIC_ROUTES = {
    "getattr-builtins": 'import builtins\nload = getattr(builtins, "__import__")\nfit = load("harness.train").fit',
    "getattr-dunder-builtins": 'load = getattr(__builtins__, "__import__")\nfit = load("harness.train").train.fit',
    "vars-builtins": 'import builtins\nload = vars(builtins)["__import__"]\nfit = load("harness.train").train.fit',
    "pkgutil": 'import pkgutil\nfit = pkgutil.resolve_name("harness.train:fit")',
    "pydoc": 'import pydoc\nfit = pydoc.locate("harness.train.fit")',
    "runpy": 'import runpy\nfit = runpy.run_module("harness.train")["fit"]',
    "checks-core": 'from harness.checks import core\nreference = core.get("04-fit").judge',
    "checks-chain": 'reference = harness.checks.core.get("04-fit")',
    "checks-importlib": 'import harness.checks.core as c\nfit = c.importlib.import_module("harness.train").fit',
    "allowed-module-globals": 'import harness.env\nfit = harness.env.importlib.import_module("harness.train").fit',
    "allowed-module-sys": 'import harness.env\nfit = harness.env.sys.modules["harness.train"].fit',
    "check-globals": 'from harness.checks import check\nfit = check.__globals__["get"]',
    "torch-alias": "import torch as T\nwith T._C.DisableTorchFunction():\n    pass",
    "torch-assigned-alias": "t = torch\nguard = t._C.DisableTorchFunction",
    "torch-from-alias": "from torch import nn\nreduce = nn._reduction.get_enum",
    "torch-getattr-alias": 'import torch as T\nC = getattr(T, "_C")',
    "timeit-runs-a-string": 'import timeit\ntimeit.timeit("from harness.train import fit as f", number=1)',
    "exec-of-a-literal": 'exec("from harness.train import fit")',
    "inspect-frames": "import inspect\nnames = inspect.stack()[1].frame.f_globals",
    "gc-object-graph": "import gc\nmodules = [m for m in gc.get_objects() if type(m).__name__ == 'module']",
}


@pytest.mark.parametrize("route", DYNAMIC_ROUTES)
def test_each_dynamic_route_is_found_in_a_solution_cell(route):
    findings = _answered("04_training_loop", "04-fit", DYNAMIC_ROUTES[route] + "\n")
    assert findings and {f.task for f in findings} == {"04-fit"}, findings


@pytest.mark.parametrize("route", DYNAMIC_ROUTES)
def test_each_dynamic_route_is_found_in_the_students_own_cell(route):
    """The route in a cell the student added above 04-fit, and an answer that only uses what it bound: the finding
    costs 04-fit (and every exercise after it), never nothing."""
    findings = _answered("04_training_loop", "04-fit", "def fit(*args, **kwargs):\n    return found(*args, **kwargs)\n",
                         own=DYNAMIC_ROUTES[route] + "\nfound = locals()\n")
    assert "04-fit" in {f.task for f in findings}, findings
    assert all("your own cell" in f.cell for f in findings), findings
    assert any(f.sentence().endswith("(it costs 04-fit)") for f in findings), findings


def test_an_own_cell_never_widens_the_allowlist():
    """A copy, above 04-fit, of the import lesson 04 gives after its exercises is the student's cell: it is read
    (and found), and the answer that calls what it imported is found too."""
    findings = _answered("04_training_loop", "04-fit", "train = fit\n", own="from harness.train import fit\n")
    assert {(f.task, f.line) for f in findings} >= {("04-fit", 1)}, findings
    assert any("your own cell" in f.cell and "harness.train.fit" in f.what for f in findings), findings
    assert any(f.cell.endswith("(04-fit-code)") and "harness.train.fit" in f.what for f in findings), findings


@pytest.mark.parametrize("own", [
    "print(model)\n",
    "import math\nscale = math.sqrt(2.0)\n",
    "def clipped(values, low=0.0, high=1.0):\n    \"\"\"My helper.\"\"\"\n"
    "    return [min(max(v, low), high) for v in values]\n",
    "import torch.nn.functional as F\nfrom torch import nn\nlayer = nn.Linear(2, 2)\nout = F.relu(torch.ones(2))\n",
    "%time x = 1\nfrom harness.checks import check, hint\nhint('04-fit')\n",
    "import gc\ngc.collect()\nimport inspect\nprint(inspect.signature(print))\nimport pdb\n# pdb.set_trace()\n",
    "exec('total = 1 + 1')\nimport pickle\nblob = pickle.dumps([1, 2])\n",
])
def test_ordinary_own_cells_are_not_flagged(own):
    submitted = answered_release("04_training_loop")
    [at] = [i for i, c in enumerate(submitted.cells) if _grade_id(c) == "04-fit-code"]
    submitted.cells.insert(at, nbformat.v4.new_code_cell(own))
    submitted.cells.append(nbformat.v4.new_code_cell(own))
    assert scan_notebook(submitted, _release("04_training_loop")) == []


def test_an_edited_release_cell_is_the_students_and_is_read():
    """A release cell without nbgrader metadata that the student edited is kept as theirs: it is read, and what it
    imports widens nothing."""
    submitted = _release("04_training_loop")
    first_code = next(c for c in submitted.cells if c.cell_type == "code" and "nbgrader" not in c.metadata)
    first_code.source += "\nimport pydoc\n"
    findings = scan_notebook(submitted, _release("04_training_loop"))
    assert findings and all("pydoc" in f.what and "your own cell" in f.cell for f in findings), findings


def test_an_edited_release_cell_keeps_what_it_imported_there_and_only_there():
    """A student who changes the demonstration that imports harness.train.fit (fewer epochs) is not flagged; adding
    another harness name to it is; and what the edited cell imports still widens nothing for the cells below it."""
    def edited(change: str, after: str = "") -> list:
        submitted = _release("04_training_loop")
        [demo] = [c for c in submitted.cells if c.cell_type == "code" and "import fit as harness_fit" in c.source]
        demo.source = demo.source.replace("lr=3e-3", "lr=1e-3") + change
        if after:
            submitted.cells.append(nbformat.v4.new_code_cell(after))
        return scan_notebook(submitted, _release("04_training_loop"))

    assert edited("\nprint(harness_fit)\n") == []
    [finding] = edited("\nfrom harness.train import train_one_epoch\n")
    assert "harness.train.train_one_epoch" in finding.what and "your own cell" in finding.cell
    assert edited("", after="from harness.train import fit as again\n")  # unedited, the demo would allow it
