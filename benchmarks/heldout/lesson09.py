"""Lesson 09 held-out entries (written from the exercise text only)."""

from entry import Entry

PRELUDE = '''
import os
import tempfile
from contextlib import ExitStack, nullcontext
from pathlib import Path
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, Subset, TensorDataset
from harness.checks import check, hint
from harness.repro import seed_everything
seed_everything(0)
'''

TD = "def train_ddp(make_model, dataset, loss_fn, *, epochs, batch_size, lr, seed):\n"
AC = "def accumulate_step(model, optimizer, micro_batches, loss_fn):\n"

ENTRIES = [
    Entry("09-ddp-mean", "mistake", "all_reduce on value itself",
          "all_reduce works in place: the caller's value is overwritten by the sum", '''
def ddp_mean(value):
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value / dist.get_world_size()
''', ("ddp_mean",)),
    Entry("09-ddp-mean", "mistake", "forgot to divide",
          "returns the sum over ranks, not the mean", '''
def ddp_mean(value):
    total = value.clone()
    dist.all_reduce(total)
    return total
''', ("ddp_mean",)),
    Entry("09-ddp-mean", "mistake", "only rank 0 averages (it is the one that prints)",
          ("the collective runs inside if rank == 0: the other ranks never join (deadlock), others get their own"
           " value"), '''
def ddp_mean(value):
    total = value.clone()
    if dist.get_rank() == 0:
        dist.all_reduce(total)
        return total / dist.get_world_size()
    return total
''', ("ddp_mean",)),
    Entry("09-ddp-mean", "mistake", "divided by a hard-coded 2",
          "divides by 2 instead of dist.get_world_size(): wrong for other world sizes", '''
def ddp_mean(value):
    total = value.clone()
    dist.all_reduce(total)
    return total / 2
''', ("ddp_mean",)),
    Entry("09-shard-loader", "mistake", "DistributedSampler(dataset, rank, world_size) positionally",
          "positional order is (num_replicas, rank): rank and world_size swapped", '''
def make_ddp_loader(dataset, batch_size, *, rank, world_size, seed):
    sampler = DistributedSampler(dataset, rank, world_size, shuffle=True, seed=seed)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)
''', ("make_ddp_loader",)),
    Entry("09-shard-loader", "mistake", "seed not passed to the sampler",
          "the sampler shuffles with its default seed 0, ignoring seed", '''
def make_ddp_loader(dataset, batch_size, *, rank, world_size, seed):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)
''', ("make_ddp_loader",)),
    Entry("09-shard-loader", "mistake", "global batch size in the loader",
          "batch_size * world_size per rank: the per-rank batch is world_size times too big", '''
def make_ddp_loader(dataset, batch_size, *, rank, world_size, seed):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
    return DataLoader(dataset, batch_size=batch_size * world_size, sampler=sampler)
''', ("make_ddp_loader",)),
    Entry("09-shard-loader", "mistake", "strided Subset with a shuffling loader",
          "a Subset with shuffle=True: no sampler.set_epoch, shards fixed, shuffle not from seed", '''
def make_ddp_loader(dataset, batch_size, *, rank, world_size, seed):
    shard = Subset(dataset, list(range(rank, len(dataset), world_size)))
    return DataLoader(shard, batch_size=batch_size, shuffle=True, generator=torch.Generator().manual_seed(seed))
''', ("make_ddp_loader",)),
    Entry("09-train-ddp", "mistake", "returned the wrapper's state_dict",
          "keys start with module.: the DDP wrapper's state_dict, not the unwrapped model's", TD + '''
    sampler = DistributedSampler(dataset, shuffle=True, seed=seed)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)
    model = DDP(make_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            optimizer.step()
    return model.state_dict()
''', ("train_ddp",)),
    Entry("09-train-ddp", "mistake", "no set_epoch",
          "sampler.set_epoch never called: every epoch has the same order", TD + '''
    sampler = DistributedSampler(dataset, shuffle=True, seed=seed)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)
    model = DDP(make_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for epoch in range(epochs):
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            optimizer.step()
    return model.module.state_dict()
''', ("train_ddp",)),
    Entry("09-train-ddp", "mistake", "forward through model.module",
          "calls ddp.module(x): bypasses DDP, gradients are never all-reduced, ranks diverge", TD + '''
    sampler = DistributedSampler(dataset, shuffle=True, seed=seed)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)
    model = DDP(make_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model.module(x), y).backward()
            optimizer.step()
    return model.module.state_dict()
''', ("train_ddp",)),
    Entry("09-train-ddp", "mistake", "linear scaling rule applied",
          "lr multiplied by the world size: not the lr asked for", TD + '''
    sampler = DistributedSampler(dataset, shuffle=True, seed=seed)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)
    model = DDP(make_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=lr * dist.get_world_size())
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            optimizer.step()
    return model.module.state_dict()
''', ("train_ddp",)),
    Entry("09-save-rank0", "mistake", "every rank saves",
          "no rank check: each rank writes the file", '''
def save_checkpoint_ddp(model, optimizer, epoch, path):
    torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, path)
    dist.barrier()
''', ("save_checkpoint_ddp",)),
    Entry("09-save-rank0", "mistake", "no barrier",
          "other ranks return before rank 0's file is complete", '''
def save_checkpoint_ddp(model, optimizer, epoch, path):
    if dist.get_rank() == 0:
        torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, path)
''', ("save_checkpoint_ddp",)),
    Entry("09-save-rank0", "mistake", "saved the wrapper",
          "model.state_dict() of the DDP wrapper: keys prefixed with module.", '''
def save_checkpoint_ddp(model, optimizer, epoch, path):
    if dist.get_rank() == 0:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, path)
    dist.barrier()
''', ("save_checkpoint_ddp",)),
    Entry("09-save-rank0", "mistake", "barrier only on the other ranks",
          "the barrier is inside else: rank 0 never reaches it, the others wait forever (or mismatch)", '''
def save_checkpoint_ddp(model, optimizer, epoch, path):
    if dist.get_rank() == 0:
        torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, path)
    else:
        dist.barrier()
''', ("save_checkpoint_ddp",)),
    Entry("09-no-sync", "mistake", "no_sync around every micro-batch",
          "the last backward is also inside no_sync: gradients never all-reduced, ranks diverge", AC + '''
    for x, y in micro_batches:
        with model.no_sync():
            (loss_fn(model(x), y) / len(micro_batches)).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
''', ("accumulate_step",)),
    Entry("09-no-sync", "mistake", "no no_sync at all",
          "every backward all-reduces: k all-reduces per step instead of one", AC + '''
    for x, y in micro_batches:
        (loss_fn(model(x), y) / len(micro_batches)).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
''', ("accumulate_step",)),
    Entry("09-no-sync", "mistake", "loss not divided",
          "the accumulated gradient is the sum over micro-batches, k times the mean", AC + '''
    last = len(micro_batches) - 1
    for i, (x, y) in enumerate(micro_batches):
        with (nullcontext() if i == last else model.no_sync()):
            loss_fn(model(x), y).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
''', ("accumulate_step",)),
    Entry("09-no-sync", "mistake", "synchronised on the first micro-batch",
          "the first backward is outside no_sync, the later ones inside: the all-reduce misses later gradients",
          AC + '''
    for i, (x, y) in enumerate(micro_batches):
        with (nullcontext() if i == 0 else model.no_sync()):
            (loss_fn(model(x), y) / len(micro_batches)).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
''', ("accumulate_step",)),
    Entry("09-ddp-mean", "correct", "all_gather then mean", "", '''
def ddp_mean(value):
    parts = [torch.empty_like(value) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, value.contiguous())
    return torch.stack(parts).mean(dim=0)
''', ("ddp_mean",)),
    Entry("09-shard-loader", "correct", "positional arguments in the right order", "", '''
def make_ddp_loader(dataset, batch_size, *, rank, world_size, seed):
    return DataLoader(dataset, batch_size, sampler=DistributedSampler(dataset, world_size, rank, True, seed))
''', ("make_ddp_loader",)),
    Entry("09-no-sync", "correct", "ExitStack entering no_sync except on the last", "", AC + '''
    n = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        with ExitStack() as stack:
            if i < n - 1:
                stack.enter_context(model.no_sync())
            loss_fn(model(x), y).div(n).backward()
    optimizer.step()
    for p in model.parameters():
        p.grad = None
''', ("accumulate_step",)),
]
