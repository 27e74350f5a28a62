"""The bubblewrap command line that isolates code the course did not write: a grading kernel, a drill's answer.

`bwrap_command(spec, inner)` runs `inner`:

- in new PID, network (loopback only), IPC and UTS namespaces: it sees no other process, reaches no network,
  and when the sandbox's first process dies every process it started dies with it;
- as user 65534 (nobody), with a clean environment (no variable of the caller's, so no secret, reaches it).
  Run by an unprivileged user, bubblewrap maps it in a user namespace and `--disable-userns` stops it making
  another; run by root, bubblewrap makes the mounts as root and `setpriv` then becomes the real uid
  `spec.host_uid` with no capability before `inner` runs, under a seccomp filter that refuses to create a user
  namespace (`user_namespace_filter`: where it could, the code would be root in a namespace of its own);
- on a filesystem built for it: the system and Python read-only, from `/etc` only what Python needs, the
  course's `harness` package read-only without the judge side (`harness/judge`, `harness/judges`) or the grader
  (`harness/grading`, except the guard and the kernel's launcher, where they exist), the data folder read-only, a
  sized `/tmp` (the working directory is `/tmp/work`) and `/dev/shm`, and the one writable folder it shares
  with its caller (`spec.runtime_dir`).

The grader (`harness.grading.sandbox`) and the drills (`harness.drills.pool`) both build on it; it lives here,
outside `harness/grading`, because the student tree ships it (`harness.grading.student_tree`) and a drill check
there needs it. It imports nothing of the harness.
"""

from __future__ import annotations

import os
import platform
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

SANDBOX_UID = 65534
WORKDIR = "/tmp/work"
REPO_ROOT = Path(__file__).resolve().parents[1]
# Variables of the grader's environment the kernel still gets (nbgrader's and the course's, none secret).
PASSED_VARIABLES = ("NBGRADER_EXECUTION", "NBGRADER_VALIDATING", "HARNESS_DEVICE", "LANG", "LC_ALL", "TZ")
# What Python (and torch, matplotlib, requests) read from /etc; the rest of /etc stays outside.
ETC_NEEDED = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "ssl", "ca-certificates", "ca-certificates.conf", "pki",
              "localtime", "timezone", "nsswitch.conf", "hosts", "host.conf", "mime.types", "fonts")
# The judge side and the grader: never in the kernel's reach (the guard and this launcher are bound back).
WITHHELD = ("judge", "judges", "grading")
GRADING_IN_KERNEL = ("__init__.py", "tamper.py", "sandbox.py")


@dataclass(frozen=True)
class Spec:
    """How one job's kernel is started: limits, threads, and whether (and what) to sandbox."""

    memory_mb: int
    threads: int
    sandboxed: bool
    runtime_dir: str  # holds the connection file and the kernel's sockets: the one folder shared with the worker
    data_dir: str  # the course's data folder (HARNESS_DATA_DIR), bound read-only when it exists
    inputs_dir: str = ""  # the hidden inputs of tasks whose targets stay secret (`grading.sealed`), read-only
    decoy_dir: str = ""  # mounted read-only where the repository's solutions/ would be (harness.grading.decoy)
    tmp_mb: int = 512  # size of the kernel's /tmp (a tmpfs)
    shm_mb: int = 256  # size of its /dev/shm (DataLoader workers pass batches through it)
    etc_dir: str = ""  # the stub passwd and group (written by `write_kernelspec`)
    host_uid: int = SANDBOX_UID  # the real uid the kernel runs as when the grader is root
    cgroup: tuple[str, ...] = ()  # the kernel's cgroup folders (`harness.grading.cgroup`), joined before bubblewrap


def unavailable_reason() -> str | None:
    """Why the sandbox cannot be made on this machine (None when it can), with what to do about it."""
    if shutil.which("bwrap") is None:
        return ("bubblewrap (`bwrap`) is not installed: install it (Debian/Ubuntu: `sudo apt-get install "
                "bubblewrap`; Fedora: `sudo dnf install bubblewrap`), or grade without isolation with --no-sandbox")
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        return ("grading as root needs `setpriv` (util-linux) to run the kernel as an unprivileged user: install "
                "util-linux, or grade as an ordinary user")
    trial = subprocess.run(["bwrap", *_namespaces(), "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
                            "true"], capture_output=True, text=True, timeout=60)
    if trial.returncode != 0:
        return (f"bubblewrap cannot create namespaces here ({trial.stderr.strip()[:200]}): allow unprivileged user "
                "namespaces (`sysctl kernel.unprivileged_userns_clone=1`, or on Ubuntu 24.04 the bwrap AppArmor "
                "profile), run grading as root, or grade without isolation with --no-sandbox")
    return None


def _namespaces() -> list[str]:
    """Root: no user namespace (the mounts are made as root, `setpriv` drops to a real uid); else a user
    namespace mapping uid 65534 to the grader's own."""
    common = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
              "--die-with-parent", "--new-session"]
    if os.geteuid() == 0:
        return common
    return ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), *common, "--disable-userns"]


# seccomp (linux/seccomp.h, linux/filter.h, linux/audit.h): the machine's architecture and system call numbers
_ARCHITECTURES = {  # machine -> (AUDIT_ARCH_*, clone, unshare, clone3)
    "x86_64": (0xC000003E, 56, 272, 435),
    "aarch64": (0xC00000B7, 220, 97, 435),
}
_LOAD, _EQUALS, _AT_LEAST, _ANY_BIT, _RETURN = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, JMP|JEQ|JGE|JSET, RET
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | errno
_EPERM, _ENOSYS, _CLONE_NEWUSER, _X32 = 1, 38, 0x10000000, 0x40000000


def _user_namespace_program(machine: str) -> bytes | None:
    """The compiled seccomp program (cBPF, as bubblewrap's `--seccomp` reads it) that refuses clone and unshare with
    CLONE_NEWUSER (EPERM), clone3 (ENOSYS: the C library then falls back to clone, whose flags the filter reads) and
    every system call of another ABI (x32, or 32-bit); None for an architecture it does not know."""
    if machine not in _ARCHITECTURES:
        return None
    arch, clone, unshare, clone3 = _ARCHITECTURES[machine]
    program = [  # (code, jump if true, jump if false, k): jumps count the instructions skipped
        (_LOAD, 0, 0, 4),  # 0: seccomp_data.arch
        (_EQUALS, 0, 10, arch),  # 1: another ABI -> 12
        (_LOAD, 0, 0, 0),  # 2: seccomp_data.nr
        (_AT_LEAST, 7, 0, _X32),  # 3: x32 -> 11
        (_EQUALS, 7, 0, clone3),  # 4: -> 12
        (_EQUALS, 2, 0, clone),  # 5: -> 8
        (_EQUALS, 1, 0, unshare),  # 6: -> 8
        (_RETURN, 0, 0, _ALLOW),  # 7
        (_LOAD, 0, 0, 16),  # 8: the low half of args[0], the flags of clone and unshare
        (_ANY_BIT, 1, 0, _CLONE_NEWUSER),  # 9: -> 11
        (_RETURN, 0, 0, _ALLOW),  # 10
        (_RETURN, 0, 0, _ERRNO | _EPERM),  # 11
        (_RETURN, 0, 0, _ERRNO | _ENOSYS),  # 12
    ]
    return b"".join(struct.pack("<HBBI", *instruction) for instruction in program)


def user_namespace_filter() -> int | None:
    """For a sandbox started by root: a file descriptor (inheritable, at its start) holding the seccomp program that
    refuses to create a user namespace, for `bwrap_command(..., seccomp_fd=)`; the caller passes it to bubblewrap and
    closes it. None for an unprivileged caller (bubblewrap's `--disable-userns` does this in its user namespace) or
    an architecture the program does not know."""
    program = _user_namespace_program(platform.machine())
    if os.geteuid() != 0 or program is None:
        return None
    fd = os.memfd_create("harness-seccomp", 0)
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    os.set_inheritable(fd, True)  # bubblewrap, exec'd or spawned with pass_fds, reads it
    return fd


def _python_prefixes() -> list[str]:
    return list(dict.fromkeys((sys.base_prefix, sys.prefix, str(Path(sys.executable).resolve().parents[1]))))


def _open_parents(targets: list[str]) -> list[str]:
    """Folders above the bind targets, made readable by anyone (bubblewrap makes them 0700 otherwise)."""
    parents = {str(parent) for target in targets for parent in Path(target).parents if str(parent) != "/"}
    args = []
    for parent in sorted(parents, key=lambda p: (p.count("/"), p)):
        args += ["--perms", "0755", "--dir", parent]
    return args


def _system_binds(spec: Spec) -> list[str]:
    """The system, this Python, and what Python needs from /etc, read-only."""
    args = []
    for path in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        args += ["--ro-bind-try", path, path]
    for name in ETC_NEEDED:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    if spec.etc_dir:
        args += ["--ro-bind", f"{spec.etc_dir}/passwd", "/etc/passwd"]
        args += ["--ro-bind", f"{spec.etc_dir}/group", "/etc/group"]
    for prefix in _python_prefixes():
        args += ["--ro-bind", prefix, prefix]
    return args


def _harness_binds(spec: Spec) -> list[str]:
    """The course's package read-only, the judge side (with the hints' solution lines) and the grader hidden (tmpfs
    over them, if present)."""
    harness = REPO_ROOT / "harness"
    args = ["--ro-bind", str(harness), str(harness)]
    for name in WITHHELD:
        if (harness / name).is_dir():
            args += ["--tmpfs", str(harness / name)]
    for name in GRADING_IN_KERNEL:
        path = harness / "grading" / name
        if path.is_file():  # a student tree has no harness/grading
            args += ["--ro-bind", str(path), str(path)]
    return args


def bwrap_command(spec: Spec, inner: list[str], seccomp_fd: int | None = None) -> list[str]:
    """The bubblewrap command line that runs `inner` in the sandbox (under the seccomp program in `seccomp_fd`, which
    the caller passes to bubblewrap: `user_namespace_filter`)."""
    harness = REPO_ROOT / "harness"
    targets = ["/etc/passwd", *_python_prefixes(), str(harness), spec.data_dir, spec.runtime_dir,
               str(REPO_ROOT / "solutions"), *([spec.inputs_dir] if spec.inputs_dir else [])]
    # The sized /tmp first: binds made after it stay visible even when they live under /tmp (a clone in /tmp)
    args = ["bwrap", *_namespaces(), "--proc", "/proc", "--dev", "/dev",
            "--perms", "1777", "--size", str(spec.shm_mb * 2**20), "--tmpfs", "/dev/shm",
            "--perms", "1777", "--size", str(spec.tmp_mb * 2**20), "--tmpfs", "/tmp",
            "--perms", "1777", "--dir", WORKDIR, "--perms", "1777", "--dir", "/tmp/home", *_open_parents(targets),
            *_system_binds(spec), *_harness_binds(spec)]
    args += ["--ro-bind-try", spec.data_dir, spec.data_dir]
    if spec.inputs_dir:
        args += ["--ro-bind", spec.inputs_dir, spec.inputs_dir]
    if spec.decoy_dir:
        args += ["--ro-bind", spec.decoy_dir, str(REPO_ROOT / "solutions")]
    args += ["--bind", spec.runtime_dir, spec.runtime_dir, "--chdir", WORKDIR, "--clearenv"]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    environment = {"HOME": "/tmp/home", "MPLCONFIGDIR": "/tmp/home/matplotlib",
                   "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
                   "OMP_NUM_THREADS": str(spec.threads), "MKL_NUM_THREADS": str(spec.threads),
                   "PYTHONWARNINGS": "ignore::DeprecationWarning", "PYTHONDONTWRITEBYTECODE": "1"}
    environment.update({name: os.environ[name] for name in PASSED_VARIABLES if name in os.environ})
    environment["HARNESS_DATA_DIR"] = spec.data_dir
    for name, value in environment.items():
        args += ["--setenv", name, value]
    if os.geteuid() == 0:  # become the unprivileged uid before anything of the student's runs
        uid = str(spec.host_uid)
        inner = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs",
                 "--inh-caps=-all", "--bounding-set=-all", *inner]
    return [*args, "--", *inner]
