"""DataLoader settings: images/s of a torch DataLoader over the procedural shapes images with num_workers
0, 1 and 2, persistent workers on and off, and (where there is a GPU) pin_memory on and off.

Three workloads: "plain" reads rows of the in-memory tensors (the per-batch cost is indexing and
collating); "augmented" also runs a per-sample random flip and padded crop (torchvision.transforms.v2), the
usual CIFAR-style training loader, whose per-sample Python work is what workers take off the main process;
"augmented + train" also trains `capstone_cnn(width=16)` one step on each batch, so the workers prepare
the next batches while the main process computes (what they are for).
With a GPU, each batch is also copied to it (`non_blocking` when pinned) and the device synchronised at the
end of the epoch; on CPU the batches are only produced, and pin_memory rows are left out (pinning needs an
accelerator: torch ignores it without one).

How it measures: every configuration's loader is built once, then the epochs run interleaved (one epoch of
each configuration in turn), so a change in machine load hits them alike. The first round is warm-up; the
median and quartiles of images/s are taken over the other rounds. An epoch's time includes starting the
workers when they are not persistent: that is the cost persistent workers remove.

    .venv/bin/python benchmarks/dataloader_settings.py [--images 2048] [--repeats 5] [--device cuda]

Writes `build/bench/dataloader_settings.csv` with the machine record.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import pandas as pd
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import v2

from harness.data import LabeledTensorDataset, shapes
from harness.models import capstone_cnn
from harness.speed import machine_record, quartiles, report_results


def workloads(images: int, device: torch.device) -> dict[str, tuple[Dataset, Callable | None]]:
    """Name -> (dataset, what the main process does with each batch on `device`: nothing, or a training step)."""
    data = shapes(images, seed=0)
    augment = v2.Compose([v2.RandomHorizontalFlip(), v2.RandomCrop(32, padding=4)])
    augmented = LabeledTensorDataset(*data.tensors, classes=data.classes, transform=augment)
    return {"plain": (data, None), "augmented": (augmented, None),
            "augmented + train": (augmented, training_step(len(data.classes), device))}


def training_step(classes: int, device: torch.device) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """One SGD step of a fresh `capstone_cnn(width=16)` on a batch already on `device`."""
    torch.manual_seed(0)
    model = capstone_cnn(classes, width=16).to(device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(inputs: torch.Tensor, targets: torch.Tensor) -> None:
        optimizer.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(inputs), targets).backward()
        optimizer.step()

    return step


def settings(device: torch.device) -> list[dict]:
    """num_workers x persistent_workers (with workers) x pin_memory (with an accelerator)."""
    pins = (False, True) if device.type == "cuda" else (False,)
    return [{"num_workers": workers, "persistent_workers": persistent, "pin_memory": pin}
            for workers in (0, 1, 2) for persistent in ((False, True) if workers else (False,)) for pin in pins]


def epoch_seconds(loader: DataLoader, device: torch.device, step: Callable | None) -> float:
    """Wall seconds to draw every batch of one epoch, copy it to `device` and run `step` on it."""
    started = time.perf_counter()
    for inputs, targets in loader:
        inputs = inputs.to(device, non_blocking=loader.pin_memory)  # no copy when device is the CPU
        targets = targets.to(device, non_blocking=loader.pin_memory)
        if step is not None:
            step(inputs, targets)
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # the last copies may still be in flight
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--images", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5, help="timed epochs per configuration (after one warm-up)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads in the main process")
    parser.add_argument("--out", default="build/bench", help="folder for the CSV and the machine record")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)

    runs = {(name, tuple(config.values())): (DataLoader(data, batch_size=args.batch_size, shuffle=True,
                                                       generator=torch.Generator().manual_seed(0), **config), step)
            for name, (data, step) in workloads(args.images, device).items() for config in settings(device)}
    seconds: dict[tuple, list[float]] = {key: [] for key in runs}
    for _ in range(1 + args.repeats):
        for key, (loader, step) in runs.items():
            seconds[key].append(epoch_seconds(loader, device, step))

    rows = []
    for (name, (workers, persistent, pin)), times in seconds.items():
        q1, median, q3 = quartiles([args.images / s for s in times[1:]])  # round 0 is warm-up
        rows.append({"workload": name, "num_workers": workers, "persistent_workers": persistent, "pin_memory": pin,
                     "images_per_s": median, "images_per_s_q1": q1, "images_per_s_q3": q3})
    frame = pd.DataFrame(rows)
    in_process = frame[frame.num_workers == 0].set_index(["workload", "pin_memory"]).images_per_s
    same_workload = list(zip(frame.workload, frame.pin_memory, strict=True))
    frame["speedup_vs_0_workers"] = frame.images_per_s / in_process.loc[same_workload].values
    report_results(frame, "dataloader_settings", machine_record(device), args.out,
                   title=f"DataLoader settings: {args.images} shapes images 3x32x32, batch {args.batch_size}, "
                         f"{args.repeats} timed epochs each, interleaved, on {device}")


if __name__ == "__main__":
    main()
