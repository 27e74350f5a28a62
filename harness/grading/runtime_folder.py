"""The kernel's runtime folder on a small tmpfs of its own: what a kernel writes there cannot fill the grader's disk.

The runtime folder is the one folder the sandbox shares with the worker: the kernel's connection file and its
sockets. A root grader starts each worker in a private mount namespace (`worker_prefix`: `unshare --mount`), so
the worker can mount a `RUNTIME_MB` tmpfs there that no other process sees and that ends with the worker; its
pages count toward the kernel's cgroup. Elsewhere (an unprivileged grader) the folder stays on the grader's disk,
each file the kernel writes capped by RLIMIT_FSIZE.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

RUNTIME_MB = 16  # a connection file and a few sockets need kilobytes


def private_mounts_available() -> bool:
    """Whether workers can run in a private mount namespace and mount there (root, with util-linux)."""
    return os.geteuid() == 0 and shutil.which("unshare") is not None and shutil.which("mount") is not None


def worker_prefix(private_mounts: bool) -> list[str]:
    """The command that starts a worker in a private mount namespace, or nothing."""
    return ["unshare", "--mount", "--propagation", "private"] if private_mounts else []


@contextmanager
def runtime_folder(folder: Path, on_tmpfs: bool) -> Iterator[Path]:
    """Make `folder`, on a `RUNTIME_MB` tmpfs when `on_tmpfs` (and the mount succeeds); unmounted at the end."""
    folder.mkdir()
    mounted = on_tmpfs and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={RUNTIME_MB}m,mode=0700", "tmpfs", str(folder)],
        capture_output=True).returncode == 0
    try:
        yield folder
    finally:
        if mounted:
            subprocess.run(["umount", "--lazy", str(folder)], capture_output=True)


def filled(folder: Path) -> str | None:
    """A sentence when the kernel filled more than half of its runtime tmpfs (None: it did not, or no tmpfs)."""
    if not os.path.ismount(folder):
        return None
    usage = shutil.disk_usage(folder)
    if usage.used <= usage.total // 2:
        return None
    return (f"the kernel wrote {usage.used >> 20} MiB into its runtime folder (a {RUNTIME_MB} MiB tmpfs of its own, "
            "which only its connection file and sockets need); none of it reached the grader's disk")
