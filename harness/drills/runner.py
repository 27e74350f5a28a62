"""The answer's runner: a fresh process that imports torch and the bank, then runs answers it is sent.

The checker (`harness.drills.pool`) starts it with `harness.drills.fresh` (a new interpreter, the harness
compiled from source), in a new session, with no descriptor but the control socket it is given, under
bubblewrap where that works. The runner itself never runs an answer and never computes with torch: for each
job it forks a child, and the child

- closes the control socket and every other descriptor but the report pipe and the output pipe it was sent,
  starts a new session, runs the answer and the drill's probe, writes the observation (data only,
  `harness.contract.wire`) to the report pipe behind the job's nonce, and exits;
- while the runner, a child subreaper (PR_SET_CHILD_SUBREAPER) and not ptrace-able (PR_SET_DUMPABLE 0), waits
  for it and then kills every process left below it: whatever the answer started, a daemon that left its
  process group and session included, is reparented to the runner and ends with it.

Between answers the runner also empties the folders an answer could write (`scrub`: the sandbox's /tmp and
/dev/shm, or the private working folder without the sandbox), back to what they held when the runner became
ready, so no answer finds what an earlier one left. The runner dies with the checker (PR_SET_PDEATHSIG). Jobs
arrive as one message each on a SOCK_SEQPACKET socket, with the write ends of the report pipe and the output
pipe passed as descriptors (SCM_RIGHTS).
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import struct
import sys
from typing import Any

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
LENGTH = struct.Struct("<Q")
MAX_JOB_BYTES = 1 << 20
SIOCSIFFLAGS, IFF_UP, IFF_LOOPBACK, IFF_RUNNING = 0x8914, 0x1, 0x8, 0x40


def prctl(option: int, value: int) -> bool:
    """Linux prctl(option, value); whether it succeeded (False off Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (from /proc; none found where there is no /proc, as on macOS)."""
    found = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as stat:
                    fields = stat.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def end_descendants(keep: frozenset[int] = frozenset()) -> None:
    """Kill every child of this process but `keep` until none is left (a subreaper's orphans included), and
    reap them."""
    for _ in range(10_000):
        left = [pid for pid in children(os.getpid()) if pid not in keep]
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in left:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        if not left:
            return


def _mount_points() -> frozenset[str]:
    try:
        with open("/proc/self/mountinfo") as info:
            # mountinfo writes a space, tab, newline or backslash in a path as an octal escape (\040)
            return frozenset(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), line.split()[4]) for line in info)
    except OSError:
        return frozenset()


def snapshot(roots: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    """Every path under `roots` (mounts not entered) with its size and modification time."""
    mounts = _mount_points()
    found = {}
    for root in roots:
        for folder, dirs, files in os.walk(os.path.abspath(root)):
            dirs[:] = [d for d in dirs if os.path.join(folder, d) not in mounts]
            for name in dirs + files:
                path = os.path.join(folder, name)
                try:
                    info = os.lstat(path)
                except OSError:
                    continue
                found[path] = (info.st_size, info.st_mtime_ns)
    return found


def scrub(roots: tuple[str, ...], before: dict[str, tuple[int, int]]) -> None:
    """Remove what appeared under `roots` since `before` was taken, and files changed since (mounts left alone)."""
    for path, stamp in sorted(snapshot(roots).items(), key=lambda item: -item[0].count("/")):
        if path in before and (before[path] == stamp or os.path.isdir(path)):
            continue
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
        except OSError:
            pass


def _answer_child(job: dict[str, Any], report_fd: int, output_fd: int) -> None:
    """In the forked child: keep only the report pipe and the output pipe, run the answer, report. Never
    returns."""
    try:
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(output_fd, 1)
        os.dup2(output_fd, 2)
        report = os.dup2(report_fd, 3)
        os.closerange(4, os.sysconf("SC_OPEN_MAX"))
        _run_job(job, report)
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:  # noqa: S110 (a stream the answer replaced or closed: nothing to save)
                pass
        os._exit(0)


def _run_job(job: dict[str, Any], report: int) -> None:
    from harness.contract import wire
    from harness.contract.case import Case
    from harness.contract.errors import explain
    from harness.contract.failure import CheckFailed
    from harness.drills.answer import load_answer
    from harness.drills.core import get_drill

    drill = get_drill(job["drill"])
    case = Case(**job["case"])
    try:
        namespace = load_answer(drill, job["source"], job["filename"])
        observation = {"seen": drill.probe(namespace, case=case)}  # type: ignore[misc]
    except CheckFailed as failure:
        observation = {"failed": failure.code, "message": str(failure)}
    except BaseException as error:  # the answer raised (or exited): reported as data
        observation = {"raised": explain(error)[:2000]}
    for stream in (sys.stdout, sys.stderr):  # what the answer printed reaches the output pipe first
        try:
            stream.flush()
        except BaseException:  # noqa: S110
            pass
    try:
        data = wire.encode(observation)
    except wire.WireError as error:
        data = wire.encode({"raised": f"the probe's observation could not be sent ({error})"})
    view = memoryview(bytes.fromhex(job["nonce"]) + LENGTH.pack(len(data)) + data)
    while view:
        view = view[os.write(report, view):]


def serve(control: socket.socket, uses: int, scratch: tuple[str, ...] = ()) -> None:
    """Run up to `uses` jobs, one forked child each, emptying `scratch` after each; then leave."""
    clean = snapshot(scratch)
    for _ in range(uses):
        try:
            message, fds, _, _ = socket.recv_fds(control, MAX_JOB_BYTES, 2)
        except OSError:
            return
        if not message or len(fds) != 2:
            return
        job = json.loads(message)
        pid = os.fork()
        if pid == 0:
            control.close()
            _answer_child(job, fds[0], fds[1])
        for fd in fds:
            os.close(fd)
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        end_descendants()
        scrub(scratch, clean)
        try:
            control.sendall(b"done")
        except OSError:
            return


def hide(paths: list[str]) -> None:
    """Mount an empty tmpfs over each of `paths` that exists (in the runner's own mount namespace: without the
    sandbox, `unshare` made one), so no answer sees what they hold."""
    libc = ctypes.CDLL(None, use_errno=True)
    for path in paths:
        if os.path.isdir(path) and libc.mount(b"none", path.encode(), b"tmpfs", 0, b"mode=0700") != 0:
            raise OSError(ctypes.get_errno(), f"cannot hide {path} from the answers")


def loopback_up() -> None:
    """Bring `lo` up (a new network namespace starts with it down; DDP drills' ranks talk over it)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            fcntl.ioctl(probe, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", IFF_UP | IFF_LOOPBACK | IFF_RUNNING))
    except OSError:  # already up (the sandbox's), or not ours to change
        pass


def main(argv: list[str]) -> None:
    """`runner CONTROL_FD USES SCRATCH [HIDDEN...]` (SCRATCH: the folders an answer can write, a JSON list; HIDDEN:
    folders to hide, in a mount namespace of its own): import, say ready, serve."""
    parent = os.getppid()
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the checker died before the line above
        os._exit(1)
    hide(argv[3:])
    loopback_up()
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    prctl(PR_SET_DUMPABLE, 0)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # DDP drills' ranks talk over loopback (no network here)
    control = socket.socket(fileno=int(argv[0]))
    import torch._dynamo  # noqa: F401 (building an optimizer imports it: seconds in every check, unless here)

    from harness.drills.core import all_drills

    all_drills()
    control.sendall(b"ready")
    serve(control, int(argv[1]), tuple(json.loads(argv[2])))


if __name__ == "__main__":
    main(sys.argv[1:])
