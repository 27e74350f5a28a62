"""Run a function or a script on N processes from a notebook: real torchrun, logs streamed, results back.

`launch(train, nproc=2, kwargs={...})` writes a small script holding `train`'s source (and the sources
of the notebook functions it calls), runs it with `torchrun --standalone --nproc-per-node=2`, streams
every rank's output into the notebook prefixed with its rank (on stdout, so a graded cell is not
zeroed), and returns every rank's return value. Why not `mp.spawn`: spawn pickles the function by
reference, and a function defined in a notebook cannot be imported by the child; why not fork: forking
after CUDA was initialised crashes. Sending source through torchrun is what also runs on many machines.

Failures are reported, never hung on: a rank's exception comes back with its traceback and the other
ranks are ended; a timeout ends every process; no process is left behind.

`launch_forked` is the fast variant the checks use (no interpreter start, ~0.2 s instead of ~3 s per
rank): CPU and gloo only, refused once CUDA is initialised in this process.
"""

from __future__ import annotations

import ast
import builtins
import dis
import errno
import inspect
import linecache
import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import traceback
import types
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Sequence

import psutil
import torch
import torch.distributed as dist

from harness.distributed import check_backend, init_distributed, cleanup_distributed

_DATAFRAME_TAG = "__harness_dataframe__"


class LaunchError(RuntimeError):
    """A distributed launch failed: a rank raised, the launch timed out, or the input was unusable.

    Attributes:
        rank: the rank whose failure is reported (None when no single rank is to blame).
        log: every rank's output, rank-prefixed.
    """

    def __init__(self, message: str, *, rank: int | None = None, log: str = "") -> None:
        super().__init__(message)
        self.rank = rank
        self.log = log


@dataclass
class LaunchResult:
    """What a launch brought back.

    Attributes:
        results: each rank's return value, indexed by rank (empty for a script).
        log: every rank's output, each line prefixed with `[rankN]`.
        seconds: wall time of the launch, process start included.
    """

    results: list[Any]
    log: str
    seconds: float

    @property
    def value(self) -> Any:
        """Rank 0's return value."""
        if not self.results:
            raise LaunchError("a script launch returns no values: have rank 0 save what you need to a file.")
        return self.results[0]


# ----------------------------------------------------------------------------------------------------
# Validation shared by both launchers


def max_world_size(backend: str) -> int:
    """The largest world size this machine runs: one process per GPU (NCCL) or per CPU core (gloo)."""
    if backend == "nccl":
        return torch.cuda.device_count()
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _check_world_size(nproc: int, backend: str) -> None:
    if not isinstance(nproc, int) or nproc < 1:
        raise ValueError(f"nproc must be a positive number of processes, got {nproc!r}.")
    limit = max_world_size(backend)
    if nproc > limit:
        unit = "GPUs" if backend == "nccl" else "CPU cores"
        raise ValueError(
            f"nproc={nproc} is more than this machine runs with {backend}: it has {limit} {unit}. "
            f"Use nproc<={limit}; to go beyond one machine, start torchrun on each machine "
            "(see the README's multi-node command)."
        )


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when nothing listens on `port` (we can bind it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError as error:
            if error.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def _check_port(port: int) -> None:
    if not 1024 <= port <= 65535:
        raise ValueError(f"port {port} is outside 1024..65535: pick an unprivileged port, or leave port=None.")
    if not port_is_free(port):
        raise ValueError(
            f"port {port} is already in use on this machine (another launch, a notebook server, or a "
            "leftover process). Pick another port, or leave port=None and a free one is chosen."
        )


# ----------------------------------------------------------------------------------------------------
# Sending a notebook function as source


def _global_names(code: types.CodeType) -> set[str]:
    """Names a code object (and the functions and classes nested in it) reads as globals."""
    names = {ins.argval for ins in dis.get_instructions(code) if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _is_literal(value: Any) -> bool:
    try:
        return ast.literal_eval(repr(value)) == value
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False


def _importable(obj: Any) -> bool:
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    qualname = getattr(obj, "__qualname__", "")
    return module is not None and module.__name__ != "__main__" and "<" not in qualname and (
        getattr(module, qualname.split(".")[0], None) is not None
    )


def _check_sendable_function(fn: Any, role: str) -> None:
    if not isinstance(fn, types.FunctionType):
        raise TypeError(f"{role} must be a function defined with def (got {type(fn).__name__}).")
    if fn.__name__ == "<lambda>":
        raise TypeError(
            f"{role} is a lambda: a lambda has no name for the other processes to call. "
            "Define it with `def` at the top level of a cell."
        )
    if fn.__code__.co_freevars or "<locals>" in fn.__qualname__:
        captured = ", ".join(fn.__code__.co_freevars) or "its enclosing function's scope"
        raise TypeError(
            f"{role} `{fn.__qualname__}` is defined inside another function and captures {captured}: "
            "the other processes cannot rebuild that. Define it at the top level of a cell and pass "
            "those values as arguments."
        )


def _class_source(cls: type) -> str:
    """A class's source, found through its methods' file: inspect cannot locate classes defined in a
    notebook cell (it searches the file of the class's module, and a notebook's __main__ has none)."""
    try:
        return inspect.getsource(cls)
    except (OSError, TypeError):
        pass
    files = {member.__code__.co_filename for member in vars(cls).values() if inspect.isfunction(member)}
    for filename in files:
        source = "".join(linecache.getlines(filename))
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef) and node.name == cls.__name__:
                return ast.get_source_segment(source, node, padded=True) or ""
    raise OSError(f"no method of class {cls.__name__} points to its source")


class _ScriptBuilder:
    """Collects the imports, constants and sources a function needs, in dependency order."""

    def __init__(self) -> None:
        self.imports: list[str] = []
        self.constants: list[str] = []
        self.sources: list[str] = []
        self.done: set[str] = set()

    def add_object(self, name: str, obj: Any, user: str) -> None:
        if name in self.done:
            return
        self.done.add(name)
        if isinstance(obj, types.ModuleType):
            self.imports.append(f"import {obj.__name__}" if obj.__name__ == name else f"import {obj.__name__} as {name}")
        elif (inspect.isfunction(obj) or inspect.isclass(obj)) and _importable(obj):
            self.imports.append(f"from {obj.__module__} import {obj.__qualname__} as {name}")
        elif inspect.isfunction(obj) or inspect.isclass(obj):
            self.add_source(name, obj)
        elif _is_literal(obj):
            self.constants.append(f"{name} = {obj!r}")
        else:
            raise TypeError(
                f"`{user}` uses the global `{name}` (a {type(obj).__name__}), which cannot be sent to the "
                f"other processes. Create it inside `{user}`, or pass it as an argument (tensors, numbers, "
                "strings, lists and dicts of these travel)."
            )

    def add_source(self, name: str, obj: Any) -> None:
        if inspect.isfunction(obj):
            _check_sendable_function(obj, f"`{name}`")
        try:
            source = textwrap.dedent(inspect.getsource(obj) if inspect.isfunction(obj) else _class_source(obj))
        except (OSError, TypeError) as error:
            raise TypeError(
                f"the source of `{name}` cannot be found ({error}). Write it to a file with %%writefile "
                "and import it, or define it in a cell of this notebook."
            ) from None
        if obj.__name__ != name:
            source += f"\n{name} = {obj.__name__}\n"
        functions = [member for member in vars(obj).values() if inspect.isfunction(member)] if inspect.isclass(obj) else [obj]
        namespace = functions[0].__globals__ if functions else vars(sys.modules[obj.__module__])
        for function in functions:
            for dependency in sorted(_global_names(function.__code__)):
                if dependency in namespace and dependency != name:
                    self.add_object(dependency, namespace[dependency], name)
                elif dependency not in namespace and not hasattr(builtins, dependency) and dependency != name:
                    raise NameError(f"`{name}` uses `{dependency}`, which is not defined: define it before launching.")
        self.sources.append(source)

    def script(self, entry: str, workdir: Path) -> str:
        header = "# Generated by harness.launch: the launched function and what it uses, run on every rank.\n"
        body = "\n".join(["from __future__ import annotations", *self.imports, *self.constants, "", *self.sources])
        main = f"\nif __name__ == '__main__':\n    from harness.launch import run_rank\n    run_rank({entry}, {str(workdir)!r})\n"
        return header + body + main


def function_script(fn: Callable[..., Any], workdir: Path) -> str:
    """The source of a script that runs `fn` on a rank (what `launch` gives torchrun).

    Raises:
        TypeError: `fn` (or something it uses) cannot be sent: a lambda, a closure, an object that is
            neither a module, an importable function or class, a notebook function or class, nor a literal.
    """
    _check_sendable_function(fn, "the launched function")
    builder = _ScriptBuilder()
    if _importable(fn):
        builder.add_object(fn.__name__, fn, fn.__name__)
    else:
        builder.done.add(fn.__name__)  # a helper that calls it back must not add it a second time
        builder.add_source(fn.__name__, fn)
    return builder.script(fn.__name__, workdir)


# ----------------------------------------------------------------------------------------------------
# Values in and out: only what torch.load(weights_only=True) reads back


def _to_portable(value: Any) -> Any:
    pandas = sys.modules.get("pandas")  # only present (and only needed) when a DataFrame can be returned
    if pandas is not None and isinstance(value, pandas.DataFrame):
        return {_DATAFRAME_TAG: value.to_dict(orient="list")}
    if isinstance(value, torch.nn.Module):
        raise TypeError(
            "a launched function returned a module: return its state_dict() instead "
            "(of the unwrapped model: ddp_model.module.state_dict())."
        )
    if isinstance(value, dict):
        return {key: _to_portable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_portable(item) for item in value)
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    return value


def _from_portable(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {_DATAFRAME_TAG}:
            import pandas

            return pandas.DataFrame(value[_DATAFRAME_TAG])
        return {key: _from_portable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_from_portable(item) for item in value)
    return value


def _save_portable(value: Any, path: Path, what: str) -> None:
    torch.save(_to_portable(value), path)
    try:
        torch.load(path, weights_only=True)
    except Exception as error:
        raise TypeError(
            f"{what} cannot travel between processes safely ({type(error).__name__}: {str(error).splitlines()[0]}). "
            "Use tensors, numbers, strings, and lists, tuples and dicts of these (state_dicts are fine)."
        ) from None


def _load_portable(path: Path) -> Any:
    return _from_portable(torch.load(path, weights_only=True))


# ----------------------------------------------------------------------------------------------------
# Inside each rank


class _RankPrefixed:
    """A text stream that writes whole lines prefixed with the rank, each in one write() to the file
    descriptor: the ranks share torchrun's pipe, and a line written in pieces would interleave with
    another rank's (a pipe write of up to 4096 bytes is never split)."""

    def __init__(self, fd: int, prefix: str) -> None:
        self.fd, self.prefix, self.pending = fd, prefix, ""

    def write(self, text: str) -> int:
        *complete, self.pending = (self.pending + text).split("\n")
        for line in complete:
            os.write(self.fd, f"{self.prefix}{line}\n".encode())
        return len(text)

    def flush(self) -> None:
        """Lines go out as they complete; a partial line waits for its end (or `finish`)."""

    def finish(self) -> None:
        if self.pending:
            self.write("\n")

    def isatty(self) -> bool:
        return False


def run_rank(fn: Callable[..., Any] | None, workdir: str) -> None:
    """Entry point of a launched rank: prefix output, join the group, run, save the result or the error.

    With `fn=None` the launched script (workdir/script.txt names it) runs as `__main__` instead and is
    responsible for its own process group (`harness.distributed.init_distributed`).
    """
    rank = int(os.environ.get("RANK", "0"))
    sys.stdout.flush()
    sys.stdout = out = _RankPrefixed(sys.stdout.fileno(), f"[rank{rank}] ")
    sys.stderr = err = _RankPrefixed(sys.stderr.fileno(), f"[rank{rank}] ")
    work = Path(workdir)
    try:
        if fn is None:
            _run_script(work)
        else:
            init_distributed()  # the backend the launcher was given (HARNESS_LAUNCH_BACKEND)
            args, kwargs = _load_portable(work / "args.pt")
            result = fn(*args, **kwargs)
            _save_portable(result, work / f"result_{rank}.pt", f"rank {rank}'s return value")
    except BaseException as error:  # noqa: BLE001 - every failure must reach the notebook with its traceback
        if isinstance(error, SystemExit) and not error.code:
            out.finish()
            cleanup_distributed()
            return
        message = "".join(traceback.format_exception(error))
        (work / f"error_{rank}.txt").write_text(message)
        out.finish()
        err.write(message)
        err.finish()
        os._exit(1)  # skip interpreter teardown: a dead peer can make process-group shutdown wait
    out.finish()
    err.finish()
    cleanup_distributed()


def _run_script(work: Path) -> None:
    import runpy

    script, *script_args = (work / "script.txt").read_text().split("\0")
    sys.argv = [script, *script_args]
    sys.path.insert(0, str(Path(script).resolve().parent))
    runpy.run_path(script, run_name="__main__")


# ----------------------------------------------------------------------------------------------------
# The torchrun launcher


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
        port: the rendezvous port; None lets torchrun pick a free one (--standalone).
        timeout_s: end every process and raise after this many seconds.
        quiet: collect the output without printing it.

    Returns:
        A LaunchResult: every rank's return value (function targets), the log and the wall time.

    Raises:
        ValueError: nproc beyond the machine, a port in use, or a script that does not exist.
        RuntimeError: NCCL without GPUs.
        TypeError: a function, global or argument that cannot be sent to other processes.
        LaunchError: a rank raised (its traceback in the message) or the launch timed out.
    """
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    check_backend(backend)
    _check_world_size(nproc, backend)
    if port is not None:
        _check_port(port)
    with tempfile.TemporaryDirectory(prefix="harness-launch-") as tmp:
        work = Path(tmp)
        entry = _prepare(target, work, args, kwargs or {}, script_args)
        command = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--max-restarts=0"]
        command += ["--standalone"] if port is None else ["--nnodes=1", "--master-addr=127.0.0.1", f"--master-port={port}"]
        command.append(str(entry))
        started = time.perf_counter()
        returncode, rank_lines, runner_lines = _run_torchrun(command, _launch_env(backend), timeout_s, quiet)
        seconds = time.perf_counter() - started
        log = "".join(rank_lines)
        if returncode is None:
            raise LaunchError(
                f"the launch did not finish within {timeout_s:g} s and every process was ended. A rank waiting "
                "in a collective (all_reduce, barrier) that another rank never reaches is the usual cause.",
                log=log,
            )
        first = _first_error(work)
        if first is not None:
            rank, message = first
            raise LaunchError(message, rank=rank, log=log)
        if returncode != 0:
            raise LaunchError(
                f"torchrun exited with status {returncode}. Its last lines:\n" + "".join(runner_lines[-30:]), log=log
            )
        results = [] if not callable(target) else [_load_portable(work / f"result_{r}.pt") for r in range(nproc)]
        return LaunchResult(results=results, log=log, seconds=seconds)


def _first_error(work: Path) -> tuple[int, str] | None:
    """The rank that failed first and the report on it: the others usually fail in turn, because their
    peer vanished ("Connection closed by peer"), and their tracebacks would hide the cause."""
    errors = sorted(work.glob("error_*.txt"), key=lambda path: path.stat().st_mtime_ns)
    if not errors:
        return None
    rank = int(errors[0].stem.split("_")[1])
    also = sorted(int(path.stem.split("_")[1]) for path in errors[1:])
    then = f" (then rank{'s' if len(also) > 1 else ''} {', '.join(map(str, also))} failed as a consequence)" if also else ""
    return rank, f"rank {rank} failed{then}; the other ranks were ended. Its traceback:\n\n{errors[0].read_text()}"


def _prepare(target: Any, work: Path, args: Sequence[Any], kwargs: dict[str, Any], script_args: Sequence[str]) -> Path:
    """Write the bootstrap script (and the arguments) into `work`; return the script torchrun runs."""
    entry = work / "rank_main.py"
    if callable(target):
        if script_args:
            raise ValueError("script_args are for script targets; pass a function's inputs as args/kwargs.")
        entry.write_text(function_script(target, work))
        _save_portable((tuple(args), dict(kwargs)), work / "args.pt", "the arguments")
        return entry
    script = Path(target)
    if not script.is_file():
        raise ValueError(f"{script} is not a file: pass a function, or the path of a Python script.")
    if args or kwargs:
        raise ValueError("args/kwargs are for function targets; pass a script's inputs as script_args.")
    (work / "script.txt").write_text("\0".join([str(script.resolve()), *map(str, script_args)]))
    entry.write_text(f"from harness.launch import run_rank\nrun_rank(None, {str(work)!r})\n")
    return entry


def _launch_env(backend: str) -> dict[str, str]:
    env = dict(os.environ)
    env["HARNESS_LAUNCH_BACKEND"] = backend
    # The ranks import what this process imports: functions of its modules are sent by reference.
    paths = [os.path.abspath(path or os.curdir) for path in sys.path]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]))
    env["PYTHONUNBUFFERED"] = "1"  # stream prints as they happen, not when a buffer fills
    env.setdefault("OMP_NUM_THREADS", "1")  # one intra-op thread per rank: N ranks share the cores
    return env


def _run_torchrun(
    command: list[str], env: dict[str, str], timeout_s: float, quiet: bool
) -> tuple[int | None, list[str], list[str]]:
    """Run torchrun, forwarding rank lines to stdout; returns (status or None on timeout, rank lines, own lines)."""
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


# ----------------------------------------------------------------------------------------------------
# The fork launcher (fast, CPU only)


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
    _check_world_size(nproc, "gloo")
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
            first = _first_error(work)
            if first is None and not last_attempt and any(work.glob("setup_error_*.txt")):
                raise _SetupFailed()
            if first is None:
                setup = sorted(work.glob("setup_error_*.txt"))
                what = "could not join the process group" if setup else f"ended with {status} without a Python traceback"
                detail = setup[0].read_text() if setup else log
                raise LaunchError(f"rank {failed} {what}; the other ranks were ended.\n\n{detail}", rank=failed, log=log)
            raise LaunchError(first[1], rank=first[0], log=log)
        results = [_load_portable(work / f"result_{r}.pt") for r in range(nproc)]
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
        try:
            store = dist.TCPStore("127.0.0.1", port, world_size=nproc + 1, is_master=False, timeout=timedelta(seconds=timeout_s))
            dist.init_process_group("gloo", store=store, rank=rank, world_size=nproc, timeout=timedelta(seconds=timeout_s))
        except Exception as error:
            (work / f"setup_error_{rank}.txt").write_text("".join(traceback.format_exception(error)))
            raise SystemExit(1) from None
        result = fn(*args, **kwargs)
        _save_portable(result, work / f"result_{rank}.pt", f"rank {rank}'s return value")
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


# ----------------------------------------------------------------------------------------------------
# `harness launch`: the same launcher from a shell


def add_arguments(parser: Any) -> None:
    """Arguments of `harness launch SCRIPT [ARGS...]`."""
    parser.add_argument("script", type=Path, help="the training script (it calls harness.distributed.init_distributed)")
    parser.add_argument("script_args", nargs="*", help="the script's own arguments (after --)")
    parser.add_argument("--nproc", type=int, default=2, help="processes on this machine (default 2)")
    parser.add_argument("--backend", choices=("gloo", "nccl"), default=None, help="default: nccl with GPUs, else gloo")
    parser.add_argument("--port", type=int, default=None, help="rendezvous port (default: a free one)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds before every process is ended")


def run(args: Any) -> int:
    """Run `harness launch`; a failure prints the failing rank's report and returns 1."""
    try:
        launch(args.script, args.nproc, script_args=args.script_args, backend=args.backend, port=args.port,
               timeout_s=args.timeout)
    except (LaunchError, ValueError, RuntimeError) as error:
        print(f"harness launch: {error}")
        return 1
    return 0
