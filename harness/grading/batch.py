"""Grade many submissions in parallel, each in its own worker process, into one gradebook.

The parent builds one template course directory (GenerateAssignment, once), draws every submission's
hidden cases from the instructor's secret (`harness.judge`), then runs up to `workers`
`harness.grading.autograde` workers at a time, each grading one submission in a private course
directory with a private gradebook and its kernel in the sandbox. The workers are forked by a fork server that
imported the grader once (`forkserver`), the process's, kept for its later batches; where it cannot start, or
dies, they are fresh processes, and the batch says so (the next batch starts another). A worker stops executing
the notebook at the whole-submission limit and keeps the points of the cells that ran; one still running a grace period
later is killed with every process under it (the sandbox's PID namespace dies with it); a worker that
crashes or is killed gets an "error" result that says what was observed; the batch goes on either way.
Only the parent writes the shared gradebook, through nbgrader's Gradebook API, into a fresh copy that then
replaces the old one. A worker gets a `GradeJob` record and answers with a `GradeResult` (`jobs`);
`shards` runs the same jobs over one slice of a class, `merge` joins the slices. Within `jobs_run_by`, the
jobs go to another runner instead of the local pool (`cluster`: a Dask cluster), the rest unchanged.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.data.vision import data_root
from harness.grading import cgroup, sandbox
from harness.grading.forkserver import ForkServer, ServerGone, ServerUnavailable, WorkerCall
from harness.grading.jobs import GradeJob, GradeResult, write_atomically
from harness.grading.layout import REPO_ROOT, graded_points, put_environment_tools_on_path
from harness.grading.release import build_course
from harness.grading.runtime_folder import private_mounts_available, worker_prefix
from harness.grading.similarity import save_answers
from harness.grading.submissions import Submission, notebook_sha256
from harness.judge.cases import draw_cases
from harness.launch import end_process_tree

COURSE_ID = "pytorch-training-lab"
RESULTS = "results"  # the folder of each student's `GradeResult` record in an output (a batch's or a shard's)
# nbgrader's API keeps process-wide state (logging, configuration): batches graded from several threads
# (harness course) take turns for it; their worker processes still run in parallel.
_NBGRADER_IN_PROCESS = threading.Lock()
# Judging and feedback after the notebook's execution stopped at the whole-submission limit.
GRACE_SECONDS = 60

# runs a batch's jobs: (jobs, job folder, whole-submission limit, on_result) -> results in job order
JobRunner = Callable[[list[GradeJob], Path, int, Callable[[GradeResult], None] | None], list[GradeResult]]
_RUNNER: ContextVar[JobRunner | None] = ContextVar("harness_grading_runner", default=None)
_SCRATCH: ContextVar[Path | None] = ContextVar("harness_grading_scratch", default=None)


@dataclass(frozen=True)
class Limits:
    """Per-submission limits: cell timeout (s), whole-submission wall time (s), kernel memory, output."""

    cell_timeout: int = 120
    submission_seconds: int = 900
    memory_mb: int = 4096
    max_output_bytes: int = 1_000_000


class SandboxUnavailable(RuntimeError):
    """The kernel sandbox cannot be made on this machine; the message says why and what to install."""


def run_job(job: GradeJob, workdir: Path, limit_seconds: int, server: ForkServer | None = None) -> GradeResult:
    """Run one worker for `job` (forked by `server`, else a fresh process); always returns a result.

    The worker stops executing the notebook at `limit_seconds` itself and keeps the points of the cells that
    ran; it is killed only if judging and feedback then take more than `GRACE_SECONDS` on top. A server that
    ends before the worker's end is known (`ServerGone`) has the job graded again in a fresh process.
    """
    name = job.student
    call = WorkerCall(job_file=workdir / f"{name}.job.json", result_file=workdir / f"{name}.result.json",
                      log_path=Path(job.out) / "logs" / f"{name}.log", cwd=workdir,
                      private_mounts=job.private_mounts)
    call.job_file.write_text(replace(job, scratch=str(workdir)).to_json(), encoding="utf-8")
    call.log_path.parent.mkdir(parents=True, exist_ok=True)
    started, timeout = time.perf_counter(), limit_seconds + GRACE_SECONDS
    if server is None:
        returncode, stopped = run_fresh(call, timeout)
    else:
        try:
            returncode, stopped = server.run(call, timeout)
        except ServerGone as gone:
            returncode, stopped = run_fresh(call, timeout, preface=str(gone))
    seconds = time.perf_counter() - started
    if call.result_file.is_file():
        return job.stamp(GradeResult.from_json(call.result_file.read_text(encoding="utf-8")))
    return job.stamp(GradeResult(name, job.assignment, "error", reasons=[worker_failure(returncode, stopped,
                                                                                        seconds, call.log_path)],
                                 seconds=seconds))


def run_fresh(call: WorkerCall, timeout: float, preface: str = "") -> tuple[int, bool]:
    """Run the worker of `call` as a fresh process (`python -m harness.grading.autograde`), its process tree
    killed after `timeout` seconds; its return code and whether it was stopped. `preface` opens its log."""
    with call.log_path.open("w") as log:
        if preface:
            print(f"{preface}: this submission is graded in a fresh process", file=log, flush=True)
        command = [sys.executable, "-m", "harness.grading.autograde", str(call.job_file), str(call.result_file)]
        worker = subprocess.Popen([*worker_prefix(call.private_mounts), *command],
                                  stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=call.cwd)
        try:
            return worker.wait(timeout=timeout), False
        except subprocess.TimeoutExpired:
            end_process_tree(worker.pid, grace_s=0.0)
            return worker.wait(), True


def worker_failure(returncode: int, stopped: bool, seconds: float, log_path: Path) -> str:
    """Why a worker left no result, from what was observed: its exit status and whether the batch stopped it."""
    if stopped:
        return (f"grading was stopped after {seconds:.0f} s: the notebook's execution ends at the whole-submission "
                f"limit, but judging and feedback then took more than {GRACE_SECONDS} s; see {log_path}")
    if returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else str(-returncode)
        hint = (" (the out-of-memory killer sends SIGKILL when the machine runs out of memory)"
                if -returncode == signal.SIGKILL else "")
        return f"the grader was killed by {name} after {seconds:.0f} s, not by the batch{hint}; see {log_path}"
    return f"the grader crashed (exit {returncode}) after {seconds:.0f} s; see {log_path}"


def make_jobs(submissions: list[Submission], assignment: str, template: Path, out: Path, secret: bytes,
              limits: Limits, workers: int, sandboxed: bool) -> list[GradeJob]:
    """The worker jobs of a batch: each carries its cases, never the secret."""
    threads = max(1, (os.cpu_count() or 1) // workers)
    points = graded_points(template / "solutions" / assignment)
    data = str(data_root().resolve())
    private_mounts = sandboxed and private_mounts_available()
    return [GradeJob(student=s.student, assignment=assignment, notebook=str(s.notebook) if s.notebook else None,
                     problem=s.problem, notes=list(s.notes), template=str(template), out=str(out),
                     timeout=limits.cell_timeout, submission_seconds=limits.submission_seconds,
                     memory_mb=limits.memory_mb, threads=threads, max_output_bytes=limits.max_output_bytes,
                     sandboxed=sandboxed, private_mounts=private_mounts, data_dir=data,
                     lms=s.lms.to_dict() if s.lms else {}, notebook_sha256=notebook_sha256(s), points=points,
                     cases={task: [{"hidden": c.hidden, "seed": c.seed}
                                   for c in draw_cases(secret, assignment, s.student, task)]
                            for task in points})
            for s in submissions]


def merge_into_gradebook(db_path: Path, template: Path, results: list[dict[str, Any]]) -> str | None:
    """Record every result's points in the gradebook at `db_path` (created from the template if new).

    The merge happens in a fresh copy next to it, which then replaces it: a crash leaves the old gradebook
    whole. An existing gradebook that cannot be read is kept aside (`<name>.unreadable-<time>`) and a new one
    is started; the returned sentence says so (None otherwise).
    """
    import shutil

    fresh = db_path.with_name(f".{db_path.name}.{os.getpid()}.tmp")
    note = None
    if db_path.is_file():
        shutil.copy(db_path, fresh)
    try:
        if not fresh.exists():
            shutil.copy(template / "gradebook.db", fresh)
        _merge(fresh, results)
    except Exception as error:  # an unreadable or foreign gradebook: start a new one, keep the old aside
        aside = db_path.with_name(f"{db_path.name}.unreadable-{int(time.time())}")
        if db_path.exists():
            os.replace(db_path, aside)
        note = (f"{db_path} could not be read ({type(error).__name__}); it was moved to {aside.name} "
                "and a new one written")
        fresh.unlink(missing_ok=True)
        shutil.copy(template / "gradebook.db", fresh)
        _merge(fresh, results)
    os.replace(fresh, db_path)
    return note


def _merge(db_path: Path, results: list[dict[str, Any]]) -> None:
    from nbgrader.api import Gradebook

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


def cgroup_note() -> str:
    """The one line `harness grade` prints about per-kernel limits: a cgroup per kernel, or why there is none."""
    reason = cgroup.unavailable_reason()
    if reason is None:
        return ("note: each kernel runs in a cgroup of its own: its memory (shared memory and /tmp included) and "
                "processes bounded, and one kernel's share of the CPU however many processes it starts")
    return (f"note: no cgroup per kernel can be made here ({reason}): each kernel has per-process limits instead "
            "(private memory, file size, processes, sized /tmp and /dev/shm); anonymous shared memory and CPU share "
            "are not bounded per student")


@functools.cache
def _note_limits() -> None:
    """Print `cgroup_note()` once per process: `harness course` grades one batch per lesson."""
    print(cgroup_note())


def check_batch(submissions: list[Submission], workers: int, sandboxed: bool) -> None:
    """Refuse a batch that cannot run: no worker, two submissions of one student, no sandbox where one is asked.

    Raises:
        ValueError: `workers` under 1, or a student id twice.
        SandboxUnavailable: `sandboxed` and the sandbox cannot be made here (the message says what to install).
    """
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    students = [s.student for s in submissions]
    if len(set(students)) != len(students):
        shared = sorted({s for s in students if students.count(s) > 1})
        raise ValueError(f"two submissions share a student id: {shared}")
    if sandboxed and (reason := sandbox.unavailable_reason()):
        raise SandboxUnavailable(reason)


@contextmanager
def course_template(assignment: str, repo_root: Path = REPO_ROOT) -> Iterator[tuple[Path, Path]]:
    """A temporary template course of `assignment` (GenerateAssignment, once) and a folder for worker jobs.

    Both are removed on exit, with every worker's private course copy in them. They are made in the system's
    temporary folder, or within `jobs_run_by(..., scratch)` in `scratch`.
    """
    put_environment_tools_on_path()
    with tempfile.TemporaryDirectory(prefix="harness-batch-", dir=_SCRATCH.get()) as tmp:
        template, workdir = Path(tmp) / "template", Path(tmp) / "jobs"
        template.mkdir()
        workdir.mkdir()
        with _NBGRADER_IN_PROCESS:
            build_course(template, [assignment], repo_root)
        yield template, workdir


@contextmanager
def jobs_run_by(runner: JobRunner, scratch: Path | None = None) -> Iterator[None]:
    """Within the block, `grade_jobs` (so `grade_batch` and `shards.grade_shard`) hands its jobs to `runner`.

    Args:
        runner: runs the jobs elsewhere, e.g. on a Dask cluster (`cluster.DaskRunner`); each job still runs
            `run_job`, with its sandbox and limits.
        scratch: the folder for the template course and the job files (None: the system's temporary folder);
            runners on other machines need one they see at the same path.
    """
    tokens = _RUNNER.set(runner), _SCRATCH.set(scratch)
    try:
        yield
    finally:
        _RUNNER.reset(tokens[0])
        _SCRATCH.reset(tokens[1])


# The process's fork server, kept between its batches (a course's lessons, a test session's batches) so the
# grader's imports are paid once per process; each worker takes the environment of the batch that asked for it.
_SERVER: ForkServer | None = None
_SERVER_LOCK = threading.Lock()
HARNESS_CODE = Path(__file__).resolve().parents[1]  # the package a server imports from
_SERVER_STAMP: tuple[int, int] = (0, 0)  # `_code_stamp()` when the server started
_SERVER_HOMES: list[Path] = []  # the folders of the servers started (each its log), removed at exit


def _code_stamp() -> tuple[int, int]:
    """How many modules the harness package holds and the newest one's modification time: a fork server imported
    the grader as it was when it started, so a batch after an edit needs a new one."""
    times = [path.stat().st_mtime_ns for path in HARNESS_CODE.rglob("*.py")]
    return len(times), max(times, default=0)


def _shared_server() -> ForkServer:
    """This process's fork server: started by the first batch that asks, started again where the last one ended or
    the harness's code changed since it started (an instructor editing a check between two batches of one session),
    closed when the process exits (`_close_server`).

    Raises:
        ServerUnavailable: it could not start; the message says what was observed.
    """
    global _SERVER, _SERVER_STAMP
    with _SERVER_LOCK:
        stamp = _code_stamp()
        if _SERVER is not None and not (_SERVER.gone or _SERVER.closed) and stamp != _SERVER_STAMP:
            print("note: the harness's code changed since the grading fork server started: a new one imports it "
                  "again", flush=True)
            _SERVER.close()
        if _SERVER is None or _SERVER.gone or _SERVER.closed:
            if not _SERVER_HOMES:
                atexit.register(_close_server, os.getpid())
            _SERVER_HOMES.append(home := Path(tempfile.mkdtemp(prefix="harness-forkserver-")))
            _SERVER, _SERVER_STAMP = ForkServer(home / "forkserver.log", home), stamp
        return _SERVER


def _close_server(owner: int) -> None:
    """Close the fork server and remove the servers' folders, in the process that started them (a fork that exits
    normally leaves them alone)."""
    if os.getpid() != owner:
        return
    if _SERVER is not None:
        _SERVER.close()
    for home in _SERVER_HOMES:
        shutil.rmtree(home, ignore_errors=True)


def batch_server(wanted: bool = True) -> ForkServer | None:
    """The grading fork server (`forkserver`) a batch forks its workers from, or None: not `wanted`, or it could
    not start (said so). The server is the process's, kept for its later batches (`_shared_server`)."""
    if not wanted:
        return None
    try:
        return _shared_server()
    except ServerUnavailable as error:
        print(f"note: the grading fork server could not start ({error}): each submission is graded in a fresh "
              "process instead, which imports the grader again (about 5 s more per submission)", flush=True)
        return None


def grade_jobs(jobs: list[GradeJob], workdir: Path, workers: int, limit_seconds: int,
               on_result: Callable[[GradeResult], None] | None = None, *,
               forked: bool = True) -> list[GradeResult]:
    """Run `jobs` over `workers` worker processes (or the runner of `jobs_run_by`); results in job order.

    `on_result` is called with each result as soon as its worker ends (from the pool's threads). With `forked`,
    the workers are forked by the process's fork server (`batch_server`), else each is a fresh process.
    """
    if (runner := _RUNNER.get()) is not None:
        return runner(jobs, workdir, limit_seconds, on_result)

    server = batch_server(forked)

    def run(job: GradeJob) -> GradeResult:
        try:
            result = run_job(job, workdir, limit_seconds, server)
        except Exception as error:  # one student's failure is that student's error row; the batch goes on
            result = job.stamp(GradeResult(job.student, job.assignment, "error", reasons=[
                f"the grader could not run this submission ({type(error).__name__}: {str(error)[:160]})"]))
        if on_result is not None:
            on_result(result)
        return result

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(run, jobs))


def absolute(submissions: list[Submission]) -> list[Submission]:
    """`submissions` with absolute notebook paths: nbgrader changes the process's working directory while it
    generates, and other threads (harness course grades two assignments at a time) must not resolve paths
    against it."""
    return [replace(s, notebook=s.notebook.resolve()) if s.notebook else s for s in submissions]


def grade_batch(submissions: list[Submission], assignment: str, out: Path, *, workers: int = 2,
                limits: Limits = Limits(), secret: bytes | None = None, sandboxed: bool = True,
                repo_root: Path = REPO_ROOT, progress: Callable[[int], Callable[[GradeResult], None]] | None = None,
                forked: bool = True) -> list[dict[str, Any]]:
    """Grade `submissions` of `assignment` over `workers` processes; results in submission order.

    Writes `out`/gradebook.db, `out`/feedback/<student>/<assignment>/ (hidden tests stripped),
    `out`/autograded/ (the instructor's view), `out`/logs/, `out`/results/<student>.json (each `GradeResult`,
    as soon as it is graded) and `out`/observations/ (what the judge decided from, for `regrade`). Each
    result is a `GradeResult` as a dict (`GradeResult.to_dict`), the form `summary.write_summary` and
    `merge_into_gradebook` read.

    Args:
        secret: the instructor's grading secret (default: `harness.judge.secret.load_or_create()`).
        sandboxed: run each kernel in the sandbox (`harness.grading.sandbox`); False only on the instructor's
            explicit `--no-sandbox`.
        progress: given the number of submissions, returns what to call with each result as it ends
            (`progress.Progress`: a line per submission with the time left).
        forked: fork the workers from one fork server that imported the grader once (`forkserver`); False:
            each worker is a fresh process (`benchmarks/grading_overhead.py` compares the two).

    Raises:
        SandboxUnavailable: `sandboxed` and the sandbox cannot be made here (the message says what to install).
    """
    check_batch(submissions, workers, sandboxed)
    if sandboxed:
        _note_limits()
        cgroup.remove_stale()  # the groups that killed workers of earlier batches left behind
    if secret is None:
        from harness.judge.secret import load_or_create

        secret, where = load_or_create()
        print(where)
    out = out.resolve()
    (out / RESULTS).mkdir(parents=True, exist_ok=True)
    save_answers(submissions, assignment, out, repo_root)  # answer cells from the files, for similarity flags
    report = progress(len(submissions)) if progress else None

    def record(result: GradeResult) -> None:
        write_atomically(out / RESULTS / f"{result.student}.json", result.to_json())
        if report is not None:
            report(result)

    with course_template(assignment, repo_root) as (template, workdir):
        jobs = make_jobs(absolute(submissions), assignment, template, out, secret, limits, workers, sandboxed)
        results = [r.to_dict() for r in grade_jobs(jobs, workdir, workers, limits.submission_seconds, record,
                                                 forked=forked)]
        with _NBGRADER_IN_PROCESS:
            note = merge_into_gradebook(out / "gradebook.db", template, results)
        if note:
            print(note)
    return results
