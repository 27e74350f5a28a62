"""A kernel's cgroup bounds what the sandbox's per-process limits cannot: anonymous shared memory, and processes.

Run in the real sandbox (bubblewrap), with the group joined as the grading launcher joins it. Skipped where no
cgroup can be made (`harness grade` then says so and keeps the per-process limits).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harness.grading import cgroup, sandbox

pytestmark = pytest.mark.skipif(cgroup.unavailable_reason() is not None or sandbox.unavailable_reason() is not None,
                                reason="no cgroup per kernel, or no sandbox, can be made here")

SHARED_HOG = """
import mmap
size = 600 * 2**20
shared = mmap.mmap(-1, size, flags=mmap.MAP_SHARED)  # neither RLIMIT_DATA nor a sized tmpfs counts this
for offset in range(0, size, 4096):
    shared[offset] = 1
print("held 600 MiB")
"""
FORKS = """
import os, time
started = 0
try:
    for _ in range(200):
        if os.fork() == 0:
            time.sleep(5)
            os._exit(0)
        started += 1
except OSError:
    pass
print(started)
"""


def _run_in_group(tmp_path, code: str, bounds: cgroup.Bounds) -> tuple[subprocess.CompletedProcess, list[str]]:
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    with cgroup.kernel_group(bounds) as group:
        assert group is not None
        spec = sandbox.Spec(memory_mb=0, threads=1, sandboxed=True, runtime_dir=str(runtime),
                            data_dir=str(tmp_path / "data"), cgroup=group.folders)
        done = subprocess.run(sandbox.bwrap_command(spec, [sys.executable, "-c", code]), capture_output=True,
                              text=True, timeout=120, preexec_fn=lambda: cgroup.join(group.folders))  # as the launcher
        return done, group.hits()


def test_shared_memory_past_the_bound_is_killed_and_named(tmp_path):
    done, hits = _run_in_group(tmp_path, SHARED_HOG, cgroup.Bounds(memory_mb=300, processes=64))
    assert "held 600 MiB" not in done.stdout and done.returncode != 0, done.stdout + done.stderr
    assert len(hits) == 1 and "more than the memory limit (300 MiB, shared memory and /tmp included)" in hits[0]


def test_within_the_bound_nothing_is_hit(tmp_path):
    done, hits = _run_in_group(tmp_path, SHARED_HOG, cgroup.Bounds(memory_mb=1200, processes=64))
    assert "held 600 MiB" in done.stdout and hits == [], done.stderr


def test_processes_past_the_bound_are_refused_and_named(tmp_path):
    done, hits = _run_in_group(tmp_path, FORKS, cgroup.Bounds(memory_mb=0, processes=40))
    assert done.returncode == 0 and int(done.stdout) < 40, done.stdout + done.stderr
    assert len(hits) == 1 and "more than 40 processes" in hits[0]


def test_the_group_is_gone_after_the_kernel(tmp_path):
    with cgroup.kernel_group(cgroup.Bounds(memory_mb=100, processes=8)) as group:
        folders = group.folders
        assert all(os.path.isdir(f) for f in folders)
    assert not any(os.path.exists(f) for f in folders)


def test_a_killed_workers_group_is_removed_by_the_next_batch_and_a_live_ones_is_not():
    gone = 2**22 + 1  # above Linux's PID_MAX_LIMIT: never a process, as a killed worker's pid is no longer one
    bounds = cgroup.Bounds(memory_mb=100, processes=8)
    stale = cgroup.create(f"harness-kernel-{gone}-0badc0de", bounds)
    live = cgroup.create(f"harness-kernel-{os.getpid()}-600dc0de", bounds)  # made by a running batch, not yet joined
    try:
        assert cgroup.remove_stale() >= 1
        assert not any(os.path.exists(f) for f in stale.folders)
        assert all(os.path.isdir(f) for f in live.folders)
    finally:
        live.remove()
        stale.remove()


def test_the_availability_probe_is_not_fooled_by_a_group_of_the_same_pid():
    # a process of another PID namespace (a sandbox, a container) or a killed one can have left this pid's name
    leftover = cgroup.create(f"harness-probe-{os.getpid()}", cgroup.Bounds(memory_mb=64, processes=8))
    try:
        assert cgroup.unavailable_reason() is None
    finally:
        leftover.remove()
