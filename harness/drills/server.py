"""The warm checker: one process that imports torch and the bank once and checks answers on request.

`harness drill check` asks it over a Unix socket and starts it when none answers. The socket lives in a private
directory the user owns, mode 0700 (`$XDG_RUNTIME_DIR/harness-drill-<key>`, else `$HARNESS_HOME/drills/run`),
opened without following links and verified (owner, mode) before use; a directory owned by anyone else is
refused with a message. Both ends check the other's credentials (SO_PEERCRED): the client talks only to a
process of its own user, the checker answers only its own user, and `stop-checker` ends the process it
verified. The client resolves the answer's path itself and sends it absolute.

Each answer runs in a child forked from a warm runner process that imported torch and the bank ahead
(`harness.drills.pool`; a spare runner waits to take over); the judge is forked from the checker
(`harness.drills.checker`). The checker records the verdict in the progress file itself, signed
(`harness.drills.progress`): the CLI only prints it. It serves one request at a time, leaves after `IDLE_S`
seconds without one, and leaves at once when the harness's code changed since it started (the client sends
a fingerprint of it, `__pycache__` included; the checker compiles the harness from source anyway:
`harness.drills.fresh`). `HARNESS_DRILL_CHECKER=inline` (`check_once`) starts the same checker, compiled from
source the same way, for one check and no longer: one path, whichever way the command is asked.

This module's client half imports neither torch nor the bank: it is what keeps a check fast.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.drills.fresh import python_command
from harness.drills.store import home

IDLE_S = 900.0
START_TIMEOUT_S = 120.0
REPLY_TIMEOUT_S = 300.0
SOCKET_NAME = "checker.sock"
_WATCHED = ("drills", "drills/bank", "drills/bank/held", "checks", "contract")
_CREDENTIALS = struct.Struct("3i")


class NotPrivate(RuntimeError):
    """The checker's directory or socket is not this user's alone (the message says what to do)."""


def runtime_dir() -> Path:
    """The private directory of this drills home's checker socket."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and Path(xdg).is_absolute():
        key = hashlib.sha256(str(home().resolve()).encode()).hexdigest()[:12]
        return Path(xdg) / f"harness-drill-{key}"
    return home() / "run"


@contextlib.contextmanager
def private_dir() -> Iterator[str]:
    """The socket's address inside the verified private directory (through a descriptor held on it, so the
    directory cannot be swapped between the check and the use). NotPrivate when it is not the user's alone."""
    path = runtime_dir()
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    try:
        fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as error:
        raise NotPrivate(f"{path} is not a directory ({error.strerror}): remove it, and the drill checker will "
                         "make its own") from None
    try:
        info = os.fstat(fd)
        if info.st_uid != os.getuid():
            raise NotPrivate(f"{path} belongs to user id {info.st_uid}, not to you ({os.getuid()}): another user "
                             "could intercept your drill checks there, so the checker refuses it. Remove it (ask an "
                             "administrator if you cannot), or set HARNESS_HOME or XDG_RUNTIME_DIR to a directory "
                             "of your own.")
        if info.st_mode & 0o077:
            os.chmod(f"/proc/self/fd/{fd}", 0o700)
        yield f"/proc/self/fd/{fd}/{SOCKET_NAME}"
    finally:
        os.close(fd)


def peer(connection: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end of a Unix socket (SO_PEERCRED)."""
    pid, uid, _ = _CREDENTIALS.unpack(connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                            _CREDENTIALS.size))
    return pid, uid


def fingerprint() -> str:
    """The harness code a checker runs: the interpreter and the size and time of every drill and check module."""
    package = Path(__file__).resolve().parents[1]
    stamps = [sys.executable]
    for folder in _WATCHED:
        if not (package / folder).is_dir():
            continue
        for entry in sorted(os.scandir(package / folder), key=lambda e: e.name):
            if entry.name.endswith(".py"):
                info = entry.stat()
                stamps.append(f"{folder}/{entry.name}:{info.st_size}:{info.st_mtime_ns}")
    return hashlib.sha256("\n".join(stamps).encode()).hexdigest()


def _connect(timeout_s: float) -> tuple[socket.socket, int]:
    """A connection to this home's checker and the checker's pid, verified to be the user's own process.
    OSError when none is listening; NotPrivate when the directory or the process is someone else's."""
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.settimeout(timeout_s)
        with private_dir() as address:
            client.connect(address)
        pid, uid = peer(client)
        if uid != os.getuid():
            raise NotPrivate(f"the drill checker's socket is served by user id {uid}, not by you ({os.getuid()}): "
                             f"refused. Remove {runtime_dir()} and check again.")
        return client, pid
    except BaseException:
        client.close()
        raise


def _exchange(request: dict[str, Any], timeout_s: float) -> tuple[dict[str, Any], int]:
    """Send one request to the running checker; its reply and its pid. OSError when none is listening."""
    client, pid = _connect(timeout_s)
    with client:
        client.sendall(json.dumps(request).encode() + b"\n")
        client.shutdown(socket.SHUT_WR)
        return json.loads(_receive(client)), pid


def _receive(connection: socket.socket) -> bytes:
    """Everything the other end sends until it shuts its side down."""
    return b"".join(iter(lambda: connection.recv(1 << 16), b""))


def _start() -> None:
    """Start a checker for this drills home, detached, logging to checker.log; wait until it listens."""
    home().mkdir(parents=True, exist_ok=True)
    log_path = home() / "checker.log"
    with open(log_path, "ab") as log:
        process = subprocess.Popen(python_command("harness.drills.server"), stdin=subprocess.DEVNULL,
                                   stdout=log, stderr=log, start_new_session=True, close_fds=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log_path.read_text(errors="replace")[-1500:]
            raise RuntimeError(f"the drill checker stopped as it started (exit {process.returncode}); the end of "
                               f"{log_path}:\n{tail}")
        try:
            _exchange({"ping": True}, 5.0)
            return
        except (OSError, json.JSONDecodeError):
            time.sleep(0.05)
    raise RuntimeError(f"the drill checker did not start within {START_TIMEOUT_S:.0f} s: see {home() / 'checker.log'}")


def request_check(drill_id: str, path: Path, order: list[int] | None, mock: int | None = None) -> dict[str, Any]:
    """The checker's result for `path` (made absolute here) as an answer to `drill_id`, recorded by the
    checker; a checker is started when none is running."""
    request = {"drill": drill_id, "path": str(Path(path).resolve()), "order": order, "mock": mock,
               "fingerprint": fingerprint()}
    for _ in range(3):
        try:
            reply, _ = _exchange(request, REPLY_TIMEOUT_S)
        except (OSError, json.JSONDecodeError):
            _start()
            continue
        if not reply.get("stale"):
            return reply
        time.sleep(0.1)  # the old checker is leaving: the next try starts a new one
    raise RuntimeError("could not reach the drill checker; retry, or set HARNESS_DRILL_CHECKER=inline")


def check_once(drill_id: str, path: Path, order: list[int] | None, mock: int | None = None) -> dict[str, Any]:
    """`request_check`'s reply from a checker started for this one check (HARNESS_DRILL_CHECKER=inline): it pays
    the imports every time, and leaves no process behind."""
    request = {"drill": drill_id, "path": str(Path(path).resolve()), "order": order, "mock": mock,
               "fingerprint": fingerprint()}
    done = subprocess.run(python_command("harness.drills.server", "once"), input=json.dumps(request),
                          capture_output=True, text=True, timeout=START_TIMEOUT_S + REPLY_TIMEOUT_S)
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(f"the one-check drill checker stopped without a verdict (exit {done.returncode}): "
                           f"{done.stderr[-1500:]}") from None


def _serve_once() -> None:
    """`server once`: answer the one request on stdin, write the reply on stdout (nothing else goes there)."""
    from harness.drills.pool import enable_subreaper

    enable_subreaper()
    reply_fd = os.dup(1)
    os.dup2(2, 1)  # whatever the checker's libraries print goes to stderr, never into the reply
    reply, _ = _answer(json.loads(sys.stdin.read()), fingerprint())
    with os.fdopen(reply_fd, "w") as out:
        out.write(json.dumps(reply))


def stop() -> int | None:
    """Ask this home's checker to leave; the pid of the (verified) process that left, None when none ran."""
    try:
        reply, pid = _exchange({"stop": True}, 10.0)
    except (OSError, json.JSONDecodeError):
        return None
    if not reply.get("stopped"):
        return None
    deadline = time.monotonic() + 10.0
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    if Path(f"/proc/{pid}").exists():  # the verified checker, still there: end it
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    return pid


def _answer(request: dict[str, Any], started: str) -> tuple[dict[str, Any], bool]:
    """The reply to one request, and whether the checker should leave after sending it."""
    from harness.drills.checker import check_file
    from harness.drills.core import get_drill
    from harness.drills.progress import record_verdict

    if request.get("ping"):
        return {"pong": True}, False
    if request.get("stop"):
        return {"stopped": True}, True
    if request.get("fingerprint") != started:
        return {"stale": True}, True
    try:
        drill = get_drill(str(request["drill"]))
    except KeyError as error:
        return {"error": str(error.args[0])}, False
    path = Path(str(request["path"]))
    if not path.is_absolute():
        return {"error": f"the checker takes absolute answer paths, not {path}: update the harness"}, False
    order = request.get("order")
    result = check_file(drill, path, order=tuple(order) if order else None).as_dict()
    mock = request.get("mock")
    recorded = record_verdict(drill.id, result, mock=mock if isinstance(mock, int) else None)
    return {**result, "note": recorded.note, "problem": recorded.problem}, False


def serve(idle_s: float = IDLE_S) -> None:
    """Listen on this home's socket and check answers until idle for `idle_s` seconds or told to leave."""
    from harness.drills.core import all_drills
    from harness.drills.pool import enable_subreaper, isolation, warm

    enable_subreaper()
    all_drills()  # import torch and the whole bank once, before the first request
    started = fingerprint()
    warm()  # the first answer's runner imports while the candidate types
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        with private_dir() as address:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(address)  # in our private directory: a socket a dead checker left
            server.bind(address)
            ours = os.stat(address).st_ino
        server.listen(8)
        server.settimeout(idle_s)
        print(f"checker {os.getpid()} listening; {isolation()}", flush=True)
        try:
            while True:
                try:
                    connection, _ = server.accept()
                except TimeoutError:
                    return
                with connection:
                    if peer(connection)[1] != os.getuid():
                        print(f"refused a connection from user id {peer(connection)[1]}", flush=True)
                        continue
                    connection.settimeout(30.0)
                    try:
                        reply, leave = _answer(json.loads(_receive(connection)), started)
                    except (OSError, json.JSONDecodeError, KeyError, TypeError) as error:
                        reply, leave = {"error": f"bad request ({type(error).__name__})"}, False
                    with contextlib.suppress(OSError):
                        connection.sendall(json.dumps(reply).encode())
                if leave:
                    return
        finally:
            _remove_own_socket(ours)


def _remove_own_socket(inode: int) -> None:
    """Remove the socket file if it is still this checker's (a newer checker may have replaced it)."""
    with contextlib.suppress(FileNotFoundError, NotPrivate), private_dir() as address:
        if os.stat(address).st_ino == inode:
            os.unlink(address)


if __name__ == "__main__":
    _serve_once() if sys.argv[1:] == ["once"] else serve()
