"""The metadata index the quick commands read matches the bank (rebuild: `python -m harness.drills.index`)."""

import json

from harness.drills.index import INDEX_PATH, build


def test_the_shipped_index_matches_the_bank():
    assert json.loads(INDEX_PATH.read_text()) == build(), "stale: run `python -m harness.drills.index`"
