"""Each submission's cases, drawn at grade time: the visible case, and a hidden one from the secret.

The hidden seed offset is an HMAC of the assignment, the student and the task under the instructor's
secret: unknowable without the secret, different for every student and task, and the same on a regrade.
"""

from __future__ import annotations

import hashlib
import hmac

from harness.contract.case import LOCAL_SEED, Case


def draw_cases(secret: bytes, assignment: str, student: str, task: str) -> list[Case]:
    """The visible case and one hidden case for `task` of `student`'s submission of `assignment`."""
    digest = hmac.new(secret, f"{assignment}\0{student}\0{task}".encode(), hashlib.sha256).digest()
    offset = 1 + int.from_bytes(digest[:4], "big") % 1_000_000
    return [Case(hidden=False, seed=LOCAL_SEED), Case(hidden=True, seed=offset)]
