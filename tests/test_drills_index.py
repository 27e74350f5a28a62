"""The metadata index the quick commands read matches the bank (rebuild: `python -m harness.drills.index`)."""

import json

from harness.drills.index import INDEX_PATH, build


def test_the_shipped_index_matches_the_bank():
    assert json.loads(INDEX_PATH.read_text()) == build(), "stale: run `python -m harness.drills.index`"


def test_a_self_check_drill_says_so_in_its_prompt():
    from harness.drills.index import entries

    marked = [e for e in entries() if e.self_check]
    assert {e.id for e in marked} >= {"debugging-grad-norms", "performance-epoch-metrics", "performance-log-every"}
    assert all("self-check" in e.prompt for e in marked)
