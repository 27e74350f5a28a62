"""Every drill in the bank, checked as `harness drill check` checks it (answer in a child, judge outside it):
the reference passes on two cases, the starter fails, every planted wrong answer fails with its own code (on the
drawn case).

Working on one bank file: `DRILL_MODULES=tensors,loop pytest tests/test_drills_bank.py` loads only those
modules (the bank-wide tests then skip).
"""

import importlib
import math
import os
from collections import Counter

import pytest

from harness.contract.case import Case
from harness.drills.checker import check_source
from harness.drills.choices import LETTERS
from harness.drills.core import _BANK, TOPICS, all_drills, load_judge_side
from harness.drills.pool import set_uses

# Each answer still runs in its own forked child of a fresh runner; here a runner takes many answers in turn, so
# the bank is checked without a torch import per answer (the CLI gives each runner one answer).
set_uses(10_000)

SELECTED = [name for name in os.environ.get("DRILL_MODULES", "").split(",") if name]
if SELECTED:
    for name in SELECTED:
        importlib.import_module(f"harness.drills.bank.{name}")
        load_judge_side(name)  # the answers: judges, solutions and wrong answers (a held drill's too)
    DRILLS = sorted(_BANK.values(), key=lambda d: d.id)
else:
    DRILLS = all_drills()
EXPLAIN = [d for d in DRILLS if d.kind == "explain"]
whole_bank = pytest.mark.skipif(bool(SELECTED), reason="only some bank modules are loaded")
# Two cases: the seed offset 0, and one as `harness drill check` draws it (fixed here, so a failure replays).
CASES = (Case(seed=0), Case(seed=424_242))


@pytest.mark.parametrize("drill", DRILLS, ids=lambda d: d.id)
def test_reference_solution_passes(drill):
    for case in CASES:
        result = check_source(drill, drill.solution, case=case)
        assert result.passed, f"seed {case.seed}: {result.message}\n{result.output}"


@pytest.mark.parametrize("drill", DRILLS, ids=lambda d: d.id)
def test_starter_fails(drill):
    assert not check_source(drill, drill.starter, case=CASES[0]).passed


@pytest.mark.parametrize(
    ("drill", "wrong"),
    [(d, w) for d in DRILLS for w in d.wrong_answers],
    ids=[f"{d.id}-wrong{i}" for d in DRILLS for i in range(len(d.wrong_answers))],
)
def test_planted_wrong_answer_fails_with_its_code(drill, wrong):
    source, code = wrong  # on the drawn case only: the reference passing on both shows the cases agree
    result = check_source(drill, source, case=CASES[1])
    assert (result.passed, result.code) == (False, code), f"{result.message}\n{result.output}"
    if drill.kind != "explain" and code not in ("raised", "timeout", "no-report"):
        assert "Observed:" in result.message and "Likely cause:" in result.message, result.message
    if drill.kind == "bughunt":  # the fix comes with the hints, never with the failure
        stated = [line for line in fixed_lines(drill) if line in result.message]
        assert stated == [], f"the failure states the fix {stated}:\n{result.message}"


def fixed_lines(drill) -> list[str]:
    """The lines a bug hunt's solution adds to its starter (comments dropped; a line of under 8 characters, such
    as `try:`, says too little to count)."""
    starter = {line.strip() for line in drill.starter.splitlines()}
    lines = (line.split("  #")[0].strip() for line in drill.solution.splitlines())
    return [line for line in lines if len(line) >= 8 and not line.startswith("#") and line not in starter]


def test_fixed_lines_are_what_the_solution_adds():
    drill = next((d for d in DRILLS if d.id == "loop-eval-changes"), None)
    if drill is None:
        pytest.skip("the loop module is not loaded")
    assert "model.eval()" in fixed_lines(drill) and "return correct / total" not in fixed_lines(drill)


@pytest.mark.parametrize("drill", EXPLAIN, ids=lambda d: d.id)
def test_explain_drills_run_their_experiment(drill, capsys):
    drill.experiment()
    assert capsys.readouterr().out.strip()


@pytest.mark.parametrize("drill", EXPLAIN, ids=lambda d: d.id)
def test_explain_options_do_not_give_the_answer_away(drill):
    choices = drill.choices
    right = len(choices.options[choices.key].text)
    longest_wrong = max(len(o.text) for i, o in enumerate(choices.options) if i != choices.key)
    assert right <= 1.25 * longest_wrong + 10, "the right option is much longer than every wrong one"
    assert len({o.text for o in choices.options}) == len(LETTERS) and all(o.why for o in choices.options)


@whole_bank
def test_the_answer_key_is_balanced():
    keys = Counter(LETTERS[d.choices.key] for d in EXPLAIN)
    share = len(EXPLAIN) / len(LETTERS)
    assert max(keys.values()) <= math.ceil(share) + 1, f"answer key {dict(keys)} over {len(EXPLAIN)} drills"
    longest = sum(len(d.choices.options[d.choices.key].text) > max(
        len(o.text) for i, o in enumerate(d.choices.options) if i != d.choices.key) for d in EXPLAIN)
    assert longest <= 0.35 * len(EXPLAIN), f"the right option is the longest in {longest} of {len(EXPLAIN)}"


@whole_bank
def test_bank_size_topics_kinds_and_difficulties():
    assert len(DRILLS) >= 148
    per_topic = Counter(t for d in DRILLS for t in d.topics)
    assert {t: per_topic[t] for t in TOPICS if per_topic[t] < 8} == {}
    assert {d.kind for d in DRILLS} == {"write", "bughunt", "explain"}
    assert {d.difficulty for d in DRILLS} == {1, 2, 3}
