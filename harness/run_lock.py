"""One live run per checkpoint folder: an exclusive lock that `fit` holds for the whole run.

The lock is `fcntl.flock` on `fit.lock` inside the folder. The kernel releases it when the holding process
ends, however it ends (an exception, SIGKILL, a kernel restart), so a killed run never blocks its own resume.
The file names its holder (pid, host, start time) for the message a refused run gets, and is removed when
the run ends normally. Under DDP only rank 0, the rank that writes the folder, takes it.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["LOCK_NAME", "RunFolderBusyError", "hold_run_folder"]

LOCK_NAME = "fit.lock"


class RunFolderBusyError(RuntimeError):
    """Another live process holds the checkpoint folder (its pid and host are in the message and `holder`)."""

    def __init__(self, directory: Path, holder: dict, action: str) -> None:
        who = f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')}"
        since = f", running since {holder['started']}" if "started" in holder else ""
        super().__init__(f"{directory} is in use by a running fit ({who}{since}): {action}. Wait for that run to "
                         "finish or stop it, or choose another checkpoint_dir. Only one live run may use a folder.")
        self.holder = holder


@contextmanager
def hold_run_folder(directory: Path, action: str) -> Iterator[None]:
    """Hold `directory`'s lock while the block runs; refuse at once if another live process holds it.

    Args:
        directory: an existing, writable folder.
        action: what the refused call would have done, for the message (e.g. "overwrite=True would delete its
            files").

    Raises:
        RunFolderBusyError: another process holds the lock.
    """
    fd = _acquire(directory / LOCK_NAME, action)
    try:
        yield
    finally:
        # removed while still locked, so no other process can lock this file and then see it vanish
        (directory / LOCK_NAME).unlink(missing_ok=True)
        fcntl.flock(fd, fcntl.LOCK_UN)  # also for forked children (DataLoader workers) sharing the descriptor
        os.close(fd)


def _acquire(path: Path, action: str) -> int:
    """The locked file's descriptor, with this process written into it as the holder."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise RunFolderBusyError(path.parent, holder, action) from None
        # the holder before us may have removed the file between our open and our lock: lock the file on disk
        if _same_file(fd, path):
            break
        os.close(fd)
    holder = {"pid": os.getpid(), "host": socket.gethostname(),
              "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds")}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(holder).encode(), 0)
    return fd


def _same_file(fd: int, path: Path) -> bool:
    try:
        on_disk = path.stat()
    except FileNotFoundError:
        return False
    opened = os.fstat(fd)
    return (opened.st_dev, opened.st_ino) == (on_disk.st_dev, on_disk.st_ino)


def _read_holder(fd: int) -> dict:
    """The holder's record; empty in the instant between its lock and its write."""
    try:
        holder = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except ValueError:
        return {}
    return holder if isinstance(holder, dict) else {}
