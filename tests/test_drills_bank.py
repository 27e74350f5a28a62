"""Every drill in the bank: the reference passes, the starter fails, every planted wrong answer fails."""

import pytest

from harness.checks import CheckFailed
from harness.drills import all_drills, run_check
from harness.drills.core import TOPICS

DRILLS = all_drills()


@pytest.mark.parametrize("drill", DRILLS, ids=lambda d: d.id)
def test_reference_solution_passes(drill):
    assert run_check(drill, drill.solution)


@pytest.mark.parametrize("drill", DRILLS, ids=lambda d: d.id)
def test_starter_fails(drill):
    with pytest.raises(CheckFailed):
        run_check(drill, drill.starter)


@pytest.mark.parametrize(
    ("drill", "wrong"),
    [(d, w) for d in DRILLS for w in d.wrong_answers],
    ids=[f"{d.id}-wrong{i}" for d in DRILLS for i in range(len(d.wrong_answers))],
)
def test_plausible_wrong_answer_fails_with_a_teaching_message(drill, wrong):
    with pytest.raises(CheckFailed) as info:
        run_check(drill, wrong)
    assert "Observed:" in str(info.value) and "Likely cause:" in str(info.value)


@pytest.mark.parametrize("drill", [d for d in DRILLS if d.kind == "explain"], ids=lambda d: d.id)
def test_explain_drills_run_their_experiment(drill, capsys):
    drill.experiment()
    assert capsys.readouterr().out.strip()


def test_bank_covers_every_topic_and_kind():
    assert {t for d in DRILLS for t in d.topics} == set(TOPICS)
    assert {d.kind for d in DRILLS} == {"write", "bughunt", "explain"}
    assert len(DRILLS) >= 40
