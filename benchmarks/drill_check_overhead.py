"""What `harness drill check` costs beyond the answer's own work: the warm checker against a cold check.

For a few drills (a multiple-choice letter, small write drills, a DDP drill) the script measures:
- the answer's own work: loading the answer and running the drill's probe in this process, imports done;
- a cold check: `harness drill check` with HARNESS_DRILL_CHECKER=inline (the command imports torch and the bank,
  then forks the answer's process and the judge's, as every check did before the warm checker);
- a warm check: `harness drill check` answered by the warm checker, started by an earlier check.
Each is the median of `--repeats` runs, interleaved. The overhead is the warm check's wall time minus the
answer's own work; the goal is about 1 s at most on a quiet 2-core machine.

    .venv/bin/python benchmarks/drill_check_overhead.py [--repeats 5]

It prints the table and writes `build/bench/drill_check_overhead.csv` and the machine record beside it.
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

from harness.contract.case import Case
from harness.drills.core import get_drill
from harness.speed import machine_record, report_results

DRILLS = ("tensors-broadcast-shape", "tensors-pairwise-distances", "loop-train-step", "ddp-global-accuracy")
GOAL_S = 1.0


def _own_work(drill_id: str) -> float:
    """Seconds to load the reference answer and run the probe here (0 for an explain drill, which never runs)."""
    drill = get_drill(drill_id)
    if drill.probe is None:
        return 0.0
    began = time.perf_counter()
    namespace: dict = {"__name__": "answer"}
    exec(compile(drill.solution, "<answer>", "exec"), namespace)  # noqa: S102 (the bank's own reference)
    drill.probe(namespace, case=Case(seed=1))
    return time.perf_counter() - began


def _check_seconds(drill_id: str, answer: Path, env: dict[str, str]) -> float:
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "harness", "drill", "check", drill_id, "--file", str(answer)],
                          capture_output=True, text=True, env=env, timeout=600)
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        raise RuntimeError(f"{drill_id}: the reference did not pass:\n{done.stdout}{done.stderr}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        warm = {**os.environ, "HARNESS_HOME": home}
        warm.pop("HARNESS_DRILL_CHECKER", None)
        cold = {**warm, "HARNESS_DRILL_CHECKER": "inline"}
        rows = []
        try:
            for drill_id in DRILLS:
                answer = Path(home) / f"{drill_id}.py"
                answer.write_text(get_drill(drill_id).solution)
                _check_seconds(drill_id, answer, warm)  # starts the warm checker (not timed)
                times: dict[str, list[float]] = {"work": [], "cold": [], "warm": []}
                for _ in range(args.repeats):
                    times["work"].append(_own_work(drill_id))
                    times["cold"].append(_check_seconds(drill_id, answer, cold))
                    times["warm"].append(_check_seconds(drill_id, answer, warm))
                work, cold_s, warm_s = (statistics.median(times[k]) for k in ("work", "cold", "warm"))
                rows.append({"drill": drill_id, "kind": get_drill(drill_id).kind, "own_work_s": round(work, 3),
                             "cold_check_s": round(cold_s, 3), "warm_check_s": round(warm_s, 3),
                             "overhead_s": round(warm_s - work, 3), "goal_met": warm_s - work <= GOAL_S})
        finally:
            subprocess.run([sys.executable, "-m", "harness", "drill", "stop-checker"], env=warm, capture_output=True)
    report_results(pd.DataFrame(rows), "drill_check_overhead", machine_record(),
                   title="harness drill check: overhead beyond the answer's own work (median seconds)")


if __name__ == "__main__":
    main()
