"""A cgroup per graded kernel: its memory (shared memory and tmpfs pages included), processes and CPU share.

The sandbox's per-process limits (RLIMIT_DATA, RLIMIT_NPROC, a sized /tmp and /dev/shm) bound neither anonymous
shared memory nor the CPU a kernel's processes take together. A cgroup bounds both: its memory limit counts every
page its processes hold, and each kernel's group has the same CPU weight, so a kernel that starts six busy
processes gets one kernel's share of a busy machine, not six (an idle CPU is still used: there is no quota).
The worker makes one per kernel (`create`), the launcher moves itself into it before it execs bubblewrap
(`join`: the kernel and every process it starts are in it), and after the kernel ends the worker reads what it
hit (`Group.hits`) and removes it (`Group.remove`). A worker killed before that leaves its empty group behind:
the next batch removes it (`remove_stale`), knowing it by the dead worker's pid in its name.

It is made in cgroup v2 where the grader's own cgroup delegates memory, pids and cpu to its children, else in the
v1 memory, pids and cpu hierarchies where they can be written (a root grader, in most containers). Where neither
can be made, `unavailable_reason` says why and grading keeps the per-process limits alone.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("memory", "pids", "cpu")  # cpu: each group has the default weight, one kernel's share
OURS = re.compile(r"harness-(?:kernel|probe)-(\d+)(?:-[0-9a-f]+)?")  # the pid is the worker's (the group's maker)


@dataclass(frozen=True)
class Bounds:
    """What one kernel and everything it starts may take together."""

    memory_mb: int  # resident memory: private, shared and tmpfs pages (0: no limit)
    processes: int


@dataclass(frozen=True)
class Group:
    """One kernel's cgroup: a folder in cgroup v2, or one per v1 hierarchy (memory, pids, cpu)."""

    folders: tuple[str, ...]
    version: int
    bounds: Bounds

    def hits(self) -> list[str]:
        """A sentence for each bound the kernel's processes reached (the memory one killed a process)."""
        found = []
        memory_events = _read(self._file("memory", "memory.events" if self.version == 2 else "memory.oom_control"))
        if _count(memory_events, "oom_kill") > 0:
            found.append(f"the kernel's processes took more than the memory limit ({self.bounds.memory_mb} MiB, "
                         "shared memory and /tmp included) and one was killed")
        if _count(_read(self._file("pids", "pids.events")), "max") > 0:
            found.append(f"the kernel tried to run more than {self.bounds.processes} processes at once "
                         "(refused: a fork bomb or runaway workers)")
        return found

    def remove(self) -> None:
        """Kill what is still in the group (the sandbox's end normally left nothing) and remove its folders."""
        for folder in self.folders:
            for _ in range(50):
                pids = [int(p) for p in _read(Path(folder) / "cgroup.procs").split()]
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                try:
                    os.rmdir(folder)
                    break
                except FileNotFoundError:
                    break
                except OSError:  # busy until the killed processes are gone
                    time.sleep(0.1)

    def _file(self, controller: str, name: str) -> Path:
        folder = self.folders[0] if self.version == 2 else self.folders[CONTROLLERS.index(controller)]
        return Path(folder) / name


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _count(events: str, key: str) -> int:
    """The value of `key` in a flat-keyed cgroup file ("oom_kill 1\\n...")."""
    for line in events.splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per v1 controller, and under "" its v2 path (from /proc/self/cgroup)."""
    paths = {}
    for line in _read(Path("/proc/self/cgroup")).splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            paths[controller] = path
    return paths


def _parents() -> tuple[int, tuple[Path, ...]]:
    """(version, the folders under which a kernel's groups are made); OSError naming what is missing."""
    own = _own_paths()
    if (ROOT / "cgroup.controllers").is_file():  # a unified (v2) hierarchy
        parent = ROOT / own.get("", "/").lstrip("/")
        delegated = set(_read(parent / "cgroup.subtree_control").split())
        if set(CONTROLLERS) <= delegated:
            return 2, (parent,)
        raise OSError(f"the grader's cgroup ({parent}) does not delegate {', '.join(CONTROLLERS)} to its children "
                      f"(it delegates: {' '.join(sorted(delegated)) or 'nothing'})")
    parents = []
    for controller in CONTROLLERS:
        if not (ROOT / controller / "cgroup.procs").is_file():
            raise OSError(f"no cgroup v2 and no v1 {controller} hierarchy at {ROOT / controller}")
        parents.append(ROOT / controller / own.get(controller, "/").lstrip("/"))
    return 1, tuple(parents)


def create(name: str, bounds: Bounds) -> Group:
    """Make the group `name` with `bounds`; OSError (with the cause) when it cannot be made here."""
    version, parents = _parents()
    folders = tuple(parent / name for parent in parents)
    made = []
    try:
        for folder in folders:
            folder.mkdir()
            made.append(folder)
        memory = bounds.memory_mb * 2**20
        if version == 2:
            folder = folders[0]
            if memory:
                _write(folder / "memory.max", memory)
                _write(folder / "memory.swap.max", 0, optional=True)
            _write(folder / "pids.max", bounds.processes)
        else:
            memory_folder, pids_folder, _ = folders
            if memory:
                _write(memory_folder / "memory.limit_in_bytes", memory)
                _write(memory_folder / "memory.memsw.limit_in_bytes", memory, optional=True)  # no spill into swap
            _write(pids_folder / "pids.max", bounds.processes)
    except OSError:
        for folder in reversed(made):
            folder.rmdir()
        raise
    return Group(tuple(str(f) for f in folders), version, bounds)


@contextmanager
def kernel_group(bounds: Bounds) -> Iterator[Group | None]:
    """A new group for one kernel, removed at the end; None where none can be made (`harness grade` said why)."""
    try:
        group = create(f"harness-kernel-{os.getpid()}-{secrets.token_hex(4)}", bounds)
    except OSError:
        yield None
        return
    try:
        yield group
    finally:
        group.remove()


def _write(path: Path, value: object, *, optional: bool = False) -> None:
    try:
        path.write_text(str(value))
    except OSError:
        if not optional:
            raise


def join(folders: tuple[str, ...] | list[str]) -> None:
    """Move this process into the group's folders (the launcher, before it execs bubblewrap)."""
    for folder in folders:
        (Path(folder) / "cgroup.procs").write_text(str(os.getpid()))


def remove_stale() -> int:
    """Remove the groups left by workers that are gone (killed before they removed them); returns how many folders.

    A group is stale when the pid in its name is no longer a process and nothing is in it: a group that a running
    worker has made but not yet joined (another batch on this machine) has a live pid, and is left alone.
    """
    try:
        _, parents = _parents()
    except OSError:
        return 0
    removed = 0
    for parent in parents:
        for folder in parent.glob("harness-*"):
            match = OURS.fullmatch(folder.name)
            if not match or _alive(int(match.group(1))) or _read(folder / "cgroup.procs").split():
                continue
            try:
                folder.rmdir()
                removed += 1
            except OSError:  # a process joined it meanwhile, or it was removed by another sweep
                pass
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def unavailable_reason() -> str | None:
    """Why a cgroup per kernel cannot be made on this machine (None when it can)."""
    try:
        create(f"harness-probe-{os.getpid()}-{secrets.token_hex(4)}", Bounds(memory_mb=64, processes=8)).remove()
    except OSError as error:
        return str(error)
    return None
