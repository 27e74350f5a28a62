"""Lesson 10, the judge side of notebook data read as globals (harness.checks.lesson10.notebook_globals)."""

from __future__ import annotations

from typing import Any

from harness.contract.compare import malformed
from harness.contract.failure import fail


def judge_notebook_data(seen: dict[str, Any], parameters: str) -> None:
    """Fail with [reads-notebook-data] when the probe found notebook data read as a global (it then ran nothing);
    `parameters` names the arguments that should have been used instead."""
    read = seen.get("notebook_data")
    if read is None:
        return
    if not (isinstance(read, dict) and all(isinstance(read.get(key), str) for key in ("function", "name", "kind"))):
        malformed("the notebook data read is named by function, name and kind")
    fail("reads-notebook-data",
         observed=f"{read['function']} reads the notebook's global {read['name']!r} ({read['kind']})",
         expected=f"a function that works only on what it is given: {parameters}",
         cause=f"{read['name']!r} is read from the notebook instead of an argument: the check's inputs never reach "
         "that line, and in the notebook the function silently uses the notebook's data",
         where=f"the line of {read['function']} that uses {read['name']}: use the argument instead",
         hint=f"Search your function for {read['name']}: which of its arguments holds what it should use there?")
