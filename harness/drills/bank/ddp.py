"""Drills on DDP: metrics across ranks, DistributedSampler epochs, what DDP averages. Real gloo processes."""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset

from harness.checks.core import fail
from harness.drills.core import Drill, add
from harness.drills.support import multiple_choice, run_on_two_ranks


def _check_global_accuracy(ns: dict) -> str:
    global_accuracy = ns["global_accuracy"]
    local = {0: (torch.tensor(9.0), torch.tensor(10.0)), 1: (torch.tensor(10.0), torch.tensor(30.0))}
    got = run_on_two_ranks(lambda rank: float(global_accuracy(*local[rank])))
    want = 19.0 / 40.0
    if got[0] != got[1]:
        fail("ranks-disagree", observed=f"rank 0 reports {got[0]:.4f}, rank 1 reports {got[1]:.4f}",
             expected=f"both report {want:.4f}", cause="the value was computed from local counts only",
             where="all_reduce the counts before dividing")
    if abs(got[0] - want) > 1e-6:
        fail("mean-of-ratios" if abs(got[0] - (0.9 + 1 / 3) / 2) < 1e-6 else "wrong-value",
             observed=f"global accuracy {got[0]:.4f}", expected=f"{want:.4f} = (9 + 10) / (10 + 30)",
             cause="averaging per-rank accuracies weights a rank with 10 samples like one with 30",
             where="all_reduce the correct and total counts (SUM), then divide")
    return "all-reduced counts: every rank reports the exact global accuracy"


add(
    Drill(
        id="ddp-global-accuracy",
        title="A DDP-safe accuracy",
        kind="write",
        topics=("ddp",),
        difficulty=2,
        prompt="Inside an initialised process group, write global_accuracy(correct, total): the accuracy over all "
        "ranks, where correct and total are this rank's counts (tensors). Ranks may hold different numbers of samples.",
        entry="global_accuracy",
        starter="import torch\nimport torch.distributed as dist\n\n\ndef global_accuracy(correct, total):\n"
        "    raise NotImplementedError\n",
        solution=(
            "import torch\nimport torch.distributed as dist\n\n\ndef global_accuracy(correct, total):\n"
            "    counts = torch.stack([correct, total]).double()\n    dist.all_reduce(counts, op=dist.ReduceOp.SUM)\n"
            "    return counts[0] / counts[1]\n"
        ),
        hints=("Averaging ratios is wrong when ranks have different sample counts.",
               "all_reduce (SUM) the stacked [correct, total], then divide."),
        check=_check_global_accuracy,
        wrong_answers=(
            "import torch\n\ndef global_accuracy(correct, total):\n    return correct / total\n",
            "import torch\nimport torch.distributed as dist\n\ndef global_accuracy(correct, total):\n"
            "    acc = (correct / total).clone()\n    dist.all_reduce(acc)\n    return acc / dist.get_world_size()\n",
        ),
    )
)

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


def _check_set_epoch(ns: dict) -> str:
    epoch_orders = ns["epoch_orders"]
    dataset = TensorDataset(torch.arange(40))
    per_rank = [epoch_orders(dataset, 3, rank, 2) for rank in (0, 1)]
    if per_rank[0][0] == per_rank[0][1] == per_rank[0][2]:
        fail("missing-set-epoch", observed="rank 0 saw the same order in epochs 0, 1 and 2",
             expected="a new shuffle each epoch", cause="DistributedSampler shuffles with seed + epoch, and the epoch "
             "stays 0 unless you call sampler.set_epoch(epoch)",
             where="sampler.set_epoch(epoch) at the start of each epoch")
    for epoch in range(3):
        if set(per_rank[0][epoch]) & set(per_rank[1][epoch]):
            fail("ranks-overlap", observed=f"ranks share samples in epoch {epoch}", expected="disjoint shards",
                 cause="different seeds on different ranks", where="use the same seed on every rank")
    if epoch_orders(dataset, 3, 0, 2) != per_rank[0]:
        fail("not-reproducible", observed="two calls gave different orders", expected="the same orders for a seed",
             cause="the seed is not used", where="DistributedSampler(..., seed=seed)")
    return "a new, reproducible shuffle each epoch, disjoint across ranks"


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
        solution=_SET_EPOCH_STARTER.replace("    for epoch in range(epochs):\n",
                                            "    for epoch in range(epochs):\n        sampler.set_epoch(epoch)\n"),
        hints=("The sampler shuffles with seed + something. What is that something, and who changes it?",
               "sampler.set_epoch(epoch) at the start of every epoch."),
        check=_check_set_epoch,
        wrong_answers=(_SET_EPOCH_STARTER.replace("    for epoch in range(epochs):\n",
                                                  "    for epoch in range(epochs):\n        sampler.set_epoch(0)\n"),
                       _SET_EPOCH_STARTER.replace("shuffle=True, seed=seed", "shuffle=True, seed=seed + rank").replace(
                           "    for epoch in range(epochs):\n",
                           "    for epoch in range(epochs):\n        sampler.set_epoch(epoch)\n")),
    )
)


def _ddp_gradients_experiment() -> None:
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    def work(rank: int) -> list[float]:
        torch.manual_seed(0)
        model = DDP(nn.Linear(2, 1))
        x = torch.full((1, 2), float(rank + 1))  # different data on each rank
        model(x).sum().backward()
        return model.module.weight.grad.flatten().tolist()

    grads = run_on_two_ranks(work)
    print("local gradients would be [1, 1] on rank 0 and [2, 2] on rank 1; "
          f"after backward under DDP both hold {grads[0]}")
    print("DDP all-reduces gradients (averaging them) bucket by bucket during backward; parameters never move.")


add(
    multiple_choice(
        id="ddp-what-is-averaged",
        title="What does DDP synchronise?",
        topics=("ddp",),
        difficulty=2,
        prompt="What does DistributedDataParallel communicate during training?\n"
        "  a) it averages the parameters after every optimizer step\n"
        "  b) it all-reduces (averages) the gradients in buckets during backward, "
        "overlapping communication with computation\n"
        "  c) it sends every batch to rank 0, which computes the loss\n  d) nothing until the end of the epoch\n",
        correct="b",
        explanation="gradients are all-reduced in buckets during backward",
        hints=("Parameters start identical (broadcast at construction). What must stay identical after each step?",
               "If the gradients are identical on every rank, so are the updates."),
        wrong=("a", "c"),
        experiment=_ddp_gradients_experiment,
    )
)
