"""Launched processes die with their launcher, and so does the launch's work folder.

A kernel restart SIGKILLs the process that called `launch`: nothing runs in it afterwards, so its `finally`
cannot end the ranks. Three mechanisms make sure nothing outlives it:

- `die_with_parent`: the kernel sends SIGKILL to a rank the moment its parent (torchrun, or the process that
  forked it) ends, whichever way it ends (Linux's parent-death signal, `prctl(PR_SET_PDEATHSIG)`).
- `watch_launcher`: torchrun's own process (`harness.launch.runner`) watches the launcher's pid and, when it
  ends, ends every rank and removes the work folder.
- `work_folder`: each work folder records its owner; a launch removes the folders of owners that are gone
  (a forked launch whose launcher was SIGKILLed leaves its folder to the next launch).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import psutil

PARENT_ENV = "HARNESS_LAUNCH_PARENT"  # the pid a torchrun-launched rank must die with (torchrun's)
_PR_SET_PDEATHSIG = 1
_OWNER = "owner.txt"


def die_with_parent(parent: int, sig: signal.Signals = signal.SIGKILL) -> None:
    """Have the kernel send `sig` to this process when `parent` (this process's parent) ends.

    Args:
        parent: the pid of the parent as the parent saw itself before starting this process: if it has
            already ended, this process is re-parented and ends at once.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the launcher's watch (`watch_launcher`) still ends us
        pass
    if os.getppid() != parent:  # the parent ended before the signal was armed
        os.kill(os.getpid(), sig)


def process_start(pid: int) -> float:
    """When process `pid` started (seconds since the epoch): with the pid, it names one process for good."""
    return psutil.Process(pid).create_time()


def is_alive(pid: int, started: float) -> bool:
    """Whether the process `pid` that started at `started` still runs (and the pid was not reused)."""
    try:
        process = psutil.Process(pid)
        return abs(process.create_time() - started) < 0.01 and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def watch_launcher(pid: int, started: float, when_gone: Callable[[], None]) -> None:
    """Call `when_gone()` on a daemon thread as soon as the process `pid` (started at `started`) ends."""

    def wait() -> None:
        try:
            handle = os.pidfd_open(pid)  # readable once the process ends: no polling
        except (AttributeError, OSError):
            handle = None
        try:
            while is_alive(pid, started):
                if handle is None:
                    time.sleep(0.2)
                else:
                    select.select([handle], [], [], 1.0)
        finally:
            if handle is not None:
                os.close(handle)
        when_gone()

    threading.Thread(target=wait, name="harness-launcher-watch", daemon=True).start()


def end_descendants(grace_s: float = 0.0) -> None:
    """SIGKILL every descendant of this process (after `grace_s` seconds of SIGTERM when positive)."""
    family = psutil.Process().children(recursive=True)
    for sig in ((signal.SIGTERM,) if grace_s > 0 else ()) + (signal.SIGKILL,):
        for member in family:
            with contextlib.suppress(psutil.NoSuchProcess):
                member.send_signal(sig)
        family = psutil.wait_procs(family, timeout=grace_s or 3.0)[1]


@contextlib.contextmanager
def work_folder(prefix: str) -> Iterator[Path]:
    """A fresh temporary folder owned by this process, removed on exit; first removes the folders with the
    same prefix whose owner has ended (a launcher killed before it could clean up)."""
    for stale in Path(tempfile.gettempdir()).glob(f"{prefix}*"):
        if not owner_alive(stale):
            shutil.rmtree(stale, ignore_errors=True)
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    (folder / _OWNER).write_text(f"{os.getpid()} {process_start(os.getpid())!r} {_pid_namespace()}")
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def owner_alive(folder: Path) -> bool:
    """Whether the process that created the work `folder` still runs (True when that cannot be told: a folder
    being created, or one of a process in another pid namespace, such as a container sharing /tmp)."""
    try:
        pid, started, namespace = (folder / _OWNER).read_text().split()
        return namespace != _pid_namespace() or is_alive(int(pid), float(started))
    except (OSError, ValueError):
        return True


def _pid_namespace() -> str:
    """This process's pid namespace: pids name processes only within one."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return "unknown"
