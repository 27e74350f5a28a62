"""A drill re-checked back to back: a cold check, a warm one, and a warm one with a new runner per answer.

A candidate fixes a line and checks again at once. The script times `harness drill check` on the reference
answer of write drills, through the real command, three ways:
- cold: no checker running (`stop-checker` first), so the check starts the warm checker, which imports torch and
  the bank and starts its runner;
- warm: checks back to back, each right after the last, answered by the warm checker: each answer is a child
  forked from its warm runner (`harness.drills.pool`);
- new runner per answer: the same, with `HARNESS_DRILL_RUNNER_USES=1`, so each answer waits for the spare runner
  that imported torch while the previous answer ran (how every check ran before the warm runner).
It reports the median and the spread (min to max) of each, the ratio cold / warm, and whether the warm median
is under the goal (2 s on a 2-core machine).

    .venv/bin/python benchmarks/drill_recheck.py [--repeats 7] [--cold-repeats 3]

It prints the table and writes `build/bench/drill_recheck.csv` and the machine record beside it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from harness.drills.core import get_drill
from harness.speed import machine_record, report_results

DRILLS = ("tensors-logsumexp", "loop-train-step")
GOAL_S = 2.0


def _check_seconds(drill_id: str, answer: Path, env: dict[str, str]) -> float:
    """Wall seconds of one `harness drill check` of `answer`; RuntimeError when the reference does not pass."""
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "harness", "drill", "check", drill_id, "--file", str(answer)],
                          capture_output=True, text=True, env=env, timeout=900)
    seconds = time.perf_counter() - began
    if done.returncode != 0 or "PASSED" not in done.stdout:
        raise RuntimeError(f"{drill_id}: the reference did not pass:\n{done.stdout}{done.stderr}")
    return seconds


def _stop(env: dict[str, str]) -> None:
    subprocess.run([sys.executable, "-m", "harness", "drill", "stop-checker"], env=env, capture_output=True,
                   timeout=120)


def _back_to_back(drill_id: str, answer: Path, env: dict[str, str], repeats: int) -> list[float]:
    """`repeats` checks, each right after the last, on a checker an untimed check started."""
    _stop(env)
    _check_seconds(drill_id, answer, env)
    return [_check_seconds(drill_id, answer, env) for _ in range(repeats)]


def _cold(drill_id: str, answer: Path, env: dict[str, str], repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        _stop(env)
        times.append(_check_seconds(drill_id, answer, env))
    return times


def _summary(prefix: str, times: list[float]) -> dict[str, float]:
    return {f"{prefix}_median_s": round(statistics.median(times), 3), f"{prefix}_min_s": round(min(times), 3),
            f"{prefix}_max_s": round(max(times), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="warm checks per drill and way")
    parser.add_argument("--cold-repeats", type=int, default=3, help="cold checks per drill")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as home:
        warm = {**os.environ, "HARNESS_HOME": home, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        for name in ("HARNESS_DRILL_CHECKER", "HARNESS_DRILL_RUNNER_USES", "XDG_RUNTIME_DIR"):
            warm.pop(name, None)
        fresh_runner = {**warm, "HARNESS_DRILL_RUNNER_USES": "1"}
        try:
            for drill_id in DRILLS:
                answer = Path(home) / f"{drill_id}.py"
                answer.write_text(get_drill(drill_id).solution)
                cold = _cold(drill_id, answer, warm, args.cold_repeats)
                forked = _back_to_back(drill_id, answer, warm, args.repeats)
                before = _back_to_back(drill_id, answer, fresh_runner, args.repeats)
                rows.append({"drill": drill_id, **_summary("cold", cold), **_summary("warm", forked),
                             **_summary("new_runner", before),
                             "cold_over_warm": round(statistics.median(cold) / statistics.median(forked), 1),
                             "new_runner_over_warm": round(statistics.median(before) / statistics.median(forked), 1),
                             "goal_met": statistics.median(forked) < GOAL_S})
        finally:
            _stop(warm)
    report_results(pd.DataFrame(rows), "drill_recheck", machine_record(),
                   title=f"harness drill check back to back: cold, warm, new runner per answer (seconds; goal: "
                         f"warm median under {GOAL_S:.0f} s)")


if __name__ == "__main__":
    main()
