"""The answerability audit (issue 38, item 3) and a graded release without drill answers (item 1): the audit names a
reference planted back into a shipped module and a solution pasted into a shipped text (a markdown block, a released
hint line), candidates are filtered by kind and signature before any check runs,
a graded student tree holds no answer of a withheld drill (a practice tree holds every one) and `harness drill
solution` says so, and a declaration the audit no longer bears out fails the release (the whole audit runs in CI's
`make student-tree`)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from harness.grading.answerability import AuditResult, Hit, Scope, audit, stale, summary, undeclared
from harness.grading.answerability_worker import Recorder, Shape, screen, shapes, snippets, wrappers, wrappings
from harness.grading.answerable import ALLOWED, KNOWN_ANSWERABLE, WITHHELD_DRILLS
from harness.grading.layout import REPO_ROOT
from harness.grading.student_tree import write_student_tree

pytestmark = pytest.mark.xdist_group("student-tree")
# The tree's own harness, not the instructor's editable install of the repository.
TREE_FIRST = ("import sys\nsys.path.insert(0, sys.argv[1])\nsys.meta_path = [f for f in sys.meta_path if 'Editable' "
              "not in type(f).__name__ and 'Editable' not in getattr(f, '__name__', '')]\n")


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("graded") / "course"
    write_student_tree(target, withheld_drills=WITHHELD_DRILLS)
    return target


def _solution_of(task: str) -> str:
    """The instructor's answer to `task`, as its solution cell holds it (markers dropped)."""
    assignment = next(p.parent.name for p in (REPO_ROOT / "solutions").glob(f"{task[:2]}_*/*.ipynb"))
    notebook = nbformat.read(REPO_ROOT / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
    cell = next(c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == f"{task}-code")
    return "\n".join(line for line in cell.source.splitlines() if "### " not in line)


def test_a_candidate_fits_a_slot_by_kind_and_signature():
    slot = shapes("def evaluate(model, loader, loss_fn=None):\n    pass\n")["evaluate"]
    fits = shapes("def a(net, data):\n    pass\ndef b(net, data, fn, extra=1):\n    pass\n"
                  "def c(*args):\n    pass\nclass D:\n    def __init__(self, net, data):\n        pass\n")
    assert fits["a"].fits(slot) and fits["b"].fits(slot) and fits["c"].fits(slot)
    assert not fits["D"].fits(slot), "a class does not fill a function's slot"
    misfits = shapes("def one(net):\n    pass\ndef four(a, b, c, d):\n    pass\ndef kw(a, b, *, scale):\n    pass\n")
    assert not any(shape.fits(slot) for shape in misfits.values()), misfits
    saved = shapes("def save(path, *, model, epoch):\n    pass\n")["save"]
    assert shapes("def s(path, model, epoch, extra=0):\n    pass\n")["s"].fits(saved)
    assert not shapes("def s(path, net, epoch):\n    pass\n")["s"].fits(saved), "keyword `model` has no parameter"
    assert shapes("@dataclass\nclass P:\n    x: int\n    y: int = 0\n")["P"] == Shape(
        "class", required=1, positional=2, names=frozenset({"x", "y"}), any_keywords=False)


def test_an_exercise_no_candidate_fits_is_audited_not_reported_as_a_stopped_worker(graded):
    """A scope that ships nothing for lesson 00 leaves each exercise with no candidate: the worker finished it, so
    none is unaudited (the report once said the worker stopped, a cause nobody observed)."""
    result = audit(graded, Scope(assignments=("00_welcome",), modules=("harness.no_such_module",)))
    assert result.tried == 0 and not result.hits and not result.unaudited, summary(result)


def test_the_audit_names_a_reference_planted_back(graded, tmp_path):
    """The instructor's answer to 00-make-batch, pasted into a module the tree ships under another name, is a hit
    named with its exercise, object and file; the tree as written has no hit from that module."""
    scope = Scope(assignments=("00_welcome",), modules=("harness.env",))
    before = audit(graded, scope)
    assert not before.hits and not before.unaudited, summary(before)
    planted = tmp_path / "course"
    write_student_tree(planted, withheld_drills=WITHHELD_DRILLS)
    reference = _solution_of("00-make-batch").replace("def make_batch(", "def reference_batch(")
    module = planted / "harness" / "env.py"
    module.write_text(module.read_text() + "\n\n" + reference + "\n")
    after = audit(planted, scope)
    assert [(h.task, h.source, h.file) for h in after.hits] == [
        ("00-make-batch", "harness.env.reference_batch", "harness/env.py")], summary(after)
    message = undeclared(after)
    assert len(message) == 1 and "00-make-batch is answered by harness.env.reference_batch (harness/env.py)" in (
        message[0]), message
    assert after.tried > after.checked, "the screen ran no check on candidates that return something else"


def _reveal(tree: Path, drill: str) -> subprocess.CompletedProcess[str]:
    code = TREE_FIRST + ("from harness.drills.cli import _solution\nfrom harness.drills.index import get\n"
                         "print(_solution(get(sys.argv[2])))\n")
    return subprocess.run([sys.executable, "-I", "-c", code, str(tree), drill], capture_output=True, text=True,
                          timeout=60)


def test_a_graded_tree_withholds_the_graded_drills_answers_and_a_practice_tree_keeps_them(graded, tmp_path):
    practice = tmp_path / "practice"
    write_student_tree(practice)
    for tree, withheld in ((graded, set(WITHHELD_DRILLS)), (practice, set())):
        answers = json.loads((tree / "harness" / "judges" / "drills" / "answers.json").read_text())
        assert not withheld & set(answers), withheld & set(answers)
        assert {"loop-train-step", "modules-why-eval"} <= set(answers) | withheld
        listed = tree / "harness" / "drills" / "withheld.json"
        assert set(json.loads(listed.read_text())) == withheld
    assert {"loop-train-step", "modules-why-eval", "checkpointing-exact-resume"} <= set(WITHHELD_DRILLS)
    withheld_reveal = _reveal(graded, "loop-train-step")
    assert withheld_reveal.returncode != 0 and "withheld until the course releases it" in withheld_reveal.stderr
    assert "def train_step" not in withheld_reveal.stdout + withheld_reveal.stderr
    assert "def train_step" in _reveal(practice, "loop-train-step").stdout
    assert _reveal(graded, "tensors-broadcast-shape").returncode == 0, "a drill no exercise grades is revealed"


def test_the_release_is_refused_for_an_unknown_withheld_drill(tmp_path):
    with pytest.raises(KeyError, match="not-a-drill"):
        write_student_tree(tmp_path / "course", withheld_drills=("not-a-drill",))


def test_a_declaration_the_audit_no_longer_bears_out_fails_the_release():
    """The tables only shrink: a declared hit that is gone is a problem the release reports (the whole audit of the
    real tree runs in CI's `make student-tree`)."""
    every = AuditResult(hits=[Hit(task, source, "f.py") for task, source in set(ALLOWED) | set(KNOWN_ANSWERABLE)])
    assert stale(every) == [] and undeclared(every) == []
    task, source = sorted(KNOWN_ANSWERABLE)[0]
    closed = AuditResult(hits=[hit for hit in every.hits if (hit.task, hit.source) != (task, source)])
    assert stale(closed) == [f"{task} is no longer answered by {source}: remove it from harness/grading/answerable.py"]
    slow = AuditResult(hits=closed.hits, timed_out=[f"{task}: {source}"])
    assert stale(slow) == []  # a check that ran past its bound (a loaded machine) proves nothing either way



def test_the_audit_finds_a_planted_code_block_and_a_released_solution_line_among_the_texts(graded, tmp_path):
    """Texts are candidates too: the solution, pasted in a fenced block of a markdown file under another name, is a
    hit (a rename is mechanical); so is a released hint line that is the solution line (the body of the stub); a
    harmless block of the same shape and a wrong line are not, and the tree as written has no hit from its README."""
    scope = Scope(assignments=("00_welcome",), texts=("README.md", "harness/checks/released_hints.json"))
    before = audit(graded, scope)
    assert not before.hits and not before.unaudited, summary(before)
    planted = tmp_path / "course"
    solution_line = "return torch.zeros(n, 3, 8, 8, dtype=torch.float32, device=device)"
    write_student_tree(planted, withheld_drills=WITHHELD_DRILLS,
                       solution_lines={"00-make-batch": solution_line, "00-count-params": "return 0"})
    copy = _solution_of("00-make-batch").replace("def make_batch(", "def zeros_batch(")
    harmless = "def ones_batch(n, device):\n    return torch.ones(n, 3, 8, 8, device=device)\n"
    readme = planted / "README.md"
    readme.write_text(readme.read_text() + f"\n```python\n{copy}\n```\n\n```python\n{harmless}```\n")
    after = audit(planted, scope)
    line = next(n for n, text in enumerate(readme.read_text().splitlines(), 1) if text.startswith("def zeros_batch("))
    assert sorted((h.task, h.source, h.file) for h in after.hits) == [
        ("00-make-batch", f"text README.md:{line} (renamed zeros_batch)", "README.md"),
        ("00-make-batch", "text harness/checks/released_hints.json 00-make-batch (as the body)",
         "harness/checks/released_hints.json")], summary(after)
    assert "00-make-batch is answered by text README.md" in undeclared(after)[0]


def test_the_texts_a_tree_ships_yield_their_code_and_not_the_exercise_cells(tmp_path):
    """Snippets come from markdown blocks (fenced, indented, inline), a notebook's markdown and given code cells (not
    its solution cells), the probe tables' hints and the drill index; prose that is no code yields none."""
    (tmp_path / "harness" / "checks").mkdir(parents=True)
    (tmp_path / "harness" / "drills").mkdir()
    (tmp_path / "notes.md").write_text("Some prose.\n\n    def shown(x):\n        return x\n\nThen `x.sum(dim=1)`.\n")
    (tmp_path / "harness" / "checks" / "probe.py").write_text(
        'Hints(nudge="Think about it.", concept="Use `return logits.argmax(dim=1)`.", solution="", section="1.")\n'
        'Requirement("ok", hint="Reduce with x.mean()")\n')
    (tmp_path / "harness" / "drills" / "index.json").write_text(json.dumps(
        [{"id": "d", "prompt": "Write it.", "starter": "def f(a):\n    raise NotImplementedError\n"}]))
    cells = [nbformat.v4.new_markdown_cell("```python\nmodel(x).argmax(1)\n```"),
             nbformat.v4.new_code_cell("def given(m):\n    return m"),
             nbformat.v4.new_code_cell("def answer(m):\n    return m")]
    cells[2].metadata["nbgrader"] = {"solution": True, "grade_id": "t-code"}
    nbformat.write(nbformat.v4.new_notebook(cells=cells), tmp_path / "n.ipynb")
    found = {snippet.code: snippet.label for snippet in snippets(tmp_path)}
    assert found == {"def shown(x):\n    return x": "text notes.md:3", "x.sum(dim=1)": "text notes.md:6",
                     "return logits.argmax(dim=1)": "text harness/checks/probe.py:1",
                     "def f(a):\n    raise NotImplementedError": "text harness/drills/index.json d.starter",
                     "model(x).argmax(1)": "text n.ipynb cell 1",
                     "def given(m):\n    return m": "text n.ipynb cell 2"}, found


_OLD_SHOWCASE_FACTOR = '''

def warmup_cosine(warmup_steps: int, total_steps: int) -> Any:
    """LR multiplier per optimizer step: linear warm-up to 1, then cosine decay to 0 at `total_steps`."""
    import math

    def multiplier(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return multiplier
'''
_OLD_SEQUENCES_SCHEDULER = '''

def warmup_cosine(optimizer: torch.optim.Optimizer, warmup_steps: int,
                  total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up from lr/warmup_steps to lr over `warmup_steps`, then cosine decay to 0 at `total_steps`."""
    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
'''


def test_the_audit_finds_a_library_function_that_answers_through_a_one_line_wrapper(graded, tmp_path):
    """The library's old warmup-cosine helpers, planted back, answer 07-warmup-cosine through a wrapper: the
    showcase's factory called with (warmup, total) and its function with the step, the sequences' LambdaLR built on
    an optimizer and read at the step (its factor, or its lr after stepping): each is a hit named by the wrapper; the
    library as shipped (torch's own schedulers) has none."""
    scope = Scope(assignments=("07_lr_schedulers",), modules=("harness.showcase", "harness.sequences"),
                  tasks=("07-warmup-cosine",))
    before = audit(graded, scope)
    assert not before.hits and not before.visible_only, summary(before)
    planted = tmp_path / "course"
    shutil.copytree(graded, planted)
    for module, source in (("showcase", _OLD_SHOWCASE_FACTOR), ("sequences", _OLD_SEQUENCES_SCHEDULER)):
        path = planted / "harness" / f"{module}.py"
        path.write_text(path.read_text() + source)
    after = audit(planted, scope)
    assert sorted((h.task, h.source, h.file) for h in after.hits) == [
        ("07-warmup-cosine", "harness.sequences.warmup_cosine (wrapped: f(optimizer, b, c).lr_lambdas[0](a))",
         "harness/sequences.py"),
        ("07-warmup-cosine", "harness.sequences.warmup_cosine (wrapped: lr of f(optimizer, b, c) stepped a times)",
         "harness/sequences.py"),
        ("07-warmup-cosine", "harness.showcase.warmup_cosine (wrapped: f(b, c)(a))", "harness/showcase.py"),
    ], summary(after)
    assert "07-warmup-cosine is answered by harness.showcase.warmup_cosine (wrapped: f(b, c)(a))" in " ".join(
        undeclared(after))


def test_wrappers_are_read_from_source_and_screened_on_the_solution_values():
    """A function returning a nested def, a lambda or a partial is a factory; one whose first parameter takes an
    optimizer builds a scheduler; anything else is only rearranged. The strict screen compares values, not outlines:
    a wrapper returning another number is dropped."""
    import ast

    nodes = {n.name: n for n in ast.parse(
        "def a(x):\n    def f(y):\n        return y\n    return f\n"
        "def b(x) -> Callable[[int], int]:\n    return g\n"
        "def c(x):\n    return functools.partial(h, x)\n"
        "def d(optimizer, w):\n    return None\n"
        "def e(o: torch.optim.Optimizer):\n    return None\n"
        "def plain(x, y):\n    return x\n").body}
    assert {name: set(wrappings(node)) for name, node in nodes.items()} == {
        "a": {"factory"}, "b": {"factory"}, "c": {"factory"}, "d": {"scheduler"}, "e": {"scheduler"}, "plain": set()}
    described = [w.describe() for w in wrappers(2, Shape("function", 1, 1, frozenset({"x"})), frozenset({"factory"}))]
    assert described == ["f(a)(b)", "f(b)(a)"], described
    recorder = Recorder(lambda step, total: step / total)
    recorded = recorder.wrap()
    assert [recorded(1, 4), recorded(2, 4), recorded(3, 4), recorded(4, 4)] == [0.25, 0.5, 0.75, 1.0]
    assert len(recorder.calls) == Recorder.KEPT
    swapped = lambda total, step: step / total  # noqa: E731 - a library function with the other order
    other = lambda step, total: step / (total + 1)  # noqa: E731
    assert screen([lambda *a: swapped(a[1], a[0]), lambda *a: other(*a)], recorder, 2, strict=True) == [True, False]


def test_the_audit_tries_a_block_of_statements_as_the_body_of_the_stub(graded, tmp_path):
    """Prose code: a fenced block of several statements that ends in a return (07-warmup-cosine's solution body,
    without its signature) is a hit as the body of the exercise's stub; the README as shipped yields no other hit."""
    planted = tmp_path / "course"
    shutil.copytree(graded, planted)
    body = "\n".join(line[4:] for line in _solution_of("07-warmup-cosine").splitlines()[2:])
    readme = planted / "README.md"
    readme.write_text(readme.read_text() + f"\n```python\n{body}\n```\n")
    line = len(readme.read_text().splitlines()) - body.count("\n") - 1
    after = audit(planted, Scope(assignments=("07_lr_schedulers",), texts=("README.md",), tasks=("07-warmup-cosine",)))
    assert [(h.task, h.source) for h in after.hits] == [
        ("07-warmup-cosine", f"text README.md:{line} (as the body)")], summary(after)


def test_the_audit_tries_exercises_whose_check_needs_the_given_cells(graded, tmp_path):
    """07-plateau's answer calls the given cells' `evaluate`, and 08-resume's check re-creates the answer from its
    source in a fresh process: both were left unaudited (the solution failed its own check in the worker). Run after
    the cells above the solution cell, with sources `inspect` can read, each is audited, and a copy of its solution
    pasted into the README under another name is a hit."""
    planted = tmp_path / "course"
    shutil.copytree(graded, planted)
    plateau = _solution_of("07-plateau").replace("def train_with_plateau(", "def plateau_loop(")
    resume = _solution_of("08-resume").replace("def save_checkpoint(", "def keep(")
    save, load = resume[:resume.index("def load_checkpoint(")], resume[resume.index("def load_checkpoint("):]
    load = load.replace("def load_checkpoint(", "def restore(")
    readme = planted / "README.md"
    blocks = "".join(f"\n```python\n{code.strip()}\n```\n" for code in (plateau, save, load))
    readme.write_text(readme.read_text() + blocks)
    lines = readme.read_text().splitlines()
    at = {name: next(n for n, text in enumerate(lines, 1) if text.startswith(f"def {name}(")) for name in
          ("plateau_loop", "keep", "restore")}
    after = audit(planted, Scope(assignments=("07_lr_schedulers", "08_checkpointing"), texts=("README.md",),
                                 tasks=("07-plateau", "08-resume")))
    assert not after.unaudited, summary(after)
    assert sorted((h.task, h.source) for h in after.hits) == [
        ("07-plateau", f"text README.md:{at['plateau_loop']} (renamed plateau_loop)"),
        ("08-resume", f"text README.md:{at['keep']} (renamed keep)"),
        ("08-resume", f"text README.md:{at['restore']} (renamed restore)")], summary(after)


def test_an_answer_that_is_a_value_is_audited_with_the_configs_the_tree_shows(graded):
    """10-held-out's answer is a value (`CONFIG = dict(...)`, which the cell's given code trains with): the audit tries
    each dict the tree's texts assign that shares a key with it, in the cell's given code. The lesson's own resume
    demo config passes (declared allowed, with why); before, the exercise had no slot and nothing was tried."""
    result = audit(graded, Scope(assignments=("10_capstone",), texts=("notebooks/10_capstone",),
                                 tasks=("10-held-out",)))
    assert not result.unaudited and result.checked >= 1, summary(result)
    assert [(h.task, h.source) for h in result.hits] == [
        ("10-held-out", "text notebooks/10_capstone/10_capstone.ipynb cell 31 (renamed small)")], summary(result)
    assert undeclared(result) == []


def test_a_candidate_writes_nothing_outside_the_workers_scratch_folder(graded, tmp_path):
    """The worker runs shipped functions on arguments they were never written for (the course's installer, called as
    a candidate, once uninstalled the instructor's editable install): it runs in bubblewrap with every file read-only
    but its scratch folder. A planted function that writes a file beside the tree and then answers 00-make-batch is
    a hit (it ran), and the file is not there."""
    planted = tmp_path / "course"
    shutil.copytree(graded, planted)
    marker = tmp_path / "written-by-a-candidate"
    answer = _solution_of("00-make-batch").replace("def make_batch(", "def reference_batch(")
    writer = (f"def writing_batch(n, device):\n    try:\n        open({str(marker)!r}, 'w').write('x')\n"
              "    except OSError:\n        pass\n    return reference_batch(n, device)\n")
    module = planted / "harness" / "env.py"
    module.write_text(module.read_text() + f"\n\n{answer}\n\n{writer}")
    after = audit(planted, Scope(assignments=("00_welcome",), modules=("harness.env",), tasks=("00-make-batch",)))
    assert ("00-make-batch", "harness.env.writing_batch") in after.keys(), summary(after)
    assert not marker.exists()


def test_a_candidate_that_signals_every_process_does_not_stop_the_audit(graded, tmp_path):
    """A shipped function called with a process id of -1 signals every process it may: in the worker's PID namespace
    that is the audit's own, and the worker, the namespace's first process, is spared (it once was not, and half of
    lessons 01 and 03 went unaudited). A planted `os.kill(-1, SIGKILL)` beside a planted answer: the answer is still
    found and nothing is left unaudited."""
    planted = tmp_path / "course"
    shutil.copytree(graded, planted)
    answer = _solution_of("00-make-batch").replace("def make_batch(", "def reference_batch(")
    killer = "def killing_batch(n, device):\n    import os, signal\n    os.kill(-1, signal.SIGKILL)\n"
    module = planted / "harness" / "env.py"
    module.write_text(module.read_text() + f"\n\n{killer}\n\n{answer}\n")
    after = audit(planted, Scope(assignments=("00_welcome",), modules=("harness.env",), tasks=("00-make-batch",)))
    assert not after.unaudited, summary(after)
    assert ("00-make-batch", "harness.env.reference_batch") in after.keys(), summary(after)
