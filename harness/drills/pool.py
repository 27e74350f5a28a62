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

Starting a runner costs a torch import (seconds, half a minute on a loaded 2-core machine); forking one costs
milliseconds. So a runner is a warm template: it imports torch and the bank once, then takes up to `uses`
answers, each in a child forked from it that gets the isolation a fresh runner had (the sandbox the runner
sits in, no descriptor but its two pipes, its own session, everything it started killed after it, its
output capped by the checker), and between answers the runner empties the scratch folders the answer could
write (`harness.drills.runner.scrub`), so no answer sees what an earlier one left. A runner that timed out,
did not report as it should or used up its answers is killed; the warm checker keeps a spare started ahead
(`warm`), so the next answer never waits for an import.
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
import sys
import tempfile
import time
from dataclasses import asdict, dataclass

from harness.contract import wire
from harness.contract.case import Case
from harness.drills.fresh import python_command
from harness.drills.printed import collect, shown
from harness.drills.runner import LENGTH, MAX_JOB_BYTES, PR_SET_CHILD_SUBREAPER, end_descendants, prctl
from harness.drills.server import runtime_dir
from harness.drills.store import home

START_TIMEOUT_S = 180.0
DEFAULT_USES = 200  # answers per runner before a new one takes over
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


@functools.cache
def namespaces() -> tuple[str, ...]:
    """Without the sandbox: the `unshare` command line that gives the runner its own PID, network, IPC, UTS and
    mount namespaces, where this platform allows it (util-linux's `unshare`, root or user namespaces); () where
    it does not (macOS, or no namespaces)."""
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        return ()
    flags = ("--pid", "--fork", "--kill-child", "--net", "--ipc", "--uts", "--mount", "--mount-proc")
    if os.geteuid() != 0:
        flags = ("--user", "--map-root-user", *flags)
    try:
        trial = subprocess.run(["unshare", *flags, "true"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return ("unshare", *flags) if trial.returncode == 0 else ()


def isolation() -> str:
    """How answers are isolated here, in one line."""
    if sandbox_reason() is None:
        return "answers run in a bubblewrap sandbox (own PID and network namespaces, read-only harness)"
    return f"answers run without the sandbox: {unsandboxed_label()}"


def unsandboxed_label() -> str:
    """Why and how answers run without the bubblewrap sandbox, for the candidate ("" when they run in it)."""
    reason = sandbox_reason()
    if reason is None:
        return ""
    where = ("in its own PID, network and mount namespaces (unshare), your drills folder hidden from it"
             if namespaces() else "in a process and session of its own only")
    return (f"checked without the bubblewrap sandbox ({reason.split(':')[0]}): your answer ran as you, {where}, "
            "and could read or change your files")


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
        # what an answer can write, emptied by the runner after each: the sandbox's /tmp and /dev/shm and the folder
        # bound into it, or (without the sandbox) the runner's working folder
        scratch = ["/tmp", "/dev/shm", self.folder] if sandbox_reason() is None else [self.folder]
        hidden = (str(home()), str(runtime_dir())) if sandbox_reason() is not None and namespaces() else ()
        command = python_command("harness.drills.runner", str(theirs.fileno()), str(uses), json.dumps(scratch),
                                 *hidden)
        seccomp = None  # a run as root: the filter that refuses a user namespace (`harness.sandbox`)
        if sandbox_reason() is not None:
            command = [*namespaces(), *command]
        else:
            from harness.sandbox import Spec, bwrap_command, user_namespace_filter

            spec = Spec(memory_mb=0, threads=_threads(), sandboxed=True, runtime_dir=self.folder,
                        data_dir=os.path.join(self.folder, "no-data"))
            seccomp = user_namespace_filter()
            command = bwrap_command(spec, command, seccomp)
        passed = (theirs.fileno(), *([seccomp] if seccomp is not None else []))
        try:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
                                            close_fds=True, pass_fds=passed, start_new_session=True,
                                            cwd=self.folder)
        finally:
            theirs.close()
            if seccomp is not None:
                os.close(seccomp)
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
    """The runner that takes the next answer, and (once `warm` was called) a spare started ahead of need."""

    def __init__(self) -> None:
        self.uses = int(os.environ.get("HARNESS_DRILL_RUNNER_USES", str(DEFAULT_USES)))
        self.active: Runner | None = None
        self.spare: Runner | None = None
        self.keep_spare = False

    def pids(self) -> list[int]:
        return [runner.process.pid for runner in (self.active, self.spare) if runner is not None]

    def warm(self) -> None:
        """Start the runners now: the one for the next answer and, from now on, a spare."""
        self.keep_spare = True
        self._fill()

    def _fill(self) -> None:
        if self.active is None or not self.active.alive:
            self.active, self.spare = (self.spare, None) if self.spare is not None and self.spare.alive else (
                Runner(self.uses), self.spare)
        if self.keep_spare and (self.spare is None or not self.spare.alive):
            self.spare = Runner(self.uses)

    def run(self, job: Job, timeout_s: float) -> Report:
        """Check one answer on the active runner (a fork of it); a runner that retires is replaced by the spare."""
        self._fill()
        runner = self.active
        assert runner is not None
        report = runner.run(job, timeout_s)
        if not runner.alive:
            self.active = None
            if self.keep_spare:
                self._fill()
        return report

    def close(self) -> None:
        for runner in (self.active, self.spare):
            if runner is not None:
                runner.close()
        self.active = self.spare = None


_POOL = Pool()
atexit.register(_POOL.close)


def warm() -> None:
    """Start the module pool's runner and its spare now (the warm checker does, so no check waits for an
    import)."""
    _POOL.warm()


def run_answer(job: Job, timeout_s: float) -> Report:
    """Run `job` in a child of the module pool's runner."""
    return _POOL.run(job, timeout_s)


def set_uses(uses: int) -> int:
    """How many answers each new runner takes (`DEFAULT_USES` unless told; 1 gives every answer a new runner); the
    number it replaces, for a caller to put back."""
    _POOL.close()
    previous, _POOL.uses = _POOL.uses, uses
    return previous
