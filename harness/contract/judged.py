"""What a course check and a drill share: the two halves of one contract and the leaves they treat apart.

A probe runs where the student's (or candidate's) objects live and returns an observation, data only
(`harness.contract.wire`); a judge decides from that data alone, recomputing what it expects. `Check`
(`harness.contract.registry`) and `Drill` (`harness.drills.core`) are this record with what each adds: a task
id, hints and a requirement table; a prompt, a starter and a reference solution.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Probe = Callable[..., dict[str, Any]]  # probe(*objects, case=...) -> observation
Judge = Callable[..., str]  # judge(observation, *, case) -> what it verified, or raises CheckFailed


@dataclass(frozen=True, kw_only=True)
class Judged:
    """The probe, the judge, and the observation's leaves the contract treats apart.

    `nonfinite` lists the leaves (paths such as "losses/*" or "steps/*/grads") whose NaN or infinity is part
    of the expected behaviour; any other non-finite leaf fails `[not-finite]` before the judge runs
    (`harness.contract.protocol.refuse_nonfinite`). `unjudged` lists leaves the judge never compares with an
    expected value: read for a message only, or only against another leaf (the second epoch against the
    first); the judge fuzz test does not expect a change there to fail.
    """

    probe: Probe | None = None
    judge: Judge | None = None
    nonfinite: tuple[str, ...] = ()
    unjudged: tuple[str, ...] = ()
