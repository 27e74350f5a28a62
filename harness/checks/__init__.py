"""The checks that grade the course's exercises, one place for all of them.

In a notebook: `check("04-train-step", train_step)` runs the behavioural check for that task and prints
what it verified, or raises `CheckFailed` with a message that says what was observed, what was expected,
the likely cause and where to look. `hint("04-train-step")` prints the next hint. Each check is a probe
(runs the student's objects, records data) and a judge (decides from that data), on the contract of
`harness.contract`: when the instructor grades, the probe runs in the sandboxed kernel on hidden cases
(other seeds, shapes, edge cases) and the judge outside it.
"""

from harness.checks.core import check, demonstrate, hint
from harness.contract.failure import CheckFailed, fail
from harness.contract.registry import Check, register

__all__ = ["Check", "CheckFailed", "check", "demonstrate", "fail", "hint", "register"]
