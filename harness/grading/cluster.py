"""Grading on a Dask cluster: `harness grade SUBMISSIONS --assignment A --dask tcp://host:8786` (or `local:N`).

Each submission's `GradeJob` becomes one Dask task, keyed by its student, that runs the same `batch.run_job`
(the autograde worker process, its sandbox and limits) on the Dask worker's machine, over a folder every
worker sees at the same path; the task answers with the `GradeResult` as JSON text, never a pickle of
anything the sandbox wrote. A task whose Dask worker is lost is run again on another (`client.map(...,
retries=2)`); the parent still merges every result into the gradebook alone, and reports progress as for
the local pool (`progress`). Needs the optional extra
`cluster` (`pip install .[cluster]`): this module is imported only when `--dask` is given.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from distributed import Client, LocalCluster, as_completed

from harness.grading.batch import jobs_run_by, run_job
from harness.grading.jobs import GradeJob, GradeResult
from harness.grading.progress import progress_line

LOCAL = "local:"


def parse_address(address: str) -> int | None:
    """The worker count of `local:N`, or None for a scheduler address such as `tcp://host:8786`.

    Raises:
        ValueError: `local:` without a positive count, or an address that is neither form.
    """
    if address.startswith(LOCAL):
        count = address.removeprefix(LOCAL)
        if not count.isdigit() or int(count) < 1:
            raise ValueError(f"--dask {address}: use local:N with N >= 1 worker processes, e.g. local:2")
        return int(count)
    if "://" not in address:
        raise ValueError(f"--dask {address}: give a scheduler address such as tcp://host:8786, or local:N")
    return None


def grade_task(job_json: str, limit_seconds: int) -> str:
    """One Dask task: grade the job in `job_json` with `run_job`; the result as JSON text.

    The job and result files and the private course copy go to a fresh folder in the worker's own temporary
    folder (short paths for the kernel's sockets, no traffic on the shared folder, and a retry never shares
    files with the attempt of a lost worker); the template course, the notebook and the output folder are
    read and written at the job's paths on the shared folder.
    """
    job = GradeJob.from_json(job_json)
    with tempfile.TemporaryDirectory(prefix="harness-job-") as attempt:
        return run_job(job, Path(attempt), limit_seconds).to_json()


class DaskRunner:
    """A `batch.JobRunner` that sends each job to a Dask cluster as one task keyed by its student."""

    def __init__(self, client: Client, report: Callable[[str], None] | None = None, retries: int = 2) -> None:
        """Run jobs through `client`; `report`, if given, gets a `progress_line` per finished submission (the
        batch's own `on_result`, `progress.Progress`, reports them with the time left in any case)."""
        self.client, self.report, self.retries = client, report, retries

    def __call__(self, jobs: list[GradeJob], workdir: Path, limit_seconds: int,
                 on_result: Callable[[GradeResult], None] | None = None) -> list[GradeResult]:
        """Grade `jobs` on the cluster; results in job order, each student once.

        `workdir` is the parent's job folder, unused: each task makes its own on its worker (`grade_task`).

        A task that still fails after its retries (its workers kept dying) gives an "error" result that says so.
        """
        batch = uuid.uuid4().hex[:8]
        futures = self.client.map(grade_task, [job.to_json() for job in jobs], limit_seconds=limit_seconds,
                                  key=[f"grade-{job.student}-{batch}" for job in jobs],
                                  retries=self.retries, pure=False)
        by_key = {future.key: job for future, job in zip(futures, jobs, strict=True)}
        results: dict[str, GradeResult] = {}
        for done, future in enumerate(as_completed(futures), 1):
            job = by_key[future.key]
            try:
                result = GradeResult.from_json(future.result())
            except Exception as error:  # failed after its retries, or its workers kept dying (KilledWorker)
                result = job.stamp(GradeResult(job.student, job.assignment, "error",
                                               reasons=[f"the Dask task failed after {self.retries} retries: "
                                                        f"{type(error).__name__}: {error}"]))
            results[job.student] = result
            if on_result is not None:
                on_result(result)
            if self.report is not None:
                self.report(progress_line(done, len(jobs), result))
        return [results[job.student] for job in jobs]


@contextmanager
def on_dask(address: str, out: Path) -> Iterator[Client]:
    """Within the block, batches and shards grade on the Dask cluster at `address` (or a `local:N` one).

    `local:N` starts a `LocalCluster` of N worker processes with one thread each and closes it on exit; the
    template course and job files then stay in the system's temporary folder. With a scheduler address they
    are made in `out`, which every worker must see at the same path (as the submissions and the repository).
    """
    count = parse_address(address)
    if count is not None:
        with LocalCluster(n_workers=count, threads_per_worker=1, processes=True, dashboard_address=None) as local, \
                Client(local) as client, jobs_run_by(DaskRunner(client)):
            yield client
        return
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    with Client(address) as client, jobs_run_by(DaskRunner(client), scratch=out):
        yield client
