"""What a launch brings back: every rank's result (`LaunchResult`), or the failing rank's report (`LaunchError`).

Both launchers report failures the same way (`blame`): a rank killed by a signal (the OOM killer's SIGKILL, an
abort) is the cause, since no rank dies of a signal because a peer failed; otherwise the rank that raised first
(a rank that raises writes its traceback to `error_RANK.txt` in the launch's work folder); otherwise the rank
that exited with an error status. The report names the rank, how it ended and its last output lines.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.launch.hangs import crash_site, where_ranks

ENDED = "ended.json"  # torchrun's process writes how each failed rank ended (`harness.launch.runner`)


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


def first_error(work: Path, log: str = "") -> tuple[int, str] | None:
    """The rank that failed first and the report on it (None when no rank wrote an error file in `work`): its
    last output lines from `log` (the rank-prefixed output), then its traceback, which ends the report.

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
    traceback = errors[0].read_text()
    printed = _last_lines(log, rank, besides=traceback, if_none="")
    return rank, f"rank {rank} failed{then}; the other ranks were ended.{printed}\n\nIts traceback:\n\n{traceback}"


_SIGNAL_CAUSES = {
    signal.SIGKILL: "likely out of memory: the kernel's OOM killer sends SIGKILL, as does kill -9",
    signal.SIGABRT: "aborted: os.abort(), or a failed check in C++ code",
    signal.SIGSEGV: "a crash in native code: a segmentation fault",
    signal.SIGBUS: "a crash in native code: a bus error, often a full /dev/shm",
    signal.SIGTERM: "asked to stop from outside: kill, timeout or a job scheduler",
}


def rank_output(log: str, rank: int) -> list[str]:
    """The lines rank `rank` printed, without their `[rankN] ` prefix."""
    prefix = f"[rank{rank}] "
    return [line[len(prefix):] for line in log.splitlines() if line.startswith(prefix)]


def _last_lines(log: str, rank: int, besides: str = "", count: int = 8,
                if_none: str = "\n\nIt printed nothing.") -> str:
    """The last output lines of `rank` (those of `besides`, its traceback already in the report, left out)."""
    shown = set(besides.splitlines())
    lines = [line for line in rank_output(log, rank) if line not in shown][-count:]
    if not lines:
        return if_none
    return "\n\nIts last output lines:\n" + "\n".join(f"  {line}" for line in lines)


def signal_cause(exitcode: int) -> str:
    """How a process that ended with `exitcode` (negative: killed by that signal) ended, in words."""
    if exitcode >= 0:
        return f"exited with status {exitcode}"
    try:
        sig = signal.Signals(-exitcode)
    except ValueError:
        return f"was killed by signal {-exitcode}"
    cause = _SIGNAL_CAUSES.get(sig)
    return f"was killed by {sig.name}" + (f" ({cause})" if cause else "")


def hang_report(what: str, work: Path, nproc: int, log: str) -> str:
    """The report on a hung launch (`what` happened): where each rank was, from the stacks they dumped."""
    last = {rank: (rank_output(log, rank) or [""])[-1] for rank in range(nproc)}
    return (f"{what} and every process was ended. Where each rank was:\n{where_ranks(work, list(range(nproc)), last)}"
            "\nA rank waiting in a collective (all_reduce, barrier) that another rank never reaches is the usual "
            "cause: look at what the ranks that did not arrive were doing instead.")


def _timed_out(timeouts: list[Path], log: str) -> tuple[int, str]:
    """The rank to blame when collectives timed out (past the step deadline) and the report: each rank whose own
    collective timed out wrote a `timeout_RANK.txt` (`note_timeout`: where it waited, then where the others
    were), the first one written says where the others were. A rank that did not arrive is named first."""
    waited = int(timeouts[0].stem.split("_")[1])
    places = {int(rank): line for rank, line in re.findall(r"(?m)^\s*rank (\d+): (.*)$", timeouts[0].read_text())}
    for path in timeouts[1:]:  # a rank that timed out itself was waiting, whatever its stack showed the first
        places[int(path.stem.split("_")[1])] = path.read_text().splitlines()[0].split(": ", 1)[1]
    late = [rank for rank, line in sorted(places.items()) if line.startswith("did not arrive")]
    waited_in_it = f"rank {waited} waited in it past its timeout (the step deadline)"
    head = f"a collective timed out: {waited_in_it}"
    if late:
        ranks = f"rank{'s' if len(late) > 1 else ''} {', '.join(map(str, late))}"
        head = f"{ranks} did not arrive at a collective: {waited_in_it}"
    listing = "\n".join(f"  rank {rank}: {line}" for rank, line in sorted(places.items()))
    rank = late[0] if late else waited
    return rank, (f"{head}, and the launch was ended. Where each rank was:\n{listing}\nA rank that hangs in its step "
                  "(a sleep, a lock or a loader that never returns), or ranks that take different paths (one rank "
                  "with more batches than another, a condition on the rank) and so wait in different collectives, "
                  "is the usual cause." + _last_lines(log, rank))


def blame(work: Path, ended: dict[int, int], log: str) -> tuple[int, str] | None:
    """The rank to blame for a failed launch and the report on it (None when no rank failed).

    Args:
        work: the launch's work folder (error_RANK.txt files).
        ended: exit code of each rank that ended on its own with a failure, in the order they were seen
            (negative: the signal that killed it); ranks the launcher ended are not in it.
        log: every rank's output, rank-prefixed.
    """
    # SIGTERM is how torchrun ends the survivors of a failure: the cause only when nothing else failed
    killed = [rank for rank, code in ended.items() if code < 0 and code != -signal.SIGTERM]
    if killed:
        rank = killed[0]
        others = sorted(set(ended) - {rank} | {int(p.stem.split("_")[1]) for p in work.glob("error_*.txt")})
        then = (f" (then rank{'s' if len(others) > 1 else ''} {', '.join(map(str, others))} failed as a consequence)"
                if others else "")
        site = crash_site(work, rank)
        return rank, (f"rank {rank} {signal_cause(ended[rank])}{then}; the other ranks were ended."
                      + (f"\nIt was {site}." if site else "") + _last_lines(log, rank))
    timeouts = sorted(work.glob("timeout_*.txt"), key=lambda path: path.stat().st_mtime_ns)
    if timeouts:
        return _timed_out(timeouts, log)
    first = first_error(work, log)
    if first is not None:
        return first
    if ended:
        rank, code = next(iter(ended.items()))
        return rank, (f"rank {rank} {signal_cause(code)} without a Python traceback; the other ranks were ended."
                      + _last_lines(log, rank))
    return None
