"""Grade many submissions in parallel, each in its own worker process, into one gradebook.

The parent builds one template course directory (GenerateAssignment, once), then runs up to `workers`
`harness.grading.autograde` processes at a time, each grading one submission in a private course
directory with a private gradebook. A worker that overruns the whole-submission limit is killed with its
kernel (pid recorded by the sandbox launcher); a worker that crashes gets an "error" result; the batch
goes on either way. Only the parent writes the shared gradebook, through nbgrader's Gradebook API.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.grading.layout import REPO_ROOT, put_environment_tools_on_path
from harness.grading.release import build_course
from harness.grading.submissions import Submission

COURSE_ID = "pytorch-training-lab"
# nbgrader's API keeps process-wide state (logging, configuration): batches graded from several threads
# (harness course) take turns for it; their worker processes still run in parallel.
_NBGRADER_IN_PROCESS = threading.Lock()


@dataclass(frozen=True)
class Limits:
    """Per-submission limits: cell timeout (s), whole-submission wall time (s), kernel memory, output."""

    cell_timeout: int = 120
    submission_seconds: int = 900
    memory_mb: int = 4096
    max_output_bytes: int = 1_000_000


def _kill_group(pid: int) -> None:
    """SIGKILL the process group led by `pid`, if it still exists."""
    if pid <= 1:  # killpg(0 or 1) would signal our own group or init
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_job(job: dict[str, Any], workdir: Path, limit_seconds: int) -> dict[str, Any]:
    """Run one worker process for `job`; always returns a result."""
    name = job["student"]
    job_file, result_file = workdir / f"{name}.job.json", workdir / f"{name}.result.json"
    job_file.write_text(json.dumps(job))
    log_path = Path(job["out"]) / "logs" / f"{name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with log_path.open("w") as log:
        worker = subprocess.Popen([sys.executable, "-m", "harness.grading.autograde", str(job_file), str(result_file)],
                                  stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=workdir)
        try:
            worker.wait(timeout=limit_seconds)
        except subprocess.TimeoutExpired:
            _kill_group(worker.pid)
            worker.wait()
    pidfile = Path(job["pidfile"])
    kernel_pid = pidfile.read_text().strip() if pidfile.exists() else ""
    if kernel_pid.isdigit() and int(kernel_pid) > 1:  # the kernel runs in its own session: a killed worker leaves it
        _kill_group(int(kernel_pid))
    base = {"student": name, "assignment": job["assignment"], "scores": {}, "failures": {},
            "seconds": time.perf_counter() - started}
    if result_file.exists():
        return json.loads(result_file.read_text())
    if worker.returncode == -signal.SIGKILL:
        return {**base, "status": "error", "reasons": [f"grading exceeded the whole-submission limit of "
                                                        f"{limit_seconds} s and was stopped"]}
    return {**base, "status": "error", "reasons": [f"the grader crashed (exit {worker.returncode}); see {log_path}"]}


def make_jobs(submissions: list[Submission], assignment: str, template: Path, out: Path, workdir: Path,
              limits: Limits, workers: int) -> list[dict[str, Any]]:
    """The worker jobs of a batch (JSON-serialisable)."""
    threads = max(1, (os.cpu_count() or 1) // workers)
    return [{"student": s.student, "assignment": assignment, "notebook": str(s.notebook) if s.notebook else None,
             "problem": s.problem, "notes": s.notes, "template": str(template), "out": str(out),
             "timeout": limits.cell_timeout, "memory_mb": limits.memory_mb, "threads": threads,
             "max_output_bytes": limits.max_output_bytes, "pidfile": str(workdir / f"{s.student}.kernel.pid")}
            for s in submissions]


def merge_into_gradebook(db_path: Path, template: Path, results: list[dict[str, Any]]) -> None:
    """Record every result's points in the gradebook at `db_path` (created from the template if new)."""
    import shutil

    from nbgrader.api import Gradebook

    if not db_path.exists():
        shutil.copy(template / "gradebook.db", db_path)
    with warnings.catch_warnings(), Gradebook(f"sqlite:///{db_path}", COURSE_ID) as gradebook:
        # nbgrader's own update_or_create_submission trips SQLAlchemy's autoflush warning; the rows are right
        warnings.filterwarnings("ignore", message=".*not in session.*")
        for result in results:
            gradebook.update_or_create_student(result["student"])
            submission = gradebook.update_or_create_submission(result["assignment"], result["student"])
            for notebook in submission.notebooks:
                for grade in notebook.grades:
                    grade.auto_score = result["scores"].get(grade.name, [0.0])[0]
                    grade.needs_manual_grade = False
            gradebook.db.commit()


def grade_batch(submissions: list[Submission], assignment: str, out: Path, *, workers: int = 2,
                limits: Limits = Limits(), repo_root: Path = REPO_ROOT) -> list[dict[str, Any]]:
    """Grade `submissions` of `assignment` over `workers` processes; results in submission order.

    Writes `out`/gradebook.db, `out`/feedback/<student>/<assignment>/ (hidden tests stripped),
    `out`/autograded/ (the instructor's view) and `out`/logs/.
    """
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    students = [s.student for s in submissions]
    if len(set(students)) != len(students):
        raise ValueError(f"two submissions share a student id: {sorted({s for s in students if students.count(s) > 1})}")
    put_environment_tools_on_path()
    # absolute paths only: nbgrader changes the process's working directory while it generates, and other
    # threads (harness course grades two assignments at a time) must not resolve paths against it
    out = out.resolve()
    submissions = [replace(s, notebook=s.notebook.resolve()) if s.notebook else s for s in submissions]
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="harness-batch-") as tmp:
        template, workdir = Path(tmp) / "template", Path(tmp) / "jobs"
        template.mkdir()
        workdir.mkdir()
        with _NBGRADER_IN_PROCESS:
            build_course(template, [assignment], repo_root)
        jobs = make_jobs(submissions, assignment, template, out, workdir, limits, workers)
        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(lambda job: run_job(job, workdir, limits.submission_seconds), jobs))
        with _NBGRADER_IN_PROCESS:
            merge_into_gradebook(out / "gradebook.db", template, results)
    return results
