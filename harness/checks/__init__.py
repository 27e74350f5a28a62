"""The checks that grade the course's exercises, one place for all of them.

In a notebook: `check("04-train-step", train_step)` runs the behavioural check for that task and prints
what it verified, or raises `CheckFailed` with a message that says what was observed, what was expected,
the likely cause and where to look. `hint("04-train-step")` prints the next hint. The visible nbgrader
test cell calls `check(...)`; the hidden one calls `check(..., hidden=True)` (other seeds, shapes, edge
cases).
"""

from harness.checks.core import Check, CheckFailed, check, fail, hint, register

__all__ = ["Check", "CheckFailed", "check", "fail", "hint", "register"]
