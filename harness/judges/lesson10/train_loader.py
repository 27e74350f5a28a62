"""10-train-loader, the judge.

Disjoint shards on 2 ranks, one process reads everything, full batches, order set by seed and epoch.
"""

from __future__ import annotations

from typing import Any

from harness.checks.lesson10.train_loader import train_loader_settings
from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges


def _index_batches(value: Any) -> list[list[int]]:
    """Recorded batches of sample indices, validated."""
    if not (isinstance(value, list) and all(isinstance(batch, list) and all(
            isinstance(i, int) and not isinstance(i, bool) for i in batch) for batch in value)):
        raise ValueError("the recorded batches are not lists of sample indices")
    return value


def _check_batches(epochs: list[list[int]], batch_size: int, n: int, who: str) -> None:
    sizes = sorted({len(batch) for batches in epochs for batch in _index_batches(batches)})
    if sizes and max(sizes) != batch_size:
        fail("wrong-batch-size", observed=f"{who} batches of {max(sizes)} samples", expected=f"{batch_size} per rank",
             cause="batch_size is the per-rank batch: keep it as given", where="DataLoader(..., batch_size=batch_size)")
    if len(sizes) > 1:
        fail("partial-last-batch", observed=f"{who} batch sizes {sizes} (n={n}, batch_size={batch_size})",
             expected=f"only full batches of {batch_size}",
             cause="the last, incomplete batch is kept: a batch of one sample makes BatchNorm fail in training "
             "mode, and small last batches give noisy steps", where="DataLoader(..., drop_last=True)")


def _check_sharded(results: list[list[list[list[int]]]], n: int, batch_size: int) -> None:
    if not (isinstance(results, list) and len(results) == 2 and all(isinstance(r, list) and r for r in results)):
        raise ValueError("the recorded ranks are not two lists of epochs")
    for rank, epochs in enumerate(results):
        _check_batches(epochs, batch_size, n, f"rank {rank} read")
    shards = [set(sum(epochs[0], [])) for epochs in results]
    if shards[0] & shards[1] or len(shards[0] | shards[1]) < 2 * ((n // 2) // batch_size) * batch_size:
        fail("overlapping-shards", observed=f"under 2 ranks, rank 0 read {len(shards[0])} samples and rank 1 "
             f"{len(shards[1])}, {len(shards[0] & shards[1])} of them the same, from {n}",
             expected="disjoint halves: each rank its own shard",
             cause="every rank reads the whole dataset (a shuffled DataLoader, or a sampler that ignores the rank), "
             "or the ranks shuffle with different seeds (seed + rank) so their shards overlap",
             where="the DataLoader's sampler: one that gives each rank its own shard of the dataset, shuffled with "
             "the run's seed on every rank")


def _check_single_process(record: dict[str, Any], n: int, batch_size: int, seed: int) -> None:
    workers = record["workers"]
    if not isinstance(workers, int) or isinstance(workers, bool):
        raise ValueError("the recorded number of workers is not an int")
    if workers != 0:
        fail("uses-workers", observed=f"the loader starts num_workers={workers} worker processes",
             expected="num_workers=0: batches made in the training process",
             cause="num_workers set on the DataLoader: every rank (and every resumed run) would fork worker "
             "processes for in-memory tensors, which costs more than it saves",
             where="DataLoader(..., num_workers=0), the default")
    first = _index_batches(record["first"])
    _check_batches([first], batch_size, n, "one process read")
    order = sum(first, [])
    if len(set(order)) != n // batch_size * batch_size:
        fail("wrong-coverage", observed=f"one epoch of one process read {len(set(order))} distinct samples of {n}",
             expected=f"{n // batch_size * batch_size}: the whole dataset but the dropped last partial batch",
             cause="a sampler that shards although there is no process group, or repeats samples",
             where="DistributedSampler(dataset, num_replicas=get_world_size(), rank=get_rank(), seed=seed) with "
             "harness.distributed's helpers: a world of one without a process group")
    if order == sorted(order):
        fail("not-shuffled", observed=f"samples read in order {order[:6]}...", expected="a shuffled order",
             cause="shuffle=False given to the sampler, or a sequential sampler",
             where="the sampler's shuffle (DistributedSampler shuffles by default)")
    if record["has_set_epoch"] is not True:
        fail("no-set-epoch", observed=f"the loader's sampler ({record['sampler']}) has no set_epoch",
             expected="a DistributedSampler: fit calls sampler.set_epoch(epoch) to reshuffle each epoch",
             cause=f"a {record['sampler']} instead of a DistributedSampler",
             where="sampler=DistributedSampler(dataset, seed=seed)")
    if sum(_index_batches(record["second"]), []) == order:
        fail("same-order-every-epoch", observed="set_epoch(1) gives the order of epoch 0",
             expected="a new order every epoch", cause="the sampler ignores its epoch",
             where="torch.utils.data.DistributedSampler seeds its shuffle with seed + epoch")
    if sum(_index_batches(record["again"]), []) != order:
        fail("order-not-reproducible", observed="two loaders built with the same seed read epoch 0 in different orders",
             expected="the order a function of (seed, epoch) only",
             cause="the shuffle draws from the global RNG or an unsaved generator: a resumed run would read other "
             "batches than the run it continues", where="DistributedSampler(dataset, seed=seed): its order is "
             "fixed by seed and epoch, nothing to save in a checkpoint")
    if sum(_index_batches(record["other"]), []) == order:
        fail("seed-ignored", observed=f"seeds {seed} and {seed + 1} give the same order",
             expected="the seed picks the order",
             cause="the seed argument is not passed on", where="DistributedSampler(dataset, seed=seed)")


@judges(
    "10-train-loader",
    hints=Hints(
        nudge="One loader for one process and for N: a DistributedSampler given the rank and world size of the "
        "process group (harness.distributed: a world of one without a group), seeded with seed; drop the last, "
        "incomplete batch.",
        concept="A DistributedSampler shards by rank and shuffles with seed + epoch (fit calls set_epoch), so the "
        "order is a function of (seed, epoch) and nothing needs saving; drop_last keeps every batch full.",
        solution="sampler = DistributedSampler(dataset, num_replicas=get_world_size(), rank=get_rank(), "
        "shuffle=True, seed=seed); return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True)",
        section="4. One training loader for one process and for many"),
    requires={
        "overlapping-shards": Requirement(
            "under N ranks, each rank reads its own disjoint shard",
            hint="On 2 ranks, what makes rank 0 and rank 1 read different samples? shuffle=True alone does not."),
        "wrong-batch-size": Requirement("batch_size samples per batch on each rank",
                                        hint="batch_size is already per rank: is it changed anywhere?"),
        "partial-last-batch": Requirement("the last incomplete batch dropped",
                                          hint="Which DataLoader option drops the last, smaller batch?"),
        "uses-workers": Requirement("no worker processes",
                                    hint="Which DataLoader option starts worker processes? Leave it at its default."),
        "wrong-coverage": Requirement(
            "a single process reads the whole dataset (a world of one)",
            hint="Without a process group, how many replicas are there? Ask harness.distributed, do not assume."),
        "not-shuffled": Requirement("shuffled", hint="Does your sampler shuffle? Print the first batch."),
        "no-set-epoch": Requirement(
            "the sampler is a DistributedSampler (fit calls its set_epoch every epoch)",
            hint="fit reshuffles through loader.sampler.set_epoch(epoch): which sampler has that method?"),
        "same-order-every-epoch": Requirement(
            "a new order every epoch",
            hint="Read two epochs, calling set_epoch(0) then set_epoch(1): is the order the same?"),
        "order-not-reproducible": Requirement(
            "the order depends on seed and epoch only, not on the global random state",
            hint="Build the loader twice after torch.seed(): if the order changes, what is it drawing from?"),
        "seed-ignored": Requirement("the seed argument picks the order",
                                    hint="Where does the seed argument go? Seeds 0 and 1 give the same order."),
    },
)
def judge_train_loader(seen: dict, *, case: Case) -> str:
    """Disjoint shards on 2 ranks, one process reads everything, full batches, order set by seed and epoch."""
    for (n, batch_size, seed), record in zip(train_loader_settings(case), seen["settings"], strict=True):
        _check_sharded(record["ranks"], n, batch_size)
        _check_single_process(record["single"], n, batch_size, seed)
    return "disjoint shards on 2 ranks, one process reads everything, full batches, order set by seed and epoch"
