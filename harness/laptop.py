"""The laptop set-up's two decisions, made before the course's packages exist: the student tree's `make setup`.

`python3 harness/laptop.py check-python`, with the Python that will make `.venv`, refuses one older than the pinned
packages support (numpy, pandas, scikit-learn and nbgrader of requirements.txt need 3.11), saying which Python it
found and how to use another; a Python newer than the course was tried with gets a warning and goes on.

`.venv/bin/python harness/laptop.py torch [--cpu]` installs requirements.txt's torch pair built for this machine,
with pip's progress: with an NVIDIA GPU (`nvidia-smi` on PATH) the default build from PyPI, which carries CUDA;
without one, the CPU-only build from PyTorch's CPU index (about 200 MB) when that index answers, else PyPI's CUDA
build with a line that says why and how big it is (`--cpu` insists on the CPU index, and stops with what to do
when it does not answer). The rest of requirements.txt, installed next, finds torch there. It uses the standard
library only.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OLDEST = (3, 11)  # the oldest Python every pinned package supports
NEWEST_TRIED = (3, 13)  # the newest the student README states
SUGGESTED = (3, 12)  # the one to install when this Python will not do
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# PyPI's torch for Linux brings NVIDIA's CUDA libraries (the nvidia-* packages): a download and a disk of this size.
CUDA_SIZE = "about 3 GB to download, 6.5 GB on disk"


def python_verdict(version: tuple[int, ...]) -> tuple[bool, str]:
    """Whether a Python of `version` can set the course up, and the line to print about it."""
    found, oldest, newest, suggested = (".".join(map(str, part)) for part in (version[:3], OLDEST, NEWEST_TRIED,
                                                                               SUGGESTED))
    if tuple(version[:2]) < OLDEST:
        return False, (f"Python {found} is older than the course's packages support ({oldest} to {newest}): install "
                       f"Python {suggested} (python.org, your package manager, or `uv python install {suggested}`), "
                       f"then `rm -rf .venv` and `make setup PYTHON=python{suggested}`")
    if tuple(version[:2]) > NEWEST_TRIED:
        return True, (f"Python {found} is newer than the course was tried with ({oldest} to {newest}): going on; if "
                      f"pip finds no wheel for a pinned package, `rm -rf .venv` and "
                      f"`make setup PYTHON=python{suggested}`")
    return True, f"Python {found}: supported ({oldest} to {newest})"


def torch_pair(requirements: Path = ROOT / "requirements.txt") -> list[str]:
    """The pinned `torch==...` and `torchvision==...` lines of `requirements`."""
    pair = [line.strip() for line in requirements.read_text().splitlines()
            if line.strip().startswith(("torch==", "torchvision=="))]
    if len(pair) != 2:
        raise ValueError(f"{requirements} must pin torch and torchvision (torch==X, torchvision==Y); found {pair}")
    return pair


def index_unreachable(url: str = CPU_INDEX, timeout: float = 10) -> str | None:
    """None when PyTorch's CPU index answers, else why not (in a few words)."""
    try:
        urllib.request.urlopen(urllib.request.Request(f"{url}/torch/", method="HEAD"), timeout=timeout).close()
    except OSError as error:  # URLError, a timeout, a refused connection
        return str(getattr(error, "reason", error))
    return None


def torch_source(has_nvidia_gpu: bool, unreachable: Callable[[], str | None], *, force_cpu: bool = False,
                 system: str = platform.system()) -> tuple[list[str] | None, str]:
    """pip's index arguments for the torch pair on this machine (None: install nothing), and the line that says
    which build and why, or why not.

    Args:
        has_nvidia_gpu: whether `nvidia-smi` is on PATH.
        unreachable: called only where the CPU index matters; None when it answers, else why not.
        force_cpu: the CPU-only build whatever the machine (`make setup CPU=1`): refused while its index is
            unreachable.
        system: `platform.system()`; PyPI's torch for macOS has no CUDA, so the CPU index adds nothing there.
    """
    if force_cpu:
        why = unreachable()
        if why is not None:
            return None, (f"torch: CPU=1 asks for the CPU-only build, but {CPU_INDEX} did not answer ({why}): run "
                          f"`make setup CPU=1` again once it is reachable, or `make setup` for PyPI's CUDA build "
                          f"({CUDA_SIZE})")
        return ["--index-url", CPU_INDEX], f"torch: the CPU-only build from {CPU_INDEX} (asked for with CPU=1)"
    if has_nvidia_gpu:
        return [], "torch: the CUDA build from PyPI (nvidia-smi found an NVIDIA GPU)"
    if system == "Darwin":
        return [], "torch: PyPI's build for macOS (CPU and Apple's GPU, no CUDA)"
    why = unreachable()
    if why is None:
        return ["--index-url", CPU_INDEX], (f"torch: the CPU-only build (about 200 MB) from {CPU_INDEX}: no NVIDIA GPU "
                                            "here (no nvidia-smi)")
    return [], (f"torch: no NVIDIA GPU here (no nvidia-smi), but {CPU_INDEX} did not answer ({why}): installing "
                f"PyPI's CUDA build instead, {CUDA_SIZE}; it runs on the CPU all the same. To save the space, "
                "`rm -rf .venv` and `make setup CPU=1` once that index is reachable")


def main(argv: list[str] | None = None) -> int:
    """`check-python` or `torch [--cpu]` (the module's docstring); returns the exit status."""
    parser = argparse.ArgumentParser(prog="harness/laptop.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    sub.add_parser("check-python", help="refuse a Python the pinned packages do not support")
    torch = sub.add_parser("torch", help="install the pinned torch pair built for this machine")
    torch.add_argument("--cpu", action="store_true", help="the CPU-only build whatever the machine")
    args = parser.parse_args(argv)
    if args.step == "check-python":
        ok, line = python_verdict(sys.version_info)
        print(f"make setup: {line}", file=sys.stdout if ok else sys.stderr)
        return 0 if ok else 1
    index, line = torch_source(shutil.which("nvidia-smi") is not None, index_unreachable, force_cpu=args.cpu)
    print(f"make setup: {line}", file=sys.stdout if index is not None else sys.stderr, flush=True)
    if index is None:
        return 1
    command = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", *torch_pair(), *index]
    return subprocess.run(command).returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
