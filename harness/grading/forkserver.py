"""A grading fork server: one process per batch imports the grader once, then forks a worker per job.

A worker started as a fresh process pays about 5 s of imports (torch, nbgrader and its server extension, the
harness) before it grades anything: a class pays that per student per assignment. `ForkServer` starts one
process per batch (`python -m harness.grading.forkserver`) that imports all of it and checks it is still one
thread: a fork copies only the forking thread, so a pool's threads (and the locks they hold) would be missing
in every worker. torch starts its intra-op pool at the first tensor operation, which the server never runs.

Each forked worker then becomes what `batch.run_job` used to start as a fresh process: a session of its own;
a private mount namespace when the job's `private_mounts` says so (`unshare(CLONE_NEWNS)` with private
propagation, what `unshare --mount --propagation private` did); stdin from /dev/null, stdout and stderr to the
student's log and no other descriptor of the server's (its control pipes, the other workers' pidfds); its random
generators re-seeded; then `autograde.main` on the job, with the same cgroup, sandbox, decoy and limits as
before, as the batch's own user (an unprivileged grader's server and workers are unprivileged too). The
feedback pages are made in the workers by the nbconvert and nbgrader modules the server imported once.

The protocol is JSON lines. The batch writes {"id", "job", "result", "log", "cwd", "private_mounts", "environment"}
to start a worker (the batch's environment variables, which the worker takes as its own: one server serves every
batch of its process) and {"id", "stop": true} to kill one with its process tree (the server does it: the worker
is its unreaped child, so its pid cannot be reused meanwhile). The server answers {"ready": pid} once, then
{"id", "pid"} when a worker starts and {"id", "returncode"} when it ends (negative: the signal that ended it).
It ends when its stdin closes. A server that dies is `ServerGone` for every job it held and every later one:
`batch` grades them in fresh processes, and the death is printed when it is seen, never silent.
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import select
import signal
import subprocess
import sys
import threading
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

READY_SECONDS = 600  # the server's imports: about 5 s on an idle machine, minutes on a crowded one
_CLONE_NEWNS, _MS_REC, _MS_PRIVATE = 0x00020000, 0x4000, 0x40000


class ServerUnavailable(RuntimeError):
    """The fork server could not start; the message says what was observed."""


class ServerGone(RuntimeError):
    """The fork server ended before the worker's end was known; the message says how it ended."""


@dataclass(frozen=True)
class WorkerCall:
    """One worker to start: its job and result files, its log, its working folder and its mount namespace."""

    job_file: Path
    result_file: Path
    log_path: Path
    cwd: Path
    private_mounts: bool
    environment: dict[str, str] = field(default_factory=lambda: dict(os.environ))  # the batch's, when it asks


@dataclass
class _Pending:
    """A worker as the batch sees it: its pid once started, its return code once ended."""

    started: threading.Event = field(default_factory=threading.Event)
    ended: threading.Event = field(default_factory=threading.Event)
    pid: int = 0
    returncode: int | None = None


class ForkServer:
    """The batch's side of one fork server: start workers, wait for them, stop them. Thread-safe."""

    def __init__(self, log_path: Path, cwd: Path) -> None:
        """Start the server (its stderr goes to `log_path`) and wait until it has imported the grader.

        Raises:
            ServerUnavailable: it ended, or did not become ready within `READY_SECONDS`.
        """
        self.log_path = log_path
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()  # apart from `_lock`, which the reader takes between the server's answers
        self._pending: dict[int, _Pending] = {}
        self._next = 0
        self._closing = False
        self._finished = False  # the server's answers have ended
        self.gone: str | None = None  # how the server ended, once it ended unasked
        self._ready = threading.Event()
        try:
            with log_path.open("w") as log:
                self._process = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                                 stdout=subprocess.PIPE, stderr=log, cwd=cwd, start_new_session=True)
        except OSError as error:
            raise ServerUnavailable(f"{type(error).__name__}: {error}") from None
        self.pid = self._process.pid
        self._reader = threading.Thread(target=self._read, name="forkserver-reader", daemon=True)
        self._reader.start()
        if not self._ready.wait(READY_SECONDS) or self.gone:
            self.close()
            raise ServerUnavailable(self.gone or f"it did not finish its imports in {READY_SECONDS} s "
                                    f"(see {log_path})")

    @property
    def closed(self) -> bool:
        """Whether `close` was called."""
        return self._closing

    def _read(self) -> None:
        """Dispatch the server's answers; at its end, release every waiting job."""
        assert self._process.stdout is not None
        for line in self._process.stdout:
            message = json.loads(line)
            if "ready" in message:
                self._ready.set()
                continue
            with self._lock:
                pending = self._pending.get(message["id"])
            if pending is None:
                continue
            if "pid" in message:
                pending.pid = message["pid"]
                pending.started.set()
            if "returncode" in message:
                pending.returncode = message["returncode"]
                pending.ended.set()
        returncode = self._process.wait()
        with self._lock:
            if not self._closing:
                self.gone = f"the grading fork server (pid {self.pid}) {ended(returncode)}; see {self.log_path}"
                print(f"note: {self.gone}: the submissions it was grading are graded again, and the rest of the "
                      "batch, each in a fresh process", flush=True)
            waiting = list(self._pending.values())
            self._finished = True
        self._ready.set()
        for pending in waiting:
            pending.started.set()
            pending.ended.set()

    def _send(self, message: dict[str, Any]) -> None:
        assert self._process.stdin is not None
        try:
            with self._write_lock:
                self._process.stdin.write((json.dumps(message) + "\n").encode())
                self._process.stdin.flush()
        except (BrokenPipeError, ValueError):  # the server is gone: `_read` says how
            self._reader.join()

    def _gone(self) -> ServerGone:
        self._reader.join()
        return ServerGone(self.gone or f"the grading fork server (pid {self.pid}) was closed")

    def run(self, call: WorkerCall, timeout: float) -> tuple[int, bool]:
        """Fork a worker for `call`, wait up to `timeout` seconds, kill its process tree if it runs longer.

        Returns:
            The worker's return code (negative: the signal that ended it) and whether the batch stopped it.

        Raises:
            ServerGone: the server ended first; the worker (if started) is killed with its process tree and its
                result file removed, so the job can be graded again from the start.
        """
        with self._lock:
            if self._finished:
                raise ServerGone(self.gone or f"the grading fork server (pid {self.pid}) was closed")
            ident, self._next = self._next, self._next + 1
            pending = self._pending[ident] = _Pending()
        try:
            self._send({"id": ident, "job": str(call.job_file), "result": str(call.result_file),
                        "log": str(call.log_path), "cwd": str(call.cwd), "private_mounts": call.private_mounts,
                        "environment": call.environment})
            pending.started.wait()
            stopped = not pending.ended.wait(timeout)
            if stopped:
                self._send({"id": ident, "stop": True})
                pending.ended.wait()
            if pending.returncode is None:
                if pending.pid:
                    from harness.launch import end_process_tree

                    end_process_tree(pending.pid, grace_s=0.0)
                call.result_file.unlink(missing_ok=True)
                raise self._gone()
            return pending.returncode, stopped
        finally:
            with self._lock:
                del self._pending[ident]

    def close(self) -> None:
        """End the server (its workers have all ended by now: each `run` waits for its own)."""
        with self._lock:
            self._closing = True
        if self._process.stdin is not None:
            try:
                self._process.stdin.close()
            except BrokenPipeError:
                pass
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._reader.join()


def ended(returncode: int) -> str:
    """How a process ended, from its return code: "exited with status N" or "was killed by SIGNAME"."""
    if returncode < 0:
        number = -returncode
        name = signal.Signals(number).name if number in signal.valid_signals() else str(number)
        return f"was killed by {name}"
    return f"exited with status {returncode}"


# --- the server process -------------------------------------------------------------------------------------


def _warm() -> None:
    """Import everything a worker uses, once (the grader, nbgrader's apps and gradebook, the HTML exporter), and
    do once what every worker's first feedback page and gradebook write would: one HTML export of a small notebook
    (the Markdown, highlighting and sanitising regexes and lexers it compiles stay in every fork) and SQLAlchemy's
    mapper configuration. None starts a thread (`serve` checks)."""
    import jupyter_client.manager  # noqa: F401
    import nbformat
    import nbgrader.api  # noqa: F401
    import nbgrader.apps  # noqa: F401
    from nbconvert.exporters import HTMLExporter
    from sqlalchemy.orm import configure_mappers

    import harness.grading.autograde  # noqa: F401
    import harness.grading.execute  # noqa: F401
    import harness.launch  # noqa: F401

    configure_mappers()
    HTMLExporter().from_notebook_node(nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# A title\n*Some* `code`, a [link](https://example.org)"),
        nbformat.v4.new_code_cell("x = 1\nprint(x)", outputs=[nbformat.v4.new_output("stream", text="1\n")])]))


def _threads() -> int:
    """This process's threads as the kernel counts them (native ones included, which `threading` misses)."""
    return len(os.listdir("/proc/self/task"))


def _answer(message: dict[str, Any]) -> None:
    os.write(1, (json.dumps(message) + "\n").encode())


def _private_mounts() -> None:
    """Move this process into a mount namespace of its own whose mounts propagate nowhere."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNS) != 0 or libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"a private mount namespace could not be made: {os.strerror(error)}")


def _reseed() -> None:
    """Fresh random state in the worker: a fork copies the server's generators."""
    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    if "torch" in sys.modules:
        sys.modules["torch"].seed()


def _become_worker(request: dict[str, Any]) -> NoReturn:
    """In the forked child: isolate it like a fresh worker process, grade the job, exit (never returns)."""
    code = 1
    try:
        os.setsid()
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        if request["private_mounts"]:
            _private_mounts()
        os.environ.clear()  # the batch's environment now, as a fresh worker process would inherit it
        os.environ.update(request["environment"])
        os.chdir(request["cwd"])
        _reseed()
        print(f"[fork server] worker {os.getpid()} forked from the grading fork server {os.getppid()}", flush=True)
        from harness.grading import autograde

        code = autograde.main([request["job"], request["result"]])
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _stop(pid: int) -> None:
    """Kill worker `pid` and every process under it, without reaping it (the serve loop reports its end)."""
    import psutil

    try:
        family = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        family = []
    for process in family:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    try:
        os.killpg(pid, signal.SIGKILL)  # anything that re-parented itself but kept the worker's session
    except (ProcessLookupError, PermissionError):
        pass


def serve() -> int:
    """The server's loop: import once, then fork a worker per request until stdin closes."""
    _warm()
    if (threads := _threads()) > 1:
        print(f"the fork server has {threads} threads after its imports; forking now would leave the workers "
              "without them (and maybe with their locks held): nothing was forked", file=sys.stderr)
        return 3
    _answer({"ready": os.getpid()})
    workers: dict[int, tuple[int, int]] = {}  # pidfd -> (request id, pid)
    buffer = b""
    while True:
        readable, _, _ = select.select([0, *workers], [], [])
        for descriptor in readable:
            if descriptor != 0:
                ident, pid = workers.pop(descriptor)
                os.close(descriptor)
                _, status = os.waitpid(pid, 0)
                _answer({"id": ident, "returncode": os.waitstatus_to_exitcode(status)})
                continue
            chunk = os.read(0, 65536)
            if not chunk:
                return 0
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                request = json.loads(line)
                if request.get("stop"):
                    running = {ident: pid for ident, pid in workers.values()}
                    if request["id"] in running:
                        _stop(running[request["id"]])
                    continue
                pid = os.fork()
                if pid == 0:
                    _become_worker(request)
                workers[os.pidfd_open(pid)] = (request["id"], pid)
                _answer({"id": request["id"], "pid": pid})


if __name__ == "__main__":
    raise SystemExit(serve())
