"""GPU speed-run: the harness's speed path against a hand-tuned loop, and against a DataLoader.

(a) An airbench94-class network (`harness.airbench`) trained on procedural 3x32x32 images (50k, CIFAR-10
    scale) two ways, interleaved run by run: `harness.fast.fast_fit` fed by a `DeviceResidentLoader`, and
    the minimal hand-tuned loop below (same network, data, seed, hyperparameters, augmentation, precision
    and compilation). Goal: the speed path within 5% of the hand-tuned loop's images/s. Then time to
    accuracy: the training seconds `fast_fit` needs to reach each target validation accuracy.
(b) The capstone CNN (`harness.models.capstone_cnn`) trained by `fast_fit` on the same images, fed by a
    torch DataLoader (workers augmenting each image, pinned memory) or by the `DeviceResidentLoader`.

How it measures: each run's first epoch is warm-up (compilation, cuDNN autotuning, DataLoader workers) and
is not counted; the other epochs' training time is read from CUDA events around each epoch (`LapTimer`; the
host clock on CPU), images/s per run, then the median and quartiles over the runs. The methods take turns
(in alternating order, round after round) and the first round is an extra warm-up. One command on a GPU machine:

    .venv/bin/python benchmarks/gpu_speedrun.py
    .venv/bin/python benchmarks/gpu_speedrun.py --quick      # tiny sizes: a smoke run, on CPU too

Prints the tables and writes `build/bench/gpu_speedrun.csv` and `gpu_speedrun_accuracy.csv` (with the machine).
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from harness.airbench import (
    AirbenchHyperparameters,
    airbench_loss,
    airbench_net,
    airbench_optimizer,
    airbench_schedule,
    whiten_stem,
)
from harness.data import LabeledTensorDataset, normalization_stats, shapes
from harness.env import select_device
from harness.fast import (
    DeviceResidentLoader,
    LapTimer,
    fast_fit,
    fast_precision,
    random_flip,
    random_translate,
    to_device,
)
from harness.models import capstone_cnn
from harness.speed import machine_record, quartiles, report_results

SEED = 0
WHITENING_IMAGES = 5000


def hand_tuned_loop(net: nn.Module, images: torch.Tensor, labels: torch.Tensor, *, hyp: AirbenchHyperparameters,
                    epochs: int, seed: int, precision: str, compile: bool) -> tuple[torch.Tensor, list[float]]:
    """The loop a speed-runner writes by hand, on normalised images already on the device.

    Draws its random numbers in the same order as a `DeviceResidentLoader` (a permutation per epoch, then
    per batch the flips and the shifts), so with the same seed it trains on exactly the same batches.

    Returns:
        Every step's loss (on the CPU) and each epoch's training seconds.
    """
    optimizer = airbench_optimizer(net, hyp)
    steps = len(images) // hyp.batch_size  # whole batches only
    scheduler = airbench_schedule(optimizer, epochs * steps, hyp)
    loss_fn = airbench_loss(hyp)
    model = torch.compile(net) if compile else net
    generator = torch.Generator(device=images.device).manual_seed(seed)
    losses, timer = [], LapTimer(images.device)
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(images), device=images.device, generator=generator)
        for step in range(steps):
            indices = order[step * hyp.batch_size:(step + 1) * hyp.batch_size]
            inputs = images[indices]
            if hyp.flip:
                inputs = random_flip(inputs, generator)
            if hyp.translate:
                inputs = random_translate(inputs, hyp.translate, generator)
            with torch.autocast(images.device.type, torch.bfloat16, enabled=precision == "bf16"):
                loss = loss_fn(model(inputs.contiguous(memory_format=torch.channels_last)), labels[indices])
            loss.backward()
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.detach())
        timer.lap()
    step_losses = torch.stack(losses).cpu()  # the run's one host sync: the GPU is done, the events readable
    return step_losses, timer.seconds()


def fast_path(net: nn.Module, images: torch.Tensor, labels: torch.Tensor, *, hyp: AirbenchHyperparameters,
              epochs: int, seed: int, precision: str, compile: bool,
              val: tuple[torch.Tensor, torch.Tensor] | None = None) -> pd.DataFrame:
    """The same training through the harness: a DeviceResidentLoader and `fast_fit`; returns its history."""
    loader = DeviceResidentLoader(images, labels, batch_size=hyp.batch_size, drop_last=True, flip=hyp.flip,
                                  translate=hyp.translate, seed=seed)
    val_loader = None if val is None else DeviceResidentLoader(*val, batch_size=2000, shuffle=False)
    optimizer = airbench_optimizer(net, hyp)
    scheduler = airbench_schedule(optimizer, epochs * len(loader), hyp)
    return fast_fit(net, loader, val_loader, loss_fn=airbench_loss(hyp), optimizer=optimizer, epochs=epochs,
                    scheduler=scheduler, precision=precision, compile=compile)


def make_airbench(hyp: AirbenchHyperparameters, images: torch.Tensor, classes: int, seed: int) -> nn.Module:
    """A fresh, seeded network on the images' device, stem whitened on the first training images."""
    torch.manual_seed(seed)
    net = to_device(airbench_net(classes, hyp.widths, batchnorm_momentum=hyp.batchnorm_momentum,
                                 logit_scale=hyp.logit_scale), images.device)
    whiten_stem(net, images[:WHITENING_IMAGES])
    return net


def procedural_images(args: argparse.Namespace, device: torch.device) -> dict[str, torch.Tensor]:
    """Training and validation shapes, normalised with the training statistics, on `device` (and the
    normalised training images on the CPU too, for the DataLoader)."""
    train, val = shapes(args.train_size, seed=SEED), shapes(args.val_size, seed=SEED + 1)
    mean, std = normalization_stats(train.tensors[0])
    normalised = [(x - mean) / std for x in (train.tensors[0], val.tensors[0])]
    return {"train_x": normalised[0].to(device), "train_y": train.tensors[1].to(device),
            "val_x": normalised[1].to(device), "val_y": val.tensors[1].to(device),
            "cpu_x": normalised[0], "cpu_y": train.tensors[1]}


def speedrun(args: argparse.Namespace, data: dict[str, torch.Tensor], hyp: AirbenchHyperparameters) -> pd.DataFrame:
    """(a) images/s of fast_fit and the hand-tuned loop, interleaved; the first round is warm-up."""
    images, labels = data["train_x"], data["train_y"]
    options = {"hyp": hyp, "epochs": args.epochs, "seed": SEED, "precision": args.precision,
               "compile": args.compile}

    def hand_tuned() -> float:
        _, seconds = hand_tuned_loop(make_airbench(hyp, images, 5, SEED), images, labels, **options)
        samples = len(images) // hyp.batch_size * hyp.batch_size
        return samples * (args.epochs - 1) / sum(seconds[1:])  # the first epoch is warm-up

    def harness() -> float:
        return _images_per_second(fast_path(make_airbench(hyp, images, 5, SEED), images, labels, **options))

    return _interleaved({"hand-tuned loop (baseline)": hand_tuned, "harness fast_fit": harness}, args.repeats,
                        part="airbench speed-run")


def time_to_accuracy(args: argparse.Namespace, data: dict[str, torch.Tensor],
                     hyp: AirbenchHyperparameters) -> pd.DataFrame:
    """(a) training seconds until fast_fit first reaches each target validation accuracy (after a warm-up run)."""
    images, labels = data["train_x"], data["train_y"]
    torch.compiler.reset()
    reached: dict[float, list[float]] = {target: [] for target in args.targets}
    finals = []
    for run in range(args.accuracy_runs + 1):
        history = fast_path(make_airbench(hyp, images, 5, SEED + run), images, labels, hyp=hyp, epochs=args.epochs,
                            seed=SEED + run, precision=args.precision, compile=args.compile,
                            val=(data["val_x"], data["val_y"]))
        if run == 0:
            continue  # warm-up run: compiles the evaluation graph too
        train_seconds = (len(images) // hyp.batch_size * hyp.batch_size / history["samples_per_second"]).cumsum()
        for target in args.targets:
            hit = history.index[history["val_accuracy"] >= target]
            if len(hit):
                reached[target].append(float(train_seconds[hit[0]]))
        finals.append(float(history["val_accuracy"].iloc[-1]))
    return pd.DataFrame([{
        "target val accuracy": target, "runs reaching it": f"{len(times)}/{args.accuracy_runs}",
        "training seconds (median)": statistics.median(times) if times else float("nan"),
        "final val accuracy (median)": statistics.median(finals), "epochs": args.epochs,
    } for target, times in reached.items()])


def loader_comparison(args: argparse.Namespace, data: dict[str, torch.Tensor]) -> pd.DataFrame:
    """(b) the capstone CNN fed by a DataLoader with workers against the DeviceResidentLoader, interleaved."""
    device = data["train_x"].device
    augment = functools.partial(augment_one_image, max_shift=args.translate)
    dataset = LabeledTensorDataset(data["cpu_x"], data["cpu_y"], transform=augment)
    pin = device.type == "cuda"  # page-locked batches copy to the GPU asynchronously
    loaders: dict[str, Callable[[], Any]] = {
        f"DataLoader, {args.workers} workers{', pin_memory' * pin} (baseline)": lambda: DataLoader(
            dataset, batch_size=args.capstone_batch, shuffle=True, drop_last=True, num_workers=args.workers,
            pin_memory=pin, persistent_workers=args.workers > 0, generator=torch.Generator().manual_seed(SEED)),
        "DeviceResidentLoader": lambda: DeviceResidentLoader(
            data["train_x"], data["train_y"], batch_size=args.capstone_batch, drop_last=True, flip=True,
            translate=args.translate, seed=SEED),
    }

    def train_with(make_loader: Callable[[], Any]) -> Callable[[], float]:
        def run() -> float:
            torch.manual_seed(SEED)
            model = to_device(capstone_cnn(classes=5, width=args.capstone_width), device)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True,
                                        fused=device.type in ("cuda", "cpu"))
            return _images_per_second(fast_fit(model, make_loader(), loss_fn=nn.CrossEntropyLoss(),
                                               optimizer=optimizer, epochs=args.loader_epochs,
                                               precision=args.precision, compile=args.compile))
        return run

    return _interleaved({name: train_with(make_loader) for name, make_loader in loaders.items()}, args.repeats,
                        part="capstone CNN loaders")


def augment_one_image(image: torch.Tensor, max_shift: int) -> torch.Tensor:
    """What a DataLoader worker does to each (C, H, W) image: the DeviceResidentLoader's flip and translation,
    one image at a time."""
    if torch.rand(()) < 0.5:
        image = image.flip(-1)
    padded = F.pad(image[None], (max_shift,) * 4, mode="reflect")[0]
    dy, dx = torch.randint(0, 2 * max_shift + 1, (2,)).tolist()
    return padded[:, dy:dy + image.shape[1], dx:dx + image.shape[2]]


def _interleaved(methods: dict[str, Callable[[], float]], repeats: int, part: str) -> pd.DataFrame:
    """Run each method (returning images/s) once per round, in alternating order so that neither always
    goes first, for a warm-up round and then `repeats` timed rounds; the table of the timed ones."""
    torch.compiler.reset()  # each part compiles afresh: earlier graphs must not use up the recompile limit
    per_run: dict[str, list[float]] = {name: [] for name in methods}
    for round_ in range(repeats + 1):
        for name in list(methods)[::1 if round_ % 2 == 0 else -1]:
            images_per_s = methods[name]()
            if round_ > 0:  # round 0 is warm-up: compilation and autotuning
                per_run[name].append(images_per_s)
    return _throughput_table(per_run, part)


def _images_per_second(history: pd.DataFrame) -> float:
    """Training images/s over every epoch but the first (warm-up)."""
    timed = history.iloc[1:]
    samples = timed["samples_per_second"] * timed["epoch_seconds"]  # no validation: epoch = training
    return float(samples.sum() / timed["epoch_seconds"].sum())


def _throughput_table(per_run: dict[str, list[float]], part: str) -> pd.DataFrame:
    """One row per method: images/s median and quartiles over the runs, and the ratio of medians to the
    first method's (the baseline)."""
    rows = []
    for method, values in per_run.items():
        q1, median, q3 = quartiles(values)
        rows.append({"part": part, "method": method, "images/s (median)": median, "q1": q1, "q3": q3,
                     "runs": len(values)})
    frame = pd.DataFrame(rows)
    frame["ratio to baseline"] = frame["images/s (median)"] / frame["images/s (median)"].iloc[0]
    return frame


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default=None, help="cuda, cuda:1, cpu... (default: the best available)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run that works on CPU")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per method (after a warm-up run)")
    parser.add_argument("--epochs", type=int, default=AirbenchHyperparameters.epochs)
    parser.add_argument("--train-size", type=int, default=50_000)
    parser.add_argument("--val-size", type=int, default=10_000)
    parser.add_argument("--targets", type=float, nargs="+", default=[0.9, 0.99, 0.999],
                        help="validation accuracies (the shapes are easier than CIFAR-10: hence the high ones)")
    parser.add_argument("--accuracy-runs", type=int, default=3)
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="torch.compile (default: on CUDA only)")
    parser.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1))
    parser.add_argument("--capstone-width", type=int, default=32)
    parser.add_argument("--capstone-batch", type=int, default=512)
    parser.add_argument("--loader-epochs", type=int, default=3, help="per run, the first being warm-up")
    parser.add_argument("--out", default="build/bench")
    args = parser.parse_args(argv)
    if min(args.epochs, args.loader_epochs) < 2 or min(args.repeats, args.accuracy_runs) < 1:
        parser.error("epochs and loader-epochs must be at least 2 (the first is warm-up); repeats and "
                     "accuracy-runs at least 1.")
    if args.quick:
        args.repeats, args.epochs, args.train_size, args.val_size = 1, 2, 256, 128
        args.accuracy_runs, args.workers, args.capstone_width, args.capstone_batch = 1, 0, 8, 64
        args.loader_epochs = 2
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, pd.DataFrame]:
    args = parse_args(argv)
    device = select_device(args.device)
    args.compile = device.type == "cuda" if args.compile is None else args.compile
    args.precision = fast_precision(device)  # bf16 where native (not a T4's emulation), else fp32
    hyp = AirbenchHyperparameters(epochs=args.epochs)
    if args.quick:
        hyp = replace(hyp, batch_size=64, widths=(16, 32, 32))
    args.translate = hyp.translate
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # autotune each convolution once (in the warm-up)
    data = procedural_images(args, device)
    machine = machine_record(device)
    throughput = pd.concat([speedrun(args, data, hyp), loader_comparison(args, data)], ignore_index=True)
    accuracy = time_to_accuracy(args, data, hyp)
    settings = f"{args.precision}, compile={args.compile}, {args.train_size} images, batch {hyp.batch_size}"
    report_results(throughput, "gpu_speedrun", machine, args.out, title=f"GPU speed-run: images/s ({settings})")
    report_results(accuracy, "gpu_speedrun_accuracy", machine, args.out,
                   title=f"GPU speed-run: time to accuracy, airbench-class network ({settings})")
    return {"throughput": throughput, "accuracy": accuracy}


if __name__ == "__main__":
    main()
