"""Held drills (issue 38 item 1): a graded student tree carries no solution or planted wrong answer of a drill whose
answer passes a graded exercise, nor the warmup-cosine reference, nor the prompt, starter or hints of a held drill that
lesson 11's notebook does not hold (held whole); there `harness drill list` shows a drill held whole by its name and
the exercise it shares, `start`, `hint`, `solution` and `check` say the drill is held and which exercise it shares, a
shipped drill still checks, and lesson 11's local check of a held drill still gives the instructor's verdicts and
messages on the visible case. A practice tree carries everything.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.drills.core import get_drill
from harness.drills.index import entries
from harness.drills.lesson import NOTEBOOK_DRILLS
from harness.grading.answerable import WITHHELD_DRILLS
from harness.grading.held_drills import held_answers, held_records, withhold_drills
from harness.grading.layout import REPO_ROOT
from harness.grading.student_tree import write_student_tree

pytestmark = pytest.mark.xdist_group("student-tree")
# The tree's own harness, not the instructor's editable install of the repository.
TREE_FIRST = ("import sys\nsys.path.insert(0, sys.argv[1])\nsys.meta_path = [f for f in sys.meta_path if 'Editable' "
              "not in type(f).__name__ and 'Editable' not in getattr(f, '__name__', '')]\n")
# A line of each held drill's solution that no other file of a graded tree has (the reference body included).
DISTINCTIVE = {
    "modules-plain-list": "self.hidden = nn.ModuleList([nn.Linear(a, b) for a, b in zip(sizes[:-2], sizes[1:-1])])",
    "schedulers-warmup-cosine": "progress = min((step - warmup) / max(1, total - warmup), 1.0)",
    "performance-epoch-metrics": "total_loss += loss_fn(out, y) * len(y)  # stays on the device",
    "tensors-logsumexp": "m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))",
    "autograd-custom-function": "ctx.save_for_backward(x)",
    "data-pad-collate": "lengths = torch.tensor([len(s) for s in sequences])",
    "data-worker-seeding": "torch.utils.data.get_worker_info().dataset.rng = np.random.default_rng(seed)",
    "checkpointing-atomic-save": "os.fsync(f.fileno())",
    "checkpointing-portable-state-dict": "for key, value in state.items():",
}
# The held drills that lesson 11's notebook does not hold: a graded tree carries nothing of them but their names
WHOLE = set(WITHHELD_DRILLS) - {drill for _, drill in NOTEBOOK_DRILLS}
# The starters a graded tree ships (a bug hunt's starter is one of its planted wrong answers)
STARTERS = {entry.starter for entry in entries() if entry.id not in WHOLE}
# warmup_cosine_factor's body, the drill judge's reference that answers 07-warmup-cosine and 11-warmup-cosine
REFERENCE_BODY = ("if step < warmup:\nreturn (step + 1) / warmup\nprogress = (step - warmup) / max(1, total - warmup)\n"
                  "return 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))")


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("graded") / "course"
    write_student_tree(target, withheld_drills=WITHHELD_DRILLS)
    return target


@pytest.fixture(scope="module")
def practice(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("practice") / "course"
    write_student_tree(target)
    return target


def _strings(value: object) -> list[str]:
    """Every string in a parsed JSON value; a list of strings (a notebook cell's lines) as one."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return ["".join(value)]
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    return [text for child in children for text in _strings(child)]


def _normalised(text: str) -> str:
    """Code lines stripped, blank and comment lines dropped."""
    return "\n".join(line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#"))


def _texts(tree: Path) -> dict[str, str]:
    """Each file of `tree` as normalised text (a JSON file's strings, decoded, one after another)."""
    texts = {}
    for path in tree.rglob("*"):
        if not path.is_file() or path.suffix in (".pyc", ".pt"):
            continue
        text = path.read_text(errors="replace")
        if path.suffix in (".json", ".ipynb"):
            text = "\n".join(_strings(json.loads(text)))
        texts[str(path.relative_to(tree))] = _normalised(text)
    return texts


def _found(texts: dict[str, str], snippet: str) -> list[str]:
    wanted = _normalised(snippet)
    return [path for path, text in texts.items() if wanted in text]


def test_the_held_answers_are_the_withheld_drills_but_an_explain_key():
    """Every withheld drill's solution and wrong answers are in harness/judges/drills/held, but modules-why-eval's: an
    explain drill's key, which lesson 11's local check needs (declared in answerable.KNOWN_ANSWERABLE)."""
    assert held_answers(REPO_ROOT) == set(WITHHELD_DRILLS) - {"modules-why-eval"}
    assert {task for tasks in WITHHELD_DRILLS.values() for task in tasks} >= {"07-warmup-cosine", "11-warmup-cosine"}


def test_the_held_records_are_the_drills_held_whole():
    assert held_records(REPO_ROOT) == WHOLE
    assert {"clipping-under-amp", "memory-checkpoint-reentrant", "checkpointing-full-training-state"} <= WHOLE


def test_a_graded_tree_carries_no_prompt_starter_or_hint_of_a_drill_held_whole(graded, practice):
    graded_texts, practice_texts = _texts(graded), _texts(practice)
    for drill_id in sorted(WHOLE):
        drill = get_drill(drill_id)
        for what, text in (("prompt", drill.prompt), ("starter", drill.starter),
                           *((f"hint {level}", hint) for level, hint in enumerate(drill.hints, 1))):
            assert not _found(graded_texts, text), f"{drill_id}'s {what} is in {_found(graded_texts, text)}"
            assert _found(practice_texts, text), f"the practice tree lacks {drill_id}'s {what}"
    graded_ids = {entry["id"] for entry in json.loads((graded / "harness" / "drills" / "index.json").read_text())}
    assert graded_ids == {entry.id for entry in entries()} - WHOLE
    assert not (graded / "harness" / "drills" / "bank" / "held").exists()
    assert (practice / "harness" / "drills" / "bank" / "held" / "amp_clipping.py").is_file()


def test_a_graded_tree_carries_no_why_of_a_held_solution_and_a_practice_tree_does(graded, practice):
    """A why (the comment that opens a solution) says what the answer does: a held drill's stays with its answers."""
    from harness.judges.drills.whys import why_of

    graded_texts, practice_texts = _texts(graded), _texts(practice)
    for drill_id in sorted(held_answers(REPO_ROOT)):
        why = why_of(get_drill(drill_id).solution)
        if not why:  # an explain drill's key gives its why after the answer line (modules-why-eval: declared)
            continue
        words = " ".join(why.split()[:12])  # the first words: a source file splits the why across lines
        assert not [path for path, text in graded_texts.items() if words in " ".join(text.split())], \
            f"{drill_id}'s why is in the graded tree"
        assert [path for path, text in practice_texts.items() if words in " ".join(text.split())], \
            f"the practice tree lacks {drill_id}'s why"


def test_a_graded_tree_carries_no_held_solution_wrong_answer_or_reference_and_a_practice_tree_does(graded, practice):
    graded_texts, practice_texts = _texts(graded), _texts(practice)
    for drill_id in held_answers(REPO_ROOT):
        drill = get_drill(drill_id)
        # a wrong answer that is a bug hunt's starter is that drill's prompt, which the tree ships (amp-train-step's
        # clip-before-unscale is clipping-under-amp's)
        wrong = [source for source, _ in drill.wrong_answers if source not in STARTERS]
        for what, text in (("solution", drill.solution), *(("wrong answer", source) for source in wrong)):
            assert not _found(graded_texts, text), f"{drill_id}'s {what} is in {_found(graded_texts, text)}"
        assert _found(practice_texts, drill.solution), f"the practice tree lacks {drill_id}'s solution"
    for drill_id, line in DISTINCTIVE.items():
        assert line in get_drill(drill_id).solution
        assert not _found(graded_texts, line), f"{drill_id}'s line {line!r} is in {_found(graded_texts, line)}"
        assert _found(practice_texts, line), f"the practice tree lacks {drill_id}'s line {line!r}"
    assert not _found(graded_texts, REFERENCE_BODY), _found(graded_texts, REFERENCE_BODY)
    assert _found(practice_texts, REFERENCE_BODY) == ["harness/judges/drills/held/schedulers.py"]
    assert not (graded / "harness" / "judges" / "drills" / "held").exists()
    assert (practice / "harness" / "judges" / "drills" / "held" / "schedulers.py").is_file()
    withheld = json.loads((graded / "harness" / "drills" / "withheld.json").read_text())
    assert withheld == {drill: list(tasks) for drill, tasks in WITHHELD_DRILLS.items()}
    assert json.loads((practice / "harness" / "drills" / "withheld.json").read_text()) == {}


_IN_THE_TREE = """
import contextlib, io, json, math
from harness.cli import main
from harness.checks import check
from harness.contract.failure import CheckFailed
from harness.drills.checker import check_source
from harness.drills.core import get_drill
from harness.drills.index import entries
from harness.judges.drills.recorded import recorded

said = {}
for action in ("solution", "check", "start", "hint", "list"):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(["drill", action, *([] if action == "list" else ["tensors-logsumexp"]),
                  *(["--file", sys.argv[2]] if action == "check" else [])])
            code = 0
        except SystemExit as stop:
            code, text = 1, str(stop.code)
    said[action] = [code, out.getvalue() + err.getvalue() + (text if code else "")]
from harness.checks.core import get
why_eval = get("11-why-eval").hints.solution
out = io.StringIO()
with contextlib.redirect_stdout(out):
    main(["drill", "experiment", "modules-why-eval"])  # what 11-why-eval's last hint sends the student to
said["experiment"] = [0, out.getvalue()]
drill = get_drill("tensors-broadcast-shape")
shipped = check_source(drill, drill.solution).passed if drill.solution else None
verdicts = {}
for name, source in json.loads(sys.argv[3]).items():
    namespace = {}
    exec(source, namespace)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            check("11-warmup-cosine", namespace)
        verdicts[name] = "passed"
    except CheckFailed as failure:
        verdicts[name] = str(failure)
try:
    recorded("schedulers.warmup_cosine_expected", 999, 3, 10)
    unrecorded = "computed"
except LookupError as error:
    unrecorded = str(error)
print(json.dumps({"said": said, "why_eval": why_eval, "shipped": shipped, "verdicts": verdicts, "answered": get_drill(
    "schedulers-warmup-cosine").answered, "unrecorded": unrecorded}))
"""


def _verdicts_here(sources: dict[str, str]) -> dict[str, str]:
    """lesson 11's check of 11-warmup-cosine on each source, in the instructor's repository."""
    import contextlib
    import io

    from harness.checks import check
    from harness.contract.failure import CheckFailed

    verdicts = {}
    for name, source in sources.items():
        namespace: dict = {}
        exec(source, namespace)  # the bank's own answers
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                check("11-warmup-cosine", namespace)
            verdicts[name] = "passed"
        except CheckFailed as failure:
            verdicts[name] = str(failure)
    return verdicts


def test_in_a_graded_tree_a_held_drill_says_why_a_shipped_one_checks_and_lesson_11_checks_as_here(graded, tmp_path):
    drill = get_drill("schedulers-warmup-cosine")
    sources = {"solution": drill.solution, **{code: source for source, code in drill.wrong_answers
                                              if code in ("wrong-warmup", "not-clamped", "wrong-decay")}}
    answer = tmp_path / "answer.py"
    answer.write_text(get_drill("tensors-logsumexp").solution)
    environment = {**os.environ, "HARNESS_HOME": str(tmp_path / "home"), "OMP_NUM_THREADS": "1",
                   "HARNESS_DRILL_CHECKER": "inline"}
    done = subprocess.run([sys.executable, "-I", "-c", TREE_FIRST + textwrap.dedent(_IN_THE_TREE), str(graded),
                           str(answer), json.dumps(sources)], capture_output=True, text=True, timeout=300,
                          env=environment, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    prompt = " ".join(get_drill("tensors-logsumexp").prompt.split())
    for action in ("solution", "check", "start", "hint"):
        code, text = seen["said"][action]
        text = " ".join(text.split())
        assert code == 1 and "01-logsumexp (lesson 01)" in text and "until the course releases it" in text, text
        assert "m.squeeze(dim)" not in text and prompt[:60] not in text and "Subtract m" not in text
    code, listing = seen["said"]["list"]
    assert code == 0 and f"held whole ({len(WHOLE)})" in listing, listing
    rows = [" ".join(line.split()) for line in listing.splitlines()]
    assert "tensors-logsumexp shares 01-logsumexp" in rows and "clipping-under-amp shares 11-amp-step" in rows
    assert "schedulers-warmup-cosine" in listing and "A numerically stable logsumexp" not in listing
    # 11-why-eval's last hint (not a literal solution line: it ships) names a command that works in a graded tree
    assert "`harness drill experiment modules-why-eval`" in seen["why_eval"], seen["why_eval"]
    assert "drill solution" not in seen["why_eval"] and "BatchNorm" in seen["said"]["experiment"][1]
    assert seen["shipped"] is True, "a drill no exercise grades still checks in the graded tree"
    assert seen["answered"] is False
    assert seen["verdicts"] == _verdicts_here(sources), "lesson 11's local check differs from the instructor's"
    assert seen["verdicts"]["solution"] == "passed" and set(seen["verdicts"]) == {
        "solution", "wrong-warmup", "not-clamped", "wrong-decay"}
    assert all(f"[{code}]" in seen["verdicts"][code] for code in ("wrong-warmup", "not-clamped", "wrong-decay"))
    assert "held with your instructor" in seen["unrecorded"] and "visible case only" in seen["unrecorded"]


def test_the_held_reference_counts_in_the_regrade_fingerprint():
    """11-warmup-cosine's judge imports its held reference where it calls it: a fixed reference is a regrade."""
    from harness.grading.fingerprint import closure, defining_modules

    assert "harness.judges.drills.held.schedulers" in closure(defining_modules("11-warmup-cosine"))


def test_the_tree_refuses_to_drop_held_answers_it_does_not_withhold(tmp_path):
    """Held answers the tree would lose without listing them (a drill left out of WITHHELD_DRILLS) stop the build."""
    partial = {drill: tasks for drill, tasks in WITHHELD_DRILLS.items() if drill != "tensors-logsumexp"}
    with pytest.raises(ValueError, match="tensors-logsumexp, which the tree does not withhold"):
        write_student_tree(tmp_path / "course", withheld_drills=partial)
    unknown = tmp_path / "unknown"
    (unknown / "harness" / "judges" / "drills").mkdir(parents=True)
    (unknown / "harness" / "judges" / "drills" / "answers.json").write_text("{}")
    with pytest.raises(KeyError, match="not-a-drill"):
        withhold_drills(unknown, {"not-a-drill": ("00-x",)}, REPO_ROOT)
