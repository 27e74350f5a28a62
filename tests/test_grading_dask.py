"""Grading on a Dask cluster gives the local pool's grades, and survives a worker killed mid-batch.

One module-scoped batch (lesson 00_welcome, two students: one correct, one with a planted bug) is graded
once through the local pool as the reference, then on a real `LocalCluster` of two worker processes: once
through `harness grade --dask ADDRESS`, once with one worker process killed (SIGKILL, with the grader it
started, as when a machine is lost) while it grades.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
import psutil
import pytest
from gradebook_readers import gradebook_scores, grades_rows

from harness.cli import main
from harness.grading.batch import Limits, grade_batch, jobs_run_by
from harness.grading.jobs import GradeResult
from harness.grading.release import answered_release
from harness.grading.submissions import Submission, collect
from harness.grading.summary import write_summary

distributed = pytest.importorskip("distributed")
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("dask")]

ASSIGNMENT = "00_welcome"
SECRET = bytes(range(32))
LIMITS = Limits(cell_timeout=60, submission_seconds=300, memory_mb=3072, max_output_bytes=100 * 1024)
WRONG_ACCURACY = "def accuracy(logits, targets):\n    return (logits.argmin(dim=1) == targets).float().mean().item()\n"
STUDENTS = {"amy": {}, "bo": {"00-accuracy": WRONG_ACCURACY}}


@dataclass(frozen=True)
class Reference:
    """The batch's submissions, and its grading through the local pool."""

    source: Path
    submissions: list[Submission]
    out: Path
    progress: list[str]  # each student's part of the progress line: "bo ok 3.0/5"
    results: dict[str, GradeResult]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Reference:
    root = tmp_path_factory.mktemp("dask")
    for name, bugs in STUDENTS.items():
        (root / "in" / name).mkdir(parents=True)
        nbformat.write(answered_release(ASSIGNMENT, bugs), root / "in" / name / f"{ASSIGNMENT}.ipynb")
    submissions = collect(root / "in", ASSIGNMENT)
    results = grade_batch(submissions, ASSIGNMENT, root / "local", workers=2, limits=LIMITS, secret=SECRET)
    write_summary(results, root / "local", ASSIGNMENT)
    progress = [f"{r['student']} {r['status']} {sum(s for s, _ in r['scores'].values()):.1f}/"
                f"{sum(m for _, m in r['scores'].values()):g}" for r in results]
    return Reference(root / "in", submissions, root / "local", progress,
                     {r["student"]: GradeResult(**r) for r in results})


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                  dashboard_address=None) as local:
        yield local


def test_the_dask_path_gives_the_gradebook_and_csv_of_the_local_pool(reference, cluster, tmp_path, capsys):
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET.hex())
    status = main(["grade", str(reference.source), "--assignment", ASSIGNMENT, "--dask", cluster.scheduler_address,
                   "--out", str(tmp_path / "out"), "--secret-file", str(secret_file), "--timeout", "60",
                   "--submission-limit", "300", "--memory-mb", "3072", "--max-output-kb", "100"])
    out = capsys.readouterr().out
    assert status == 0, out
    for student in reference.progress:
        assert f": {student}\n" in out, out
    assert [f"graded {i}/{len(STUDENTS)}: " in out for i in range(1, len(STUDENTS) + 1)] == [True] * len(STUDENTS), out
    assert (gradebook_scores(tmp_path / "out" / "gradebook.db", ASSIGNMENT)
            == gradebook_scores(reference.out / "gradebook.db", ASSIGNMENT))
    assert grades_rows(tmp_path / "out" / "grades.csv") == grades_rows(reference.out / "grades.csv")
    assert not list((tmp_path / "out").glob("harness-batch-*"))  # the template course, made in --out, is gone


def test_a_shard_graded_on_dask_records_the_local_pools_result(reference, cluster, tmp_path, capsys):
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET.hex())
    status = main(["grade", str(reference.source), "--assignment", ASSIGNMENT, "--dask", cluster.scheduler_address,
                   "--shard", "1/3", "--out", str(tmp_path / "shard"), "--secret-file", str(secret_file),
                   "--timeout", "60", "--submission-limit", "300", "--memory-mb", "3072", "--max-output-kb", "100"])
    out = capsys.readouterr().out
    assert status == 0 and "graded 1/1: bo " in out, out
    assert [p.name for p in (tmp_path / "shard" / "results").iterdir()] == ["bo.json"]
    recorded = GradeResult.from_json((tmp_path / "shard" / "results" / "bo.json").read_text())
    assert recorded.same_grade(reference.results["bo"]), (recorded, reference.results["bo"])


def _kill_a_grading_worker(address: str, stop: threading.Event, killed: list[int]) -> None:
    """Once a worker has been grading for a few seconds, SIGKILL it and the grader it started."""
    with distributed.Client(address) as client:
        pids = client.run(os.getpid)
        while not stop.is_set():
            busy = [worker for worker, keys in client.processing().items() if keys]
            if busy:
                time.sleep(4)  # its autograde process is running the notebook
                if not client.processing()[busy[0]]:
                    continue
                worker = psutil.Process(pids[busy[0]])
                children = worker.children(recursive=True)
                os.kill(worker.pid, signal.SIGKILL)
                for child in children:
                    child.kill()
                killed.append(worker.pid)
                return
            time.sleep(0.2)


def test_a_worker_killed_mid_batch_still_grades_every_student_once(reference, cluster, tmp_path, capsys):
    from harness.grading.cluster import DaskRunner

    stop, killed = threading.Event(), []
    killer = threading.Thread(target=_kill_a_grading_worker, args=(cluster.scheduler_address, stop, killed))
    lines: list[str] = []
    with distributed.Client(cluster.scheduler_address) as client, jobs_run_by(DaskRunner(client, lines.append)):
        killer.start()
        try:
            results = grade_batch(reference.submissions, ASSIGNMENT, tmp_path / "out", workers=2, limits=LIMITS,
                                  secret=SECRET)
        finally:
            stop.set()
            killer.join()
    assert killed, "no worker was killed while grading"
    assert [r["student"] for r in results] == sorted(STUDENTS)
    assert len(lines) == len(STUDENTS) and lines[-1].startswith(f"graded {len(STUDENTS)}/{len(STUDENTS)}: "), lines
    assert all(r["status"] in ("ok", "flagged") for r in results), results
    assert (gradebook_scores(tmp_path / "out" / "gradebook.db", ASSIGNMENT)
            == gradebook_scores(reference.out / "gradebook.db", ASSIGNMENT))
