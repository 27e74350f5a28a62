"""Engine overhead: a hand-written loop vs `harness.train.fit` vs PyTorch Lightning's Trainer.

Same model, data, optimizer, clipping and seed; the three run interleaved (hand, fit, Lightning, hand,
...) so that a change in machine load hits all of them alike. The step time is measured the same way for
all three: a forward pre-hook stamps the start of every training forward, and the time between two
consecutive forwards of one epoch is one whole step (data, forward, backward, clip, step, bookkeeping).
The first epoch of each run is warm-up; the median over the other epochs' steps is reported with its
interquartile range, and the ratios are taken against the hand-written loop's median.

Each step is timed twice: in wall-clock time, and in CPU time of the training thread
(`time.thread_time`, with torch limited to that one thread by default). On a shared machine the wall
time mostly measures the other processes; the thread's CPU time does not, so the overhead ratios are
read from it on CPU.

On a GPU the device runs asynchronously, so the script also reports wall time per step over whole
epochs, measured between `torch.cuda.synchronize()` calls.

Lightning is not a project dependency. Install it beside the project, never into .venv:

    .venv/bin/python -m pip install --target build/bench-site --no-deps -r benchmarks/requirements.txt
    PYTHONPATH=build/bench-site .venv/bin/python benchmarks/engine_overhead.py

Without Lightning the script measures the other two and says so. It prints the table and writes
`build/bench/engine_overhead.csv` and the machine record beside it (`harness.speed.report_results`).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from itertools import pairwise

import pandas as pd
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from harness.speed import machine_record, report_results
from harness.train import fit

SEED = 0


def make_data(samples: int, features: int, classes: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(SEED)
    inputs = torch.randn(samples, features, generator=generator)
    targets = torch.randint(0, classes, (samples,), generator=generator)
    return TensorDataset(inputs, targets)


def make_model(features: int, width: int, classes: int, device: torch.device) -> nn.Module:
    torch.manual_seed(SEED)
    return nn.Sequential(nn.Linear(features, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, classes)).to(device)


def make_loader(dataset: TensorDataset, batch_size: int) -> DataLoader:
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=torch.Generator().manual_seed(SEED))


def hand_written(model: nn.Module, loader: DataLoader, epochs: int, device: torch.device) -> None:
    """The loop as one writes it by hand: no history, no checks."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(epochs):
        model.train()
        for inputs, targets in loader:
            inputs, targets = inputs.to(device, non_blocking=True), targets.to(device, non_blocking=True)
            loss = loss_fn(model(inputs), targets)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)


def harness_fit(sync_every: int) -> Callable[[nn.Module, DataLoader, int, torch.device], None]:
    def run(model: nn.Module, loader: DataLoader, epochs: int, device: torch.device) -> None:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        fit(model, loader, loss_fn=nn.CrossEntropyLoss(), optimizer=optimizer, epochs=epochs, max_grad_norm=1.0,
            progress=False, sync_every=sync_every)

    return run


def lightning_trainer(model: nn.Module, loader: DataLoader, epochs: int, device: torch.device) -> None:
    import pytorch_lightning as pl

    class Module(pl.LightningModule):
        def __init__(self, net: nn.Module) -> None:
            super().__init__()
            self.net, self.loss_fn = net, nn.CrossEntropyLoss()

        def training_step(self, batch, batch_index):
            inputs, targets = batch
            return self.loss_fn(self.net(inputs), targets)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    trainer = pl.Trainer(max_epochs=epochs, accelerator=device.type, devices=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         num_sanity_val_steps=0, gradient_clip_val=1.0, gradient_clip_algorithm="norm")
    trainer.fit(Module(model), train_dataloaders=loader)


def step_times(run: Callable, args: argparse.Namespace, device: torch.device,
               dataset: TensorDataset) -> tuple[list[float], list[float], float]:
    """Wall and thread-CPU times of each step after the warm-up epoch (forward to forward), and the
    synchronised wall time per step over the whole run."""
    model = make_model(args.features, args.width, args.classes, device)
    loader = make_loader(dataset, args.batch_size)
    stamps: list[tuple[float, float]] = []
    model.register_forward_pre_hook(
        lambda module, inputs: stamps.append((time.perf_counter(), time.thread_time())) if module.training else None
    )
    synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    synchronize()
    started = time.perf_counter()
    run(model, loader, args.epochs, device)
    synchronize()
    steps = len(loader)
    per_epoch = [stamps[e * steps : (e + 1) * steps] for e in range(1, args.epochs)]  # epoch 0 is warm-up
    pairs = [(b, a) for epoch in per_epoch for a, b in pairwise(epoch)]
    wall = [b[0] - a[0] for b, a in pairs]
    cpu = [b[1] - a[1] for b, a in pairs]
    return wall, cpu, (time.perf_counter() - started) / (steps * args.epochs)


def summarize(samples: list[float]) -> dict[str, float]:
    q1, median, q3 = statistics.quantiles(samples, n=4)
    return {"median_ms": median * 1e3, "q1_ms": q1 * 1e3, "q3_ms": q3 * 1e3, "n": len(samples)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 keeps CPU timings stable)")
    parser.add_argument("--samples", type=int, default=8192)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--features", type=int, default=256)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=3, help="per run, the first one is warm-up")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved runs of each method")
    parser.add_argument("--out", default="build/bench", help="folder for the CSV and the machine record")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dataset = make_data(args.samples, args.features, args.classes)

    methods: dict[str, Callable] = {"hand-written": hand_written, "harness.fit": harness_fit(50),
                                    "harness.fit sync_every=1": harness_fit(1)}
    try:
        import logging

        import pytorch_lightning as pl

        logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
        logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
        methods[f"Lightning {pl.__version__}"] = lightning_trainer
    except ImportError:
        print("pytorch_lightning is not importable: measuring without it (see the docstring to install it).")

    wall: dict[str, list[float]] = {name: [] for name in methods}
    cpu: dict[str, list[float]] = {name: [] for name in methods}
    whole: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(args.repeats):
        for name, run in methods.items():
            steps_wall, steps_cpu, per_step = step_times(run, args, device, dataset)
            wall[name] += steps_wall
            cpu[name] += steps_cpu
            whole[name].append(per_step)

    baseline = {kind: summarize(samples["hand-written"])["median_ms"]
                for kind, samples in (("cpu", cpu), ("wall", wall))}
    rows = []
    for name in methods:
        row = {"method": name}
        for kind, samples in (("cpu", cpu), ("wall", wall)):
            summary = summarize(samples[name])
            row |= {f"{kind}_ms_median": summary["median_ms"], f"{kind}_ms_q1": summary["q1_ms"],
                    f"{kind}_ms_q3": summary["q3_ms"], f"{kind}_ratio": summary["median_ms"] / baseline[kind]}
        rows.append(row | {"whole_run_wall_ms": statistics.median(whole[name]) * 1e3, "timed_steps": len(cpu[name])})
    steps = len(make_loader(dataset, args.batch_size))
    report_results(pd.DataFrame(rows), "engine_overhead", machine_record(device), args.out,
                   title=f"Engine overhead: MLP {args.features}-{args.width}-{args.width}-{args.classes}, batch "
                         f"{args.batch_size}, {steps} steps/epoch, {args.threads} thread(s), {args.repeats} "
                         f"interleaved runs x {args.epochs - 1} timed epochs")


if __name__ == "__main__":
    main()
