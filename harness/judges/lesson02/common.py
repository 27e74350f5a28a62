"""Lesson 02: what several of its tasks share on the judge side (references)."""

from __future__ import annotations

from typing import Any

from harness.contract.failure import fail


def _no_exception(record: dict[str, Any], what: str) -> None:
    """Fail if the probe recorded an exception of the student's code while running `what`."""
    if record.get("raised") is not None:
        fail("raised", observed=f"while {what}, your code raised {record['raised']}",
             expected="it runs on the check's inputs without an exception",
             cause="the exception named here, raised inside your code", where="the line named above")
