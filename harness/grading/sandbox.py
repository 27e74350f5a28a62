"""The grading kernel's sandbox: bubblewrap isolation, then resource limits, then the kernel.

The kernelspec `write_kernelspec` registers starts `python -m harness.grading.sandbox launch SPEC -- CONN`
in the worker. That launcher reads the spec (written by the worker, out of the kernel's reach) and execs
bubblewrap (`bwrap`), which runs the kernel:

- in new PID, network (loopback only), IPC and UTS namespaces: it sees no other process, reaches no
  network, and when the sandbox's first process dies every process the kernel started dies with it
  (a kernel cannot leave a PID namespace the way it can leave a process group);
- as user 65534 (nobody), with a clean environment (no variable of the grader's, so no secret, reaches it).
  Run by an unprivileged grader, bubblewrap maps it in a user namespace (outside it is the grader's uid,
  which holds nothing more). Run by root, bubblewrap makes the mounts as root (so it can bind a Python that
  lives under a private folder such as /root/.pyenv) and `setpriv` then becomes the real uid 65534 with no
  capability before anything of the student's runs: the kernel cannot read `/etc/shadow` or root's files;
- on a filesystem built for it: the system and Python read-only (each folder above a bind readable by
  anyone), from `/etc` only what Python needs (certificates, the loader's cache, time zone, a stub
  `passwd`/`group`), the course's `harness` package read-only without the judge side (`harness/judge`,
  `harness/judges`) or the grader (`harness/grading`, except the guard and this launcher), the data folder
  read-only, a sized `/tmp` (its working directory is `/tmp/work`) and a sized `/dev/shm`, and nothing else:
  no `solutions/` (a decoy copy of the release sits there, watched: `decoy`), no gradebook, no output
  folder, no other submission, no grader file.
  What it writes disappears with it. The one writable folder it shares with the worker holds the kernel's
  connection file and sockets.

Inside, `limits` caps the kernel's private memory (RLIMIT_DATA), file sizes (RLIMIT_FSIZE) and processes
(RLIMIT_NPROC, counted per uid and user namespace: the sandbox's alone, root-graded or not), then execs the
kernel, which inherits them (so do its DataLoader workers and DDP ranks). RLIMIT_DATA rather than RLIMIT_AS: importing
torch maps over 3 GB of shared libraries, which RLIMIT_AS counts and RLIMIT_DATA does not. Neither counts
shared memory or tmpfs pages: the sized /tmp and /dev/shm bound files there (a fuller one fails with
ENOSPC, or SIGBUS through a mapping), and what the sandbox still runs and holds at the end is reported
(`execute`). Anonymous MAP_SHARED memory and the CPU share are bounded by the kernel's cgroup
(`harness.grading.cgroup`), which the launcher joins before it execs bubblewrap, where one can be made.
With `sandboxed=False` (`harness grade --no-sandbox`) only the limits apply.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

KERNEL_NAME = "harness-sandbox"
SANDBOX_UID = 65534
# With root grading, each sandbox runs as its own real uid from this range (a per-uid process cap then
# belongs to one kernel alone); none of them owns any file of the machine.
HOST_UID_BASE, HOST_UID_COUNT = 200_000, 50_000
WORKDIR = "/tmp/work"
REPO_ROOT = Path(__file__).resolve().parents[2]
# Variables of the grader's environment the kernel still gets (nbgrader's and the course's, none secret).
PASSED_VARIABLES = ("NBGRADER_EXECUTION", "NBGRADER_VALIDATING", "HARNESS_DEVICE", "LANG", "LC_ALL", "TZ")
# What Python (and torch, matplotlib, requests) read from /etc; the rest of /etc stays outside.
ETC_NEEDED = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "ssl", "ca-certificates", "ca-certificates.conf", "pki",
              "localtime", "timezone", "nsswitch.conf", "hosts", "host.conf", "mime.types", "fonts")
# The judge side and the grader: never in the kernel's reach (the guard and this launcher are bound back).
WITHHELD = ("judge", "judges", "grading")
GRADING_IN_KERNEL = ("__init__.py", "tamper.py", "sandbox.py")
PROCESSES = 256  # RLIMIT_NPROC of a sandboxed kernel (its uid and namespace are its own): a fork bomb stops there


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


def host_uid_for(key: str) -> int:
    """The real uid a root-graded sandbox runs as, stable for `key` (a job's runtime folder)."""
    return HOST_UID_BASE + int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % HOST_UID_COUNT


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


def _harness_binds() -> list[str]:
    """The course's package read-only, the judge side and the grader hidden (tmpfs over them, if present)."""
    harness = REPO_ROOT / "harness"
    args = ["--ro-bind", str(harness), str(harness)]
    for name in WITHHELD:
        if (harness / name).is_dir():
            args += ["--tmpfs", str(harness / name)]
    for name in GRADING_IN_KERNEL:
        path = harness / "grading" / name
        args += ["--ro-bind", str(path), str(path)]
    return args


def bwrap_command(spec: Spec, inner: list[str]) -> list[str]:
    """The bubblewrap command line that runs `inner` in the sandbox."""
    harness = REPO_ROOT / "harness"
    targets = ["/etc/passwd", *_python_prefixes(), str(harness), spec.data_dir, spec.runtime_dir,
               str(REPO_ROOT / "solutions"), *([spec.inputs_dir] if spec.inputs_dir else [])]
    # The sized /tmp first: binds made after it stay visible even when they live under /tmp (a clone in /tmp)
    args = ["bwrap", *_namespaces(), "--proc", "/proc", "--dev", "/dev",
            "--perms", "1777", "--size", str(spec.shm_mb * 2**20), "--tmpfs", "/dev/shm",
            "--perms", "1777", "--size", str(spec.tmp_mb * 2**20), "--tmpfs", "/tmp",
            "--perms", "1777", "--dir", WORKDIR, "--perms", "1777", "--dir", "/tmp/home", *_open_parents(targets),
            *_system_binds(spec), *_harness_binds()]
    args += ["--ro-bind-try", spec.data_dir, spec.data_dir]
    if spec.inputs_dir:
        args += ["--ro-bind", spec.inputs_dir, spec.inputs_dir]
    if spec.decoy_dir:
        args += ["--ro-bind", spec.decoy_dir, str(REPO_ROOT / "solutions")]
    args += ["--bind", spec.runtime_dir, spec.runtime_dir, "--chdir", WORKDIR, "--clearenv"]
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


def write_kernelspec(jupyter_dir: Path, spec: Spec) -> Path:
    """Write the sandbox kernelspec under `jupyter_dir`/kernels; point JUPYTER_PATH at `jupyter_dir` to use it.

    The spec itself goes next to it (`spec.json`): the launcher reads it in the worker, before any
    student code runs, from a folder the kernel never sees.
    """
    spec_dir = jupyter_dir / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True, exist_ok=True)
    uid = host_uid_for(spec.runtime_dir) if os.geteuid() == 0 else SANDBOX_UID
    (spec_dir / "passwd").write_text(f"root:x:0:0:root:/root:/usr/sbin/nologin\n"
                                     f"student:x:{uid}:{uid}:student:/tmp/home:/usr/sbin/nologin\n")
    (spec_dir / "group").write_text(f"root:x:0:\nstudent:x:{uid}:\n")
    spec = replace(spec, etc_dir=str(spec_dir), host_uid=uid)
    (spec_dir / "spec.json").write_text(json.dumps(asdict(spec)))
    kernel = {
        "argv": [sys.executable, "-m", "harness.grading.sandbox", "launch", str(spec_dir / "spec.json"), "--",
                 "{connection_file}"],
        "display_name": "Python 3 (grading sandbox)",
        "language": "python",
        # bubblewrap does not forward signals: interrupts travel as messages, which ipykernel handles itself
        "interrupt_mode": "message",
        "env": {"OMP_NUM_THREADS": str(spec.threads), "MKL_NUM_THREADS": str(spec.threads),
                "PYTHONWARNINGS": "ignore::DeprecationWarning"},
    }
    (spec_dir / "kernel.json").write_text(json.dumps(kernel, indent=1))
    return spec_dir


def apply_limits(memory_mb: int, file_mb: int = 1024, processes: int = 0) -> None:
    """Cap this process's private memory (`memory_mb`, 0 for none), the size of any file it writes and the
    processes of its uid (`processes`, 0 for no cap)."""
    if memory_mb > 0:
        limit = memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_mb * 2**20, file_mb * 2**20))
    if processes > 0:
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))


def _kernel_command(spec: Spec, connection_file: str) -> list[str]:
    # RLIMIT_NPROC counts per uid and user namespace (Linux 5.14+): a root-graded sandbox's uid is its kernel's
    # alone, and an unprivileged grader's sandbox has a user namespace of its own; unsandboxed, it would count
    # every process of the grader's
    processes = PROCESSES if spec.sandboxed else 0
    return [sys.executable, "-m", "harness.grading.sandbox", "limits", "--memory-mb", str(spec.memory_mb),
            "--processes", str(processes), "--", sys.executable, "-m", "ipykernel_launcher", "-f", connection_file]


def hand_over(spec: Spec, connection_file: str) -> None:
    """Give the root-graded kernel's uid its runtime folder and connection file (written by root, 0600)."""
    if spec.sandboxed and os.geteuid() == 0:
        for path in (spec.runtime_dir, connection_file):
            os.chown(path, spec.host_uid, spec.host_uid)


def main(argv: list[str] | None = None) -> None:
    """`launch SPEC -- CONN` (in the worker: exec bwrap) or `limits --memory-mb N -- CMD` (inside: exec CMD)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    launch = commands.add_parser("launch")
    launch.add_argument("spec", type=Path)
    launch.add_argument("rest", nargs=argparse.REMAINDER)
    limits = commands.add_parser("limits")
    limits.add_argument("--memory-mb", type=int, required=True)
    limits.add_argument("--processes", type=int, default=0)
    limits.add_argument("rest", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    if not rest:
        parser.error("give the command (or the connection file) after --")
    if args.command == "launch":
        spec = Spec(**json.loads(args.spec.read_text()))
        inner = _kernel_command(spec, rest[0])
        hand_over(spec, rest[0])
        from harness.grading import cgroup  # here, in the worker: the kernel's sandbox does not hold it

        cgroup.join(spec.cgroup)
        command = bwrap_command(spec, inner) if spec.sandboxed else inner
        os.execvp(command[0], command)
    apply_limits(args.memory_mb, processes=args.processes)
    os.execv(rest[0], rest)


if __name__ == "__main__":
    main()
