"""The grading kernel's limits: a kernel launcher that caps memory and file size, then becomes the kernel.

`python -m harness.grading.sandbox --memory-mb 3072 -- python -m ipykernel_launcher -f CONN` sets
RLIMIT_DATA (the process's private writable memory: heap, anonymous mappings, torch's CPU tensors) and
RLIMIT_FSIZE on itself, records its pid, and execs the kernel, which inherits
the limits (so do the kernel's DataLoader workers). A submission that exhausts memory gets MemoryError (or
torch's "can't allocate memory") in the cell that allocated, instead of the machine's OOM killer taking
other students' kernels with it. A resource limit rather than a cgroup: it needs no privileges and works
in any container. RLIMIT_DATA rather than RLIMIT_AS: importing torch maps over 3 GB of shared libraries,
which RLIMIT_AS counts and RLIMIT_DATA does not (measured: torch imports under a 2 GiB RLIMIT_DATA and
fails to load under a 2 GiB RLIMIT_AS). `write_kernelspec` registers the launcher as a Jupyter kernel in a private directory.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
from pathlib import Path

KERNEL_NAME = "harness-sandbox"
PIDFILE_VARIABLE = "HARNESS_KERNEL_PIDFILE"


def write_kernelspec(jupyter_dir: Path, *, memory_mb: int, threads: int, pidfile: Path) -> Path:
    """Write the sandbox kernelspec under `jupyter_dir`/kernels; point JUPYTER_PATH at `jupyter_dir` to use it.

    Args:
        jupyter_dir: a private Jupyter data directory.
        memory_mb: private-memory limit (RLIMIT_DATA) of the kernel process, in MiB (0: no limit).
        threads: intra-op threads for torch/OpenMP, so that parallel workers do not oversubscribe cores.
        pidfile: where the launcher writes the kernel's pid, for the parent to clean up after a hard kill.
    """
    spec_dir = jupyter_dir / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [sys.executable, "-m", "harness.grading.sandbox", "--memory-mb", str(memory_mb), "--",
                 sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (grading sandbox)",
        "language": "python",
        "env": {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
                "PYTHONWARNINGS": "ignore::DeprecationWarning", PIDFILE_VARIABLE: str(pidfile)},
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec, indent=1))
    return spec_dir


def apply_limits(memory_mb: int, file_mb: int = 1024) -> None:
    """Cap this process's private memory (`memory_mb`, 0 for none) and the size of any file it writes."""
    if memory_mb > 0:
        limit = memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_mb * 2**20, file_mb * 2**20))


def main(argv: list[str] | None = None) -> None:
    """Apply the limits, record the pid, and exec the kernel command given after `--`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory-mb", type=int, required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the kernel command after --")
    pidfile = os.environ.get(PIDFILE_VARIABLE)
    if pidfile:
        Path(pidfile).write_text(str(os.getpid()))
    apply_limits(args.memory_mb)
    os.execv(command[0], command)


if __name__ == "__main__":
    main()
