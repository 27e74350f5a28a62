"""The metadata index the quick commands read matches the bank (rebuild: `python -m harness.drills.index`)."""

import json

from harness.drills.index import ANSWERS_PATH, INDEX_PATH, build


def test_the_shipped_index_and_answers_match_the_bank():
    index, answers = build()
    assert json.loads(INDEX_PATH.read_text()) == index, "stale: run `python -m harness.drills.index`"
    assert json.loads(ANSWERS_PATH.read_text()) == answers, "stale: run `python -m harness.drills.index`"


def test_the_index_holds_no_answer():
    """The index sits beside the bank's probe side, which a graded kernel mounts: solutions and keys are apart."""
    text = INDEX_PATH.read_text()
    assert '"solution"' not in text and '"key"' not in text
    for drill_id, answer in json.loads(ANSWERS_PATH.read_text()).items():
        assert answer["solution"].strip() not in text, drill_id


def test_a_self_check_drill_says_so_in_its_prompt():
    from harness.drills.index import entries

    marked = [e for e in entries() if e.self_check]
    assert {e.id for e in marked} >= {"debugging-grad-norms", "performance-epoch-metrics", "performance-log-every"}
    assert all("self-check" in e.prompt for e in marked)
