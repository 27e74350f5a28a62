"""The fork launcher: `launch_forked` runs a function on N forked processes, CPU and gloo only.

No interpreter starts (~0.2 s per launch instead of ~3 s per rank), and nothing needs to be sent:
closures, lambdas and datasets are fine. It is what the checks use. Forking after CUDA was initialised
crashes the child, so it is refused then. Each rank's output goes to a log file, collected into the result.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist

from harness.launch.limits import check_world_size
from harness.launch.outcome import LaunchError, LaunchResult, first_error
from harness.launch.transport import load_portable, save_portable


def launch_forked(
    fn: Callable[..., Any],
    nproc: int = 2,
    *,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    timeout_s: float = 60.0,
    cuda_initialized_ok: bool = False,
) -> LaunchResult:
    """Run `fn(*args, **kwargs)` on `nproc` forked processes joined in a gloo process group.

    Forking copies this process, so `fn` and its arguments need not be sent (closures, lambdas and
    datasets are fine) and no interpreter starts: a launch costs a fraction of a second. The result of
    each rank comes back as with `launch` (tensors, numbers, strings, lists and dicts of these). The
    output of the ranks is collected in the result's log, not printed.

    Args:
        cuda_initialized_ok: fork even though CUDA is initialised in this process, for an `fn` that never
            touches CUDA (CPU tensors, gloo collectives, a DataLoader without pinned memory): the ranks
            inherit a CUDA state they cannot use, as DataLoader workers do.

    Raises:
        RuntimeError: CUDA is initialised in this process (a forked child cannot use it and crashes) and
            `cuda_initialized_ok` is False, or this process is itself inside a process group.
        ValueError: nproc beyond the machine's CPU cores.
        LaunchError: a rank raised (its traceback in the message; the other ranks are ended) or timed out.
    """
    if not cuda_initialized_ok and torch.cuda.is_available() and torch.cuda.is_initialized():
        raise RuntimeError(
            "launch_forked refuses to fork: CUDA is already initialised in this process, and a forked child "
            "cannot use CUDA (it crashes or hangs). Use harness.launch.launch (torchrun starts fresh processes), "
            "or fork before anything touches the GPU."
        )
    if dist.is_initialized():
        raise RuntimeError("launch_forked cannot run inside a process group: call it from a single process.")
    check_world_size(nproc, "gloo")
    try:
        return _launch_forked_once(fn, nproc, tuple(args), kwargs or {}, timeout_s)
    except _SetupFailed:
        # Joining the group failed before `fn` ran (a refused or dropped connection on a machine under heavy
        # load): that is the launcher's problem, not the caller's, and a fresh attempt on a new port fixes it.
        return _launch_forked_once(fn, nproc, tuple(args), kwargs or {}, timeout_s, last_attempt=True)


class _SetupFailed(Exception):
    """Every failing rank failed while joining the process group, before the launched function ran."""


def _launch_forked_once(
    fn: Callable[..., Any], nproc: int, args: tuple[Any, ...], kwargs: dict[str, Any], timeout_s: float,
    last_attempt: bool = False,
) -> LaunchResult:
    store = dist.TCPStore("127.0.0.1", 0, world_size=nproc + 1, is_master=True, wait_for_workers=False)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="harness-fork-") as tmp:
        work = Path(tmp)
        sys.stdout.flush()
        sys.stderr.flush()
        pids = [_fork_rank(fn, rank, nproc, store.port, work, args, kwargs, timeout_s) for rank in range(nproc)]
        failed, status, timed_out = _wait_ranks(pids, timeout_s)
        log = "".join(_prefixed(r, work / f"log_{r}.txt") for r in range(nproc))
        seconds = time.perf_counter() - started
        if timed_out:
            raise LaunchError(
                f"the forked launch did not finish within {timeout_s:g} s and every rank was ended. A rank "
                "waiting in a collective that another rank never reaches is the usual cause.\n" + log,
                log=log,
            )
        if failed is not None:
            first = first_error(work)
            if first is None and not last_attempt and any(work.glob("setup_error_*.txt")):
                raise _SetupFailed()
            if first is None:
                setup = sorted(work.glob("setup_error_*.txt"))
                what = ("could not join the process group" if setup
                        else f"ended with {status} without a Python traceback")
                detail = setup[0].read_text() if setup else log
                raise LaunchError(f"rank {failed} {what}; the other ranks were ended.\n\n{detail}",
                                  rank=failed, log=log)
            raise LaunchError(first[1], rank=first[0], log=log)
        results = [load_portable(work / f"result_{r}.pt") for r in range(nproc)]
    return LaunchResult(results=results, log=log, seconds=seconds)


def _fork_rank(
    fn: Callable[..., Any], rank: int, nproc: int, port: int, work: Path,
    args: tuple[Any, ...], kwargs: dict[str, Any], timeout_s: float,
) -> int:
    pid = os.fork()
    if pid:
        return pid
    status = 1
    try:
        log = open(work / f"log_{rank}.txt", "w", buffering=1)  # noqa: SIM115 - lives until os._exit
        os.dup2(log.fileno(), 1)  # C++ output (gloo) too: nothing reaches the parent's stdout/stderr
        os.dup2(log.fileno(), 2)
        sys.stdout = sys.stderr = log
        torch.set_num_threads(1)  # OpenMP's thread pool does not survive fork; one thread needs none
        timeout = timedelta(seconds=timeout_s)
        try:
            store = dist.TCPStore("127.0.0.1", port, world_size=nproc + 1, is_master=False, timeout=timeout)
            dist.init_process_group("gloo", store=store, rank=rank, world_size=nproc, timeout=timeout)
        except Exception as error:
            (work / f"setup_error_{rank}.txt").write_text("".join(traceback.format_exception(error)))
            raise SystemExit(1) from None
        result = fn(*args, **kwargs)
        save_portable(result, work / f"result_{rank}.pt", f"rank {rank}'s return value")
        dist.destroy_process_group()
        status = 0
    except SystemExit:
        pass  # a setup failure, already reported
    except BaseException as error:  # noqa: BLE001 - reported to the parent through the error file
        (work / f"error_{rank}.txt").write_text("".join(traceback.format_exception(error)))
    finally:
        sys.stdout.flush()
        os._exit(status)  # never return into the parent's code (a kernel, a test runner) in the child


def _wait_ranks(pids: list[int], timeout_s: float) -> tuple[int | None, str, bool]:
    """Reap the ranks; on the first failure or at the deadline end the rest.

    Returns (first failed rank, how it ended, timed out)."""
    deadline = time.monotonic() + timeout_s
    running = dict(enumerate(pids))
    failed: int | None = None
    ended = ""
    while running:
        for rank, pid in list(running.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                del running[rank]
                code = os.waitstatus_to_exitcode(status)
                if code != 0 and failed is None:
                    failed = rank
                    ended = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
        if failed is not None or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    timed_out = bool(running) and failed is None
    for pid in running.values():
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return failed, ended, timed_out


def _prefixed(rank: int, path: Path) -> str:
    if not path.exists():
        return ""
    return "".join(f"[rank{rank}] {line}" for line in path.read_text().splitlines(keepends=True))
