"""`benchmarks/gpu_verify.py`, the one command a lent GPU runs: its dry run on this CPU, so the real run cannot fail
on a typo, and its steps' outcomes (a failure or a hang is reported and the next step still runs)."""

import importlib.util
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_verify.py"


def _load():
    spec = importlib.util.spec_from_file_location("gpu_verify", SCRIPT)
    module = sys.modules["gpu_verify"] = importlib.util.module_from_spec(spec)  # dataclasses look it up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_dry_run_runs_every_step_a_cpu_can_and_writes_its_summary(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--dry", "--out", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = (tmp_path / "summary.md").read_text()
    rows = {line.split(" | ")[0].lstrip("| "): line for line in summary.splitlines()[4:]}
    steps = _load().steps(tmp_path / "work")
    assert set(rows) == {step.name for step in steps}
    for step in steps:
        expected = "| skipped |" if step.dry is None else "| passed |"
        assert expected in rows[step.name], rows[step.name]
        if step.dry is None:
            assert "needs a CUDA device" in rows[step.name]
    log = (tmp_path / "gpu_verify.log").read_text()
    assert log.startswith("# GPU verification (dry run)\ncommit: ")
    assert "torch: " in log and "nvidia-smi:" in log and "harness env:" in log and "precision:" in log
    with tarfile.open(tmp_path / "work.tar.gz") as archive:
        names = {Path(name).name for name in archive.getnames()}
    assert {"gpu_precision.csv", "gpu_speedrun.csv", "gpu_speedrun_accuracy.csv", "engine_overhead.csv"} <= names
    assert not (tmp_path / "work").exists()  # packed: the device tool brings back at most 8 files


def test_a_failed_hung_or_unmet_step_is_reported_without_raising(tmp_path):
    verify = _load()
    log = open(tmp_path / "gpu_verify.log", "w")  # a real file: the steps' output goes straight to it
    py = sys.executable

    def outcome(step, dry=False, seconds_left=60.0):
        return verify.run_step(step, dry, seconds_left, log)

    failed = outcome(verify.Step("exits 3", (py, "-c", "raise SystemExit(3)"), 30, needs=()))
    assert (failed.status, failed.detail) == ("failed", "exit status 3 (the log has its output)")
    hung = outcome(verify.Step("sleeps", (py, "-c", "import time; time.sleep(60)"), 1, needs=()))
    assert hung.status == "timed out" and hung.seconds < 30
    unmet = outcome(verify.Step("needs", (py, "-c", "pass"), 30, needs=("no_such_package_xyz", "bin:no-such-program")))
    assert unmet.status == "skipped"
    assert unmet.detail == "needs the Python package no_such_package_xyz, the program no-such-program"
    spent = outcome(verify.Step("late", (py, "-c", "pass"), 30, needs=()), seconds_left=2)
    assert (spent.status, spent.detail) == ("skipped", "the total time budget is spent")
    no_dry = outcome(verify.Step("gpu only", (py, "-c", "pass"), 30), dry=True)
    assert (no_dry.status, no_dry.detail) == ("skipped", "needs a CUDA device (no dry form)")
    assert outcome(verify.Step("fine", (py, "-c", "pass"), 30, needs=())).status == "passed"
    table = verify.summary_table([failed, hung, unmet], dry=False, total=12.0)
    assert table.startswith("GPU verification: 0 passed, 1 failed, 1 timed out, 1 skipped, 12 s in all.")
