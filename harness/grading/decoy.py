"""Decoy solutions: a copy of the release where the instructor's `solutions/` would be, watched for opens.

The sandbox hides the real `solutions/`; in its place it mounts this decoy (the released notebook, no
answers) read-only. A kernel that lists or opens it was looking for the instructor's solutions: the
worker, outside the sandbox, sees that through inotify (a bind mount shares the watched inodes) and flags
the submission. Nothing in the decoy is worth reading, so a look costs no points, only the flag.

inotify does not say who opened a file, so the decoy is watched only where nothing but this submission's
kernel can reach it: a root grader's worker runs in a mount namespace of its own (`runtime_folder.worker_prefix`)
and mounts the decoy there on a small tmpfs, which no other process on the machine sees (a host `ls -R` finds
an empty folder). Anywhere else (an ordinary user's grader, a worker in the machine's mount namespace) the decoy
is not watched and flags nobody: an open the grader cannot attribute accuses no one.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_IN_ACCESS, _IN_OPEN, _IN_NONBLOCK = 0x1, 0x20, 0o4000
DECOY_MB = 8  # the released notebook, and room to spare


def private_namespace() -> bool:
    """Whether this process's mounts are its own: its mount namespace is not its parent's (the worker was started
    by `unshare --mount --propagation private`, so what it mounts no other process sees)."""
    try:
        return os.readlink("/proc/self/ns/mnt") != os.readlink(f"/proc/{os.getppid()}/ns/mnt")
    except OSError:  # no /proc, or the parent not ours to read: not provably private
        return False


class Decoy:
    """The decoy folder for one job, and whether anything opened it since `watch()`.

    `watched` is whether opens count: only a decoy on a tmpfs of the worker's private mount namespace.
    """

    def __init__(self, folder: Path, watched: bool) -> None:
        self.folder = folder
        self.watched = watched
        self._descriptor = -1

    def watch(self) -> None:
        """Start watching the decoy's folders (a no-op where opens do not count or inotify is missing)."""
        if not self.watched:
            return
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            self._descriptor = libc.inotify_init1(_IN_NONBLOCK)
            for path in [self.folder, *[p for p in self.folder.rglob("*") if p.is_dir()]]:
                libc.inotify_add_watch(self._descriptor, str(path).encode(), _IN_OPEN | _IN_ACCESS)
        except (OSError, AttributeError):
            self._descriptor = -1

    def opened(self) -> bool:
        """Whether the decoy was listed or opened since `watch()` (always False when it is not `watched`)."""
        if self._descriptor < 0:
            return False
        try:
            return bool(os.read(self._descriptor, 65536))
        except BlockingIOError:
            return False
        finally:
            os.close(self._descriptor)
            self._descriptor = -1


@contextmanager
def decoy_folder(folder: Path, assignment: str, release_notebook: Path, private: bool) -> Iterator[Decoy]:
    """Make the decoy at `folder`: `assignment`/ with the released notebook.

    Args:
        private: the worker runs in a mount namespace of its own (`GradeJob.private_mounts`): the decoy goes on a
            `DECOY_MB` tmpfs there, unmounted at the end, and is watched; otherwise it is a plain folder, not
            watched.
    """
    folder.mkdir()
    mounted = private and private_namespace() and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DECOY_MB}m,mode=0755", "tmpfs", str(folder)],
        capture_output=True).returncode == 0
    (folder / assignment).mkdir()
    shutil.copy(release_notebook, folder / assignment / release_notebook.name)
    try:
        yield Decoy(folder, watched=mounted)
    finally:
        if mounted:
            subprocess.run(["umount", "--lazy", str(folder)], capture_output=True)
