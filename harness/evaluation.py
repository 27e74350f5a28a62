"""Evaluation, shared by `fit` and `fast_fit`: mean loss and metrics over a loader, in eval mode, without grads.

Sums stay on the device while the loader runs; the host reads them once at the end (a host sync per batch
would stall a GPU). `evaluation_sums` is the part without that sync, for a loop that reads it later together
with other values (fast_fit's one sync per epoch); `evaluate` reads it, and under DDP adds the ranks' sums.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from harness.amp import autocast
from harness.distributed import all_reduce_sum
from harness.fit_options import check_batch_tensors, check_metric_values, resolve_device

__all__ = ["Metric", "batch_to_device", "evaluate", "evaluation_sums"]

Metric = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def batch_to_device(batch: Any, device: torch.device, *,
                    channels_last: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """An `(inputs, targets)` batch on `device` (4-D inputs in channels_last format if asked).

    Raises:
        ValueError: the batch is not a pair of tensors.
    """
    if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
        raise ValueError(f"fit expects each batch to be (inputs, targets); got {type(batch).__name__}"
                         f"{f' of length {len(batch)}' if isinstance(batch, (tuple, list)) else ''}.")
    inputs, targets = batch
    check_batch_tensors(inputs, targets)
    # non_blocking overlaps the copy with compute when the loader uses pinned memory (a no-op if already there)
    inputs, targets = inputs.to(device, non_blocking=True), targets.to(device, non_blocking=True)
    if channels_last and inputs.dim() == 4:
        inputs = inputs.contiguous(memory_format=torch.channels_last)
    return inputs, targets


def evaluation_sums(model: nn.Module, loader: Iterable, *, loss_fn: Metric, metrics: dict[str, Metric],
                    device: torch.device, precision: str = "fp32",
                    channels_last: bool = False) -> tuple[torch.Tensor, int]:
    """The loss and each metric times the batch size, summed over `loader` on the device, and the sample count.

    The model is put in eval mode (dropout off, batch norm on its running statistics) and runs under
    `inference_mode` and the precision's autocast. The returned tensor is [loss, *metrics] in that order.

    Raises:
        ValueError: the loader yielded no batches.
    """
    model.eval()
    count = 0
    with torch.inference_mode(), autocast(device, precision):
        sums = torch.zeros(1 + len(metrics), device=device)
        for batch in loader:
            inputs, targets = batch_to_device(batch, device, channels_last=channels_last)
            outputs = model(inputs)
            values = [loss_fn(outputs, targets), *(fn(outputs, targets) for fn in metrics.values())]
            check_metric_values(metrics, values[1:])
            sums += torch.stack([torch.as_tensor(v, device=device).float() for v in values]) * len(inputs)
            count += len(inputs)
    if count == 0:
        raise ValueError("the evaluation loader has no batches: check the validation split and batch size.")
    return sums, count


def evaluate(
    model: nn.Module,
    loader: Iterable,
    *,
    loss_fn: Metric,
    metrics: dict[str, Metric] | None = None,
    device: str | torch.device | None = None,
    precision: str = "fp32",
) -> dict[str, float]:
    """Mean loss and metrics over `loader`, weighted by batch size, in eval mode under inference_mode.

    Under DDP the sums and counts are added across ranks, so every rank returns the mean over all the data
    the ranks saw.

    Returns:
        {"loss": ..., "<metric>": ...}.
    """
    device = resolve_device(model, device)
    metrics = metrics or {}
    sums, count = evaluation_sums(model, loader, loss_fn=loss_fn, metrics=metrics, device=device, precision=precision)
    totals = all_reduce_sum(torch.cat([sums, torch.tensor([float(count)], device=device)]))
    means = (totals[:-1] / totals[-1]).tolist()  # the evaluation's one host sync
    return dict(zip(["loss", *metrics], means, strict=True))
