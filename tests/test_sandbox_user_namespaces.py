"""A sandbox started by root refuses to create a user namespace (issue 38: "a root-graded sandbox allows nested user
namespaces"): there `setpriv` makes the code an unprivileged uid, but `unshare -U -r` made it root in a namespace of
its own. bubblewrap's `--disable-userns` needs a user namespace, which a root-started sandbox has not, so a seccomp
filter refuses it (`harness.sandbox.user_namespace_filter`), for the graded kernel and the drills' runner alike."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.drills.checker import check_source
from harness.drills.core import get_drill
from harness.grading import sandbox as grading_sandbox
from harness.sandbox import Spec, bwrap_command, unavailable_reason, user_namespace_filter

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or unavailable_reason() is not None,
                                reason="a root-started bubblewrap sandbox is what the filter is for")

PROBE = r'''
import os, subprocess, threading
from torch.utils.data import DataLoader
made = subprocess.run(["unshare", "--user", "--map-root-user", "id", "-u"], capture_output=True, text=True)
print("user namespace:", made.stdout.strip() or made.stderr.strip())
thread = threading.Thread(target=print, args=("a thread ran",)); thread.start(); thread.join()
child = os.fork()
if child == 0:
    os._exit(7)
print("a fork exited with", os.waitpid(child, 0)[1] >> 8)
print("two loader workers gave", sum(len(b) for b in DataLoader(list(range(10)), batch_size=3, num_workers=2)))
'''


def _spec(tmp_path: Path) -> Spec:
    return Spec(memory_mb=0, threads=1, sandboxed=True, runtime_dir=str(tmp_path), data_dir=str(tmp_path / "no-data"))


def _run(tmp_path: Path, seccomp: int | None) -> str:
    command = bwrap_command(_spec(tmp_path), [sys.executable, "-c", PROBE], seccomp)
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, pass_fds=(seccomp,) if seccomp else ())
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_filter_refuses_a_user_namespace_and_leaves_threads_forks_and_loader_workers(tmp_path):
    seccomp = user_namespace_filter()
    assert seccomp is not None
    try:
        shown = _run(tmp_path, seccomp)
    finally:
        os.close(seccomp)
    assert "user namespace: unshare: unshare failed: Operation not permitted" in shown, shown
    assert "a thread ran" in shown and "a fork exited with 7" in shown and "two loader workers gave 10" in shown
    assert "user namespace: 0" in _run(tmp_path, None), "without the filter the sandbox's code becomes root"


def test_the_graded_kernel_and_the_drills_runner_start_under_the_filter(tmp_path):
    command = grading_sandbox.launch_command(_spec(tmp_path), str(tmp_path / "kernel.json"))
    os.close(int(command[command.index("--seccomp") + 1]))  # the launcher execs bubblewrap, which reads it
    assert command[0] == "bwrap"
    answer = PROBE + "def logsumexp(x, dim):\n    return x.exp().sum(dim).log()\n"
    result = check_source(get_drill("tensors-logsumexp"), answer)
    assert "user namespace: unshare: unshare failed: Operation not permitted" in result.output, result.output
