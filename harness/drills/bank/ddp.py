"""Drills on DDP: metrics across ranks, DistributedSampler epochs and shards, what DDP averages, gradient
accumulation with no_sync, barriers around rank 0's files. The probes run real gloo ranks on CPU."""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from harness.contract.case import Case
from harness.contract.wire import describe
from harness.drills.core import Drill, add
from harness.drills.support import explain, run_on_two_ranks


def _rank_number(value: Any) -> Any:
    """A rank's returned value as data: a float for a number or a one-element tensor, else its description."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.detach().double().item())
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return describe(value)


def _param_lists(params: Any) -> list:
    """Parameters as nested lists: a rank returns them as plain data (a tensor sent through a queue shares its
    memory with the sending rank, which may have exited by the time it is read)."""
    return [p.detach().tolist() for p in params]


def _tensors_from_lists(lists: list) -> list[torch.Tensor]:
    return [torch.tensor(values, dtype=torch.float32) for values in lists]


# --- global accuracy -----------------------------------------------------------------------------------------

def accuracy_counts(case: Case) -> list[tuple[torch.Tensor, torch.Tensor]]:
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
    counts = accuracy_counts(case)
    return {"values": run_on_two_ranks(
        lambda rank: _rank_number(answer["global_accuracy"](counts[rank][0].clone(), counts[rank][1].clone())))}


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
        hints=("Averaging ratios is wrong when ranks have different sample counts.",
               "all_reduce (SUM) the stacked [correct, total], then divide."),
        probe=_probe_global_accuracy,
    )
)


SET_EPOCH_STARTER = '''from torch.utils.data import DataLoader
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
ORDER_EPOCHS = 3


def set_epoch_inputs(case: Case) -> tuple[TensorDataset, int]:
    """An even-sized dataset of indices to shard over two ranks, and the sampler's seed."""
    return TensorDataset(torch.arange(2 * (15 + case.seeded(0) % 6))), case.seeded(1) % 10_000


def _probe_set_epoch(answer: dict, *, case: Case) -> dict:
    dataset, seed = set_epoch_inputs(case)
    epoch_orders = answer["epoch_orders"]
    return {"ranks": [epoch_orders(dataset, ORDER_EPOCHS, rank, 2, seed=seed) for rank in (0, 1)],
            "again": epoch_orders(dataset, ORDER_EPOCHS, 0, 2, seed=seed)}


add(
    Drill(
        id="ddp-set-epoch",
        title="Bug hunt: every epoch sees the same order",
        kind="bughunt",
        topics=("ddp", "data"),
        difficulty=1,
        prompt="Under DDP, every epoch visits the samples in exactly the same order. Fix epoch_orders().",
        entry="epoch_orders",
        starter=SET_EPOCH_STARTER,
        hints=("The sampler shuffles with seed + something. What is that something, and who changes it?",
               "sampler.set_epoch(epoch) at the start of every epoch."),
        probe=_probe_set_epoch,
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
    explain(
        id="ddp-what-is-averaged",
        title="What does DDP synchronise?",
        topics=("ddp",),
        difficulty=2,
        question="What does DistributedDataParallel communicate during training?",
        hints=("Parameters start identical (broadcast at construction). What must stay identical after each step?",
               "If the gradients are identical on every rank, so are the updates."),
        experiment=_ddp_gradients_experiment,
    )
)


# --- evaluation loss: sums and counts ------------------------------------------------------------------------

def eval_loss_setup(case: Case, rank: int) -> tuple[nn.Module, TensorDataset]:
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
        model, dataset = eval_loss_setup(case, rank)
        model.train()
        return _rank_number(answer["evaluate"](model, DataLoader(dataset, batch_size=8)))

    return {"values": run_on_two_ranks(work)}


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
        hints=("A mean of means is the mean only when every group has the same size. Which groups here differ?",
               "Sum the per-sample losses and count the samples, on each rank; all_reduce both (SUM); divide once."),
        probe=_probe_eval_loss,
    )
)


# --- gradient accumulation under DDP: a three-bug loop -------------------------------------------------------

ACCUM_EPOCHS, ACCUM_STEPS, MICRO_PER_EPOCH, MICRO_BATCH = 3, 3, 6, 4  # accum_steps != world_size (2)


class _RecordingSampler(DistributedSampler):
    """A DistributedSampler that records its epoch each time an epoch's iteration starts."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.started: list[int] = []

    def __iter__(self):
        self.started.append(self.epoch)
        return super().__iter__()


def accum_data(case: Case) -> tuple[TensorDataset, int]:
    """The accumulation drill's regression dataset (enough for two ranks' micro-batches) and the sampler's seed."""
    gen = torch.Generator().manual_seed(case.seeded(1))
    x = torch.randn(2 * MICRO_PER_EPOCH * MICRO_BATCH, 5, generator=gen)
    y = x @ torch.randn(5, 1, generator=gen) + 0.1 * torch.randn(len(x), 1, generator=gen)
    return TensorDataset(x, y), case.seeded(2) % 10_000


def accum_model(case: Case) -> nn.Module:
    """The accumulation drill's seeded Tanh MLP (5 -> 8 -> 1)."""
    torch.manual_seed(case.seeded(0))
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 1))


def allreduce_factors(case: Case) -> list[float]:
    """The factor the check's all-reduce hook multiplies its k-th result by: 1 + a case-drawn 2 to 20 %, so the
    number of all-reduces, and which micro-batches made them, shows in the weights the judge recomputes."""
    gen = torch.Generator().manual_seed(case.seeded(3))
    return (1 + 0.02 + 0.18 * torch.rand(2 * ACCUM_EPOCHS * MICRO_PER_EPOCH, generator=gen, dtype=torch.float64)
            ).tolist()


def _probe_ddp_accumulation(answer: dict, *, case: Case) -> dict:
    def work(rank: int) -> dict:
        dataset, seed = accum_data(case)
        model = DDP(accum_model(case))
        syncs, factors = [0], allreduce_factors(case)

        def counting_hook(state, bucket):  # no annotations: DDP checks them, and they are strings here
            factor = factors[min(syncs[0], len(factors) - 1)]
            syncs[0] += 1
            return allreduce_hook(None, bucket).then(lambda future: future.value().mul_(factor))

        model.register_comm_hook(None, counting_hook)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        sampler = _RecordingSampler(dataset, num_replicas=2, rank=rank, shuffle=True, seed=seed)
        loader = DataLoader(dataset, batch_size=MICRO_BATCH, sampler=sampler)
        answer["train_epochs"](model, optimizer, sampler, loader, ACCUM_EPOCHS, ACCUM_STEPS)
        return {"params": _param_lists(model.module.parameters()), "syncs": syncs[0], "epochs": sampler.started}

    return {"ranks": [{**r, "params": _tensors_from_lists(r["params"])} for r in run_on_two_ranks(work)]}


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
        hints=("Three independent fixes: one line before the inner loop, one context manager, one division.",
               "sampler.set_epoch(epoch); DDP's no_sync() skips the all-reduce of a backward; gradients add up, so "
               "divide each micro-batch loss by accum_steps.",
               "with contextlib.nullcontext() if stepping else ddp_model.no_sync(): loss = ... / accum_steps; "
               "loss.backward()"),
        probe=_probe_ddp_accumulation,
    )
)


# --- barrier before reading rank 0's file --------------------------------------------------------------------

def barrier_model(seed: int) -> nn.Module:
    """A small ReLU MLP (3 -> 5 -> 2) seeded with `seed`."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2))


def _probe_barrier(answer: dict, *, case: Case) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "start.pt")
        torch.save(barrier_model(case.seeded(99)).state_dict(), path)  # the previous run's file, still there

        def work(rank: int) -> dict:
            model = barrier_model(case.seeded(10 + rank))  # the ranks start different
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


add(
    Drill(
        id="ddp-barrier-checkpoint",
        self_check=True,
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
        hints=("Rank 1 does not know when rank 0 has finished writing. What makes a rank wait for the others?",
               "dist.barrier() between rank 0's torch.save and every rank's torch.load."),
        probe=_probe_barrier,
    )
)


# --- disjoint shards -----------------------------------------------------------------------------------------

def shard_configs(case: Case) -> list[tuple[int, int]]:
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
        for n, world in shard_configs(case):
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


add(
    Drill(
        id="ddp-disjoint-shards",
        self_check=True,
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
        hints=("Every rank must compute the SAME permutation, then take its own part of it.",
               "torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch)), padded to a multiple of "
               "world_size, then order[rank::world_size]."),
        probe=_probe_shards,
    )
)

