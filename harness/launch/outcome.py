"""What a launch brings back: every rank's result (`LaunchResult`), or the failing rank's report (`LaunchError`).

Both launchers report failures the same way: a rank that raises writes its traceback to `error_RANK.txt`
in the launch's work folder, and `first_error` turns the earliest of those files into the report.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


class LaunchError(RuntimeError):
    """A distributed launch failed: a rank raised, the launch timed out, or the input was unusable.

    Attributes:
        rank: the rank whose failure is reported (None when no single rank is to blame).
        log: every rank's output, rank-prefixed.
    """

    def __init__(self, message: str, *, rank: int | None = None, log: str = "") -> None:
        super().__init__(message)
        self.rank = rank
        self.log = log


@dataclass
class LaunchResult:
    """What a launch brought back.

    Attributes:
        results: each rank's return value, indexed by rank (empty for a script).
        log: every rank's output, each line prefixed with `[rankN]`.
        seconds: wall time of the launch, process start included.
    """

    results: list[Any]
    log: str
    seconds: float

    @property
    def value(self) -> Any:
        """Rank 0's return value."""
        if not self.results:
            raise LaunchError("a script launch returns no values: have rank 0 save what you need to a file.")
        return self.results[0]


def first_error(work: Path) -> tuple[int, str] | None:
    """The rank that failed first and the report on it (None when no rank wrote an error file in `work`).

    The others usually fail in turn, because their peer vanished ("Connection closed by peer"), and their
    tracebacks would hide the cause.
    """
    errors = sorted(work.glob("error_*.txt"), key=lambda path: path.stat().st_mtime_ns)
    if not errors:
        return None
    rank = int(errors[0].stem.split("_")[1])
    also = sorted(int(path.stem.split("_")[1]) for path in errors[1:])
    then = (f" (then rank{'s' if len(also) > 1 else ''} {', '.join(map(str, also))} failed as a consequence)"
            if also else "")
    return rank, f"rank {rank} failed{then}; the other ranks were ended. Its traceback:\n\n{errors[0].read_text()}"
