"""What the drills teach with, read from the bank's index (no torch, no answer run): an explain drill's key is
not given away by its length, and every drill's solution says why it is right (issue 41, item 5).

The failure messages themselves are checked where the planted wrong answers run (tests/test_drills_bank.py): a
specific code per mistake, and a bug hunt's message that names what was observed without stating the fix.
"""

import math
from collections import Counter

from harness.drills.index import Entry, entries

EXPLAIN = [e for e in entries() if e.kind == "explain"]


def length_rank(entry: Entry) -> int:
    """How many of the other options are strictly longer than the key: 0 when the key is the longest (a tie
    counts against the key), 3 when it is the shortest."""
    key = len(entry.options[entry.key])
    return sum(len(text) > key for i, text in enumerate(entry.options) if i != entry.key)


def test_the_keys_length_gives_nothing_away():
    """A candidate who always picks the longest (or the second-longest, or the shortest) option does no better
    than chance: the key is among the two longest in at most half the drills, and no length rank holds the key
    more than two standard deviations of a fair draw above a quarter of them."""
    ranks = Counter(length_rank(e) for e in EXPLAIN)
    n = len(EXPLAIN)
    top_two = ranks[0] + ranks[1]
    assert top_two <= math.ceil(n / 2), f"the key is the longest or second-longest in {top_two} of {n} drills"
    bound = n / 4 + 2 * math.sqrt(n * 0.25 * 0.75)
    crowded = {rank: count for rank, count in ranks.items() if count > bound}
    assert crowded == {}, f"length ranks (0 = longest) holding the key too often: {crowded} of {n} drills"


def test_the_length_rank_counts_ties_against_the_key():
    entry = Entry(id="x", title="", kind="explain", topics=("tensors",), difficulty=1, prompt="", starter="",
                  hints=("", ""), options=("aa", "bbb", "bbb", "c"), key=1)
    assert length_rank(entry) == 0
    assert length_rank(Entry(**{**entry.__dict__, "key": 3})) == 3
