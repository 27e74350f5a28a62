"""The grading kernel's sandbox: bubblewrap isolation, then resource limits, then the kernel.

The kernelspec `write_kernelspec` registers starts `python -m harness.grading.sandbox launch SPEC -- CONN`
in the worker. That launcher reads the spec (written by the worker, out of the kernel's reach) and execs
bubblewrap (`bwrap`), which runs the kernel:

- in new PID, network (loopback only), IPC and UTS namespaces: it sees no other process, reaches no
  network, and when the sandbox's first process dies every process the kernel started dies with it
  (a kernel cannot leave a PID namespace the way it can leave a process group);
- as user 65534 (nobody) in a user namespace, with a clean environment (no variable of the grader's,
  so no secret, reaches it);
- on a filesystem built for it: the system and Python read-only, the course's `harness` package (without
  `harness/judge`) and the data folder read-only, an empty `/tmp` (its working directory is `/tmp/work`)
  and nothing else: no `solutions/` (a decoy copy of the release sits there, watched: `decoy`), no
  gradebook, no output folder, no other submission, no grader file.
  What it writes disappears with it. The one writable folder it shares with the worker holds the kernel's
  connection file and sockets.

Inside, `limits` caps the kernel's private memory (RLIMIT_DATA) and file sizes (RLIMIT_FSIZE), then execs
the kernel, which inherits them (so do its DataLoader workers and DDP ranks). RLIMIT_DATA rather than
RLIMIT_AS: importing torch maps over 3 GB of shared libraries, which RLIMIT_AS counts and RLIMIT_DATA does
not. With `sandboxed=False` (`harness grade --no-sandbox`) only the limits apply.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

KERNEL_NAME = "harness-sandbox"
SANDBOX_UID = 65534
WORKDIR = "/tmp/work"
REPO_ROOT = Path(__file__).resolve().parents[2]
# Variables of the grader's environment the kernel still gets (nbgrader's and the course's, none secret).
PASSED_VARIABLES = ("NBGRADER_EXECUTION", "NBGRADER_VALIDATING", "HARNESS_DEVICE", "LANG", "LC_ALL", "TZ")


@dataclass(frozen=True)
class Spec:
    """How one job's kernel is started: limits, threads, and whether (and what) to sandbox."""

    memory_mb: int
    threads: int
    sandboxed: bool
    runtime_dir: str  # holds the connection file and the kernel's sockets: the one folder shared with the worker
    data_dir: str  # the course's data folder (HARNESS_DATA_DIR), bound read-only when it exists
    decoy_dir: str = ""  # mounted read-only where the repository's solutions/ would be (harness.grading.decoy)


def unavailable_reason() -> str | None:
    """Why the sandbox cannot be made on this machine (None when it can), with what to do about it."""
    if shutil.which("bwrap") is None:
        return ("bubblewrap (`bwrap`) is not installed: install it (Debian/Ubuntu: `sudo apt-get install "
                "bubblewrap`; Fedora: `sudo dnf install bubblewrap`), or grade without isolation with --no-sandbox")
    trial = subprocess.run(["bwrap", *_namespaces(), "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
                            "true"], capture_output=True, text=True, timeout=60)
    if trial.returncode != 0:
        return (f"bubblewrap cannot create namespaces here ({trial.stderr.strip()[:200]}): allow unprivileged user "
                "namespaces (`sysctl kernel.unprivileged_userns_clone=1`, or on Ubuntu 24.04 the bwrap AppArmor "
                "profile), run grading as root, or grade without isolation with --no-sandbox")
    return None


def _namespaces() -> list[str]:
    return ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--unshare-pid",
            "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent",
            "--new-session", "--disable-userns"]


def _system_binds() -> list[str]:
    """The system and this Python, read-only."""
    args = []
    for path in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc"):
        args += ["--ro-bind-try", path, path]
    for prefix in dict.fromkeys((sys.base_prefix, sys.prefix, str(Path(sys.executable).resolve().parents[1]))):
        args += ["--ro-bind", prefix, prefix]
    return args


def bwrap_command(spec: Spec, inner: list[str]) -> list[str]:
    """The bubblewrap command line that runs `inner` in the sandbox."""
    harness = REPO_ROOT / "harness"
    # The empty /tmp first: binds made after it stay visible even when they live under /tmp (a clone in /tmp)
    args = ["bwrap", *_namespaces(), "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", WORKDIR,
            "--dir", "/tmp/home", *_system_binds(), "--ro-bind", str(harness), str(harness)]
    if (harness / "judge").is_dir():
        args += ["--tmpfs", str(harness / "judge")]
    args += ["--ro-bind-try", spec.data_dir, spec.data_dir]
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
    return [*args, "--", *inner]


def write_kernelspec(jupyter_dir: Path, spec: Spec) -> Path:
    """Write the sandbox kernelspec under `jupyter_dir`/kernels; point JUPYTER_PATH at `jupyter_dir` to use it.

    The spec itself goes next to it (`spec.json`): the launcher reads it in the worker, before any
    student code runs, from a folder the kernel never sees.
    """
    spec_dir = jupyter_dir / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True, exist_ok=True)
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


def apply_limits(memory_mb: int, file_mb: int = 1024) -> None:
    """Cap this process's private memory (`memory_mb`, 0 for none) and the size of any file it writes."""
    if memory_mb > 0:
        limit = memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_mb * 2**20, file_mb * 2**20))


def _kernel_command(memory_mb: int, connection_file: str) -> list[str]:
    return [sys.executable, "-m", "harness.grading.sandbox", "limits", "--memory-mb", str(memory_mb), "--",
            sys.executable, "-m", "ipykernel_launcher", "-f", connection_file]


def main(argv: list[str] | None = None) -> None:
    """`launch SPEC -- CONN` (in the worker: exec bwrap) or `limits --memory-mb N -- CMD` (inside: exec CMD)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    launch = commands.add_parser("launch")
    launch.add_argument("spec", type=Path)
    launch.add_argument("rest", nargs=argparse.REMAINDER)
    limits = commands.add_parser("limits")
    limits.add_argument("--memory-mb", type=int, required=True)
    limits.add_argument("rest", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    if not rest:
        parser.error("give the command (or the connection file) after --")
    if args.command == "launch":
        spec = Spec(**json.loads(args.spec.read_text()))
        inner = _kernel_command(spec.memory_mb, rest[0])
        command = bwrap_command(spec, inner) if spec.sandboxed else inner
        os.execvp(command[0], command)
    apply_limits(args.memory_mb)
    os.execv(rest[0], rest)


if __name__ == "__main__":
    main()
