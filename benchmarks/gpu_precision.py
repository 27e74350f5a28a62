"""GPU precision benchmark: the capstone CNN trained in fp32, TF32, bf16 and fp16, each with and without
torch.compile and channels_last: images/s, peak memory and model FLOPs utilisation.

The model is `harness.models.capstone_cnn` on procedural 3x32x32 images (`harness.data.shapes`) at CIFAR-10
scale (50,000 images, resident on the device); each timed repeat is one epoch of full training steps
(forward, loss, backward, SGD step), measured by `harness.speed.training_throughput`: warm-up and
compilation excluded, device synchronised, median and quartiles over the repeats. FLOPs are counted once
with `torch.utils.flop_counter.FlopCounterMode` (forward and backward, per image) and divided by the GPU's
published dense peak for the precision (`harness.speed.PEAK_FLOPS`; not reported for unlisted GPUs or CPU).

    make bench-gpu                                     # on a GPU machine: this and gpu_speedrun.py
    PYTHONPATH=. python3 benchmarks/gpu_precision.py   # the same, this script only
    PYTHONPATH=. python3 benchmarks/gpu_precision.py --quick --device cpu   # tiny sizes: a smoke run

Goal: bf16 at least 2x the throughput of fp32 (TF32 off) on an H100.
"""

from __future__ import annotations

import argparse
import itertools

import pandas as pd
import torch

from harness.data import shapes
from harness.models import capstone_cnn
from harness.speed import (
    machine_record,
    model_flops_utilization,
    report_results,
    supported_precision_names,
    training_flops,
    training_throughput,
)

FULL = {"images": 50_000, "batch_size": 512, "width": 32, "warmup": 10, "repeats": 5}
QUICK = {"images": 64, "batch_size": 32, "width": 8, "warmup": 1, "repeats": 2}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (runs in seconds, on CPU too)")
    for name, value in FULL.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, help=f"default {value}, --quick {QUICK[name]}")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="also measure torch.compile (default: on CUDA only; on CPU it compiles for minutes)")
    parser.add_argument("--out", default="build/bench", help="folder for the CSV and the machine record")
    args = parser.parse_args()
    for name, value in (QUICK if args.quick else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def configurations(device: torch.device, compile: bool) -> list[dict]:
    """Every (precision, tf32, compile, channels_last) to measure; TF32 only where it exists (CUDA)."""
    modes = [("fp32", False)] + [("fp32", True)] * (device.type == "cuda")
    modes += [(precision, False) for precision in supported_precision_names(device) if precision != "fp32"]
    return [{"precision": precision, "tf32": tf32, "compile": compiled, "channels_last": channels_last}
            for (precision, tf32), compiled, channels_last in itertools.product(modes, (False, True)[: 1 + compile],
                                                                                 (False, True))]


def measure(model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor, args: argparse.Namespace,
            compile: bool) -> pd.DataFrame:
    """One row per configuration: its settings, `Throughput` fields, TFLOP/s and MFU, in MiB where bytes."""
    device = inputs.device
    flops_per_image = training_flops(model, inputs[: args.batch_size], targets[: args.batch_size]) / args.batch_size
    rows = []
    for config in configurations(device, compile):
        result = training_throughput(model, inputs, targets, batch_size=args.batch_size, warmup=args.warmup,
                                     steps=args.images // args.batch_size, repeats=args.repeats, **config)
        print(f"{result.label:32} {result.images_per_s:12,.0f} images/s", flush=True)
        rows.append({**config, "images_per_s": result.images_per_s, "images_per_s_q1": result.images_per_s_q1,
                     "images_per_s_q3": result.images_per_s_q3, "ms_per_step": result.ms_per_step,
                     "peak_MiB": result.peak_memory_bytes / 2**20 if result.peak_memory_bytes else None,
                     "activations_MiB": result.activation_bytes / 2**20,
                     "tflop_per_s": result.images_per_s * flops_per_image / 1e12,
                     "mfu": model_flops_utilization(result.images_per_s, flops_per_image, device,
                                                    config["precision"], config["tf32"])})
        if device.type == "cuda":
            torch.cuda.empty_cache()  # the next configuration's peak is its own
    frame = pd.DataFrame(rows)
    frame.attrs["flops_per_image"] = flops_per_image
    return frame


def add_speedups(frame: pd.DataFrame) -> None:
    """speedup_vs_fp32: images/s over strict fp32's with the same compile and memory-format settings."""
    strict = frame[(frame.precision == "fp32") & ~frame.tf32].set_index(["compile", "channels_last"]).images_per_s
    same_settings = list(zip(frame.compile, frame.channels_last, strict=True))
    frame["speedup_vs_fp32"] = frame.images_per_s / strict.loc[same_settings].values


def goal_line(frame: pd.DataFrame) -> str:
    """The bf16 speed-ups next to the README's goal."""
    ratios = [f"{row.speedup_vs_fp32:.2f}x" + " compiled" * row.compile + " channels_last" * row.channels_last
              for row in frame[frame.precision == "bf16"].itertuples()]
    return f"goal: bf16 at least 2x fp32 (TF32 off) on an H100; measured here: {', '.join(ratios) or 'no bf16'}"


def main() -> None:
    args = parse_args()
    device = torch.device(args.device)
    data = shapes(args.images, seed=0)
    inputs, targets = data.tensors[0].to(device), data.tensors[1].to(device)
    torch.manual_seed(0)
    model = capstone_cnn(classes=len(data.classes), width=args.width).to(device)
    frame = measure(model, inputs, targets, args, device.type == "cuda" if args.compile is None else args.compile)
    add_speedups(frame)
    report_results(frame, "gpu_precision", machine_record(device), args.out,
                   title=f"capstone_cnn(width={args.width}) on {args.images:,} shapes images, batch "
                         f"{args.batch_size}, one epoch per repeat, {args.repeats} repeats; "
                         f"{frame.attrs['flops_per_image'] / 1e6:.1f} MFLOP per image (forward+backward); every "
                         f"peak includes the resident data set ({inputs.numel() * 4 / 2**20:.0f} MiB)")
    print(goal_line(frame))


if __name__ == "__main__":
    main()
