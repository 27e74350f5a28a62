"""09-shard-loader, the probe.

Build the loader of every rank of each world; record the batches of epoch 0, of rank 0 with the next
seed, and of rank 0 in epoch 1. A loader with worker processes fails here, before any is started. Where
DistributedSampler itself refuses its arguments, the refusal is recorded (and the worlds after it are not built).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch
from torch.utils.data import DataLoader, TensorDataset

from harness.contract.case import Case
from harness.contract.failure import fail
from harness.contract.registry import register


def loader_settings(case: Case) -> list[tuple[int, int, int, int]]:
    """(dataset size, per-rank batch size, world size, seed) of each loader world to build."""
    settings = [(40, 4, 2, 0), (37, 3, 3, 5)]  # the second: three ranks, a dataset that does not divide evenly
    if case.hidden:
        settings = [(38, 4, 2, 3), (37, 3, 3, 5), (64, 8, 4, 11)]
    return [(n, batch_size, world, case.seeded(seed)) for n, batch_size, world, seed in settings]


def _loader_indices(loader: DataLoader, epoch: int) -> list[list[int]] | None:
    """The sample indices of each batch after set_epoch(epoch); None where the sampler has no set_epoch."""
    set_epoch = getattr(loader.sampler, "set_epoch", None)
    if set_epoch is not None:
        set_epoch(epoch)
    elif epoch > 0:
        return None
    return [batch[0].reshape(-1).tolist() for batch in loader]


def _sampler_refusal(error: ValueError) -> str | None:
    """The message of a ValueError raised by DistributedSampler's own check of its arguments; None for any other."""
    frame = error.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    if frame is None or not frame.tb_frame.f_code.co_filename.endswith(_SAMPLER_FILE):
        return None
    return str(error)[:200]


_SAMPLER_FILE = str(Path("torch", "utils", "data", "distributed.py"))


@register("09-shard-loader")
def probe_shard_loader(make_ddp_loader: Callable[..., DataLoader], *, case: Case) -> dict:
    """Build the loader of every rank of each world; record the batches of epoch 0, of rank 0 with the next
    seed, and of rank 0 in epoch 1. A loader with worker processes fails here, before any is started."""
    worlds = []
    for n, batch_size, world, seed in loader_settings(case):
        dataset = TensorDataset(torch.arange(n))
        loaders = []
        for rank in range(world):
            try:
                loaders.append(make_ddp_loader(dataset, batch_size, rank=rank, world_size=world, seed=seed))
            except ValueError as error:
                refusal = _sampler_refusal(error)
                if refusal is None:
                    raise
                worlds.append({"refused": refusal, "rank": rank})
                return {"worlds": worlds}
        workers = getattr(loaders[0], "num_workers", 0)
        if workers:
            fail("uses-workers", observed=f"a DataLoader with num_workers={workers}", expected="num_workers=0",
                 cause="num_workers is set: each worker is a process the check (and a notebook) has to start",
                 where="the DataLoader's arguments: leave num_workers out")
        epoch0 = [_loader_indices(loader, epoch=0) for loader in loaders]
        reseeded_loader = make_ddp_loader(dataset, batch_size, rank=0, world_size=world, seed=seed + 1)
        reseeded = _loader_indices(reseeded_loader, epoch=0)
        worlds.append({"epoch0": epoch0, "reseeded": reseeded, "epoch1": _loader_indices(loaders[0], epoch=1),
                       "sampler": type(loaders[0].sampler).__name__})
    return {"worlds": worlds}
