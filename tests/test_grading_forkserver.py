"""The grading fork server (harness.grading.forkserver): one server per process forks a worker per job; a worker
that crashes, is killed or exits becomes that student's row; a server that dies is said aloud and its jobs are
graded again in fresh processes; a batch after the harness's code changed gets a new server.

The workers here are real forked workers grading real jobs. A worker that must stay alive until the test acts
waits on its submitted notebook, a FIFO nobody has opened for writing yet (the template course is the few files
the worker opens before the notebook)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import psutil

from harness.grading import batch
from harness.grading.batch import batch_server, grade_jobs
from harness.grading.jobs import GradeJob, GradeResult

ASSIGNMENT = "00_welcome"
FORKED = re.compile(r"\[fork server\] worker (\d+) forked from the grading fork server (\d+)")


def _template(folder: Path) -> Path:
    """What a worker reads of a template course before it opens the submitted notebook."""
    (folder / "notebooks" / ASSIGNMENT).mkdir(parents=True)
    (folder / "notebooks" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").write_text("{}")
    (folder / "solutions" / ASSIGNMENT).mkdir(parents=True)
    (folder / "gradebook.db").write_bytes(b"")
    return folder


def _job(tmp_path: Path, student: str, *, waits: bool = False, version: int = 1) -> GradeJob:
    """A job whose worker waits on a FIFO notebook (`waits`), or one with no notebook (graded "missing")."""
    notebook = tmp_path / f"{student}.ipynb"
    if waits:
        os.mkfifo(notebook)
    return GradeJob(student=student, assignment=ASSIGNMENT, notebook=str(notebook) if waits else None,
                    problem=None if waits else {"status": "missing", "reason": "no notebook was submitted"},
                    notes=[], template=str(_template(tmp_path / f"template-{student}")), out=str(tmp_path / "out"),
                    timeout=30, submission_seconds=60, memory_mb=0, threads=1, max_output_bytes=1000,
                    sandboxed=False, data_dir=str(tmp_path), cases={}, private_mounts=os.geteuid() == 0,
                    version=version)


def _forked(log: Path, timeout: float = 300) -> tuple[int, int]:
    """(worker pid, server pid) from a forked worker's log, once it has written it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.is_file() and (match := FORKED.search(log.read_text())):
            return int(match.group(1)), int(match.group(2))
        time.sleep(0.1)
    raise AssertionError(f"no forked worker wrote {log}")


def _grade_in_background(jobs: list[GradeJob], workdir: Path, workers: int) -> tuple[threading.Thread, list]:
    results: list[list[GradeResult]] = []
    thread = threading.Thread(target=lambda: results.append(grade_jobs(jobs, workdir, workers, 60)))
    thread.start()
    return thread, results


def test_one_server_forks_a_worker_per_job_and_a_crashed_killed_or_exited_worker_is_a_row(tmp_path):
    workdir, logs = tmp_path / "jobs", tmp_path / "out" / "logs"
    workdir.mkdir()
    jobs = [_job(tmp_path, "segfault", waits=True), _job(tmp_path, "oom", waits=True),
            _job(tmp_path, "exits", version=99),  # its worker refuses the record: a worker that exits with 1
            _job(tmp_path, "missing1"), _job(tmp_path, "missing2")]
    thread, results = _grade_in_background(jobs, workdir, workers=len(jobs))
    segfault, server = _forked(logs / "segfault.log")
    oom, _ = _forked(logs / "oom.log")
    os.kill(segfault, signal.SIGSEGV)
    os.kill(oom, signal.SIGKILL)  # what the out-of-memory killer sends
    thread.join(timeout=300)
    rows = {r.student: r for r in results[0]}

    assert "killed by SIGSEGV" in rows["segfault"].reasons[0] and "not by the batch" in rows["segfault"].reasons[0]
    assert "killed by SIGKILL" in rows["oom"].reasons[0] and "out-of-memory killer" in rows["oom"].reasons[0]
    assert "the grader crashed (exit 1)" in rows["exits"].reasons[0]
    assert "ContractError" in (logs / "exits.log").read_text()
    assert {r.status for r in rows.values()} == {"error", "missing"}
    assert [rows[s].status for s in ("missing1", "missing2")] == ["missing", "missing"]
    forks = [_forked(logs / f"{job.student}.log") for job in jobs]
    assert {parent for _, parent in forks} == {server} and server != os.getpid()  # one server for the batch
    assert len({worker for worker, _ in forks}) == len(jobs) and server not in {w for w, _ in forks}
    grade_jobs([_job(tmp_path, "next-batch")], workdir, 1, 60)  # the process's next batch: the same server
    assert _forked(logs / "next-batch.log")[1] == server


def test_a_server_that_dies_is_named_and_its_jobs_are_graded_again_in_fresh_processes(tmp_path, capsys):
    workdir, logs = tmp_path / "jobs", tmp_path / "out" / "logs"
    workdir.mkdir()
    jobs = [_job(tmp_path, "inflight", waits=True), _job(tmp_path, "queued")]
    thread, results = _grade_in_background(jobs, workdir, workers=1)
    worker, server = _forked(logs / "inflight.log")
    os.kill(server, signal.SIGKILL)
    deadline = time.monotonic() + 120
    while "graded in a fresh process" not in (logs / "inflight.log").read_text():
        assert time.monotonic() < deadline, "the in-flight job was not graded again"
        time.sleep(0.1)
    with open(tmp_path / "inflight.ipynb", "w") as fifo:  # now the fresh worker reads it
        fifo.write("not a notebook")
    thread.join(timeout=300)
    inflight, queued = results[0]

    assert f"the grading fork server (pid {server}) was killed by SIGKILL" in capsys.readouterr().out
    assert inflight.status == "invalid" and "not valid notebook JSON" in inflight.reasons[0]
    assert queued.status == "missing" and "graded in a fresh process" in (logs / "queued.log").read_text()
    assert not psutil.pid_exists(worker) or psutil.Process(worker).status() == psutil.STATUS_ZOMBIE  # ended
    grade_jobs([_job(tmp_path, "next-batch")], workdir, 1, 60)  # the next batch starts another server
    assert _forked(logs / "next-batch.log")[1] not in (server, os.getpid())


def test_a_batch_after_the_harness_code_changed_gets_a_new_server(tmp_path, capsys, monkeypatch):
    """An instructor who edits a check between two batches of one session grades the second with the new code. The
    package folder the stamp reads is a scratch one here: touching the real package would restart the servers of
    the suite's other processes."""
    package = tmp_path / "package"
    (package / "checks").mkdir(parents=True)
    (module := package / "checks" / "task.py").write_text("")
    monkeypatch.setattr(batch, "HARNESS_CODE", package)
    workdir, logs = tmp_path / "jobs", tmp_path / "out" / "logs"
    workdir.mkdir()
    grade_jobs([_job(tmp_path, "before")], workdir, 1, 60)
    grade_jobs([_job(tmp_path, "unchanged")], workdir, 1, 60)
    first = _forked(logs / "before.log")[1]
    assert _forked(logs / "unchanged.log")[1] == first  # nothing changed: the same server
    capsys.readouterr()
    os.utime(module, ns=(time.time_ns(), time.time_ns() + 10**9))  # saved again, as an editor does
    grade_jobs([_job(tmp_path, "after")], workdir, 1, 60)
    second = _forked(logs / "after.log")[1]

    assert second not in (first, os.getpid())
    assert "the harness's code changed since the grading fork server started" in capsys.readouterr().out
    assert not psutil.pid_exists(first) or psutil.Process(first).status() == psutil.STATUS_ZOMBIE  # closed


def test_a_server_that_cannot_start_is_said_and_the_batch_uses_fresh_processes(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(batch, "_SERVER", None)  # the process's server not started yet (restored after the test)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python"))
    assert batch_server() is None
    assert "the grading fork server could not start" in capsys.readouterr().out


def test_the_overhead_benchmarks_dry_run_grades_blank_notebooks_both_ways_into_its_csv(tmp_path):
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "grading_overhead.py"
    run = subprocess.run([sys.executable, str(script), "--dry", "--submissions", "1", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    table = pd.read_csv(tmp_path / "grading_overhead.csv")
    assert list(table["mode"]) == ["fresh process", "fork server"]
    assert set(table["statuses"]) == {"not attempted"} and (table["kernel_seconds"] == 0).all()
