"""What the drills teach with, read from the bank's index (no torch, no answer run): an explain drill's key is
not given away by its length, and every drill's solution says why it is right, as `solution` shows it (issue 41,
item 5).

The failure messages themselves are checked where the planted wrong answers run (tests/test_drills_bank.py): a
specific code per mistake, and a bug hunt's message that names what was observed without stating the fix.
"""

import math
from collections import Counter

import pytest

from harness.cli import main
from harness.drills.core import Answers
from harness.drills.index import Entry, entries
from harness.judges.drills.whys import add_answers, why_of

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


def test_every_solution_says_why():
    thin = [e.id for e in entries() if len(why_of(e.solution or "").split()) < 8]
    assert thin == [], f"solutions without a why of a sentence or more: {thin}"


@pytest.mark.parametrize("kind", ["write", "bughunt", "explain"])
def test_the_solution_command_shows_the_why(kind, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "80")
    entry = next(e for e in entries() if e.kind == kind)
    assert main(["drill", "solution", entry.id]) == 0
    shown = capsys.readouterr().out
    assert why_of(shown) == why_of(entry.solution) != ""


def test_a_solution_without_a_why_is_refused():
    with pytest.raises(ValueError, match="needs a why"):
        add_answers(Answers(drill_id="no-such-drill", solution="x = 1\n", wrong_answers=()))


# The six mistakes a held-out round of wrong answers got a generic or wrong cause for: each planted wrong answer
# (by its code) and what its message must name, the thing the judge observed
SPECIFIC = (
    ("modules-layer-norm-from-scratch", "leading-dims", "over x's first len(normalized_shape) dimensions"),
    ("modules-layer-norm-from-scratch", "all-dims", "over every dimension of x"),
    ("ddp-gather-full-params", "unfilled-buffer", "returned its own shard in place, but rank"),
    ("export-fold-batchnorm", "bias-not-scaled", "the folded bias is b - running_mean + beta"),
    ("export-fold-batchnorm", "eps-outside-sqrt", "divides by sqrt(running_var) + eps"),
    ("loop-adamw-from-scratch", "decay-after-update", "with the decay applied after the Adam step"),
    ("sequences-causal-padding-mask", "diagonal-masked", "mask[b, 0, i, i] is False"),
)


@pytest.fixture(scope="module")
def one_runner():
    """Each answer still runs in its own forked child; one runner takes them in turn (as in test_drills_bank)."""
    from harness.drills.pool import set_uses

    previous = set_uses(10_000)
    yield
    set_uses(previous)


@pytest.mark.usefixtures("one_runner")
@pytest.mark.parametrize(("drill_id", "code", "named"), SPECIFIC, ids=[f"{d}-{c}" for d, c, _ in SPECIFIC])
def test_a_specific_mistake_gets_its_own_cause(drill_id, code, named):
    from harness.contract.case import Case
    from harness.drills.checker import check_source
    from harness.drills.core import get_drill

    drill = get_drill(drill_id)
    source = next(source for source, wanted in drill.wrong_answers if wanted == code)
    result = check_source(drill, source, case=Case(seed=424_242))
    assert (result.passed, result.code) == (False, code), result.message
    assert named in " ".join(result.message.split()), result.message
