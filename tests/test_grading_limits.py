"""The whole-submission limit keeps earned points, and a worker's failure is explained by what was observed."""

from __future__ import annotations

import signal
from pathlib import Path

import nbformat
import pytest

from harness.grading.batch import GRACE_SECONDS, Limits, grade_batch, worker_failure
from harness.grading.release import answered_release
from harness.grading.submissions import Submission

ASSIGNMENT = "00_welcome"
LIMIT = 25


@pytest.mark.slow
def test_the_whole_submission_limit_stops_execution_and_keeps_the_points_earned(tmp_path):
    # every cell stays under the per-cell limit (120 s), but the last exercise would take the submission past LIMIT
    # (the cells before it take a few seconds)
    notebook = answered_release(ASSIGNMENT)
    last = next(c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "00-accuracy-code")
    last.source = "import time\ntime.sleep(300)\n" + last.source
    path = tmp_path / "in" / "slow" / f"{ASSIGNMENT}.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(notebook, path)
    [result] = grade_batch([Submission("slow", path)], ASSIGNMENT, tmp_path / "out", workers=1,
                           limits=Limits(cell_timeout=120, submission_seconds=LIMIT), secret=bytes(range(32)))
    assert result["status"] == "flagged", result
    assert {task: score for task, (score, _) in result["scores"].items()} == {
        "00-make-batch": 1.0, "00-count-params": 2.0, "00-accuracy": 0.0}
    assert any("00-accuracy-code" in r and "whole-submission limit was reached here" in r for r in result["reasons"])
    assert result["seconds"] < LIMIT + GRACE_SECONDS
    assert list((tmp_path / "out" / "feedback" / "slow" / ASSIGNMENT).glob("*.html"))


def test_a_kill_the_batch_did_not_send_is_not_called_a_time_limit():
    log = Path("logs/x.log")
    killed = worker_failure(-signal.SIGKILL, stopped=False, seconds=21.3, log_path=log)
    assert killed.startswith("the grader was killed by SIGKILL after 21 s, not by the batch (the out-of-memory")
    assert "limit" not in killed
    assert worker_failure(-signal.SIGTERM, stopped=False, seconds=5, log_path=log).startswith(
        "the grader was killed by SIGTERM after 5 s")
    assert worker_failure(1, stopped=False, seconds=3, log_path=log).startswith("the grader crashed (exit 1)")
    stopped = worker_failure(-signal.SIGKILL, stopped=True, seconds=962, log_path=log)
    assert stopped.startswith("grading was stopped after 962 s") and f"more than {GRACE_SECONDS} s" in stopped
