"""The torchrun launcher: `launch` runs a function or a script on N fresh processes and returns their results.

A function's source is sent (`harness.launch.source`), its arguments and return values travel as files
(`harness.launch.transport`), and each rank runs `harness.launch.rank.run_rank`. Every rank's output is
streamed to this process's stdout prefixed with its rank; a failing rank, or the timeout, ends every
process, and `end_process_tree` makes sure none is left behind. torchrun runs inside `harness.launch.runner`,
which ends every rank and removes the work folder when this process ends however it ends, and reports how each
rank ended; the rendezvous (`--standalone`) is a store torchrun serves on a port the kernel picked for it.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import psutil
import torch

from harness.distributed import JOIN_TIMEOUT_S, STEP_TIMEOUT_VARIABLE, check_backend
from harness.launch.hangs import ask_for_stacks
from harness.launch.lifeline import process_start, work_folder
from harness.launch.limits import check_port, check_world_size
from harness.launch.outcome import ENDED, LaunchError, LaunchResult, blame, hang_report
from harness.launch.source import function_script
from harness.launch.transport import load_portable, save_portable


def launch(
    target: Callable[..., Any] | str | os.PathLike[str],
    nproc: int = 2,
    *,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    script_args: Sequence[str] = (),
    backend: str | None = None,
    port: int | None = None,
    timeout_s: float = 120.0,
    step_timeout_s: float | None = None,
    quiet: bool = False,
) -> LaunchResult:
    """Run `target` on `nproc` processes with torchrun, stream their output, and return their results.

    Args:
        target: a function (its source is sent; the launcher joins each rank to the process group before
            calling it, so it can use DDP and collectives directly) or the path of a script (run as
            `__main__` with `script_args`; it calls `harness.distributed.init_distributed()` itself).
        nproc: number of processes (ranks) on this machine.
        args, kwargs: the function's arguments: tensors, numbers, strings, lists and dicts of these.
        script_args: command-line arguments of a script.
        backend: "gloo" or "nccl"; None picks NCCL when CUDA is available, gloo otherwise.
        port: the rendezvous port; None has torchrun serve its rendezvous on a port the kernel picks, reserved
            for this launch (concurrent launches never meet).
        timeout_s: end every process and raise after this many seconds.
        step_timeout_s: the step deadline (gloo): how long a rank may wait in a collective for the others (DDP
            all-reduces the gradients in every step) before that wait fails and the launch names the rank that
            did not arrive, with where it was and its last lines. None: a third of `timeout_s`, at most 300 s,
            so the rank is named before the launch times out. Under NCCL, whose watchdog would end the rank
            that waited, a hang is reported at `timeout_s`.
        quiet: collect the output without printing it.

    Returns:
        A LaunchResult: every rank's return value (function targets), the log and the wall time.

    Raises:
        ValueError: nproc beyond the machine, a port in use, a step_timeout_s not above 0, or a script that does
            not exist.
        RuntimeError: NCCL without GPUs.
        TypeError: a function, global or argument that cannot be sent to other processes.
        LaunchError: a rank failed (the rank that caused it is named, with its signal or traceback and its
            last output lines), a rank did not reach a collective by the step deadline (named, with where each
            rank was and its last lines) or the launch timed out (where each rank was is named).
    """
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    check_backend(backend)
    check_world_size(nproc, backend)
    if port is not None:
        check_port(port)
    if step_timeout_s is None:
        step_timeout_s = min(timeout_s / 3, JOIN_TIMEOUT_S)
    if step_timeout_s <= 0:
        raise ValueError(f"step_timeout_s={step_timeout_s!r}: use a number of seconds above 0, or None for a third "
                         "of timeout_s.")
    with work_folder("harness-launch-") as work:
        entry = _prepare(target, work, args, kwargs or {}, script_args)
        me = os.getpid()
        command = [sys.executable, "-m", "harness.launch.runner", str(work), str(me), repr(process_start(me)),
                   f"--nproc-per-node={nproc}", "--max-restarts=0"]
        command += (["--standalone"] if port is None
                    else ["--nnodes=1", "--master-addr=127.0.0.1", f"--master-port={port}"])
        command.append(str(entry))
        started = time.perf_counter()
        env = _launch_env(backend, step_timeout_s)
        returncode, rank_lines, runner_lines = _run_torchrun(command, env, timeout_s, quiet, work, nproc)
        seconds = time.perf_counter() - started
        log = "".join(rank_lines)
        if returncode is None:
            raise LaunchError(hang_report(f"the launch did not finish within {timeout_s:g} s", work, nproc, log),
                              log=log)
        ended = json.loads((work / ENDED).read_text()) if (work / ENDED).exists() else {}
        failure = blame(work, {int(rank): code for rank, code in ended.items()}, log)
        if failure is not None:
            rank, message = failure
            raise LaunchError(message, rank=rank, log=log)
        if returncode != 0:
            raise LaunchError(
                f"torchrun exited with status {returncode}. Its last lines:\n" + "".join(runner_lines[-30:]), log=log
            )
        results = [] if not callable(target) else [load_portable(work / f"result_{r}.pt") for r in range(nproc)]
        return LaunchResult(results=results, log=log, seconds=seconds)


def _prepare(target: Any, work: Path, args: Sequence[Any], kwargs: dict[str, Any], script_args: Sequence[str]) -> Path:
    """Write the bootstrap script (and the arguments) into `work`; return the script torchrun runs."""
    entry = work / "rank_main.py"
    if callable(target):
        if script_args:
            raise ValueError("script_args are for script targets; pass a function's inputs as args/kwargs.")
        entry.write_text(function_script(target, work))
        save_portable((tuple(args), dict(kwargs)), work / "args.pt", "the arguments")
        return entry
    script = Path(target)
    if not script.is_file():
        raise ValueError(f"{script} is not a file: pass a function, or the path of a Python script.")
    if args or kwargs:
        raise ValueError("args/kwargs are for function targets; pass a script's inputs as script_args.")
    (work / "script.txt").write_text("\0".join([str(script.resolve()), *map(str, script_args)]))
    entry.write_text(f"from harness.launch import run_rank\nrun_rank(None, {str(work)!r})\n")
    return entry


def _launch_env(backend: str, step_timeout_s: float) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", None)  # the ranks use the store torchrun reserved
    env["HARNESS_LAUNCH_BACKEND"] = backend
    env.pop(STEP_TIMEOUT_VARIABLE, None)  # an outer launch's deadline is not this one's
    if backend == "gloo":  # a gloo collective past it raises in the rank that waited (`note_timeout` names the late)
        env[STEP_TIMEOUT_VARIABLE] = repr(float(step_timeout_s))
    # The ranks import what this process imports: functions of its modules are sent by reference.
    paths = [os.path.abspath(path or os.curdir) for path in sys.path]
    inherited = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths + inherited))
    env["PYTHONUNBUFFERED"] = "1"  # stream prints as they happen, not when a buffer fills
    env.setdefault("OMP_NUM_THREADS", "1")  # one intra-op thread per rank: N ranks share the cores
    return env


def _run_torchrun(
    command: list[str], env: dict[str, str], timeout_s: float, quiet: bool, work: Path, nproc: int
) -> tuple[int | None, list[str], list[str]]:
    """Run torchrun, forwarding rank lines to stdout; returns (status or None on timeout, rank lines, own lines).
    On the timeout, every rank dumps its stack into `work` before it is ended."""
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        text=True, env=env, start_new_session=True,  # its own process group: ended as one on timeout
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:  # a thread only reads; printing stays on the caller's thread (Jupyter routes it to the cell)
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    rank_lines: list[str] = []
    runner_lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    returncode: int | None = None
    try:
        while True:
            try:
                line = lines.get(timeout=max(0.01, min(0.2, deadline - time.monotonic())))
            except queue.Empty:
                if time.monotonic() >= deadline:
                    break
                continue
            if line is None:  # torchrun closed its output: it is exiting
                returncode = process.wait(timeout=max(1.0, deadline - time.monotonic()))
                break
            if line.startswith("[rank"):
                rank_lines.append(line)
                if not quiet:
                    sys.stdout.write(line)
                    sys.stdout.flush()
            else:  # torchrun's own messages and C++ library warnings: kept for the error report
                runner_lines.append(line)
    except subprocess.TimeoutExpired:
        returncode = None
    finally:
        if returncode is None and time.monotonic() >= deadline:  # hung: where was each rank?
            ask_for_stacks(work, list(range(nproc)))
        end_process_tree(process.pid)
        process.wait()
    return returncode, rank_lines, runner_lines


def end_process_tree(pid: int, grace_s: float = 3.0) -> None:
    """End `pid` and every descendant: SIGTERM, then SIGKILL for those still alive after `grace_s`."""
    try:
        root = psutil.Process(pid)
        family = root.children(recursive=True) + [root]
    except psutil.NoSuchProcess:
        return
    for member in family:
        try:
            member.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(family, timeout=grace_s)
    for member in alive:
        try:
            member.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=grace_s)
    try:
        os.killpg(pid, signal.SIGKILL)  # anything that re-parented itself but kept the session
    except (ProcessLookupError, PermissionError):
        pass
