"""The engine showcase for `make course`: a small CNN trained on procedural shapes with everything on.

The precision `harness doctor` recommends for the device (bf16 where it is native, fp16 with a scaler on a
T4-class GPU, fp32 on a CPU, where emulated bf16 is five times slower), gradient clipping, a warm-up-then-cosine
schedule stepped per optimizer step, early stopping and checkpoints; then curves (PNG), history (CSV), held-out
test metrics and the run report (Markdown) in one folder. Sized to be a small share of `make course`: about
15 s on one CPU core with one thread, as `make course` runs it (a held-out accuracy of about 0.94; measured in
benchmarks/README.md, "Lesson execution times").
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import CosineAnnealingLR, LinearLR, SequentialLR

from harness.amp import validate_precision
from harness.data import SHAPE_CLASSES, make_loaders, shapes
from harness.env import environment_report, recommended_precision, select_device, supported_precisions
from harness.metrics import accuracy
from harness.plots import plot_history
from harness.progress import format_epoch_line
from harness.report import observe_op_dtypes, write_run_report
from harness.repro import seed_everything
from harness.train import EarlyStopping, evaluate, fit

SEED = 0


def small_cnn(classes: int = len(SHAPE_CLASSES), width: int = 12) -> nn.Sequential:
    """Three conv blocks and a linear head: (N, 3, 24, 24) -> (N, classes) logits."""

    def block(c_in: int, c_out: int) -> list[nn.Module]:
        return [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(), nn.MaxPool2d(2)]

    # 24 -> 12 -> 6 -> 3 pixels, then global average pooling
    return nn.Sequential(*block(3, width), *block(width, 2 * width), *block(2 * width, 4 * width),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * width, classes))


def run_showcase(out_dir: str | Path, *, samples: int = 4000, epochs: int = 12, width: int = 12, lr: float = 1e-2,
                 device: str | None = None, progress: bool = False) -> dict[str, Any]:
    """Train the showcase model and write curves, history, checkpoints and the run report into `out_dir`.

    Args:
        out_dir: the folder to write into (created).
        samples: procedural images to generate (80% train, 10% validation, 10% test).
        epochs: at most this many epochs (early stopping may end sooner).
        width: channels of the first conv block (doubled in each of the next two).
        lr: AdamW's peak learning rate (reached after a warm-up of a tenth of the steps).
        device: None picks the best available (harness.env.select_device).
        progress: show tqdm bars (a line of results per epoch is printed either way).

    Returns:
        Paths ("report", "curves", "history", "best_checkpoint"), "curves_alt" (the curves in words) and
        "test_metrics", "seconds", "device".
    """
    started = time.perf_counter()
    out_dir = Path(out_dir)
    seed_everything(SEED)
    device = select_device(device)
    precision, _ = recommended_precision(device, supported_precisions(device))  # bf16 where native; fp32 on a CPU
    validate_precision(precision, device)
    loaders = make_loaders(shapes(samples, seed=SEED, size=24), batch_size=64, seed=SEED, device=device)

    model = small_cnn(width=width).to(device)  # on its device before the optimizer is built
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05)
    # warm-up over a tenth of the optimizer steps, lr / warmup up to lr, then a cosine down to 0 (lesson 07's
    # convention), from torch's own schedulers
    total_steps = epochs * len(loaders.train)
    warmup_steps = max(1, total_steps // 10)
    warmup = LinearLR(optimizer, start_factor=1 / warmup_steps, total_iters=warmup_steps - 1)
    cosine = CosineAnnealingLR(optimizer, T_max=max(1, total_steps - warmup_steps))
    scheduler = SequentialLR(optimizer, [warmup, cosine], milestones=[warmup_steps])
    history = fit(model, loaders.train, loaders.val, loss_fn=nn.CrossEntropyLoss(), optimizer=optimizer,
                  epochs=epochs, precision=precision, max_grad_norm=1.0, scheduler=scheduler,
                  scheduler_interval="step", metrics={"accuracy": accuracy},
                  early_stopping=EarlyStopping("val_accuracy", mode="max", patience=3),
                  checkpoint_dir=out_dir / "checkpoints", overwrite=True,  # a fresh run each time
                  progress=progress, on_epoch_end=None if progress else _print_epoch_line(epochs))

    # report the best epoch's weights on the test split, which training and model selection never saw
    best_path = out_dir / "checkpoints" / "best.pt"
    model.load_state_dict(torch.load(best_path, map_location=device, weights_only=True)["model"])
    test_metrics = evaluate(model, loaders.test, loss_fn=nn.CrossEntropyLoss(), metrics={"accuracy": accuracy},
                            device=device, precision=precision)
    sample_inputs, sample_targets = next(iter(loaders.test))
    op_dtypes = observe_op_dtypes(model, sample_inputs, precision=precision, targets=sample_targets,
                                  loss_fn=nn.CrossEntropyLoss())
    curves = out_dir / "curves.png"
    curves_alt = plot_history(history, curves).alt_text
    report = write_run_report(out_dir / "report.md", history, test_metrics=test_metrics, best_checkpoint=best_path,
                              op_dtypes=op_dtypes, environment=environment_report(device), curves=curves,
                              title="Showcase: a small CNN on procedural shapes")
    return {"report": report, "curves": curves, "curves_alt": curves_alt,
            "history": out_dir / "checkpoints" / "history.csv",
            "best_checkpoint": best_path, "test_metrics": test_metrics,
            "seconds": time.perf_counter() - started, "device": str(device)}


def _print_epoch_line(epochs: int) -> Any:
    """An `on_epoch_end` that prints fit's line of results for each epoch: never minutes without a line."""

    def print_line(epoch: int, row: dict[str, Any]) -> None:
        print(format_epoch_line(row, epochs), flush=True)

    return print_line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `harness showcase`."""
    parser.add_argument("--out", type=Path, default=Path("build/course/showcase"), help="folder to write into")
    parser.add_argument("--device", default=None, help="cpu, cuda, mps (default: the best available)")
    parser.add_argument("--progress", action="store_true", help="show progress bars")


def run(args: argparse.Namespace) -> int:
    """`harness showcase`: train, write the files, print where they are and the test accuracy."""
    result = run_showcase(args.out, device=args.device, progress=args.progress)
    print(f"showcase: test accuracy {result['test_metrics']['accuracy']:.3f} in {result['seconds']:.0f} s "
          f"on {result['device']}; report {result['report']}")
    return 0
