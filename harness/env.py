"""The machine we train on: which device to use, and a report of versions, device and precisions.

`select_device()` is the one place the course picks a device: CUDA, then Apple MPS, then CPU, unless the
caller or the HARNESS_DEVICE variable names one. `environment_report()` says what this machine can do, so a
student (or a bug report) states versions and supported precisions instead of guessing them.
This module is also the `harness env` subcommand.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import psutil
import torch

DEVICE_ENV_VAR = "HARNESS_DEVICE"
NO_BF16_ENV_VAR = "HARNESS_NO_BF16"  # 1: every CUDA GPU is treated as one without native bf16 (`bf16_supported`)
KNOWN_DEVICE_TYPES = ("cuda", "mps", "cpu")
COLAB_DRIVE = Path("/content/drive/MyDrive")  # where Colab mounts Google Drive
KAGGLE_WORKING = Path("/kaggle/working")  # the folder a saved Kaggle version keeps
COURSE_FOLDER = "pytorch-training-lab"


def available_devices() -> list[str]:
    """Names of the devices usable here, best first (e.g. ["cuda:0", "cuda:1", "cpu"])."""
    devices = [f"cuda:{index}" for index in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    if torch.backends.mps.is_available():
        devices.append("mps")
    devices.append("cpu")
    return devices


def select_device(name: str | torch.device | None = None) -> torch.device:
    """The device to train on: `name`, else HARNESS_DEVICE, else the best available (cuda, mps, cpu).

    Args:
        name: a device such as "cpu", "cuda", "cuda:1" or "mps"; "auto" (or None with HARNESS_DEVICE unset)
            picks the best available one.

    Returns:
        The chosen `torch.device`.

    Raises:
        ValueError: the name is not a device torch knows, or that device is not available on this machine.
    """
    source = "select_device(name=...)"
    if name is None and os.environ.get(DEVICE_ENV_VAR, "").strip():
        name, source = os.environ[DEVICE_ENV_VAR].strip(), f"the {DEVICE_ENV_VAR} environment variable"
    if name is None or str(name).strip().lower() == "auto":
        return torch.device(available_devices()[0])
    device = _parse_device(name, source)
    if not _is_available(device):
        raise ValueError(
            f"Device {str(device)!r} (from {source}) is not available on this machine. "
            f"{_how_to_choose()}"
        )
    return device


def _parse_device(name: str | torch.device, source: str) -> torch.device:
    """`name` as a torch.device of a type the course supports, or a ValueError saying what is accepted."""
    try:
        device = torch.device(str(name).strip().lower())
    except RuntimeError:
        device = None
    if device is None or device.type not in KNOWN_DEVICE_TYPES:
        raise ValueError(
            f"Unknown device {str(name)!r} (from {source}): the course trains on "
            f"{', '.join(KNOWN_DEVICE_TYPES)} (optionally with an index, e.g. 'cuda:1'). {_how_to_choose()}"
        )
    return device


def _is_available(device: torch.device) -> bool:
    """Whether `device` (type and index) exists on this machine."""
    if device.type == "cuda":
        index = device.index or 0
        return torch.cuda.is_available() and index < torch.cuda.device_count()
    if device.type == "mps":
        return torch.backends.mps.is_available()
    return True


def _how_to_choose() -> str:
    """The sentence every device error ends with: what exists here and how to pick it."""
    return (
        f"Devices available here: {', '.join(available_devices())}. Pass one of them to select_device(), "
        f"or set {DEVICE_ENV_VAR} (e.g. {DEVICE_ENV_VAR}=cpu), or leave both unset to use the best available."
    )


def persistent_root(environ: dict[str, str] | None = None, drive: Path = COLAB_DRIVE,
                    kaggle: Path = KAGGLE_WORKING) -> Path | None:
    """The folder of a hosted runtime whose files survive a disconnect, or None where there is none to choose.

    On Colab with Google Drive mounted, `<Drive>/pytorch-training-lab` (made here); on Kaggle, /kaggle/working
    (kept by a saved version). Elsewhere None: on a laptop or a hub the lessons' folders already persist, and on
    Colab without Drive nothing does (`harness doctor` says to mount it). `harness doctor` reads the same answer.

    Args:
        environ: the environment variables to read (default: this process's); the runtime is known by them.
        drive: where Colab mounts Google Drive's "My Drive".
        kaggle: Kaggle's working folder.
    """
    environ = dict(os.environ if environ is None else environ)
    if environ.get("COLAB_RELEASE_TAG") and drive.is_dir():
        root = drive / COURSE_FOLDER
        root.mkdir(exist_ok=True)
        return root
    if environ.get("KAGGLE_KERNEL_RUN_TYPE") and kaggle.is_dir():
        return kaggle
    return None


def work_folder(prefix: str, environ: dict[str, str] | None = None, drive: Path = COLAB_DRIVE,
                kaggle: Path = KAGGLE_WORKING) -> Path:
    """A new folder for a lesson's runs and checkpoints (e.g. `work_folder("lesson08")`): under
    `persistent_root()` when a hosted runtime has one, so a checkpoint outlives a disconnect, else a temporary
    folder, as the lessons make today. The name starts with `prefix`; the other arguments as in `persistent_root`.
    """
    root = persistent_root(environ, drive, kaggle)
    if root is None:
        return Path(tempfile.mkdtemp(prefix=f"{prefix}-"))
    return Path(tempfile.mkdtemp(prefix=f"{prefix}-{time.strftime('%Y%m%d-%H%M%S')}-", dir=root))


def bf16_supported(device: torch.device) -> bool:
    """Whether `device` computes bf16 natively: the course's one definition of "bf16 is supported".

    On CUDA that is compute capability 8.0 and above (Ampere on); older GPUs such as a T4 emulate bf16, which
    runs but is slower than fp32, so it is no training option there (fp16 with a GradScaler is). torch's
    `torch.cuda.is_bf16_supported()` says True on a T4, because it counts emulation: ask here instead. CPU and
    MPS autocast compute bf16 themselves. Every precision choice asks here: `harness.amp`, `supported_precisions`
    (so `recommended_precision`, `harness doctor` and the lessons), `harness.fast`'s "auto" and the benchmarks.

    HARNESS_NO_BF16=1 refuses bf16 on every CUDA GPU, as a T4 does: on a newer GPU, a run then takes the T4's
    path (fp16 with a GradScaler), so that path can be verified without a T4. CPU and MPS are unaffected.

    Raises:
        ValueError: HARNESS_NO_BF16 holds something other than 1, 0 or nothing.
    """
    if device.type != "cuda":
        return True
    if _bf16_refused_by_environment():
        return False
    with torch.cuda.device(device):
        return torch.cuda.is_bf16_supported(including_emulation=False)


def _bf16_refused_by_environment() -> bool:
    """Whether HARNESS_NO_BF16=1 asks the course to treat every CUDA GPU as one without native bf16 (a T4).

    Raises:
        ValueError: the variable holds something other than 1, 0 or nothing.
    """
    value = os.environ.get(NO_BF16_ENV_VAR, "").strip()
    if value not in ("", "0", "1"):
        raise ValueError(f"{NO_BF16_ENV_VAR}={value!r}: set it to 1 to refuse bf16 on CUDA GPUs (as on a T4, "
                         "where the course trains in fp16 with a GradScaler), or to 0 or nothing to allow it.")
    return value == "1"


def no_bf16_reason(device: torch.device) -> str:
    """Why `bf16_supported(device)` is False, in words a message can start with."""
    if _bf16_refused_by_environment():
        return f"bf16 is refused on {device_name(device)} by {NO_BF16_ENV_VAR}=1 (as on a GPU without native bf16)"
    return f"{device_name(device)} has no native bf16 (it would emulate it, slower than fp32)"


def supported_precisions(device: torch.device) -> dict[str, bool]:
    """Which training precisions work on `device`, found by trying them rather than by lookup tables.

    Returns:
        {"fp32": True, "bf16_autocast": ..., "fp16_autocast": ..., "grad_scaler": ...}.
    """
    return {
        "fp32": True,
        "bf16_autocast": bf16_supported(device) and _autocast_runs(device, torch.bfloat16),  # a T4 emulates it
        "fp16_autocast": _autocast_runs(device, torch.float16),
        "grad_scaler": _grad_scaler_works(device),
    }


def recommended_precision(device: torch.device, precisions: dict[str, bool]) -> tuple[str, str]:
    """The precision to train in on `device`, given its `supported_precisions`, and why.

    bf16 where it is native (fp32's range, no scaler), else fp16 with a GradScaler (a T4), else fp32. On the
    CPU fp32: bf16 autocast runs there, for learning what it does, but is rarely faster.
    """
    if device.type == "cpu":
        return "fp32", "CPU: bf16 autocast runs here for learning what it does, rarely faster than fp32"
    if precisions["bf16_autocast"]:
        return "bf16", "bf16 is native here: fp32's range, no GradScaler needed"
    if precisions["fp16_autocast"] and precisions["grad_scaler"]:
        why = no_bf16_reason(device) if not bf16_supported(device) else "bf16 autocast does not run here"
        return "fp16", f"{why}: fp16 with a GradScaler"
    return "fp32", "neither bf16 nor fp16 autocast runs natively here"


def _autocast_runs(device: torch.device, dtype: torch.dtype) -> bool:
    """True when a matmul under autocast on `device` really computes in `dtype` (torch would warn and fall
    back to fp32 otherwise, so any warning counts as unsupported)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with torch.autocast(device_type=device.type, dtype=dtype):
                x = torch.ones(8, 8, device=device)
                product = x @ x
        except RuntimeError:
            return False
    return not caught and product.dtype == dtype


def _grad_scaler_works(device: torch.device) -> bool:
    """True when `torch.amp.GradScaler` is enabled for `device` (it disables itself, with a warning,
    where it cannot run)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            scaler = torch.amp.GradScaler(device.type)
        except (RuntimeError, ValueError):
            return False
    return scaler.is_enabled() and not caught


def device_name(device: torch.device) -> str:
    """A human name for the device: the GPU model, or the CPU model for "cpu"."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "mps":
        return f"Apple MPS ({platform.machine()})"
    return _cpu_model() or platform.processor() or platform.machine()


def _cpu_model() -> str:
    """The CPU model from /proc/cpuinfo on Linux; empty where that file does not exist."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def _device_memory_bytes(device: torch.device) -> int:
    """Total memory of the device: GPU memory for CUDA, the recommended working set for MPS, RAM for CPU."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    if device.type == "mps":
        return int(torch.mps.recommended_max_memory())
    return psutil.virtual_memory().total


def environment_report(device: str | torch.device | None = None) -> dict[str, Any]:
    """Versions, device and supported precisions of this machine, as JSON-serialisable values.

    Args:
        device: the device to describe; None describes the one `select_device()` picks.

    Returns:
        A dict with python, platform, torch, torchvision, cuda, cudnn, device, device_name,
        device_memory_gb, cpu_threads, cpu_count, precisions and precision (the one to train in).
    """
    chosen = select_device(device)
    precisions = supported_precisions(chosen)
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torchvision": importlib.metadata.version("torchvision"),
        "cuda": torch.version.cuda,  # the CUDA torch was built with; None on CPU-only builds
        "cuda_available": torch.cuda.is_available(),
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "device": str(chosen),
        "device_name": device_name(chosen),
        "device_memory_gb": round(_device_memory_bytes(chosen) / 2**30, 2),
        "cpu_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "precisions": precisions,
        "precision": recommended_precision(chosen, precisions)[0],
    }


def format_environment_report(report: dict[str, Any]) -> str:
    """`report` as aligned "key: value" lines, precisions as a yes/no list."""
    width = max(len(key) for key in report)
    lines = []
    for key, value in report.items():
        if isinstance(value, dict):
            value = ", ".join(f"{name} {'yes' if ok else 'no'}" for name, ok in value.items())
        lines.append(f"{key + ':':<{width + 2}}{value}")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `harness env`."""
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--device", default=None, help=f"device to describe (cpu, cuda, cuda:1, mps; default: {DEVICE_ENV_VAR} or best)"
    )


def run(args: argparse.Namespace) -> int:
    """`harness env`: print the environment report; exit status 2 for a device that cannot be used."""
    try:
        report = environment_report(args.device)
    except ValueError as error:
        print(f"harness env: error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2) if args.json else format_environment_report(report))
    return 0
