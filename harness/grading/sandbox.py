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
import sys
from dataclasses import asdict, replace
from pathlib import Path

from harness.sandbox import REPO_ROOT as REPO_ROOT  # the bubblewrap command line is shared with the drills
from harness.sandbox import SANDBOX_UID, Spec, bwrap_command, user_namespace_filter
from harness.sandbox import unavailable_reason as unavailable_reason

KERNEL_NAME = "harness-sandbox"
# With root grading, each sandbox runs as its own real uid from this range (a per-uid process cap then
# belongs to one kernel alone); none of them owns any file of the machine.
HOST_UID_BASE, HOST_UID_COUNT = 200_000, 50_000
PROCESSES = 256  # RLIMIT_NPROC of a sandboxed kernel (its uid and namespace are its own): a fork bomb stops there


def host_uid_for(key: str) -> int:
    """The real uid a root-graded sandbox runs as, stable for `key` (a job's runtime folder)."""
    return HOST_UID_BASE + int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % HOST_UID_COUNT


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


def launch_command(spec: Spec, connection_file: str) -> list[str]:
    """The command that starts the kernel of `connection_file`: in the sandbox (started by root: under the filter
    that refuses a user namespace, its descriptor left open for bubblewrap) or, unsandboxed, as it is."""
    inner = _kernel_command(spec, connection_file)
    return bwrap_command(spec, inner, user_namespace_filter()) if spec.sandboxed else inner


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
        hand_over(spec, rest[0])
        from harness.grading import cgroup  # here, in the worker: the kernel's sandbox does not hold it

        cgroup.join(spec.cgroup)
        command = launch_command(spec, rest[0])
        os.execvp(command[0], command)
    apply_limits(args.memory_mb, processes=args.processes)
    os.execv(rest[0], rest)


if __name__ == "__main__":
    main()
