"""The judge side of the ddp drills (`harness.drills.bank.ddp`): judges and the references
they recompute, reference solutions, planted wrong answers, explain drills' options and keys.

A graded kernel never mounts this package (`harness.judges`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from harness.contract.case import Case
from harness.contract.compare import close_number, close_tensors, malformed, same_values
from harness.contract.failure import fail
from harness.contract.wire import describe
from harness.drills.bank.ddp import (
    ACCUM_EPOCHS,
    ACCUM_STEPS,
    MICRO_BATCH,
    MICRO_PER_EPOCH,
    ORDER_EPOCHS,
    SET_EPOCH_STARTER,
    accum_data,
    accum_model,
    accuracy_counts,
    allreduce_factors,
    barrier_model,
    eval_loss_setup,
    set_epoch_inputs,
    shard_configs,
)
from harness.drills.core import Answers, choice_answers
from harness.drills.support import edited
from harness.judges.drills.whys import add_answers


def _two_floats(got: Any, what: str) -> list[float]:
    if not (isinstance(got, list) and len(got) == 2):
        malformed("per-rank values")
    for value in got:
        if not isinstance(value, float):
            fail("not-a-number", observed=f"{what} returned {value}", expected="a number (a float or a one-element "
                 "tensor)", cause="a tuple, list or multi-element tensor returned", where="the return statement")
    return got


def _judge_global_accuracy(seen: dict, *, case: Case) -> str:
    (c0, t0), (c1, t1) = [(int(c), int(t)) for c, t in accuracy_counts(case)]
    got = _two_floats(seen["values"], "global_accuracy")
    want = (c0 + c1) / (t0 + t1)
    if not close_number(got[0], got[1], rtol=1e-6, atol=1e-6):
        fail("ranks-disagree", observed=f"rank 0 reports {got[0]:.4f}, rank 1 reports {got[1]:.4f}",
             expected=f"both report {want:.4f}", cause="the value was computed from this rank's counts only",
             where="all_reduce the counts before dividing")
    if not close_number(got[0], want, rtol=1e-6, atol=1e-6):
        mean_of_ratios = (c0 / t0 + c1 / t1) / 2
        fail("mean-of-ratios" if close_number(got[0], mean_of_ratios, rtol=1e-6, atol=1e-6) else "wrong-value",
             observed=f"global accuracy {got[0]:.4f} (rank 0: {c0}/{t0} correct, rank 1: {c1}/{t1})",
             expected=f"{want:.4f} = ({c0} + {c1}) / ({t0} + {t1})",
             cause="averaging per-rank accuracies weights a rank with few samples like one with many"
             if close_number(got[0], mean_of_ratios, rtol=1e-6, atol=1e-6)
             else "not the all-reduced counts' ratio (a hard-coded value, or a wrong reduction)",
             where="all_reduce the correct and total counts (SUM), then divide")
    return "all-reduced counts: every rank reports the exact global accuracy"


_ACCURACY_SOLUTION = (
    "import torch\nimport torch.distributed as dist\n\n\ndef global_accuracy(correct, total):\n"
    "    counts = torch.stack([correct, total]).double()\n    dist.all_reduce(counts, op=dist.ReduceOp.SUM)\n"
    "    return counts[0] / counts[1]\n"
)


# --- set_epoch -----------------------------------------------------------------------------------------------

_SET_EPOCH_FIX = ("    for epoch in range(epochs):\n",
                  "    for epoch in range(epochs):\n        sampler.set_epoch(epoch)\n")


def _sampler_orders(dataset: TensorDataset, seed: int, epochs: list[int], rank: int) -> list[list[int]]:
    """What a DistributedSampler whose epoch is set to each of `epochs` in turn yields (the judge's reference)."""
    sampler = DistributedSampler(dataset, num_replicas=2, rank=rank, shuffle=True, seed=seed)
    orders = []
    for epoch in epochs:
        sampler.set_epoch(epoch)
        orders.append(list(sampler))
    return orders


def _judge_set_epoch(seen: dict, *, case: Case) -> str:
    dataset, seed = set_epoch_inputs(case)
    ranks = seen["ranks"]
    if not (isinstance(ranks, list) and len(ranks) == 2 and all(isinstance(r, list) and len(r) == ORDER_EPOCHS and all(
            isinstance(o, list) and all(isinstance(i, int) for i in o) for o in r) for r in ranks)):
        fail("wrong-format", observed=f"epoch_orders returned {describe(ranks)}",
             expected=f"{ORDER_EPOCHS} lists of ints",
             cause="the starter's return value changed", where="return orders")
    for epoch in range(ORDER_EPOCHS):
        shared = set(ranks[0][epoch]) & set(ranks[1][epoch])
        if shared:
            fail("ranks-overlap", observed=f"ranks 0 and 1 share {len(shared)} samples in epoch {epoch}",
                 expected="disjoint shards", cause="different seeds on different ranks: each rank shuffles its own "
                 "way, so their shards overlap and some samples are never seen", where="the same seed on every rank")
    want = [_sampler_orders(dataset, seed, list(range(ORDER_EPOCHS)), rank) for rank in (0, 1)]
    if ranks == want:
        if seen["again"] != want[0]:
            fail("not-reproducible", observed="two calls with the same seed gave different orders",
                 expected="the same orders for a seed", cause="randomness from outside the sampler",
                 where="the sampler's seed")
        return "a new shuffle each epoch, set before the epoch starts, reproducible and disjoint across ranks"
    variants = {
        "missing-set-epoch": ([0] * ORDER_EPOCHS, "the sampler shuffles with seed + epoch, and its epoch stayed 0: "
                              "every epoch repeats epoch 0's order"),
        "set-epoch-too-late": ([0, *range(ORDER_EPOCHS - 1)], "the sampler's epoch moved on only after each epoch's "
                               "loop: epochs 0 and 1 both shuffle with epoch 0, every later epoch is one behind"),
    }
    for code, (epochs, cause) in variants.items():
        if ranks == [_sampler_orders(dataset, seed, epochs, rank) for rank in (0, 1)]:
            fail(code, observed=f"the sampler's epoch was {epochs} in epochs {list(range(ORDER_EPOCHS))}"
                 + (": epochs 0 and 1 see the same order" if epochs[0] == epochs[1] else ""),
                 expected=f"epochs {list(range(ORDER_EPOCHS))}: a new order each epoch", cause=cause,
                 where="the start of each epoch, before the loader is iterated")
    if ranks == [_sampler_orders(dataset, 0, list(range(ORDER_EPOCHS)), rank) for rank in (0, 1)] and seed != 0:
        fail("seed-ignored", observed="the orders are those of seed 0", expected=f"those of seed={seed}",
             cause="the seed argument is not passed to the sampler", where="the sampler's construction")
    fail("wrong-order", observed=f"rank 0's first epoch starts {ranks[0][0][:6]}",
         expected=f"{want[0][0][:6]} (DistributedSampler with seed={seed}, epoch 0)",
         cause="the sampler is configured differently, or its epoch is set to other values",
         where="the value passed to set_epoch")


def _judge_eval_loss(seen: dict, *, case: Case) -> str:
    got = _two_floats(seen["values"], "evaluate")
    sums, counts, batch_means = [], [], []
    for rank in (0, 1):
        model, dataset = eval_loss_setup(case, rank)
        model.eval()
        with torch.no_grad():
            losses = [F.mse_loss(model(x), y, reduction="none").double().flatten() for x, y in
                      DataLoader(dataset, batch_size=8)]
        sums.append(float(torch.cat(losses).sum()))
        counts.append(len(dataset))
        batch_means.append([float(loss.mean()) for loss in losses])
    want = sum(sums) / sum(counts)
    if not close_number(got[0], got[1], rtol=1e-6, atol=1e-6):
        fail("ranks-disagree", observed=f"rank 0 reports {got[0]:.5f}, rank 1 reports {got[1]:.5f}",
             expected=f"both report {want:.5f}", cause="the loss was not reduced across ranks",
             where="what each rank combines with the others")
    if close_number(got[0], want, rtol=1e-6, atol=1e-6):
        return "the exact mean over every sample of every rank, in eval mode"
    all_batches = batch_means[0] + batch_means[1]
    per_rank_batch = [sum(b) / len(b) for b in batch_means]
    mean_of_batch_means = {sum(all_batches) / len(all_batches), sum(per_rank_batch) / 2}
    if any(close_number(got[0], value, rtol=1e-6, atol=1e-6) for value in mean_of_batch_means):
        fail("mean-of-batch-means", observed=f"validation loss {got[0]:.5f}", expected=f"{want:.5f}, the mean over "
             f"all {sum(counts)} samples", cause="averaging batch means weights the smaller last batch like a full "
             "one", where="how the local losses and counts are accumulated")
    if close_number(got[0], (sums[0] / counts[0] + sums[1] / counts[1]) / 2, rtol=1e-6, atol=1e-6):
        fail("mean-of-rank-means", observed=f"validation loss {got[0]:.5f}", expected=f"{want:.5f}",
             cause=f"each rank's mean was averaged across ranks: rank 0 has {counts[0]} samples, rank 1 "
             f"{counts[1]}, yet they weigh the same", where="the all_reduce calls and the division")
    fail("wrong-value", observed=f"validation loss {got[0]:.5f}", expected=f"{want:.5f}",
         cause="dropout still active (model.eval() missing), or the losses summed wrongly",
         where="the start of evaluate, then the sums and counts")


_EVAL_SOLUTION = '''import torch
import torch.distributed as dist
import torch.nn.functional as F


@torch.no_grad()
def evaluate(model, loader):
    """The mean MSE over every sample of every rank."""
    model.eval()
    totals = torch.zeros(2, dtype=torch.float64)  # [sum of losses, number of samples]
    for x, y in loader:
        totals[0] += F.mse_loss(model(x), y, reduction="sum").double()
        totals[1] += y.numel()
    dist.all_reduce(totals, op=dist.ReduceOp.SUM)
    return totals[0] / totals[1]
'''


def _accum_reference(case: Case, epochs: list[int], scale: float, *, every_micro_batch: bool = False
                     ) -> list[torch.Tensor]:
    """The weights two ranks reach when their averaged gradients are accumulated over `ACCUM_STEPS` micro-batches,
    with the sampler's epoch set to `epochs` and each micro-batch's loss multiplied by `scale`; the accumulated
    gradient is multiplied by the probe's next all-reduce factor once per step (`allreduce_factors`), or after
    every micro-batch when `every_micro_batch` (DDP all-reduces the accumulated .grad at each synced backward)."""
    dataset, seed = accum_data(case)
    model = accum_model(case)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    factors = iter(allreduce_factors(case))
    for epoch in epochs:
        shards = _sampler_orders(dataset, seed, [epoch], 0)[0], _sampler_orders(dataset, seed, [epoch], 1)[0]
        for i in range(MICRO_PER_EPOCH):
            for shard in shards:
                x, y = dataset[shard[i * MICRO_BATCH:(i + 1) * MICRO_BATCH]]
                (F.mse_loss(model(x), y) * scale / 2).backward()  # DDP averages over the two ranks
            if every_micro_batch or (i + 1) % ACCUM_STEPS == 0:
                factor = next(factors)
                for p in model.parameters():
                    p.grad.mul_(factor)
            if (i + 1) % ACCUM_STEPS == 0:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
    return [p.detach() for p in model.parameters()]


def _judge_ddp_accumulation(seen: dict, *, case: Case) -> str:
    ranks = seen["ranks"]
    if not (isinstance(ranks, list) and len(ranks) == 2 and all(isinstance(r, dict) for r in ranks)):
        malformed("per-rank observation")
    epochs, want_epochs = ranks[0]["epochs"], list(range(ACCUM_EPOCHS))
    if epochs != want_epochs:
        late = [0, *range(ACCUM_EPOCHS - 1)]
        fail("missing-set-epoch" if epochs == [0] * ACCUM_EPOCHS else "set-epoch-too-late" if epochs == late
             else "wrong-set-epoch", observed=f"the sampler's epoch when each epoch started: {epochs}",
             expected=f"{want_epochs}", cause="the sampler's epoch did not follow the loop's: an epoch whose sampler "
             "epoch repeats shuffles (and shards) the data as an earlier one did" if epochs != late else "the "
             "sampler's epoch moved on only after each epoch's loop: epochs 0 and 1 see the same order",
             where="the start of each epoch, before the loader is iterated")
    first, second = ranks[0]["params"], ranks[1]["params"]
    if not (isinstance(first, list) and isinstance(second, list) and len(first) == len(second)):
        malformed("parameters")
    if not all(same_values(a, b, dtype=False) for a, b in zip(first, second, strict=True)):
        fail("ranks-diverge", observed="after training, rank 0 and rank 1 hold different weights",
             expected="identical weights on every rank", cause="the optimizer stepped on gradients that were never "
             "all-reduced: no_sync() was active on the micro-batch before the step (the condition is inverted)",
             where="which micro-batches run under no_sync()")
    steps = ACCUM_EPOCHS * MICRO_PER_EPOCH // ACCUM_STEPS
    if ranks[0]["syncs"] != steps:
        fail("syncs-every-micro-step" if ranks[0]["syncs"] == ACCUM_EPOCHS * MICRO_PER_EPOCH else "wrong-sync-count",
             observed=f"{ranks[0]['syncs']} gradient all-reduces for {steps} optimizer steps",
             expected=f"{steps}: one per optimizer step", cause="every backward under DDP all-reduces the gradients; "
             "during accumulation that is wasted communication, since only the last micro-batch's sum is used",
             where="which micro-batches run under no_sync()")
    want = _accum_reference(case, want_epochs, 1 / ACCUM_STEPS)
    if close_tensors(first, want, atol=1e-5, rtol=1e-4, dtype=False):
        return "one all-reduce per optimizer step, averaged micro-batch losses, a new shard each epoch"
    if close_tensors(first, _accum_reference(case, want_epochs, 1 / ACCUM_STEPS, every_micro_batch=True),
                     atol=1e-5, rtol=1e-4, dtype=False):
        fail("syncs-every-micro-step", observed="the weights show an all-reduce after every micro-batch (the check's "
             "all-reduce scales its result by a known factor, so each one shows in the weights)",
             expected=f"{steps}: one all-reduce per optimizer step", cause="every backward under DDP all-reduces the "
             "gradients; during accumulation that is wasted communication, since only the last micro-batch's sum "
             "is used", where="which micro-batches run under no_sync()")
    if close_tensors(first, _accum_reference(case, want_epochs, 1.0), atol=1e-5, rtol=1e-4, dtype=False):
        fail("loss-not-scaled", observed="the weights match steps on the SUM of the micro-batches' gradients",
             expected=f"steps on their mean (each loss divided by accum_steps={ACCUM_STEPS})",
             cause="accumulating unscaled losses multiplies the effective learning rate by accum_steps",
             where="the loss each micro-batch backpropagates")
    for scale, what in ((1 / (ACCUM_STEPS * 2), "divided by accum_steps and by the world size"),
                        (1 / 2, "divided by the world size instead of accum_steps")):
        if close_tensors(first, _accum_reference(case, want_epochs, scale), atol=1e-5, rtol=1e-4, dtype=False):
            fail("loss-divided-by-world-size", observed=f"the weights match steps on micro-batch losses {what}",
                 expected=f"steps on their mean (each loss divided by accum_steps={ACCUM_STEPS} only)",
                 cause="DDP already averages the gradients over the ranks in its all-reduce: dividing the loss by "
                 "world_size as well scales every step by 1 / world_size", where="the loss each micro-batch "
                 "backpropagates")
    fail("wrong-update", observed="the final weights differ from the reference run's",
         expected="SGD steps on gradients averaged over ranks and micro-batches",
         cause="steps at the wrong micro-batches, or gradients not zeroed after a step",
         where="the step condition and zero_grad")


_ACCUM_SOLUTION = '''import contextlib

import torch.nn.functional as F


def train_epochs(ddp_model, optimizer, sampler, loader, epochs, accum_steps):
    """Train a DDP model with gradient accumulation: one optimizer step per accum_steps micro-batches."""
    ddp_model.train()
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for i, (x, y) in enumerate(loader):
            stepping = (i + 1) % accum_steps == 0
            with contextlib.nullcontext() if stepping else ddp_model.no_sync():
                loss = F.mse_loss(ddp_model(x), y) / accum_steps
                loss.backward()
            if stepping:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
'''


def _judge_barrier(seen: dict, *, case: Case) -> str:
    ranks = seen["ranks"]
    if not (isinstance(ranks, list) and len(ranks) == 2 and all(isinstance(r, dict) for r in ranks)):
        malformed("per-rank observation")
    if ranks[1]["saves"]:
        fail("every-rank-saves", observed=f"rank 1 called torch.save {ranks[1]['saves']} time(s)",
             expected="rank 0 only writes the file", cause="every rank writes its own weights to the same path: "
             "whichever finishes last wins, and readers may see a torn file", where="if dist.get_rank() == 0:")
    if ranks[0]["saves"] != 1:
        fail("rank0-did-not-save", observed=f"rank 0 called torch.save {ranks[0]['saves']} time(s)",
             expected="one save on rank 0", cause="the rank test is inverted", where="if dist.get_rank() == 0:")
    want = list(barrier_model(case.seeded(10)).parameters())
    stale = list(barrier_model(case.seeded(99)).parameters())
    for rank, observed in enumerate(ranks):
        params = observed["params"]
        if not (isinstance(params, list) and len(params) == len(want)
                and all(isinstance(p, torch.Tensor) and p.shape == w.shape for p, w in zip(params, want, strict=True))):
            malformed("parameters")
        if all(same_values(p, w, dtype=False) for p, w in zip(params, want, strict=True)):
            continue
        if all(same_values(p, s, dtype=False) for p, s in zip(params, stale, strict=True)):
            fail("read-before-written", observed=f"rank {rank} loaded the previous run's file, still at the path",
                 expected="rank 0's new weights on every rank", cause="rank 1 read the file before rank 0 had "
                 "finished writing it: nothing made it wait", where="dist.barrier() after rank 0's save and before "
                 "any rank loads")
        fail("weights-not-loaded", observed=f"rank {rank} does not hold rank 0's weights",
             expected="rank 0's weights on every rank", cause="the file was not loaded into the model",
             where="model.load_state_dict(torch.load(path, weights_only=True))")
    return "rank 0 writes, every rank waits at the barrier, then loads rank 0's weights"


_BARRIER_SOLUTION = '''import torch
import torch.distributed as dist


def sync_from_rank0(model, path):
    if dist.get_rank() == 0:
        torch.save(model.state_dict(), path)
    dist.barrier()  # nobody reads before rank 0 has finished writing
    model.load_state_dict(torch.load(path, weights_only=True))
'''


def _judge_shards(seen: dict, *, case: Case) -> str:
    if seen["used_sampler"] is not False:
        fail("uses-distributed-sampler", observed="shard_indices built a DistributedSampler",
             expected="the sharding written by hand", cause="the drill asks you to write what DistributedSampler "
             "does, to know what it guarantees (and what padding and set_epoch are for)",
             where="one seeded permutation, padded, then order[rank::world_size]")
    results = seen["results"]
    configs = shard_configs(case)
    if not isinstance(results, list) or len(results) != len(configs):
        malformed("the observation is not one the probe writes")
    for (n, world), result in zip(configs, results, strict=True):
        for epoch, shards in enumerate(result["epochs"]):
            if not (isinstance(shards, list) and all(isinstance(s, list) and all(isinstance(i, int) for i in s)
                                                     for s in shards)):
                fail("wrong-format", observed=f"shard_indices returned {describe(shards)}",
                     expected="a list or 1-D tensor of ints", cause="another type returned", where="the return value")
            where = f"n={n}, world_size={world}, epoch {epoch}"
            lengths = [len(s) for s in shards]
            if len(set(lengths)) > 1:
                fail("uneven-shards", observed=f"{where}: shard lengths {lengths}", expected=f"every shard "
                     f"{-(-n // world)} long", cause="slicing without padding: ranks with one batch more wait forever "
                     "in the all-reduce of the batch the others never run", where="pad the permutation to a multiple "
                     "of world_size with its first indices, then take order[rank::world_size]")
            flat = [i for s in shards for i in s]
            if any(not 0 <= i < n for i in flat):
                fail("out-of-range", observed=f"{where}: an index outside 0..{n - 1}",
                     expected=f"indices in 0..{n - 1}",
                     cause="padding with made-up indices", where="pad with indices from the permutation itself")
            missing = n - len(set(flat))
            if missing > 0:
                overlap = len(flat) > len(set(flat))
                fail("ranks-overlap" if overlap else "samples-dropped",
                     observed=f"{where}: {missing} of {n} samples in no shard"
                     + (f", {len(flat) - len(set(flat))} in two" if overlap else ""),
                     expected="the shards cover every sample, each once (plus the padding)",
                     cause="each rank shuffles with its own seed (seed + rank), so their shards overlap" if overlap
                     else "the tail that does not divide evenly was dropped (n // world_size per rank)",
                     where="one permutation from a generator seeded identically on every rank" if overlap
                     else "pad instead of dropping: every sample must be seen each epoch")
            if lengths[0] != -(-n // world):
                fail("wrong-shard-size", observed=f"{where}: shards of {lengths[0]}", expected=f"{-(-n // world)}",
                     cause="more padding than needed", where="pad to the next multiple of world_size only")
        orders = result["epochs"]
        if orders[0] == orders[1]:
            fail("same-order-every-epoch", observed=f"n={n}, world_size={world}: epochs 0 and 1 give the same shards",
                 expected="a new shuffle each epoch", cause="the generator is seeded with the seed alone",
                 where="torch.Generator().manual_seed(seed + epoch)")
        if sorted(orders[0][0]) == orders[0][0] and sorted(orders[1][0]) == orders[1][0]:
            fail("not-shuffled", observed=f"n={n}: rank 0's indices are in increasing order", expected="a shuffled "
                 "order", cause="no permutation drawn", where="torch.randperm(n, generator=...)")
        if result["again"] != orders[0][0]:
            fail("not-reproducible", observed="two calls with the same seed and epoch gave different shards",
                 expected="the same shards", cause="randomness from the global RNG", where="a seeded torch.Generator")
        if result["other_seed"] == orders[0][0]:
            fail("seed-ignored", observed="another seed gives the same shards", expected="the order set by the seed",
                 cause="the seed argument is not used", where="torch.Generator().manual_seed(seed + epoch)")
    if seen["touched_global_rng"] is not False:
        fail("uses-global-rng", observed="shard_indices changed torch's global RNG state",
             expected="a private generator", cause="torch.manual_seed / torch.randperm without generator=",
             where="torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch))")
    return "equal, disjoint shards that cover every sample, reshuffled each epoch and identical on every rank"


_SHARD_SOLUTION = '''import torch


def shard_indices(n, rank, world_size, seed, epoch):
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch))
    per_rank = -(-n // world_size)  # ceil: every rank gets the same number of samples
    order = torch.cat([order, order[: per_rank * world_size - n]])  # pad with the first indices
    return order[rank::world_size]
'''


add_answers(
    Answers(
        drill_id="ddp-global-accuracy",
        solution=_ACCURACY_SOLUTION,
        wrong_answers=(
            ("import torch\n\ndef global_accuracy(correct, total):\n    return correct / total\n", "ranks-disagree"),
            ("import torch\nimport torch.distributed as dist\n\ndef global_accuracy(correct, total):\n"
             "    acc = (correct / total).clone()\n    dist.all_reduce(acc)\n    return acc / dist.get_world_size()\n",
             "mean-of-ratios"),
            ("import torch\n\ndef global_accuracy(correct, total):\n    return torch.tensor(19 / 40)\n", "wrong-value"),
            ("import torch\nimport torch.distributed as dist\n\ndef global_accuracy(correct, total):\n"
             "    correct = correct.double()\n    dist.all_reduce(correct)\n    return correct / total\n",
             "ranks-disagree"),
        ),
        judge=_judge_global_accuracy,
    )
)


add_answers(
    Answers(
        drill_id="ddp-set-epoch",
        solution=edited(SET_EPOCH_STARTER, _SET_EPOCH_FIX),
        wrong_answers=(
            (edited(SET_EPOCH_STARTER,
                    ("    for epoch in range(epochs):\n",
                     "    for epoch in range(epochs):\n        sampler.set_epoch(0)\n")),
             "missing-set-epoch"),
            (edited(SET_EPOCH_STARTER,
                    ("for i in batch])\n", "for i in batch])\n        sampler.set_epoch(epoch)\n")),
             "set-epoch-too-late"),
            (edited(SET_EPOCH_STARTER,
                    ("shuffle=True, seed=seed", "shuffle=True, seed=seed + rank"),
                    _SET_EPOCH_FIX),
             "ranks-overlap"),
            (edited(SET_EPOCH_STARTER, (", seed=seed)", ")"), _SET_EPOCH_FIX),
             "seed-ignored"),
        ),
        judge=_judge_set_epoch,
    )
)


add_answers(
    choice_answers(
        "ddp-what-is-averaged",
        options=(
            ("it averages the parameters across ranks after every optimizer step",
             "parameters are broadcast once, at construction; they stay equal because every rank applies the same "
             "averaged gradient"),
            ("it sends every rank's batch to rank 0, which computes the loss",
             "each rank runs its own forward and backward on its own batch; nothing is gathered on rank 0"),
            ("nothing until the end of the epoch, when it averages the models",
             "that is periodic model averaging (local SGD), not DDP: DDP communicates in every backward"),
            ("gradient all-reduces, in buckets, overlapped with backward",
             "gradient hooks launch an all-reduce (average) per bucket as soon as its gradients are ready, so "
             "communication overlaps the rest of backward"),
        ),
        key="d",
    )
)


add_answers(
    Answers(
        drill_id="ddp-eval-loss-sums",
        solution=_EVAL_SOLUTION,
        wrong_answers=(
            (edited(_EVAL_SOLUTION,
                    ("    dist.all_reduce(totals, op=dist.ReduceOp.SUM)\n"
                     "    return totals[0] / totals[1]",
                     "    loss = totals[0] / totals[1]\n    dist.all_reduce(loss)\n"
                     "    return loss / dist.get_world_size()")), "mean-of-rank-means"),
            (edited(_EVAL_SOLUTION,
                    ('F.mse_loss(model(x), y, reduction="sum").double()',
                     "F.mse_loss(model(x), y).double()"),
                    ("y.numel()", "1")),
             "mean-of-batch-means"),
            (edited(_EVAL_SOLUTION, ("    model.eval()\n", "")), "wrong-value"),
        ),
        judge=_judge_eval_loss,
    )
)


add_answers(
    Answers(
        drill_id="ddp-accumulation-loop",
        solution=_ACCUM_SOLUTION,
        wrong_answers=(
            (edited(_ACCUM_SOLUTION, ("        sampler.set_epoch(epoch)\n", "")), "missing-set-epoch"),
            (edited(_ACCUM_SOLUTION,
                    ("        sampler.set_epoch(epoch)\n", ""),
                    ("                optimizer.zero_grad(set_to_none=True)\n",
                     "                optimizer.zero_grad(set_to_none=True)\n        sampler.set_epoch(epoch)\n")),
             "set-epoch-too-late"),
            (edited(_ACCUM_SOLUTION,
                    ("contextlib.nullcontext() if stepping else ddp_model.no_sync()",
                     "contextlib.nullcontext()")), "syncs-every-micro-step"),
            (edited(_ACCUM_SOLUTION, (" / accum_steps\n", "\n")), "loss-not-scaled"),
            (edited(_ACCUM_SOLUTION,
                    (" / accum_steps\n", " / accum_steps / dist.get_world_size()\n"),
                    ("import torch.nn", "import torch.distributed as dist\nimport torch.nn")),
             "loss-divided-by-world-size"),
            (edited(_ACCUM_SOLUTION,
                    ("contextlib.nullcontext() if stepping else ddp_model.no_sync()",
                     "ddp_model.no_sync() if stepping else contextlib.nullcontext()")), "ranks-diverge"),
        ),
        judge=_judge_ddp_accumulation,
    )
)


add_answers(
    Answers(
        drill_id="ddp-barrier-checkpoint",
        solution=_BARRIER_SOLUTION,
        wrong_answers=(
            (edited(_BARRIER_SOLUTION,
                    ("    dist.barrier()  # nobody reads before rank 0 has finished writing\n", "")),
             "read-before-written"),
            (edited(_BARRIER_SOLUTION,
                    ("    dist.barrier()  # nobody reads before rank 0 has finished writing\n", ""),
                    ("    if dist.get_rank() == 0:",
                     "    dist.barrier()\n    if dist.get_rank() == 0:")),
             "read-before-written"),
            ("import torch\nimport torch.distributed as dist\n\n\ndef sync_from_rank0(model, path):\n"
             "    torch.save(model.state_dict(), path)\n    dist.barrier()\n"
             "    model.load_state_dict(torch.load(path, weights_only=True))\n", "every-rank-saves"),
        ),
        judge=_judge_barrier,
    )
)


add_answers(
    Answers(
        drill_id="ddp-disjoint-shards",
        solution=_SHARD_SOLUTION,
        wrong_answers=(
            (edited(_SHARD_SOLUTION, ("manual_seed(seed + epoch)", "manual_seed(seed + epoch + rank)")),
             "ranks-overlap"),
            ("import torch\n\n\ndef shard_indices(n, rank, world_size, seed, epoch):\n"
             "    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch))\n"
             "    return order[rank::world_size]\n", "uneven-shards"),
            ("import torch\n\n\ndef shard_indices(n, rank, world_size, seed, epoch):\n"
             "    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch))\n"
             "    per_rank = n // world_size\n    return order[rank * per_rank:(rank + 1) * per_rank]\n",
             "samples-dropped"),
            (edited(_SHARD_SOLUTION, ("manual_seed(seed + epoch)", "manual_seed(seed)")), "same-order-every-epoch"),
            (edited(_SHARD_SOLUTION,
                    ("    order = torch.randperm(n, generator=torch.Generator()"
                     ".manual_seed(seed + epoch))",
                     "    torch.manual_seed(seed + epoch)\n    order = torch.randperm(n)")),
             "uses-global-rng"),
            ("from torch.utils.data.distributed import DistributedSampler\n\n\n"
             "def shard_indices(n, rank, world_size, seed, epoch):\n"
             "    sampler = DistributedSampler(range(n), num_replicas=world_size, rank=rank, seed=seed)\n"
             "    sampler.set_epoch(epoch)\n    return list(sampler)\n", "uses-distributed-sampler"),
        ),
        judge=_judge_shards,
    )
)
