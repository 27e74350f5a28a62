"""Measuring training speed and memory honestly, on whatever device the reader has.

Lessons 05 and 10 and every script in `benchmarks/` read their speed figures from this module, so a number
in a notebook and a number in `benchmarks/README.md` are measured the same way:

- warm-up steps are excluded (the first steps pay for allocation, cuDNN autotuning and compilation);
- the device is synchronised before each clock read (CUDA runs asynchronously: without a sync the clock
  measures how fast Python queues work, not how fast the GPU does it);
- every configuration is timed over several repeats and reported as the median with its quartiles.

`training_throughput` times full training steps of one configuration; `compare_precisions` times each
precision the device supports, side by side; `training_flops` and `model_flops_utilization` turn a
throughput into the fraction of the GPU's published peak it reaches. `machine_record` and `report_results`
are the benchmarks' shared tail: the machine, a printed table and a CSV under `build/bench/`.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from harness.amp import autocast, make_scaler, validate_precision
from harness.env import environment_report, supported_precisions
from harness.report import markdown_table

__all__ = [
    "PEAK_FLOPS",
    "Throughput",
    "compare_precisions",
    "machine_record",
    "benchmark_cell",
    "model_flops_utilization",
    "peak_flops",
    "quartiles",
    "report_results",
    "supported_precision_names",
    "training_flops",
    "training_throughput",
]


@dataclass(frozen=True)
class Throughput:
    """Speed and memory of one training configuration."""

    label: str                       # e.g. "bf16 compiled channels_last"
    images_per_s: float              # median over repeats
    images_per_s_q1: float           # spread: quartiles over repeats
    images_per_s_q3: float
    ms_per_step: float               # median
    peak_memory_bytes: int | None    # CUDA peak allocated during the timed steps; None on CPU
    activation_bytes: int            # bytes autograd saved for backward in one training step


def training_throughput(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, *,
                        precision: str = "fp32", compile: bool = False, channels_last: bool = False,
                        tf32: bool = False, warmup: int = 2, steps: int = 5, repeats: int = 3,
                        label: str | None = None, batch_size: int | None = None) -> Throughput:
    """Full training steps (zero_grad, autocast forward+loss, scaled backward, step) on one batch already on
    the model's device; warm-up excluded, device synchronised, median and quartiles over repeats.

    A copy of `model` is measured (with SGD and momentum, cross-entropy loss): `model` itself is left as it
    was. `activation_bytes` is counted in one eager step before any compilation.

    Args:
        model: the network, on the same device as `inputs`.
        inputs: one batch (N, ...); with `batch_size`, a device-resident data set whose consecutive slices
            of `batch_size` are the steps' batches, in turn (the last partial slice is dropped).
        targets: class indices (N,).
        precision: "fp32", "bf16" or "fp16" (autocast; fp16 with a GradScaler).
        compile: run the model through `torch.compile` (compilation happens in the warm-up).
        channels_last: model and inputs in channels-last memory format (4-D inputs only).
        tf32: let float32 matmuls and convolutions use TF32 tensor cores (CUDA, Ampere and later); off
            means strict float32 (torch's default leaves TF32 on for cuDNN convolutions).
        warmup: untimed steps before the timed ones.
        steps: training steps per timed repeat.
        repeats: timed repeats; the median and quartiles are taken over them.
        label: the row's name; default from the settings ("bf16 compiled channels_last").
        batch_size: see `inputs`.

    Returns:
        The `Throughput`.

    Raises:
        ValueError: a precision the device cannot run, a model on another device, channels_last for
            inputs that are not 4-D, or counts below 1.
    """
    device = inputs.device
    _validate(model, device, precision, warmup, steps, repeats)
    batches = _batches(inputs, targets, batch_size, channels_last)
    label = label or _default_label(precision, compile, channels_last, tf32)
    model = copy.deepcopy(model)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    scaler = make_scaler(device, precision)
    with _tf32(tf32):
        activation_bytes = _saved_for_backward(model, *batches[0], device, precision)
        if compile:
            torch.compiler.reset()  # earlier configurations' graphs would count towards the recompile limit
            model = torch.compile(model)

        def step(index: int) -> None:
            x, y = batches[index % len(batches)]
            optimizer.zero_grad(set_to_none=True)
            with autocast(device, precision):
                loss = nn.functional.cross_entropy(model(x), y)
            scaler.scale(loss).backward()  # outside autocast
            scaler.step(optimizer)
            scaler.update()

        for index in range(warmup):
            step(index)
        seconds = _timed_repeats(step, device, warmup, steps, repeats)
    images = len(batches[0][0]) * steps
    per_second = [images / s for s in seconds]
    q1, median, q3 = quartiles(per_second)
    return Throughput(label=label, images_per_s=median, images_per_s_q1=q1, images_per_s_q3=q3,
                      ms_per_step=statistics.median(seconds) / steps * 1e3,
                      peak_memory_bytes=torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
                      activation_bytes=activation_bytes)


def compare_precisions(make_model: Callable[[], nn.Module], inputs: torch.Tensor, targets: torch.Tensor,
                       precisions: Sequence[str] | None = None, **options: Any) -> pd.DataFrame:
    """One row per precision supported on the inputs' device (default: every supported one of fp32, bf16,
    fp16), a fresh model each, columns from Throughput plus 'speedup' against fp32.

    Args:
        make_model: builds the model on the inputs' device (called once per precision).
        inputs: one batch on the device to measure (see `training_throughput`).
        targets: its class indices.
        precisions: the precisions to compare; None: each of fp32, bf16, fp16 the device supports.
        **options: passed to `training_throughput` (compile, channels_last, warmup, steps, ...).

    Returns:
        A DataFrame with columns precision, the `Throughput` fields and speedup (images/s over fp32's;
        NaN without an fp32 row).

    Raises:
        ValueError: a requested precision the device does not support.
    """
    supported = supported_precision_names(inputs.device)
    if precisions is None:
        precisions = supported
    unsupported = [p for p in precisions if p not in supported]
    if unsupported:
        raise ValueError(f"{unsupported} cannot train on {inputs.device}: it supports {supported}.")
    rows = []
    for precision in precisions:
        result = training_throughput(make_model(), inputs, targets, precision=precision, **options)
        rows.append({"precision": precision, **asdict(result)})
        _release_memory(inputs.device)
    frame = pd.DataFrame(rows)
    baseline = frame.loc[frame["precision"] == "fp32", "images_per_s"]
    frame["speedup"] = frame["images_per_s"] / baseline.iloc[0] if len(baseline) else float("nan")
    return frame


def supported_precision_names(device: torch.device) -> list[str]:
    """The training precisions `device` runs, of fp32, bf16 and fp16 (found by trying them)."""
    works = supported_precisions(device)
    return ["fp32"] + [p for p in ("bf16", "fp16") if works[f"{p}_autocast"]]


def quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    """First quartile, median and third quartile of repeated measurements (all equal for a single one)."""
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, median, q3


# --- FLOPs and model FLOPs utilisation ------------------------------------------------------------------

# Published dense peaks (no sparsity) in FLOP/s, by GPU and the format the tensor cores compute in.
# "tf32" is float32 training with TF32 allowed; "fp32" is strict float32 on the CUDA cores.
PEAK_FLOPS: dict[str, dict[str, float]] = {
    "H100 SXM": {"bf16": 989e12, "fp16": 989e12, "tf32": 495e12, "fp32": 67e12},
    "H200 SXM": {"bf16": 989e12, "fp16": 989e12, "tf32": 495e12, "fp32": 67e12},
    "A100": {"bf16": 312e12, "fp16": 312e12, "tf32": 156e12, "fp32": 19.5e12},
}


def peak_flops(device: torch.device, precision: str, tf32: bool = False) -> float | None:
    """The published peak FLOP/s of `device` for `precision` (`PEAK_FLOPS`), or None where it is not
    listed: a CPU, another GPU, or the H100 and H200 PCIe and NVL cards (lower clocks than the SXM ones)."""
    if device.type != "cuda":
        return None
    gpu = _peak_table_key(torch.cuda.get_device_name(device))
    kind = "tf32" if precision == "fp32" and tf32 else precision
    return PEAK_FLOPS[gpu][kind] if gpu else None


def _peak_table_key(device_name: str) -> str | None:
    """The `PEAK_FLOPS` row for a CUDA device name such as "NVIDIA H100 80GB HBM3"."""
    if "A100" in device_name:
        return "A100"  # the SXM and PCIe cards share the same peaks
    if "PCIe" in device_name or "NVL" in device_name:
        return None
    return next((gpu for gpu in ("H100 SXM", "H200 SXM") if gpu.split()[0] in device_name), None)


def training_flops(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> int:
    """FLOPs of one forward and backward pass on the batch (matmuls and convolutions, as counted by
    `torch.utils.flop_counter.FlopCounterMode`); divide by the batch size for FLOPs per image.

    A copy of `model` runs, so its gradients are left as they were."""
    model = copy.deepcopy(model).train()
    with FlopCounterMode(display=False) as counter:
        nn.functional.cross_entropy(model(inputs), targets).backward()
    return counter.get_total_flops()


def model_flops_utilization(images_per_s: float, flops_per_image: float, device: torch.device,
                            precision: str, tf32: bool = False) -> float | None:
    """Achieved FLOP/s over the device's published peak (0 to 1), or None where no peak is known."""
    peak = peak_flops(device, precision, tf32)
    return None if peak is None else images_per_s * flops_per_image / peak


# --- Benchmark reports: the machine, a table, a CSV --------------------------------------------------------

def machine_record(device: str | torch.device | None = None) -> dict[str, Any]:
    """What a benchmark ran on: `harness.env.environment_report(device)` plus the CPU model, the load
    average, the git commit and the time, so a CSV says where its numbers come from."""
    record = environment_report(device)
    record["cpu_name"] = environment_report("cpu")["device_name"]
    record["load_average"] = [round(load, 2) for load in os.getloadavg()]
    record["git_commit"] = _git_commit()
    record["measured_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return record


def benchmark_cell(value: Any) -> str:
    """A benchmark table's value: whole numbers from 100 up, two decimals from 1, three significant figures
    below, blank where nothing was measured (None or NaN)."""
    if value is None or isinstance(value, float) and value != value:
        return ""
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}" if abs(value) >= 1 else f"{value:.3g}"
    return str(value)


def report_results(frame: pd.DataFrame, name: str, machine: dict[str, Any], out_dir: str | Path = "build/bench",
                   title: str | None = None) -> Path:
    """Print the machine and `frame` as a table, and write `out_dir/name.csv` (the table plus the machine's
    main facts on every row) and `out_dir/name.machine.json` (the whole machine record).

    Returns:
        The CSV's path.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"\n## {title or name}\n")
    print(f"machine: {machine['device_name']} ({machine['device']}); CPU {machine['cpu_name']}, "
          f"{machine['cpu_count']} cores, load average {machine['load_average']}; python {machine['python']}, "
          f"torch {machine['torch']}, CUDA {machine['cuda']}, commit {machine['git_commit']}\n")
    print(markdown_table(frame, cell=benchmark_cell))
    facts = {key: machine[key] for key in ("device_name", "cpu_name", "torch", "cuda", "python", "git_commit",
                                           "measured_at")}
    csv_path = out_dir / f"{name}.csv"
    frame.assign(**facts).to_csv(csv_path, index=False)
    (out_dir / f"{name}.machine.json").write_text(json.dumps(machine, indent=2))
    print(f"\nwrote {csv_path}")
    return csv_path


# --- helpers ---------------------------------------------------------------------------------------------

def _validate(model: nn.Module, device: torch.device, precision: str, warmup: int, steps: int,
              repeats: int) -> None:
    """Reject settings the measurement cannot honour, with the reason."""
    validate_precision(precision, device)
    if warmup < 0 or steps < 1 or repeats < 1:
        raise ValueError(f"need warmup >= 0, steps >= 1 and repeats >= 1 (got {warmup}, {steps}, {repeats}).")
    parameter = next(model.parameters(), None)
    if parameter is not None and parameter.device != device:
        raise ValueError(f"the model is on {parameter.device} but the inputs are on {device}: "
                         "move both to the device to measure (model.to(device) before the optimizer).")


def _batches(inputs: torch.Tensor, targets: torch.Tensor, batch_size: int | None,
             channels_last: bool) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The steps' batches: the whole of `inputs`, or its consecutive full slices of `batch_size`."""
    if channels_last:
        if inputs.dim() != 4:
            raise ValueError(f"channels_last needs 4-D image batches (N, C, H, W), got shape {tuple(inputs.shape)}.")
        inputs = inputs.contiguous(memory_format=torch.channels_last)
    if batch_size is None:
        return [(inputs, targets)]
    if not 1 <= batch_size <= len(inputs):
        raise ValueError(f"batch_size={batch_size} must be between 1 and the {len(inputs)} inputs.")
    return [(inputs[i : i + batch_size], targets[i : i + batch_size])
            for i in range(0, len(inputs) - batch_size + 1, batch_size)]


def _default_label(precision: str, compile: bool, channels_last: bool, tf32: bool) -> str:
    words = [precision + (" tf32" if tf32 and precision == "fp32" else "")]
    return " ".join(words + ["compiled"] * compile + ["channels_last"] * channels_last)


@contextlib.contextmanager
def _tf32(enabled: bool) -> Iterator[None]:
    """Allow (or forbid) TF32 in float32 matmuls and cuDNN convolutions, restoring the settings after.

    Only the fp32_precision settings (torch 2.9 and later) are touched: torch refuses to read its older
    allow_tf32 flags once they and the new settings disagree."""
    settings = (torch.backends.cuda.matmul, torch.backends.cudnn.conv, torch.backends.cudnn.rnn)
    saved = [setting.fp32_precision for setting in settings]
    try:
        for setting in settings:
            setting.fp32_precision = "tf32" if enabled else "ieee"
        yield
    finally:
        for setting, value in zip(settings, saved, strict=True):
            setting.fp32_precision = value


def _saved_for_backward(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, device: torch.device,
                        precision: str) -> int:
    """Bytes autograd keeps for backward in one forward and loss, each distinct storage counted once: the
    activations, and the weights each layer's backward needs (in fp32 the parameters themselves, under
    autocast their 16-bit copies)."""
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        with autocast(device, precision):
            loss = nn.functional.cross_entropy(model(inputs), targets)
    del loss  # frees the graph without a backward: this step does not train
    return sum(storages.values())


def _timed_repeats(step: Callable[[int], None], device: torch.device, first: int, steps: int,
                   repeats: int) -> list[float]:
    """Seconds for `steps` steps, once per repeat, with the device synchronised around each clock read;
    on CUDA the peak-memory counter restarts before the first timed step."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    seconds, index = [], first
    for _ in range(repeats):
        _synchronize(device)
        started = time.perf_counter()
        for _ in range(steps):
            step(index)
            index += 1
        _synchronize(device)  # wait for the queued GPU work before reading the clock
        seconds.append(time.perf_counter() - started)
    return seconds


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def _release_memory(device: torch.device) -> None:
    """Return cached GPU memory so that the next configuration's peak is its own."""
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _git_commit() -> str | None:
    """The short commit of the working tree, or None outside a git checkout."""
    try:
        result = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10,
                                cwd=Path(__file__).resolve().parent)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() or None
