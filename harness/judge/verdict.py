"""Decide one task of one submission from what its probe cell displayed: the only place points are earned.

The grader collects, from each probe cell's outputs, the observations (`OBSERVATION_MIME` bundles) and any
error the cell raised. `judge_task` accepts an observation only if it carries this run's nonce, names the
task and the case index, decodes as data (`harness.contract.wire`) and echoes the case's fingerprint; then
the task's judge (`harness.contract.protocol.decide`) compares it with the reference it computes itself. A task
earns its points only when every case passes. What the student may read (`message`) never contains a
hidden case's inputs or expected values; `detail` (for the instructor's log) does.

The judge owns every string it reports: a failure's code is one of the task's requirement table (or one every
task has: `raised`, `not-finite`); any other code, which only a student's code raising `CheckFailed` can
give, becomes `failed` and its text is not copied. Messages are capped (`instructor_text.MESSAGE_CHARS`).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from harness.contract import wire
from harness.contract.case import Case
from harness.contract.failure import NOT_FINITE, RAISED, CheckFailed
from harness.contract.protocol import decide
from harness.contract.registry import get
from harness.grading.instructor_text import capped

UNKNOWN_FAILURE = "failed"  # the code of a failure whose code is not the task's: its text is not shown


@dataclass(frozen=True)
class Verdict:
    """The judge's decision on one task."""

    task: str
    passed: bool
    code: str | None  # the failure code, None when passed
    message: str  # safe to show the student: what passed, or the visible failure, or a hidden failure's code
    detail: str  # for the instructor: the full message of every case
    tamper: str | None = None  # why the observation could not be trusted (forged, missing, wrong nonce)


def _payload(bundle: dict[str, Any], task: str, index: int, nonce: str) -> bytes:
    """The observation bytes of one displayed bundle, or WireError saying why it is not acceptable."""
    if not isinstance(bundle, dict) or bundle.get("nonce") != nonce:
        raise wire.WireError("an observation without this run's nonce")
    if bundle.get("task") != task or bundle.get("case") != index:
        raise wire.WireError("an observation of another task or case")
    try:
        return base64.b64decode(str(bundle.get("data", "")), validate=True)
    except (binascii.Error, ValueError):
        raise wire.WireError("an observation that is not base64") from None


def _hidden_message(task: str, code: str) -> str:
    return (f"{task} failed [{code}]: your code passes the visible test but fails the hidden tests, which run the "
            "same check on other inputs (seeds, shapes, edge cases)")


def owned_failure(task: str, failure: CheckFailed) -> tuple[str, str]:
    """The code and message the judge reports for `failure` of `task`: a code of the task's requirement table
    (or `raised`, `not-finite`) with its message capped; any other code `UNKNOWN_FAILURE`, with a message of the
    judge's own."""
    if failure.code in {*get(task).requires, RAISED, NOT_FINITE}:
        return failure.code, capped(str(failure))
    return UNKNOWN_FAILURE, (f"{task} failed [{UNKNOWN_FAILURE}]: the check reported a failure that is none of "
                             "this exercise's requirements (your code may raise CheckFailed itself); its text is "
                             "not shown: remove any `raise CheckFailed` from your code and run the check again")


def judge_task(task: str, cases: list[Case], bundles: list[dict[str, Any]], nonce: str,
               cell_error: str = "") -> Verdict:
    """Decide `task` from the bundles its probe cell displayed, one per case in order.

    Args:
        task: the task id ("04-train-step").
        cases: the cases the probe cell was given, in order (visible first).
        bundles: the observation bundles the probe cell displayed, in order.
        nonce: this run's secret the bundles must carry.
        cell_error: the error the probe cell raised, if any (it should never raise).
    """
    if len(bundles) != len(cases):
        why = (f"the probe cell sent {len(bundles)} observations for {len(cases)} cases"
               + (f" and raised {cell_error[:200]}" if cell_error else ""))
        return Verdict(task, False, "no-observation", f"{task}: not graded: the grader's probe did not "
                       f"complete ({why}): 0 points", why, tamper=why)
    details = []
    for index, (case, bundle) in enumerate(zip(cases, bundles, strict=True)):
        try:
            verified = decide(task, _payload(bundle, task, index, nonce), case)
            details.append(f"case {index} ({'hidden' if case.hidden else 'visible'}): {verified}")
        except CheckFailed as failure:
            code, text = owned_failure(task, failure)
            message = text if not case.hidden else _hidden_message(task, code)
            details.append(f"case {index} ({'hidden' if case.hidden else 'visible'}, seed {case.seed}): {text}")
            return Verdict(task, False, code, message, "\n".join(details))
        except wire.WireError as error:
            why = f"forged or corrupted observation: {error}"
            return Verdict(task, False, "forged-observation", f"{task}: not graded: {why}: 0 points",
                           "\n".join(details + [why]), tamper=why)
        except Exception as error:  # the judge could not compute on what was sent: not an honest probe's data
            why = f"an observation the judge cannot use ({type(error).__name__}: {str(error)[:200]})"
            return Verdict(task, False, "forged-observation", f"{task}: not graded: {why}: 0 points",
                           "\n".join(details + [why]), tamper=why)
    visible = capped(details[0].split(": ", 1)[-1]) if details else ""
    return Verdict(task, True, None, f"\u2714 {task}: {visible}", capped("\n".join(details)))
