"""`harness doctor`: what this machine will do for the course, found by running things rather than by asking.

It runs one real kernel on the device (a GPU that reports itself available but has no kernel image for its
architecture fails here, with what to do), says which precisions the device computes natively (the definition
`harness.amp` uses: `harness.env.bf16_supported`), how many CPU cores and DataLoader workers make sense, whether
files written here survive a restart (Colab, Kaggle, a mounted Google Drive), and what each lesson will do on
this machine. Lesson 00's first cells print it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from harness.env import (
    COLAB_DRIVE,
    DEVICE_ENV_VAR,
    KAGGLE_WORKING,
    device_name,
    persistent_root,
    recommended_precision,
    select_device,
    supported_precisions,
)

EXPORT_MODULES = ("onnx", "onnxruntime", "onnxscript")


@dataclass(frozen=True)
class Diagnosis:
    """What `diagnose()` found; `problems` empty means the course runs here."""

    device: str
    device_name: str
    kernel: str
    precision: str
    precision_why: str
    cpu_cores: int
    dataloader_workers: int
    runtime: str
    storage: str
    lessons: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def run_kernel(device: torch.device) -> str | None:
    """Run a matmul and a reduction on `device` and compare them with the CPU; None when they agree, else why not.

    `torch.cuda.is_available()` only says a driver answered: a GPU newer (or older) than the architectures this
    torch build was compiled for reports itself available and then fails its first kernel ("no kernel image is
    available for execution on the device").
    """
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 64, generator=generator)
    expected = (x @ x).relu().sum(dim=1)
    try:
        got = (x.to(device) @ x.to(device)).relu().sum(dim=1).cpu()
    except (RuntimeError, AssertionError) as error:  # CUDA's errors; a CPU-only build asserts it has no CUDA
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        built = ", ".join(torch.cuda.get_arch_list()) if device.type == "cuda" else ""
        hint = (f" This torch {torch.__version__} was built for {built}; install a torch build for this GPU "
                "(https://pytorch.org/get-started/locally/)") if built else ""
        return (f"a kernel on {device} failed: {first}.{hint} Until then, train on the CPU: set "
                f"{DEVICE_ENV_VAR}=cpu.")
    if not torch.allclose(got, expected, rtol=1e-2, atol=1e-2):
        return f"a matmul on {device} disagrees with the CPU (max difference {(got - expected).abs().max():.3g})."
    return None


def cpu_cores() -> int:
    """CPU cores this process may use (its affinity mask, e.g. a container's limit), not the host's count."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def dataloader_workers(cores: int) -> int:
    """DataLoader workers that help: none on two cores or fewer (the main process and a worker would fight over
    them), else one core left for the training process, at most 8."""
    return 0 if cores <= 2 else min(cores - 1, 8)


def runtime_and_storage(environ: dict[str, str] | None = None, drive: Path = COLAB_DRIVE,
                        kaggle: Path = KAGGLE_WORKING) -> tuple[str, str]:
    """Which hosted runtime this is (from its environment variables) and whether files written here survive.

    Where `harness.env.persistent_root` finds a folder that survives, it is named: `harness.env.work_folder`
    puts the lessons' runs and checkpoints there.
    """
    environ = dict(os.environ if environ is None else environ)
    root = persistent_root(environ, drive, kaggle)
    if environ.get("COLAB_RELEASE_TAG"):
        if root is not None:
            return "Google Colab", (f"Google Drive is mounted: runs and checkpoints go to {root} "
                                    "(it survives a disconnect; /content does not)")
        return "Google Colab", ("/content is wiped when the runtime disconnects: mount Google Drive "
                                "(from google.colab import drive; drive.mount('/content/drive')) and work there")
    if environ.get("KAGGLE_KERNEL_RUN_TYPE"):
        where = f"runs and checkpoints go to {root}, which" if root is not None else "/kaggle/working"
        return "Kaggle", (f"{where} is kept only in a saved version (Save Version > Save & Run All); "
                          "download checkpoints you need before the session ends")
    if environ.get("JUPYTERHUB_USER"):
        return "JupyterHub", "your home folder on the hub persists across server restarts"
    return "this machine", "files persist (a local disk)"


def lesson_plan(device: torch.device, precision: str, export_installed: bool) -> list[str]:
    """What the lessons whose behaviour depends on the machine will do on this one."""
    gpus = torch.cuda.device_count() if device.type == "cuda" else 0
    on = "a GPU" if device.type == "cuda" else ("Apple's GPU" if device.type == "mps" else "the CPU")
    plan = [
        f"00-04: run on {on}; training cells are sized to finish in about a minute on two CPU cores",
        f"05 mixed precision: autocast on {on}, training in {precision}" + (
            "" if device.type == "cuda" else "; the speed-ups are a GPU's: the lesson says what one would change"),
        "09 DDP: " + (f"NCCL across {gpus} GPUs" if gpus >= 2 else "two CPU processes with gloo (the same code as "
                      "on GPUs)"),
        f"10 capstone, 12-13 speed and memory: measured on {on}",
        "16 export: " + ("ONNX export and ONNX Runtime are installed" if export_installed else
                         "needs the export extra: pip install onnx onnxruntime onnxscript "
                         "(python -m harness.install does it)"),
    ]
    return plan


def diagnose(device: str | torch.device | None = None) -> Diagnosis:
    """Everything `harness doctor` prints, for `device` (None: the one `select_device()` picks)."""
    chosen = select_device(device)
    kernel_problem = run_kernel(chosen)
    problems = [kernel_problem] if kernel_problem else []
    if kernel_problem:
        precision, why = "fp32", "the device failed its test kernel"
    else:
        precision, why = recommended_precision(chosen, supported_precisions(chosen))
    cores = cpu_cores()
    runtime, storage = runtime_and_storage()
    export_installed = all(importlib.util.find_spec(name) is not None for name in EXPORT_MODULES)
    if cores <= 2 and os.environ.get("OMP_NUM_THREADS") != "1":
        problems.append(f"{cores} CPU cores: start Jupyter with OMP_NUM_THREADS=1 so that the DataLoader and the "
                        "checks' processes do not spin-wait on each other's threads")
    return Diagnosis(
        device=str(chosen),
        device_name=device_name(chosen),
        kernel="failed" if kernel_problem else "ok",
        precision=precision,
        precision_why=why,
        cpu_cores=cores,
        dataloader_workers=dataloader_workers(cores),
        runtime=runtime,
        storage=storage,
        lessons=lesson_plan(chosen, precision, export_installed),
        problems=problems,
    )


def format_diagnosis(diagnosis: Diagnosis) -> str:
    """`diagnosis` as the lines a student reads."""
    lines = [
        f"device:      {diagnosis.device} ({diagnosis.device_name}), test kernel {diagnosis.kernel}",
        f"precision:   {diagnosis.precision}: {diagnosis.precision_why}",
        f"CPU:         {diagnosis.cpu_cores} cores; DataLoader num_workers={diagnosis.dataloader_workers}",
        f"runtime:     {diagnosis.runtime}: {diagnosis.storage}",
        "lessons:",
        *(f"  {line}" for line in diagnosis.lessons),
    ]
    lines += [f"problem:     {problem}" for problem in diagnosis.problems] or ["no problems found"]
    return "\n".join(lines)


def doctor(device: str | torch.device | None = None) -> Diagnosis:
    """Print the diagnosis of this machine (lesson 00 calls this) and return it."""
    diagnosis = diagnose(device)
    print(format_diagnosis(diagnosis))
    return diagnosis


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `harness doctor`."""
    parser.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
    parser.add_argument("--device", default=None,
                        help=f"device to diagnose (cpu, cuda, cuda:1, mps; default: {DEVICE_ENV_VAR} or best)")


def run(args: argparse.Namespace) -> int:
    """`harness doctor`: exit status 0 when the device works, 1 when its kernel failed, 2 for an unusable name."""
    try:
        diagnosis = diagnose(args.device)
    except ValueError as error:
        print(f"harness doctor: error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(asdict(diagnosis), indent=2) if args.json else format_diagnosis(diagnosis))
    return 1 if diagnosis.kernel == "failed" else 0
