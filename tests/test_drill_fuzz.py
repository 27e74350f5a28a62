"""The judge fuzz test for drills (issue 27): each drill's reference observation, broken one leaf at a time
(NaN, +inf, -inf, zeros, an empty tensor, an integer tensor, a meta tensor), never passes the checker's judge.

The reference solution runs as `harness drill check` runs an answer (a fresh runner); its observation is decoded,
broken and re-encoded, then judged as the checker judges. A NaN or an infinity in a leaf the drill does not declare
(`Drill.nonfinite`) fails `[not-finite]` before the drill's judge runs; leaves a drill reads only for a message
are declared `Drill.unjudged`.
"""

from __future__ import annotations

import pytest

from harness.contract import wire
from harness.contract.case import Case
from harness.contract.failure import NOT_FINITE
from harness.drills.checker import _judge
from harness.drills.core import all_drills
from harness.drills.pool import Job, run_answer, set_uses
from tests.fuzzing import NONFINITE, declared, mutations, replaced, sampled

set_uses(10_000)  # one runner takes every reference in turn, as in test_drills_bank
DRILLS = [d for d in all_drills() if d.kind != "explain"]
CASE = Case(seed=31_337)


@pytest.mark.parametrize("drill", DRILLS, ids=lambda d: d.id)
def test_a_broken_leaf_never_passes(drill):
    report = run_answer(Job(drill.id, drill.solution, "<reference>", CASE), 120.0)
    assert report.frame is not None, report.how
    observation = wire.decode(report.frame)
    assert _judge(drill, report.frame, CASE)["passed"], observation.get("raised") or observation.get("message")
    seen = observation["seen"]
    passed = []
    for path, leaf in sampled(seen):
        for name, broken in mutations(leaf):
            verdict = _judge(drill, wire.encode({**observation, "seen": replaced(seen, path, broken)}), CASE)
            where = "/".join(map(str, path))
            if verdict["passed"] and not declared(drill.unjudged, path):
                passed.append(f"{name} at {where} passed")
            elif (not verdict["passed"] and name in NONFINITE and not declared(drill.nonfinite, path)
                  and verdict["code"] != NOT_FINITE):
                passed.append(f"{name} at {where}: [{verdict['code']}], not [{NOT_FINITE}]")
    assert not passed, "\n".join(passed)
