"""Drills on DDP: metrics across ranks, DistributedSampler epochs and shards, what DDP averages, gradient
accumulation with no_sync, barriers around rank 0's files. The probes run real gloo ranks on CPU."""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from harness.contract.case import Case
from harness.contract.compare import close_number
from harness.contract.failure import fail
from harness.contract.wire import WireError, describe
from harness.drills.core import Drill, add
from harness.drills.support import multiple_choice, run_on_two_ranks


def _rank_number(value: Any) -> Any:
    """A rank's returned value as data: a float for a number or a one-element tensor, else its description."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.detach().double().item())
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return describe(value)


def _two_floats(got: Any, what: str) -> list[float]:
    if not (isinstance(got, list) and len(got) == 2):
        raise WireError("malformed per-rank values")
    for value in got:
        if not isinstance(value, float):
            fail("not-a-number", observed=f"{what} returned {value}", expected="a number (a float or a one-element "
                 "tensor)", cause="a tuple, list or multi-element tensor returned", where="the return statement")
    return got


def _param_lists(params: Any) -> list:
    """Parameters as nested lists: a rank returns them as plain data (a tensor sent through a queue shares its
    memory with the sending rank, which may have exited by the time it is read)."""
    return [p.detach().tolist() for p in params]


def _tensors_from_lists(lists: list) -> list[torch.Tensor]:
    return [torch.tensor(values, dtype=torch.float32) for values in lists]


# --- global accuracy -----------------------------------------------------------------------------------------

def _accuracy_counts(case: Case) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each rank's (correct, total): different totals and different accuracies (probe and judge alike)."""
    gen = torch.Generator().manual_seed(case.seeded(0))
    total0 = int(torch.randint(5, 40, (), generator=gen))
    total1 = total0 + int(torch.randint(7, 50, (), generator=gen))
    correct0 = int(torch.randint(0, total0 + 1, (), generator=gen))
    correct1 = int(torch.randint(0, total1 + 1, (), generator=gen))
    if correct0 * total1 == correct1 * total0:  # equal accuracies would hide a mean of ratios
        correct1 = correct1 + 1 if correct1 < total1 else correct1 - 1
    return [(torch.tensor(correct0), torch.tensor(total0)), (torch.tensor(correct1), torch.tensor(total1))]


def _probe_global_accuracy(answer: dict, *, case: Case) -> dict:
    counts = _accuracy_counts(case)
    return {"values": run_on_two_ranks(
        lambda rank: _rank_number(answer["global_accuracy"](counts[rank][0].clone(), counts[rank][1].clone())))}


def _judge_global_accuracy(seen: dict, *, case: Case) -> str:
    (c0, t0), (c1, t1) = [(int(c), int(t)) for c, t in _accuracy_counts(case)]
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

add(
    Drill(
        id="ddp-global-accuracy",
        title="A DDP-safe accuracy",
        kind="write",
        topics=("ddp",),
        difficulty=2,
        prompt="Inside an initialised process group, write global_accuracy(correct, total): the accuracy over all "
        "ranks, where correct and total are this rank's counts (tensors). Ranks may hold different numbers of "
        "samples. Every rank returns the same value.",
        entry="global_accuracy",
        starter="import torch\nimport torch.distributed as dist\n\n\ndef global_accuracy(correct, total):\n"
        "    raise NotImplementedError\n",
        solution=_ACCURACY_SOLUTION,
        hints=("Averaging ratios is wrong when ranks have different sample counts.",
               "all_reduce (SUM) the stacked [correct, total], then divide."),
        probe=_probe_global_accuracy,
        judge=_judge_global_accuracy,
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
    )
)


# --- set_epoch -----------------------------------------------------------------------------------------------

_SET_EPOCH_FIX = ("    for epoch in range(epochs):\n",
                  "    for epoch in range(epochs):\n        sampler.set_epoch(epoch)\n")
_SET_EPOCH_STARTER = '''from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def epoch_orders(dataset, epochs, rank, world_size, seed=0):
    """The indices this rank sees each epoch. Symptom: every epoch sees the same order."""
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
    loader = DataLoader(dataset, batch_size=4, sampler=sampler)
    orders = []
    for epoch in range(epochs):
        orders.append([int(i) for (batch,) in loader for i in batch])
    return orders
'''
_EPOCHS = 3


def _set_epoch_inputs(case: Case) -> tuple[TensorDataset, int]:
    return TensorDataset(torch.arange(2 * (15 + case.seeded(0) % 6))), case.seeded(1) % 10_000


def _sampler_orders(dataset: TensorDataset, seed: int, epochs: list[int], rank: int) -> list[list[int]]:
    """What a DistributedSampler whose epoch is set to each of `epochs` in turn yields (the judge's reference)."""
    sampler = DistributedSampler(dataset, num_replicas=2, rank=rank, shuffle=True, seed=seed)
    orders = []
    for epoch in epochs:
        sampler.set_epoch(epoch)
        orders.append(list(sampler))
    return orders


def _probe_set_epoch(answer: dict, *, case: Case) -> dict:
    dataset, seed = _set_epoch_inputs(case)
    epoch_orders = answer["epoch_orders"]
    return {"ranks": [epoch_orders(dataset, _EPOCHS, rank, 2, seed=seed) for rank in (0, 1)],
            "again": epoch_orders(dataset, _EPOCHS, 0, 2, seed=seed)}


def _judge_set_epoch(seen: dict, *, case: Case) -> str:
    dataset, seed = _set_epoch_inputs(case)
    ranks = seen["ranks"]
    if not (isinstance(ranks, list) and len(ranks) == 2 and all(isinstance(r, list) and len(r) == _EPOCHS and all(
            isinstance(o, list) and all(isinstance(i, int) for i in o) for o in r) for r in ranks)):
        fail("wrong-format", observed=f"epoch_orders returned {describe(ranks)}", expected=f"{_EPOCHS} lists of ints",
             cause="the starter's return value changed", where="return orders")
    for epoch in range(_EPOCHS):
        shared = set(ranks[0][epoch]) & set(ranks[1][epoch])
        if shared:
            fail("ranks-overlap", observed=f"ranks 0 and 1 share {len(shared)} samples in epoch {epoch}",
                 expected="disjoint shards", cause="different seeds on different ranks: each rank shuffles its own "
                 "way, so their shards overlap and some samples are never seen", where="the same seed on every rank")
    want = [_sampler_orders(dataset, seed, list(range(_EPOCHS)), rank) for rank in (0, 1)]
    if ranks == want:
        if seen["again"] != want[0]:
            fail("not-reproducible", observed="two calls with the same seed gave different orders",
                 expected="the same orders for a seed", cause="randomness from outside the sampler",
                 where="the sampler's seed")
        return "a new shuffle each epoch, set before the epoch starts, reproducible and disjoint across ranks"
    variants = {
        "missing-set-epoch": ([0] * _EPOCHS, "the sampler shuffles with seed + epoch, and its epoch stays 0 unless "
                              "you call sampler.set_epoch(epoch)"),
        "set-epoch-too-late": ([0, *range(_EPOCHS - 1)], "set_epoch(epoch) after the epoch's loop: epoch 0 and "
                               "epoch 1 both shuffle with epoch 0, every later epoch is one behind"),
    }
    for code, (epochs, cause) in variants.items():
        if ranks == [_sampler_orders(dataset, seed, epochs, rank) for rank in (0, 1)]:
            fail(code, observed=f"the sampler's epoch was {epochs} in epochs {list(range(_EPOCHS))}"
                 + (": epochs 0 and 1 see the same order" if epochs[0] == epochs[1] else ""),
                 expected=f"epochs {list(range(_EPOCHS))}: a new order each epoch", cause=cause,
                 where="sampler.set_epoch(epoch) at the start of each epoch, before iterating the loader")
    if ranks == [_sampler_orders(dataset, 0, list(range(_EPOCHS)), rank) for rank in (0, 1)] and seed != 0:
        fail("seed-ignored", observed="the orders are those of seed 0", expected=f"those of seed={seed}",
             cause="the seed argument is not passed to the sampler", where="DistributedSampler(..., seed=seed)")
    fail("wrong-order", observed=f"rank 0's first epoch starts {ranks[0][0][:6]}",
         expected=f"{want[0][0][:6]} (DistributedSampler with seed={seed}, epoch 0)",
         cause="the sampler is configured differently, or its epoch is set to other values",
         where="sampler.set_epoch(epoch) with the loop's epoch")


add(
    Drill(
        id="ddp-set-epoch",
        title="Bug hunt: every epoch sees the same order",
        kind="bughunt",
        topics=("ddp", "data"),
        difficulty=1,
        prompt="Under DDP, every epoch visits the samples in exactly the same order. Fix epoch_orders().",
        entry="epoch_orders",
        starter=_SET_EPOCH_STARTER,
        solution=_SET_EPOCH_STARTER.replace(*_SET_EPOCH_FIX),
        hints=("The sampler shuffles with seed + something. What is that something, and who changes it?",
               "sampler.set_epoch(epoch) at the start of every epoch."),
        probe=_probe_set_epoch,
        judge=_judge_set_epoch,
        wrong_answers=(
            (_SET_EPOCH_STARTER.replace("    for epoch in range(epochs):\n",
                                        "    for epoch in range(epochs):\n        sampler.set_epoch(0)\n"),
             "missing-set-epoch"),
            (_SET_EPOCH_STARTER.replace("for i in batch])\n", "for i in batch])\n        sampler.set_epoch(epoch)\n"),
             "set-epoch-too-late"),
            (_SET_EPOCH_STARTER.replace("shuffle=True, seed=seed", "shuffle=True, seed=seed + rank").replace(
                *_SET_EPOCH_FIX),
             "ranks-overlap"),
            (_SET_EPOCH_STARTER.replace(", seed=seed)", ")").replace(*_SET_EPOCH_FIX),
             "seed-ignored"),
        ),
    )
)


# --- what DDP averages ---------------------------------------------------------------------------------------

def _ddp_gradients_experiment() -> None:
    def work(rank: int) -> list[float]:
        torch.manual_seed(0)
        model = DDP(nn.Linear(2, 1))
        x = torch.full((1, 2), float(rank + 1))  # different data on each rank
        model(x).sum().backward()
        return model.module.weight.grad.flatten().tolist()

    grads = run_on_two_ranks(work)
    print("local gradients would be [1, 1] on rank 0 and [2, 2] on rank 1; "
          f"after backward under DDP both hold {grads[0]}")
    print("DDP all-reduces (averages) the gradients bucket by bucket during backward; the parameters are "
          "broadcast once, at construction, and stay equal because every rank applies the same update.")


add(
    multiple_choice(
        id="ddp-what-is-averaged",
        title="What does DDP synchronise?",
        topics=("ddp",),
        difficulty=2,
        question="What does DistributedDataParallel communicate during training?",
        options=(
            ("it averages the parameters across ranks after every optimizer step",
             "parameters are broadcast once, at construction; they stay equal because every rank applies the same "
             "averaged gradient"),
            ("it sends every rank's batch to rank 0, which computes the loss",
             "each rank runs its own forward and backward on its own batch; nothing is gathered on rank 0"),
            ("nothing until the end of the epoch, when it averages the models",
             "that is periodic model averaging (local SGD), not DDP: DDP communicates in every backward"),
            ("it all-reduces the gradients in buckets during backward, overlapping with compute",
             "gradient hooks launch an all-reduce (average) per bucket as soon as its gradients are ready, so "
             "communication overlaps the rest of backward"),
        ),
        key="d",
        hints=("Parameters start identical (broadcast at construction). What must stay identical after each step?",
               "If the gradients are identical on every rank, so are the updates."),
        experiment=_ddp_gradients_experiment,
    )
)


# --- evaluation loss: sums and counts ------------------------------------------------------------------------

def _eval_loss_setup(case: Case, rank: int) -> tuple[nn.Module, TensorDataset]:
    """The model (identical on both ranks, with dropout) and this rank's uneven shard of validation data."""
    torch.manual_seed(case.seeded(0))
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 1))
    gen = torch.Generator().manual_seed(case.seeded(1 + rank))
    n = (13 + case.seeded(0) % 5) if rank == 0 else (27 + case.seeded(0) % 7)
    x = torch.randn(n, 4, generator=gen)
    y = x[:, :1] * 2 + torch.randn(n, 1, generator=gen) * (1 + rank)  # the ranks' losses differ
    return model, TensorDataset(x, y)


def _probe_eval_loss(answer: dict, *, case: Case) -> dict:
    def work(rank: int) -> Any:
        model, dataset = _eval_loss_setup(case, rank)
        model.train()
        return _rank_number(answer["evaluate"](model, DataLoader(dataset, batch_size=8)))

    return {"values": run_on_two_ranks(work)}


def _judge_eval_loss(seen: dict, *, case: Case) -> str:
    got = _two_floats(seen["values"], "evaluate")
    sums, counts, batch_means = [], [], []
    for rank in (0, 1):
        model, dataset = _eval_loss_setup(case, rank)
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
             where="all_reduce the sums and counts")
    if close_number(got[0], want, rtol=1e-6, atol=1e-6):
        return "the exact mean over every sample of every rank, in eval mode"
    all_batches = batch_means[0] + batch_means[1]
    per_rank_batch = [sum(b) / len(b) for b in batch_means]
    mean_of_batch_means = {sum(all_batches) / len(all_batches), sum(per_rank_batch) / 2}
    if any(close_number(got[0], value, rtol=1e-6, atol=1e-6) for value in mean_of_batch_means):
        fail("mean-of-batch-means", observed=f"validation loss {got[0]:.5f}", expected=f"{want:.5f}, the mean over "
             f"all {sum(counts)} samples", cause="averaging batch means weights the smaller last batch like a full "
             "one", where="accumulate the sum of per-sample losses (reduction='sum') and the number of samples")
    if close_number(got[0], (sums[0] / counts[0] + sums[1] / counts[1]) / 2, rtol=1e-6, atol=1e-6):
        fail("mean-of-rank-means", observed=f"validation loss {got[0]:.5f}", expected=f"{want:.5f}",
             cause=f"each rank's mean was averaged across ranks: rank 0 has {counts[0]} samples, rank 1 "
             f"{counts[1]}, yet they weigh the same", where="all_reduce the sum and the count, divide after")
    fail("wrong-value", observed=f"validation loss {got[0]:.5f}", expected=f"{want:.5f}",
         cause="dropout still active (model.eval() missing), or the losses summed wrongly",
         where="model.eval(), then the sums and counts")


_EVAL_STARTER = '''import torch
import torch.distributed as dist
import torch.nn.functional as F


@torch.no_grad()
def evaluate(model, loader):
    """The mean MSE over every sample of every rank. Symptom: it moves with the batch size and the
    number of ranks, although the data does not change."""
    model.eval()
    losses = []
    for x, y in loader:
        losses.append(F.mse_loss(model(x), y))
    loss = torch.stack(losses).mean()
    dist.all_reduce(loss)
    return loss / dist.get_world_size()
'''
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

add(
    Drill(
        id="ddp-eval-loss-sums",
        title="Bug hunt: a validation loss that depends on the batch size",
        kind="bughunt",
        topics=("ddp", "loop"),
        difficulty=2,
        prompt="evaluate(model, loader) runs on every rank of a DDP job; each rank's loader holds its own shard of "
        "the validation set, and the shards have different sizes (the last batch of each is smaller). It must "
        "return, on every rank, the mean MSE over all samples of all ranks. Fix it.",
        entry="evaluate",
        starter=_EVAL_STARTER,
        solution=_EVAL_SOLUTION,
        hints=("A mean of means is the mean only when every group has the same size. Which groups here differ?",
               "Sum the per-sample losses and count the samples, on each rank; all_reduce both (SUM); divide once."),
        probe=_probe_eval_loss,
        judge=_judge_eval_loss,
        wrong_answers=(
            (_EVAL_SOLUTION.replace("    dist.all_reduce(totals, op=dist.ReduceOp.SUM)\n"
                                    "    return totals[0] / totals[1]",
                                    "    loss = totals[0] / totals[1]\n    dist.all_reduce(loss)\n"
                                    "    return loss / dist.get_world_size()"), "mean-of-rank-means"),
            (_EVAL_SOLUTION.replace('F.mse_loss(model(x), y, reduction="sum").double()',
                                    "F.mse_loss(model(x), y).double()").replace("y.numel()", "1"),
             "mean-of-batch-means"),
            (_EVAL_SOLUTION.replace("    model.eval()\n", ""), "wrong-value"),
        ),
    )
)


# --- gradient accumulation under DDP: a three-bug loop -------------------------------------------------------

_ACCUM_EPOCHS, _ACCUM_STEPS, _MICRO_PER_EPOCH, _MICRO_BATCH = 3, 3, 6, 4  # accum_steps != world_size (2)


class _RecordingSampler(DistributedSampler):
    """A DistributedSampler that records its epoch each time an epoch's iteration starts."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.started: list[int] = []

    def __iter__(self):
        self.started.append(self.epoch)
        return super().__iter__()


def _accum_data(case: Case) -> tuple[TensorDataset, int]:
    gen = torch.Generator().manual_seed(case.seeded(1))
    x = torch.randn(2 * _MICRO_PER_EPOCH * _MICRO_BATCH, 5, generator=gen)
    y = x @ torch.randn(5, 1, generator=gen) + 0.1 * torch.randn(len(x), 1, generator=gen)
    return TensorDataset(x, y), case.seeded(2) % 10_000


def _accum_model(case: Case) -> nn.Module:
    torch.manual_seed(case.seeded(0))
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 1))


def _probe_ddp_accumulation(answer: dict, *, case: Case) -> dict:
    def work(rank: int) -> dict:
        dataset, seed = _accum_data(case)
        model = DDP(_accum_model(case))
        syncs = [0]

        def counting_hook(state, bucket):  # no annotations: DDP checks them, and they are strings here
            syncs[0] += 1
            return allreduce_hook(None, bucket)

        model.register_comm_hook(None, counting_hook)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        sampler = _RecordingSampler(dataset, num_replicas=2, rank=rank, shuffle=True, seed=seed)
        loader = DataLoader(dataset, batch_size=_MICRO_BATCH, sampler=sampler)
        answer["train_epochs"](model, optimizer, sampler, loader, _ACCUM_EPOCHS, _ACCUM_STEPS)
        return {"params": _param_lists(model.module.parameters()), "syncs": syncs[0], "epochs": sampler.started}

    return {"ranks": [{**r, "params": _tensors_from_lists(r["params"])} for r in run_on_two_ranks(work)]}


def _accum_reference(case: Case, epochs: list[int], scale: float) -> list[torch.Tensor]:
    """The weights two ranks reach when their averaged gradients are accumulated over `_ACCUM_STEPS` micro-batches,
    with the sampler's epoch set to `epochs` and each micro-batch's loss multiplied by `scale`."""
    dataset, seed = _accum_data(case)
    model = _accum_model(case)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in epochs:
        shards = _sampler_orders(dataset, seed, [epoch], 0)[0], _sampler_orders(dataset, seed, [epoch], 1)[0]
        for i in range(_MICRO_PER_EPOCH):
            for shard in shards:
                x, y = dataset[shard[i * _MICRO_BATCH:(i + 1) * _MICRO_BATCH]]
                (F.mse_loss(model(x), y) * scale / 2).backward()  # DDP averages over the two ranks
            if (i + 1) % _ACCUM_STEPS == 0:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
    return [p.detach() for p in model.parameters()]


def _judge_ddp_accumulation(seen: dict, *, case: Case) -> str:
    ranks = seen["ranks"]
    if not (isinstance(ranks, list) and len(ranks) == 2 and all(isinstance(r, dict) for r in ranks)):
        raise WireError("malformed per-rank observation")
    epochs, want_epochs = ranks[0]["epochs"], list(range(_ACCUM_EPOCHS))
    if epochs != want_epochs:
        late = [0, *range(_ACCUM_EPOCHS - 1)]
        fail("missing-set-epoch" if epochs == [0] * _ACCUM_EPOCHS else "set-epoch-too-late" if epochs == late
             else "wrong-set-epoch", observed=f"the sampler's epoch when each epoch started: {epochs}",
             expected=f"{want_epochs}", cause="without sampler.set_epoch(epoch) before the epoch's loop, every epoch "
             "shuffles (and shards) the data exactly like epoch 0" if epochs != late else "set_epoch after the "
             "epoch's loop: epochs 0 and 1 see the same order", where="sampler.set_epoch(epoch) first thing in each "
             "epoch")
    first, second = ranks[0]["params"], ranks[1]["params"]
    if not (isinstance(first, list) and isinstance(second, list) and len(first) == len(second)):
        raise WireError("malformed parameters")
    if not all(torch.equal(a, b) for a, b in zip(first, second, strict=True)):
        fail("ranks-diverge", observed="after training, rank 0 and rank 1 hold different weights",
             expected="identical weights on every rank", cause="the optimizer stepped on gradients that were never "
             "all-reduced: no_sync() was active on the micro-batch before the step (the condition is inverted)",
             where="no_sync() on the micro-batches that do NOT step; a plain backward on the one that does")
    steps = _ACCUM_EPOCHS * _MICRO_PER_EPOCH // _ACCUM_STEPS
    if ranks[0]["syncs"] != steps:
        fail("syncs-every-micro-step" if ranks[0]["syncs"] == _ACCUM_EPOCHS * _MICRO_PER_EPOCH else "wrong-sync-count",
             observed=f"{ranks[0]['syncs']} gradient all-reduces for {steps} optimizer steps",
             expected=f"{steps}: one per optimizer step", cause="every backward under DDP all-reduces the gradients; "
             "during accumulation that is wasted communication, since only the last micro-batch's sum is used",
             where="with ddp_model.no_sync(): forward and backward on the micro-batches that do not step")
    want = _accum_reference(case, want_epochs, 1 / _ACCUM_STEPS)
    if all(torch.allclose(a, b, atol=1e-5, rtol=1e-4) for a, b in zip(first, want, strict=True)):
        return "one all-reduce per optimizer step, averaged micro-batch losses, a new shard each epoch"
    if all(torch.allclose(a, b, atol=1e-5, rtol=1e-4) for a, b in zip(first, _accum_reference(case, want_epochs, 1.0),
                                                                        strict=True)):
        fail("loss-not-scaled", observed="the weights match steps on the SUM of the micro-batches' gradients",
             expected=f"steps on their mean (each loss divided by accum_steps={_ACCUM_STEPS})",
             cause="accumulating unscaled losses multiplies the effective learning rate by accum_steps",
             where="loss = loss_fn(...) / accum_steps before backward")
    for scale, what in ((1 / (_ACCUM_STEPS * 2), "divided by accum_steps and by the world size"),
                        (1 / 2, "divided by the world size instead of accum_steps")):
        if all(torch.allclose(a, b, atol=1e-5, rtol=1e-4) for a, b in zip(first, _accum_reference(
                case, want_epochs, scale), strict=True)):
            fail("loss-divided-by-world-size", observed=f"the weights match steps on micro-batch losses {what}",
                 expected=f"steps on their mean (each loss divided by accum_steps={_ACCUM_STEPS} only)",
                 cause="DDP already averages the gradients over the ranks in its all-reduce: dividing the loss by "
                 "world_size as well scales every step by 1 / world_size", where="loss = loss_fn(...) / accum_steps; "
                 "no division by the world size")
    fail("wrong-update", observed="the final weights differ from the reference run's",
         expected="SGD steps on gradients averaged over ranks and micro-batches",
         cause="steps at the wrong micro-batches, or gradients not zeroed after a step",
         where="the step condition and zero_grad")


_ACCUM_STARTER = '''import torch.nn.functional as F


def train_epochs(ddp_model, optimizer, sampler, loader, epochs, accum_steps):
    """Train a DDP model with gradient accumulation: one optimizer step per accum_steps micro-batches."""
    ddp_model.train()
    for epoch in range(epochs):
        for i, (x, y) in enumerate(loader):
            loss = F.mse_loss(ddp_model(x), y)
            loss.backward()
            if (i + 1) % accum_steps == 0:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
'''
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

add(
    Drill(
        id="ddp-accumulation-loop",
        title="Bug hunt: gradient accumulation under DDP, three bugs",
        kind="bughunt",
        topics=("ddp", "loop"),
        difficulty=3,
        prompt="train_epochs(ddp_model, optimizer, sampler, loader, epochs, accum_steps) trains a DDP model with "
        "gradient accumulation: one optimizer step per accum_steps micro-batches, on the mean of their gradients, "
        "averaged over ranks. On two ranks the run shows three problems: the per-epoch training loss repeats the "
        "same pattern of batch losses every epoch, profiling counts one gradient all-reduce per micro-batch "
        "(accum_steps times the optimizer steps), and the loss jumps around where a single-process run with the "
        "same effective batch descends smoothly. It has three bugs; the check reports the first it observes. "
        "Fix all three.",
        entry="train_epochs",
        starter=_ACCUM_STARTER,
        solution=_ACCUM_SOLUTION,
        hints=("Three independent fixes: one line before the inner loop, one context manager, one division.",
               "sampler.set_epoch(epoch); DDP's no_sync() skips the all-reduce of a backward; gradients add up, so "
               "divide each micro-batch loss by accum_steps.",
               "with contextlib.nullcontext() if stepping else ddp_model.no_sync(): loss = ... / accum_steps; "
               "loss.backward()"),
        probe=_probe_ddp_accumulation,
        judge=_judge_ddp_accumulation,
        wrong_answers=(
            (_ACCUM_SOLUTION.replace("        sampler.set_epoch(epoch)\n", ""), "missing-set-epoch"),
            (_ACCUM_SOLUTION.replace("        sampler.set_epoch(epoch)\n", "").replace(
                "                optimizer.zero_grad(set_to_none=True)\n",
                "                optimizer.zero_grad(set_to_none=True)\n        sampler.set_epoch(epoch)\n"),
             "set-epoch-too-late"),
            (_ACCUM_SOLUTION.replace("contextlib.nullcontext() if stepping else ddp_model.no_sync()",
                                     "contextlib.nullcontext()"), "syncs-every-micro-step"),
            (_ACCUM_SOLUTION.replace(" / accum_steps\n", "\n"), "loss-not-scaled"),
            (_ACCUM_SOLUTION.replace(" / accum_steps\n", " / accum_steps / dist.get_world_size()\n")
             .replace("import torch.nn", "import torch.distributed as dist\nimport torch.nn"),
             "loss-divided-by-world-size"),
            (_ACCUM_SOLUTION.replace("contextlib.nullcontext() if stepping else ddp_model.no_sync()",
                                     "ddp_model.no_sync() if stepping else contextlib.nullcontext()"), "ranks-diverge"),
        ),
    )
)


# --- barrier before reading rank 0's file --------------------------------------------------------------------

def _barrier_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2))


def _probe_barrier(answer: dict, *, case: Case) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "start.pt")
        torch.save(_barrier_model(case.seeded(99)).state_dict(), path)  # the previous run's file, still there

        def work(rank: int) -> dict:
            model = _barrier_model(case.seeded(10 + rank))  # the ranks start different
            real, saves = torch.save, [0]

            def slow_save(*args: Any, **kwargs: Any) -> None:  # a slow shared filesystem
                saves[0] += 1
                time.sleep(0.6)
                return real(*args, **kwargs)

            torch.save = slow_save
            try:
                answer["sync_from_rank0"](model, path)
            finally:
                torch.save = real
            return {"saves": saves[0], "params": _param_lists(model.parameters())}

        return {"ranks": [{**r, "params": _tensors_from_lists(r["params"])} for r in run_on_two_ranks(work)]}


def _judge_barrier(seen: dict, *, case: Case) -> str:
    ranks = seen["ranks"]
    if not (isinstance(ranks, list) and len(ranks) == 2 and all(isinstance(r, dict) for r in ranks)):
        raise WireError("malformed per-rank observation")
    if ranks[1]["saves"]:
        fail("every-rank-saves", observed=f"rank 1 called torch.save {ranks[1]['saves']} time(s)",
             expected="rank 0 only writes the file", cause="every rank writes its own weights to the same path: "
             "whichever finishes last wins, and readers may see a torn file", where="if dist.get_rank() == 0:")
    if ranks[0]["saves"] != 1:
        fail("rank0-did-not-save", observed=f"rank 0 called torch.save {ranks[0]['saves']} time(s)",
             expected="one save on rank 0", cause="the rank test is inverted", where="if dist.get_rank() == 0:")
    want = list(_barrier_model(case.seeded(10)).parameters())
    stale = list(_barrier_model(case.seeded(99)).parameters())
    for rank, observed in enumerate(ranks):
        params = observed["params"]
        if not (isinstance(params, list) and len(params) == len(want)
                and all(isinstance(p, torch.Tensor) and p.shape == w.shape for p, w in zip(params, want, strict=True))):
            raise WireError("malformed parameters")
        if all(torch.equal(p, w) for p, w in zip(params, want, strict=True)):
            continue
        if all(torch.equal(p, s) for p, s in zip(params, stale, strict=True)):
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

add(
    Drill(
        id="ddp-barrier-checkpoint",
        title="Reading rank 0's checkpoint: wait for it",
        kind="write",
        topics=("ddp", "checkpointing"),
        difficulty=2,
        prompt="In a DDP job (process group initialised), the ranks' models differ and every rank must continue "
        "from rank 0's weights through a file on a shared filesystem. Write sync_from_rank0(model, path): rank 0 "
        "alone saves its model's state dict to path, then every rank (rank 0 included) loads it from path "
        "(weights_only=True). A file from a previous run may already be at path.",
        entry="sync_from_rank0",
        starter="import torch\nimport torch.distributed as dist\n\n\ndef sync_from_rank0(model, path):\n"
        "    raise NotImplementedError\n",
        solution=_BARRIER_SOLUTION,
        hints=("Rank 1 does not know when rank 0 has finished writing. What makes a rank wait for the others?",
               "dist.barrier() between rank 0's torch.save and every rank's torch.load."),
        probe=_probe_barrier,
        judge=_judge_barrier,
        wrong_answers=(
            (_BARRIER_SOLUTION.replace("    dist.barrier()  # nobody reads before rank 0 has finished writing\n", ""),
             "read-before-written"),
            (_BARRIER_SOLUTION.replace("    dist.barrier()  # nobody reads before rank 0 has finished writing\n", "")
             .replace("    if dist.get_rank() == 0:", "    dist.barrier()\n    if dist.get_rank() == 0:"),
             "read-before-written"),
            ("import torch\nimport torch.distributed as dist\n\n\ndef sync_from_rank0(model, path):\n"
             "    torch.save(model.state_dict(), path)\n    dist.barrier()\n"
             "    model.load_state_dict(torch.load(path, weights_only=True))\n", "every-rank-saves"),
        ),
    )
)


# --- disjoint shards -----------------------------------------------------------------------------------------

def _shard_configs(case: Case) -> list[tuple[int, int]]:
    """(n, world_size) pairs, most with n not divisible by the world size."""
    return [(37 + case.seeded(0) % 10, 2), (50 + case.seeded(1) % 9, 3), (41 + case.seeded(2) % 6, 4), (24, 4)]


def _probe_shards(answer: dict, *, case: Case) -> dict:
    shard, seed = answer["shard_indices"], case.seeded(3) % 10_000

    def as_list(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.tolist()
        return [int(i) for i in value] if isinstance(value, (list, tuple, range)) else describe(value)

    results, touched, used_sampler = [], False, []
    real_init = DistributedSampler.__init__

    def recording_init(self: DistributedSampler, *args: Any, **kwargs: Any) -> None:
        used_sampler.append(True)
        real_init(self, *args, **kwargs)

    DistributedSampler.__init__ = recording_init  # any import of the class, under any name
    try:
        for n, world in _shard_configs(case):
            results.append(_shard_results(shard, n, world, seed, as_list))
            touched |= results[-1].pop("touched")
    finally:
        DistributedSampler.__init__ = real_init
    return {"results": results, "touched_global_rng": touched, "used_sampler": bool(used_sampler)}


def _shard_results(shard: Any, n: int, world: int, seed: int, as_list: Any) -> dict:
    before = torch.get_rng_state()
    per_epoch = [[as_list(shard(n, rank, world, seed, epoch)) for rank in range(world)] for epoch in (0, 1)]
    touched = not torch.equal(before, torch.get_rng_state())
    return {"epochs": per_epoch, "again": as_list(shard(n, 0, world, seed, 0)),
            "other_seed": as_list(shard(n, 0, world, seed + 1, 0)), "touched": touched}


def _judge_shards(seen: dict, *, case: Case) -> str:
    if seen["used_sampler"] is not False:
        fail("uses-distributed-sampler", observed="shard_indices built a DistributedSampler",
             expected="the sharding written by hand", cause="the drill asks you to write what DistributedSampler "
             "does, to know what it guarantees (and what padding and set_epoch are for)",
             where="one seeded permutation, padded, then order[rank::world_size]")
    results = seen["results"]
    configs = _shard_configs(case)
    if not isinstance(results, list) or len(results) != len(configs):
        raise WireError("malformed observation")
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

add(
    Drill(
        id="ddp-disjoint-shards",
        title="Shards for every rank: disjoint, complete, equal",
        kind="write",
        topics=("ddp", "data"),
        difficulty=2,
        prompt="Write shard_indices(n, rank, world_size, seed, epoch) -> this rank's sample indices for one epoch, "
        "as DistributedSampler does: the ranks' shards are disjoint (apart from padding), together cover all n "
        "samples, all have the same length ceil(n / world_size) (pad with repeated indices), are reshuffled each "
        "epoch, depend only on (seed, epoch), and leave torch's global RNG untouched. Each rank calls it alone: no "
        "communication.",
        entry="shard_indices",
        starter="import torch\n\n\ndef shard_indices(n, rank, world_size, seed, epoch):\n"
        "    raise NotImplementedError\n",
        solution=_SHARD_SOLUTION,
        hints=("Every rank must compute the SAME permutation, then take its own part of it.",
               "torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch)), padded to a multiple of "
               "world_size, then order[rank::world_size]."),
        probe=_probe_shards,
        judge=_judge_shards,
        wrong_answers=(
            (_SHARD_SOLUTION.replace("manual_seed(seed + epoch)", "manual_seed(seed + epoch + rank)"), "ranks-overlap"),
            ("import torch\n\n\ndef shard_indices(n, rank, world_size, seed, epoch):\n"
             "    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch))\n"
             "    return order[rank::world_size]\n", "uneven-shards"),
            ("import torch\n\n\ndef shard_indices(n, rank, world_size, seed, epoch):\n"
             "    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch))\n"
             "    per_rank = n // world_size\n    return order[rank * per_rank:(rank + 1) * per_rank]\n",
             "samples-dropped"),
            (_SHARD_SOLUTION.replace("manual_seed(seed + epoch)", "manual_seed(seed)"), "same-order-every-epoch"),
            (_SHARD_SOLUTION.replace("    order = torch.randperm(n, generator=torch.Generator()"
                                     ".manual_seed(seed + epoch))",
                                     "    torch.manual_seed(seed + epoch)\n    order = torch.randperm(n)"),
             "uses-global-rng"),
            ("from torch.utils.data.distributed import DistributedSampler\n\n\n"
             "def shard_indices(n, rank, world_size, seed, epoch):\n"
             "    sampler = DistributedSampler(range(n), num_replicas=world_size, rank=rank, seed=seed)\n"
             "    sampler.set_epoch(epoch)\n    return list(sampler)\n", "uses-distributed-sampler"),
        ),
    )
)

