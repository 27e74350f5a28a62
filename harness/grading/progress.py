"""Progress while a class is graded: one line per finished submission, with an estimate of the time left.

`Progress` is the `on_result` of a batch or a shard, whatever runs the jobs (the local pool or Dask):

    took 35 s, about 4 min left | graded 3/10: alice ok 14.0/14

The estimate is the wall time per finished submission so far (which already includes the parallelism of
the workers) times the submissions left.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from harness.grading.jobs import GradeResult


def progress_line(done: int, total: int, result: GradeResult) -> str:
    """`graded 3/10: alice ok 14.0/14`."""
    points = sum(score for score, _ in result.scores.values())
    maximum = sum(top for _, top in result.scores.values())
    return f"graded {done}/{total}: {result.student} {result.status} {points:.1f}/{maximum:g}"


def duration(seconds: float) -> str:
    """`42 s`, `3 min`, `1 h 20 min`."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds // 3600:.0f} h {seconds % 3600 / 60:.0f} min"


def print_now(line: str) -> None:
    """Print `line` at once, also when the output is a pipe or a file (a scheduler's log)."""
    print(line, flush=True)


class Progress:
    """Reports each finished submission of a batch of `total`, from any thread (the pool calls it from its own)."""

    def __init__(self, total: int, report: Callable[[str], None] = print_now) -> None:
        """Count from now; `report` gets one line per finished submission."""
        self.total, self.report = total, report
        self.done = 0
        self.started = time.perf_counter()
        self._lock = threading.Lock()

    def __call__(self, result: GradeResult) -> None:
        """Report `result`: how long it took, the time left and the student's grade."""
        with self._lock:
            self.done += 1
            elapsed = time.perf_counter() - self.started
            left = self.total - self.done
            estimate = f"about {duration(elapsed / self.done * left)} left" if left else "all graded"
            self.report(f"took {duration(result.seconds)}, {estimate} | "
                        f"{progress_line(self.done, self.total, result)}")
