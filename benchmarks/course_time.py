"""The time of `make course` once set up: `python -m harness course` end to end, its wall time, its CPU time and
the showcase's share of both, with the machine's load average while it ran.

Wall time on a shared machine says more about the other work than about the course; CPU time does not. The CPU
time is read from a cpuacct cgroup made for the run where this process may make one (root, cgroup v1: every
process of the course counts, sandboxed kernels included), else from the reaped children's rusage (which misses
kernels that bubblewrap does not hand back). On an idle machine with N cores the course takes at least its CPU
time divided by N; `cpu_s / 2` is that bound for the 2-core machine.

    .venv/bin/python benchmarks/course_time.py [--lessons LESSON ...] [--out build/bench]

Writes `build/bench/course_time.csv` with the machine record.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from harness.grading.layout import REPO_ROOT
from harness.speed import machine_record, report_results

CPUACCT = Path("/sys/fs/cgroup/cpuacct")


class CpuClock:
    """CPU seconds used by the course's processes: a cpuacct group of their own where one can be made, else the
    rusage of reaped children."""

    def __init__(self) -> None:
        self.group: Path | None = None
        try:
            group = CPUACCT / f"harness-course-time-{os.getpid()}"
            group.mkdir()
            self.group = group
        except OSError:
            self._start = self._children()

    @property
    def source(self) -> str:
        return "cpuacct cgroup" if self.group else "rusage of reaped children (undercounts sandboxed kernels)"

    def join(self) -> Callable[[], None] | None:
        """A preexec_fn that moves the started process into the group (None without a group)."""
        if self.group is None:
            return None
        procs = self.group / "cgroup.procs"
        return lambda: procs.write_text(str(os.getpid()))

    def seconds(self) -> float:
        if self.group is not None:
            return int((self.group / "cpuacct.usage").read_text()) / 1e9
        return self._children() - self._start

    def close(self) -> None:
        if self.group is not None:
            self.group.rmdir()

    @staticmethod
    def _children() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime


def sample_load(samples: list[float], stop: threading.Event, every: float = 5.0) -> None:
    """Append the 1-minute load average every `every` seconds until `stop` is set."""
    while not stop.is_set():
        samples.append(os.getloadavg()[0])
        stop.wait(every)


def time_course(lessons: list[str]) -> dict[str, float | str]:
    """Run `python -m harness course` into a temporary folder; its wall and CPU seconds, the showcase's (from its
    first printed line to the end), and the load average's range while it ran."""
    clock, loads, stop = CpuClock(), [], threading.Event()
    sampler = threading.Thread(target=sample_load, args=(loads, stop), daemon=True)
    showcase_wall = showcase_cpu = None
    try:
        with tempfile.TemporaryDirectory(prefix="bench-course-") as tmp:
            command = [sys.executable, "-m", "harness", "course", "--out", str(Path(tmp) / "course"), *(
                ["--lessons", *lessons] if lessons else [])]
            started = time.perf_counter()
            with subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True,
                                  preexec_fn=clock.join()) as course:
                sampler.start()  # after the fork: preexec_fn runs in the child, best with one thread here
                for line in course.stdout:
                    print(line, end="", flush=True)
                    if line.startswith("showcase: training") and showcase_wall is None:
                        showcase_wall, showcase_cpu = time.perf_counter(), clock.seconds()
            wall, cpu = time.perf_counter() - started, clock.seconds()
            if course.returncode != 0:
                raise SystemExit(f"harness course exited with {course.returncode}")
    finally:
        stop.set()
        if sampler.is_alive():
            sampler.join()
        clock.close()
    return {"wall_s": wall, "cpu_s": cpu, "idle_2_cores_s": cpu / 2,
            "showcase_wall_s": wall - (showcase_wall - started) if showcase_wall else None,
            "showcase_cpu_s": cpu - showcase_cpu if showcase_cpu is not None else None,
            "load_min": min(loads), "load_mean": statistics.fmean(loads), "load_max": max(loads),
            "cpu_source": clock.source}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lessons", nargs="*", default=[], help="lessons to run (default: all)")
    parser.add_argument("--out", default="build/bench", help="folder for the CSV and the machine record")
    args = parser.parse_args()
    result = time_course(args.lessons)
    if result["showcase_cpu_s"] is not None:
        result["showcase_cpu_share"] = result["showcase_cpu_s"] / result["cpu_s"]
    frame = pd.DataFrame([result])
    report_results(frame.drop(columns="cpu_source"), "course_time", machine_record("cpu"), args.out,
                   title=f"harness course (make course once set up); CPU time from the {result['cpu_source']}")


if __name__ == "__main__":
    main()
