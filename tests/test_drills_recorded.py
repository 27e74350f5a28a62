"""A held drill's reference is filed as the judges' `@recorded` references are (issue 38 item 1: one recorded-value
mechanism): the table a graded student tree gets for it (`harness.judges.drills.held.recorded_values`, written by
`harness.grading.held_drills`) is keyed by `harness.contract.recorded.digest` and holds wire-format values, so the
contract's `lookup` answers every visible call with the reference's own value, and any other call is `Unrecorded`."""

from __future__ import annotations

import json

import pytest

from harness.contract.recorded import Unrecorded, decoded, lookup
from harness.judges.drills.held import recorded_values
from harness.judges.drills.held.schedulers import VISIBLE

NAME = "schedulers.warmup_cosine_expected"


def test_the_held_table_answers_each_visible_call_through_the_contract() -> None:
    table = decoded(json.loads(json.dumps(recorded_values())))  # as held_drills writes it and the tree reads it
    reference, calls = VISIBLE[NAME]
    assert calls and set(table) == set(VISIBLE)
    for arguments in calls:
        assert lookup(table, NAME, tuple(arguments), {}) == reference(*arguments), arguments
    with pytest.raises(Unrecorded, match="not the visible case's"):
        lookup(table, NAME, (999, 3, 10), {})
