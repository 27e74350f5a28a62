"""The warm checker: one process that imports torch and the bank once and checks answers on request.

`harness drill check` asks it over a Unix socket (mode 0600, in the temporary folder, one per drills home) and
starts it when none answers; the answer's process and the judge's are forked from it
(`harness.drills.checker`), so a check costs no import. The checker serves one request at a time, leaves
after `IDLE_S` seconds without one, and leaves at once when the harness's code changed since it started (the
client sends a fingerprint of it). `HARNESS_DRILL_CHECKER=inline` checks in the calling process instead.

This module's client half imports neither torch nor the bank: it is what keeps a check fast.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.drills.progress import home

IDLE_S = 900.0
START_TIMEOUT_S = 90.0
REPLY_TIMEOUT_S = 300.0
_WATCHED = ("drills", "drills/bank", "checks")


def socket_path() -> Path:
    """The checker's socket for this drills home (short: a Unix socket path must fit in 108 bytes)."""
    key = hashlib.sha256(str(home().resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"harness-drill-{os.getuid()}-{key}.sock"


def fingerprint() -> str:
    """The harness code a checker runs: the interpreter and the size and time of every drill and check module."""
    package = Path(__file__).resolve().parents[1]
    stamps = [sys.executable]
    for folder in _WATCHED:
        for entry in sorted(os.scandir(package / folder), key=lambda e: e.name):
            if entry.name.endswith(".py"):
                info = entry.stat()
                stamps.append(f"{folder}/{entry.name}:{info.st_size}:{info.st_mtime_ns}")
    return hashlib.sha256("\n".join(stamps).encode()).hexdigest()


def _exchange(request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """Send one request to the running checker; its reply. OSError when none is listening."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(timeout_s)
        client.connect(str(socket_path()))
        client.sendall(json.dumps(request).encode() + b"\n")
        client.shutdown(socket.SHUT_WR)
        return json.loads(_receive(client))


def _receive(connection: socket.socket) -> bytes:
    """Everything the other end sends until it shuts its side down."""
    return b"".join(iter(lambda: connection.recv(1 << 16), b""))


def _start() -> None:
    """Start a checker for this drills home, detached, logging to checker.log; wait until it listens."""
    home().mkdir(parents=True, exist_ok=True)
    log_path = home() / "checker.log"
    with open(log_path, "ab") as log:
        process = subprocess.Popen([sys.executable, "-m", "harness.drills.server"], stdin=subprocess.DEVNULL,
                                   stdout=log, stderr=log, start_new_session=True)
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


def request_check(drill_id: str, path: Path, order: list[int] | None) -> dict[str, Any]:
    """The checker's result for `path` as an answer to `drill_id`, starting a checker when none is running."""
    request = {"drill": drill_id, "path": str(path), "order": order, "fingerprint": fingerprint()}
    for _ in range(3):
        try:
            reply = _exchange(request, REPLY_TIMEOUT_S)
        except (OSError, json.JSONDecodeError):
            _start()
            continue
        if not reply.get("stale"):
            return reply
        time.sleep(0.1)  # the old checker is leaving: the next try starts a new one
    raise RuntimeError("could not reach the drill checker; retry, or set HARNESS_DRILL_CHECKER=inline")


def stop() -> bool:
    """Ask this home's checker to leave; whether one was running."""
    try:
        _exchange({"stop": True}, 10.0)
        return True
    except (OSError, json.JSONDecodeError):
        return False


def _answer(request: dict[str, Any], started: str) -> tuple[dict[str, Any], bool]:
    """The reply to one request, and whether the checker should leave after sending it."""
    from harness.drills.checker import check_file
    from harness.drills.core import get_drill

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
    order = request.get("order")
    result = check_file(drill, Path(str(request["path"])), order=tuple(order) if order else None)
    return result.as_dict(), False


def serve(idle_s: float = IDLE_S) -> None:
    """Listen on this home's socket and check answers until idle for `idle_s` seconds or told to leave."""
    from harness.drills.core import all_drills

    all_drills()  # import torch and the whole bank once, before the first request
    started = fingerprint()
    path = socket_path()
    path.unlink(missing_ok=True)
    previous = os.umask(0o077)  # the socket is the user's alone
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        os.umask(previous)
        ours = path.stat().st_ino
        server.listen(8)
        server.settimeout(idle_s)
        try:
            while True:
                try:
                    connection, _ = server.accept()
                except TimeoutError:
                    return
                with connection:
                    connection.settimeout(30.0)
                    try:
                        reply, leave = _answer(json.loads(_receive(connection)), started)
                    except (OSError, json.JSONDecodeError, KeyError, TypeError) as error:
                        reply, leave = {"error": f"bad request ({type(error).__name__})"}, False
                    try:
                        connection.sendall(json.dumps(reply).encode())
                    except OSError:
                        pass
                if leave:
                    return
        finally:
            _remove_own_socket(path, ours)


def _remove_own_socket(path: Path, inode: int) -> None:
    """Remove the socket file if it is still this checker's (a newer checker may have replaced it)."""
    try:
        if path.stat().st_ino == inode:
            path.unlink()
    except FileNotFoundError:
        pass


if __name__ == "__main__":
    serve()
