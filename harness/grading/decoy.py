"""Decoy solutions: a copy of the release where the instructor's `solutions/` would be, watched for opens.

The sandbox hides the real `solutions/`; in its place it mounts this decoy (the released notebook, no
answers) read-only. A kernel that lists or opens it was looking for the instructor's solutions: the
worker, outside the sandbox, sees that through inotify (a bind mount shares the watched inodes) and flags
the submission. Nothing in the decoy is worth reading, so a look costs no points, only the flag.
"""

from __future__ import annotations

import ctypes
import os
import shutil
from pathlib import Path

_IN_ACCESS, _IN_OPEN, _IN_NONBLOCK = 0x1, 0x20, 0o4000


class Decoy:
    """The decoy folder for one job, and whether anything opened it since `watch()`."""

    def __init__(self, folder: Path, assignment: str, release_notebook: Path) -> None:
        self.folder = folder
        (folder / assignment).mkdir(parents=True)
        shutil.copy(release_notebook, folder / assignment / release_notebook.name)
        self._descriptor = -1

    def watch(self) -> None:
        """Start watching the decoy's folders (a no-op where inotify is missing)."""
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            self._descriptor = libc.inotify_init1(_IN_NONBLOCK)
            for path in [self.folder, *[p for p in self.folder.rglob("*") if p.is_dir()]]:
                libc.inotify_add_watch(self._descriptor, str(path).encode(), _IN_OPEN | _IN_ACCESS)
        except (OSError, AttributeError):
            self._descriptor = -1

    def opened(self) -> bool:
        """Whether the decoy was listed or opened since `watch()`."""
        if self._descriptor < 0:
            return False
        try:
            return bool(os.read(self._descriptor, 65536))
        except BlockingIOError:
            return False
        finally:
            os.close(self._descriptor)
            self._descriptor = -1
