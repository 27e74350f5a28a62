"""09-shard-loader, the judge.

Shards must be disjoint, cover the data, come in per-rank batches, be shuffled, seeded and reshuffle.
"""

from __future__ import annotations

import re
from typing import Any, NoReturn

from harness.checks.lesson09.shard_loader import loader_settings
from harness.contract.case import Case
from harness.contract.compare import int_list, malformed
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.judges.lesson09.common import _ranks


def _shard_batches(value: Any) -> list[list[int]]:
    """A recorded list of batches of indices, validated."""
    if not isinstance(value, list):
        malformed("expected a list of batches")
    return [int_list(batch, "a batch's indices") for batch in value]


_INVALID_RANK = re.compile(r"Invalid rank (-?\d+), rank should be in the interval \[0, (-?\d+)\]")


def _judge_refusal(refused: dict[str, Any], world: int) -> NoReturn:
    """Fail on DistributedSampler's refusal of the arguments it got for rank `refused['rank']` of `world`: named as
    swapped when the sampler saw rank=world_size and num_replicas=rank, else quoted."""
    rank, message = refused["rank"], refused["refused"]
    if not isinstance(rank, int) or isinstance(rank, bool) or not isinstance(message, str):
        malformed("a refusal names the rank and the sampler's message")
    match = _INVALID_RANK.fullmatch(message)
    if match and (int(match[1]), int(match[2])) == (world, rank - 1):
        fail("overlapping-shards",
             observed=f"for rank={rank}, world_size={world}, DistributedSampler raised ValueError: {message}: "
             f"it received num_replicas={rank} and rank={world}",
             expected="num_replicas=world_size and rank=rank",
             cause="rank and world_size passed by position in the wrong order: DistributedSampler's signature is "
             "(dataset, num_replicas, rank, ...), num_replicas before rank",
             where="name them: DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=seed)",
             hint="Read DistributedSampler's signature: which comes second, num_replicas or rank? Pass them by "
             "name and the order cannot go wrong.")
    fail("overlapping-shards",
         observed=f"for rank={rank}, world_size={world}, DistributedSampler raised ValueError: {message}",
         expected="a sampler for rank of world_size ranks",
         cause="DistributedSampler refused the num_replicas and rank it received: not the ones passed in",
         where="DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=seed)")


@judges(
    "09-shard-loader",
    hints=Hints(
        nudge="A DistributedSampler gives each rank its own shard; the DataLoader then batches that shard. "
        "Pass the sampler, not shuffle=True, to the DataLoader.",
        concept="DistributedSampler(dataset, num_replicas, rank, shuffle, seed) draws one permutation seeded with "
        "seed + epoch, the same on every rank, and gives rank r every world_size-th index from r",
        solution="sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed); "
        "return DataLoader(dataset, batch_size=batch_size, sampler=sampler)",
        section="3. Each rank its own shard: `DistributedSampler` and `set_epoch`"),
    requires={
        "wrong-batch-size": Requirement("batches of batch_size samples per rank",
                                        hint="batch_size is per rank: does your loader change it with the world size?"),
        "overlapping-shards": Requirement(
            "each rank its own shard: disjoint, together the whole dataset, for any world size",
            hint="Some samples reach two ranks: do all ranks draw the same permutation, and split it by rank?"),
        "not-shuffled": Requirement("the shard is shuffled", hint="Rank 0 reads its samples in increasing order."),
        "seed-ignored": Requirement("shuffled with `seed`", hint="Two seeds gave the same order: where does seed go?"),
        "same-order-every-epoch": Requirement(
            "set_epoch(epoch) on the loader's sampler reshuffles",
            hint="The order must change with sampler.set_epoch(epoch): which sampler reseeds itself with the epoch?"),
        "uses-workers": Requirement("no worker processes (num_workers=0)",
                                    hint="The text asks for no worker processes: look at the DataLoader's arguments."),
    },
)
def judge_shard_loader(seen: dict, *, case: Case) -> str:
    """Shards must be disjoint, cover the data, come in per-rank batches, be shuffled, seeded and reshuffle."""
    settings, worlds = loader_settings(case), seen["worlds"]
    if not isinstance(worlds, list) or len(worlds) > len(settings) or (
            len(worlds) < len(settings) and not (worlds and "refused" in worlds[-1])):
        malformed("one record per world, or a record cut short by the sampler's refusal")
    for (n, batch_size, world, seed), observed in zip(settings, worlds, strict=False):  # cut short: refused
        if "refused" in observed:
            _judge_refusal(observed, world)
        epoch0 = [_shard_batches(batches) for batches in _ranks(observed["epoch0"], world)]
        shards = [sum(batches, []) for batches in epoch0]
        sizes = [len(batch) for batch in epoch0[0]]
        if sizes and sizes[0] != batch_size:
            fail("wrong-batch-size", observed=f"batches of {sizes[0]} samples on a rank",
                 expected=f"{batch_size} (per rank)",
                 cause="batch_size is the per-rank batch: do not divide or multiply it by the world size",
                 where="the DataLoader's batch_size")
        covered = set().union(*map(set, shards)) & set(range(n))
        if any(len(shard) > -(-n // world) for shard in shards) or len(covered) < world * (n // world):
            if all(len(shard) >= n for shard in shards):
                cause = ("every rank reads the whole dataset: shuffle=True or a RandomSampler instead of a "
                         "DistributedSampler")
            else:
                cause = ("the ranks' shards overlap or leave samples out: the ranks draw different permutations "
                         "(a seed that differs per rank), or num_replicas and rank are not the ones passed in")
            fail("overlapping-shards", observed=f"{world} ranks loaded {[len(s) for s in shards]} samples, "
                 f"{len(covered)} distinct of {n}",
                 expected=f"each rank about {n // world} samples, together all {n}", cause=cause,
                 where="pass sampler=DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=seed) "
                 "to the DataLoader")
        if shards[0] == sorted(shards[0]) and n > 8:
            fail("not-shuffled", observed=f"rank 0 reads samples in increasing order {shards[0][:6]}...",
                 expected="a shuffled order", cause="shuffle=False in the sampler, or a shard taken from the "
                 "indices without a permutation",
                 where="DistributedSampler(..., shuffle=True)")
        if sum(_shard_batches(observed["reseeded"]), []) == shards[0]:
            fail("seed-ignored", observed=f"seeds {seed} and {seed + 1} give rank 0 the same order",
                 expected="the seed to choose the permutation", cause="the seed argument is not passed to the sampler",
                 where="DistributedSampler(..., seed=seed)")
        if observed["epoch1"] is None:
            fail("same-order-every-epoch", observed=f"the loader's sampler ({observed['sampler']}) has no set_epoch",
                 expected="a sampler whose set_epoch(epoch) reshuffles", cause="not a DistributedSampler",
                 where="DataLoader(dataset, batch_size=..., sampler=DistributedSampler(...))")
        if sum(_shard_batches(observed["epoch1"]), []) == shards[0]:
            fail("same-order-every-epoch", observed="set_epoch(1) leaves rank 0's order unchanged",
                 expected="a new permutation each epoch", cause="the sampler ignores the epoch",
                 where="use torch.utils.data.DistributedSampler, whose set_epoch reseeds the shuffle")
    return "disjoint shards covering the data, per-rank batches, seeded and reshuffled by set_epoch"
