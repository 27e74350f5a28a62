"""10-train-loader, the probe.

Read the loader on 2 forked gloo ranks, then in this process; record the batches every reader got.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from harness.checks.lesson10.common import _rng_kept
from harness.contract.case import Case
from harness.contract.registry import register
from harness.launch import LaunchError, launch_forked


def _index_dataset(n: int) -> TensorDataset:
    """Inputs are the sample indices, so a batch says which samples it holds."""
    return TensorDataset(torch.arange(n), torch.zeros(n, dtype=torch.long))


def _batches_of_epoch(loader: DataLoader, epoch: int) -> list[list[int]]:
    set_epoch = getattr(loader.sampler, "set_epoch", None)
    if set_epoch is not None:
        set_epoch(epoch)
    return [batch[0].tolist() for batch in loader]


def _loader_worker(train_loader: Callable[..., DataLoader], n: int, batch_size: int,
                   seed: int) -> list[list[list[int]]]:
    loader = train_loader(_index_dataset(n), batch_size, seed=seed)
    return [_batches_of_epoch(loader, epoch) for epoch in range(2)]


def _on_two_ranks(worker: Callable[..., Any], *args: Any) -> list[Any]:
    """Run `worker` on 2 forked gloo ranks; a rank's exception becomes the student's exception."""
    for attempt in range(2):
        try:
            # the ranks only read CPU tensors: safe to fork even after the notebook used a GPU
            return launch_forked(worker, 2, args=args, timeout_s=30, cuda_initialized_ok=True).results
        except LaunchError as error:
            # a forked child of a threaded kernel can, rarely, deadlock at start: a second try tells it apart
            if "did not finish" not in str(error) or attempt:
                last = str(error).strip().splitlines()[-1]
                raise RuntimeError(f"on rank {error.rank}: {last}") from None
    raise AssertionError("unreachable")


def _record_single_process(train_loader: Callable[..., DataLoader], n: int, batch_size: int, seed: int) -> dict:
    """The batches one process reads: epochs 0 and 1 of a loader, epoch 0 of a second loader built with the same
    seed from another global RNG state, and of a third built with seed + 1; and the loader's sampler."""
    loader = train_loader(_index_dataset(n), batch_size, seed=seed)
    record: dict[str, Any] = {"first": _batches_of_epoch(loader, 0), "sampler": type(loader.sampler).__name__,
                              "has_set_epoch": getattr(loader.sampler, "set_epoch", None) is not None,
                              "workers": loader.num_workers}
    record["second"] = _batches_of_epoch(loader, 1)
    torch.default_generator.seed()  # a resumed run starts from some other global RNG state
    record["again"] = _batches_of_epoch(train_loader(_index_dataset(n), batch_size, seed=seed), 0)
    record["other"] = _batches_of_epoch(train_loader(_index_dataset(n), batch_size, seed=seed + 1), 0)
    return record


def train_loader_settings(case: Case) -> list[tuple[int, int, int]]:
    """(samples, batch_size, seed)."""
    settings = [(100, 16, 0)] if not case.hidden else [(75, 8, 5), (130, 32, 11)]
    return [(n, batch_size, case.seeded(seed)) for n, batch_size, seed in settings]


@register("10-train-loader")
def probe_train_loader(train_loader: Callable[..., DataLoader], *, case: Case) -> dict:
    """Read the loader on 2 forked gloo ranks, then in this process; record the batches every reader got."""
    records = []
    with _rng_kept():
        for n, batch_size, seed in train_loader_settings(case):
            records.append({"ranks": _on_two_ranks(_loader_worker, train_loader, n, batch_size, seed),
                            "single": _record_single_process(train_loader, n, batch_size, seed)})
    return {"settings": records}
