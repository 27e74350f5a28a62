"""How a check fails and teaches: `CheckFailed`, `fail`'s four-part message, requirements and hints."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NoReturn


class CheckFailed(AssertionError):
    """A check observed behaviour that differs from the reference.

    `code` is a stable identifier of the failure (for example "missing-zero-grad"); the message teaches.
    It subclasses AssertionError so that nbgrader marks the test cell as failed. `hint`, when the check found
    a more specific cause than the code names, is the first hint for that cause (`hint()` shows it in place of
    the requirement's own hint).
    """

    def __init__(self, message: str, code: str = "failed", hint: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.hint = hint

    def _render_traceback_(self) -> list[str]:
        """How IPython shows it: the teaching message alone, without the check's own frames (the message
        already names the student's line where there is one)."""
        return [f"{type(self).__name__}: {self}"]


@dataclass(frozen=True)
class Requirement:
    """One thing an exercise's text asks for ("must", "returns", "do not call", "in place", "on device").

    Its violation fails the check with the failure code it is registered under; `hint` is the first hint a
    student gets after that failure: a nudge about that mistake, never the solution.
    """

    states: str
    hint: str


@dataclass(frozen=True)
class Hints:
    """Three levels of help for an exercise: a nudge, the concept (with the lesson's section to reread), and
    the solution line. After a failure, the first level is that failure's own hint (`Requirement.hint`)."""

    nudge: str
    concept: str
    solution: str
    section: str  # the heading of the lesson's section that teaches it, as written in the notebook


# Every task and every drill can fail with these, whatever its own table says: they need no requirement.
NOT_FINITE = "not-finite"
RAISED = "raised"


def fail(code: str, *, observed: str, expected: str, cause: str, where: str, hint: str | None = None) -> NoReturn:
    """Raise CheckFailed with the course's four-part teaching message.

    `hint`: the first hint for the cause this failure observed, when it is narrower than the requirement's hint
    (a tie counted as an improvement, where the requirement's hint speaks of the counter): a nudge, never the solution.
    """
    __tracebackhide__ = True
    raise CheckFailed(
        f"[{code}]\n"
        f"  Observed:      {observed}\n"
        f"  Expected:      {expected}\n"
        f"  Likely cause:  {cause}\n"
        f"  Where to look: {where}",
        code=code,
        hint=hint,
    )


def raised_failure(task_id: str, explained: str) -> CheckFailed:
    """The failure reported when the student's code raised; `explained` is `errors.explain` of the exception."""
    return CheckFailed(
        f"{task_id} failed [{RAISED}]\n"
        f"  Observed:      your code raised {explained}\n"
        f"  Expected:      it runs on the check's inputs without an exception\n"
        f"  Where to look: the line named above, in the cell that defines what you passed to check()",
        code=RAISED,
    )
