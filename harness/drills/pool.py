"""The checker's side of the answer's runner (`harness.drills.runner`): start, feed and end runner processes.

Each runner is a fresh interpreter (`harness.drills.fresh`: the harness compiled from source, no bytecode), in a
new session, started with `close_fds` and only its end of a control socket passed (`pass_fds`), so the answer
inherits no descriptor of the checker's (no client connection, no socket, no log), and shares no memory with
it. Where bubblewrap works, the runner runs in the grading sandbox (`harness.sandbox.bwrap_command`):
its own PID, network (loopback only), IPC and UTS namespaces, as an unprivileged user, the system and the
`harness` package read-only, a private `/tmp`, no variable of the user's environment, no view of the drills
home (progress, the checker's socket and key); killing it ends its PID namespace, so every process the
answer started ends with it.

Where bubblewrap does not work (not installed, or no user namespaces: `HARNESS_DRILL_SANDBOX=off` forces
this), the runner runs as the user, in a new session and a private working folder, and the containment is
the runner's own: it is a child subreaper that kills everything below it after each answer, the checker
kills its session, and a checker that is itself a subreaper (`enable_subreaper`: the warm checker and the
inline CLI) kills every orphan that was reparented to it. What the fallback cannot stop is an answer that
uses the user's own rights against the user's files (rewriting the harness, reading the progress key):
install bubblewrap for that.

Starting a runner costs a torch import (seconds); the pool keeps one started ahead, so the next check finds
it ready. A runner takes `uses` answers (1 for the CLI: each runner sees one answer; the test suite raises it
to check the bank fast), each in its own forked child.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import secrets
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass

from harness.contract import wire
from harness.contract.case import Case
from harness.drills.fresh import python_command
from harness.drills.printed import collect, shown
from harness.drills.runner import LENGTH, MAX_JOB_BYTES, PR_SET_CHILD_SUBREAPER, end_descendants, prctl

START_TIMEOUT_S = 180.0
_SUBREAPER = False


@dataclass(frozen=True)
class Job:
    """One answer to check: the drill, the answer's source and file name, and the case."""

    drill: str
    source: str
    filename: str
    case: Case


@dataclass(frozen=True)
class Report:
    """What came back from the answer's process: the observation bytes (None when none came), why none came
    ("timeout", "no-report"), and what the answer printed (its last 64 KiB, `harness.drills.printed`)."""

    frame: bytes | None
    how: str
    output: str


class RunnerFailed(RuntimeError):
    """A runner could not be started (the message says why and what to do)."""


def enable_subreaper() -> None:
    """Make this process a child subreaper: orphans of the answers' processes are reparented to it, and the
    pool kills them after each answer (the bubblewrap-free fallback's last line)."""
    global _SUBREAPER
    _SUBREAPER = prctl(PR_SET_CHILD_SUBREAPER, 1)


@functools.cache
def sandbox_reason() -> str | None:
    """Why answers run without the sandbox (None when they run in it)."""
    if os.environ.get("HARNESS_DRILL_SANDBOX", "auto") == "off":
        return "HARNESS_DRILL_SANDBOX=off"
    from harness.sandbox import unavailable_reason

    return unavailable_reason()


def isolation() -> str:
    """How answers are isolated here, in one line."""
    reason = sandbox_reason()
    if reason is None:
        return "answers run in a bubblewrap sandbox (own PID and network namespaces, read-only harness)"
    return f"answers run without the sandbox ({reason.split(':')[0]}): a fresh process in its own session only"


def _threads() -> int:
    try:
        return max(1, int(os.environ.get("OMP_NUM_THREADS", "")))
    except ValueError:
        return min(4, os.cpu_count() or 1)


class Runner:
    """One runner process, started at once; `run` hands it an answer."""

    def __init__(self, uses: int) -> None:
        self.uses = uses
        self.folder = tempfile.mkdtemp(prefix="harness-drill-runner-")
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.log = tempfile.TemporaryFile()
        command = python_command("harness.drills.runner", str(theirs.fileno()), str(uses))
        if sandbox_reason() is None:
            from harness.sandbox import Spec, bwrap_command

            spec = Spec(memory_mb=0, threads=_threads(), sandboxed=True, runtime_dir=self.folder,
                        data_dir=os.path.join(self.folder, "no-data"))
            command = bwrap_command(spec, command)
        try:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
                                            close_fds=True, pass_fds=(theirs.fileno(),), start_new_session=True,
                                            cwd=self.folder)
        finally:
            theirs.close()
        self.ready = False

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Wait until the runner has imported torch and the bank; RunnerFailed when it cannot."""
        if self.ready:
            return
        if _receive(self.control, timeout_s) != b"ready":
            self.close()
            self.log.seek(0)
            tail = self.log.read()[-1500:].decode(errors="replace")
            raise RunnerFailed(f"the drill runner did not start (exit {self.process.poll()}): {tail}\nSet "
                               "HARNESS_DRILL_SANDBOX=off if the sandbox is what fails here.")
        self.ready = True

    def run(self, job: Job, timeout_s: float) -> Report:
        """Run one answer; its report. The runner is closed afterwards unless it has uses left and is sound."""
        self.wait_ready()
        self.uses -= 1
        nonce = secrets.token_bytes(16)
        message = json.dumps({"drill": job.drill, "source": job.source, "filename": job.filename,
                              "case": asdict(job.case), "nonce": nonce.hex()}).encode()
        if len(message) > MAX_JOB_BYTES:
            return Report(None, "too-large", "")
        read_end, write_end = os.pipe()
        output_read, output_write = os.pipe()  # drained as the answer runs: only the last 64 KiB is kept
        try:
            try:
                socket.send_fds(self.control, [message], [write_end, output_write])
            except OSError:
                self.close()
                return Report(None, "no-report", "")
            finally:
                os.close(write_end)
                os.close(output_write)
            data, timed_out, tail = collect(read_end, output_read, timeout_s, wire.MAX_BYTES + 64)
        finally:
            os.close(read_end)
            os.close(output_read)
        sound = not timed_out and _receive(self.control, 30.0) == b"done"
        if timed_out or not sound or self.uses <= 0:
            self.close()
        printed = shown(tail)
        if timed_out:
            return Report(None, "timeout", printed)
        if len(data) < len(nonce) + LENGTH.size or not secrets.compare_digest(data[:len(nonce)], nonce):
            return Report(None, "no-report", printed)
        (length,) = LENGTH.unpack_from(data, len(nonce))
        body = data[len(nonce) + LENGTH.size:]
        return Report(body, "", printed) if length == len(body) else Report(None, "no-report", printed)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None and self.uses > 0

    def close(self) -> None:
        """Kill the runner's session (its PID namespace under bubblewrap) and everything left of it."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait()
        self.control.close()
        self.log.close()
        if _SUBREAPER:
            end_descendants(keep=frozenset(_POOL.pids()))
        shutil.rmtree(self.folder, ignore_errors=True)
        self.uses = 0


def _receive(control: socket.socket, timeout_s: float) -> bytes:
    ready, _, _ = select.select([control], [], [], timeout_s)
    try:
        return control.recv(64) if ready else b""
    except OSError:
        return b""


def read_all(fd: int, timeout_s: float) -> tuple[bytes, bool]:
    """Everything written to `fd` until its writers close it; (data, True) when the deadline passed first."""
    deadline = time.monotonic() + timeout_s
    chunks: list[bytes] = []
    size = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return b"".join(chunks), True
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks), False
            chunks.append(chunk)
            size += len(chunk)
            if size > wire.MAX_BYTES + 64:
                return b"", False


class Pool:
    """Runners started ahead of need: `run` uses the one waiting and starts the next."""

    def __init__(self) -> None:
        self.uses = int(os.environ.get("HARNESS_DRILL_RUNNER_USES", "1"))
        self.spare: Runner | None = None

    def pids(self) -> list[int]:
        return [self.spare.process.pid] if self.spare is not None else []

    def warm(self) -> None:
        """Start a runner now, if none is waiting."""
        if self.spare is None or not self.spare.alive:
            self.spare = Runner(self.uses)

    def run(self, job: Job, timeout_s: float) -> Report:
        """Check one answer on a waiting runner; another is started to wait for the next."""
        self.warm()
        runner = self.spare
        assert runner is not None
        if runner.uses <= 1:
            self.spare = None
        report = runner.run(job, timeout_s)
        if not runner.alive:
            self.spare = None if self.spare is runner else self.spare
        self.warm()
        return report

    def close(self) -> None:
        if self.spare is not None:
            spare, self.spare = self.spare, None
            spare.close()


_POOL = Pool()
atexit.register(_POOL.close)


def warm() -> None:
    """Start the module pool's first runner now (the warm checker does, so the first check finds it ready)."""
    _POOL.warm()


def run_answer(job: Job, timeout_s: float) -> Report:
    """Run `job` in a fresh runner (the module's pool)."""
    return _POOL.run(job, timeout_s)


def set_uses(uses: int) -> None:
    """How many answers each new runner takes (the test suite raises it; the CLI keeps 1)."""
    _POOL.close()
    _POOL.uses = uses
