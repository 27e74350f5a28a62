"""The fork launcher: `launch_forked` runs a function on N forked processes, CPU and gloo only.

No interpreter starts (~0.2 s per launch instead of ~3 s per rank), and nothing needs to be sent:
closures, lambdas and datasets are fine. It is what the checks use. Forking after CUDA was initialised
crashes the child, so it is refused then. Each rank's output goes to a log file, collected into the result.
The ranks join through a store this process serves on a port reserved for the launch
(`harness.launch.rendezvous`), die with this process (`die_with_parent`), and a failure names the rank that
caused it (`harness.launch.outcome.blame`), a hang where each rank was (`harness.launch.hangs`).
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist

from harness.launch.hangs import arm_stack_dump, ask_for_stacks, note_timeout
from harness.launch.lifeline import die_with_parent, work_folder
from harness.launch.limits import check_world_size
from harness.launch.outcome import LaunchError, LaunchResult, blame, first_error, hang_report
from harness.launch.rendezvous import join_group, reserve_store
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
        LaunchError: a rank failed (the rank that caused it is named, with its signal or traceback and its last
            output lines; the other ranks are ended) or the launch timed out (where each rank was is named).
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
        # The group never formed, so `fn` ran nowhere (a refused or dropped connection on a machine under heavy
        # load, a rank lost before it joined): that is the launcher's problem, not the caller's, and a fresh
        # attempt on a new port fixes it.
        return _launch_forked_once(fn, nproc, tuple(args), kwargs or {}, timeout_s, last_attempt=True)


class _SetupFailed(Exception):
    """The process group never formed (no rank had joined it): the launched function ran nowhere."""


def _launch_forked_once(
    fn: Callable[..., Any], nproc: int, args: tuple[Any, ...], kwargs: dict[str, Any], timeout_s: float,
    last_attempt: bool = False,
) -> LaunchResult:
    store = reserve_store(nproc)
    started = time.perf_counter()
    with work_folder("harness-fork-") as work:
        sys.stdout.flush()
        sys.stderr.flush()
        pids = [_fork_rank(fn, rank, nproc, store.port, work, args, kwargs, timeout_s) for rank in range(nproc)]
        ended, running = _wait_ranks(pids, timeout_s, work)
        log = "".join(_prefixed(r, work / f"log_{r}.txt") for r in range(nproc))
        seconds = time.perf_counter() - started
        # Joining ends in a barrier: once one rank has joined, every rank reached it, and `fn` may have run. Before
        # that, a rank that could not join, died or hung left the group unformed, and `fn` ran nowhere.
        if not last_attempt and not any(work.glob("joined_*")):
            raise _SetupFailed()
        if not ended and running:
            what = f"the forked launch did not finish within {timeout_s:g} s"
            raise LaunchError(f"{hang_report(what, work, nproc, log)}\n\n{log}", log=log)
        if ended:
            setup = sorted(work.glob("setup_error_*.txt"))
            if first_error(work) is None and setup and all(code > 0 for code in ended.values()):
                rank = int(setup[0].stem.split("_")[2])
                raise LaunchError(f"rank {rank} could not join the process group; the other ranks were ended."
                                  f"\n\n{setup[0].read_text()}", rank=rank, log=log)
            failure = blame(work, ended, log)
            if failure is not None:  # always: a rank failed
                raise LaunchError(failure[1], rank=failure[0], log=log)
        results = [load_portable(work / f"result_{r}.pt") for r in range(nproc)]
    return LaunchResult(results=results, log=log, seconds=seconds)


def _fork_rank(
    fn: Callable[..., Any], rank: int, nproc: int, port: int, work: Path,
    args: tuple[Any, ...], kwargs: dict[str, Any], timeout_s: float,
) -> int:
    parent = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    # Objects inherited from this process are never collected in the rank: a finalizer run there (an earlier
    # launch's TCPStore server, whose thread the fork did not copy) crashes it with SIGSEGV.
    gc.freeze()
    status = 1
    try:
        die_with_parent(parent)  # a kernel restart's SIGKILL of the launcher ends the ranks too
        log = open(work / f"log_{rank}.txt", "w", buffering=1)  # noqa: SIM115 - lives until os._exit
        os.dup2(log.fileno(), 1)  # C++ output (gloo) too: nothing reaches the parent's stdout/stderr
        os.dup2(log.fileno(), 2)
        sys.stdout = sys.stderr = log
        arm_stack_dump(work, rank)
        torch.set_num_threads(1)  # OpenMP's thread pool does not survive fork; one thread needs none
        try:
            # A collective waits longer than the launch: a hang is reported by the launcher, with every rank's output.
            join_group(port, rank, nproc, timedelta(seconds=timeout_s + 30))
            (work / f"joined_{rank}").touch()
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
        note_timeout(work, rank, error)
        (work / f"error_{rank}.txt").write_text("".join(traceback.format_exception(error)))
    finally:
        sys.stdout.flush()
        os._exit(status)  # never return into the parent's code (a kernel, a test runner) in the child


def _wait_ranks(pids: list[int], timeout_s: float, work: Path) -> tuple[dict[int, int], list[int]]:
    """Reap the ranks; after the first failure, or at the deadline (each rank's stack dumped first), end the rest.

    Returns the exit code of each rank that failed on its own (negative: the signal that killed it), in the
    order they were seen, and the ranks still running at the end (ended here)."""
    deadline = time.monotonic() + timeout_s
    running = dict(enumerate(pids))
    ended: dict[int, int] = {}
    while running and not ended and time.monotonic() <= deadline:
        time.sleep(0.01)
        for rank, pid in list(running.items()):  # one sweep reaps every rank that has ended
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                del running[rank]
                code = os.waitstatus_to_exitcode(status)
                if code != 0:
                    ended[rank] = code
    if running and not ended:
        ask_for_stacks(work, list(running))
    for pid in running.values():
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return ended, list(running)


def _prefixed(rank: int, path: Path) -> str:
    if not path.exists():
        return ""
    return "".join(f"[rank{rank}] {line}" for line in path.read_text().splitlines(keepends=True))
