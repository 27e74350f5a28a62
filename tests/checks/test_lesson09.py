"""Lesson 09's checks (DDP) reject planted bugs with their codes and accept different correct solutions.

Every check forks real gloo ranks (harness.launch.launch_forked), so these tests exercise real DDP.
"""

from __future__ import annotations

import threading
from contextlib import nullcontext

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, Sampler

from harness.checks import lesson09
from harness.checks.testing import assert_check_fails, assert_check_passes

pytestmark = pytest.mark.slow  # each check forks processes


# ---------------------------------------------------------------------------------------------- 09-ddp-mean


def mean_clone_divide(value: torch.Tensor) -> torch.Tensor:
    total = value.detach().clone()
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return total / dist.get_world_size()


def mean_gathered(value: torch.Tensor) -> torch.Tensor:
    parts = [torch.empty_like(value) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, value.contiguous())
    return torch.stack(parts).mean(dim=0)


def mean_local_only(value: torch.Tensor) -> torch.Tensor:
    return value.clone()


def mean_summed(value: torch.Tensor) -> torch.Tensor:
    total = value.clone()
    dist.all_reduce(total)
    return total


def mean_in_place(value: torch.Tensor) -> torch.Tensor:
    dist.all_reduce(value)
    value /= dist.get_world_size()
    return value.clone()


def mean_on_rank0_only(value: torch.Tensor) -> torch.Tensor:
    total = value.clone()
    dist.reduce(total, dst=0)  # only rank 0 receives the sum
    return total / dist.get_world_size()


@pytest.mark.parametrize("solution", [mean_clone_divide, mean_gathered])
def test_ddp_mean_accepts_correct_solutions(solution, capsys):
    assert_check_passes("09-ddp-mean", solution, capsys=capsys)


@pytest.mark.parametrize(
    ("solution", "code", "phrase", "hidden"),
    [
        (mean_local_only, "not-averaged", "without communicating", False),
        (mean_summed, "summed", "without dividing", False),
        (mean_in_place, "modified-input", "works in place", True),
        (mean_on_rank0_only, "wrong-mean", "rank 1", False),
    ],
)
def test_ddp_mean_rejects_planted_bugs(solution, code, phrase, hidden):
    assert_check_fails("09-ddp-mean", solution, code=code, phrase=phrase, hidden=hidden)


def mean_that_blocks_on_rank1(value: torch.Tensor) -> torch.Tensor:
    total = value.clone()
    dist.all_reduce(total)
    if dist.get_rank() == 1:
        threading.Event().wait()  # never returns, as a rank stuck waiting for a message would
    return total / dist.get_world_size()


@pytest.mark.slow
def test_a_rank_that_never_returns_is_reported_as_a_hang(monkeypatch):
    monkeypatch.setattr(lesson09, "LAUNCH_TIMEOUT_S", 4)  # the same path as 30 s, without waiting a minute
    assert_check_fails("09-ddp-mean", mean_that_blocks_on_rank1, code="hang", phrase="did not finish within 4 s, twice")


# ---------------------------------------------------------------------------------------------- 09-shard-loader


def loader_with_sampler(dataset, batch_size, *, rank, world_size, seed):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def loader_drop_last(dataset, batch_size, *, rank, world_size, seed):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=seed, drop_last=True)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=False)


def loader_plain_shuffle(dataset, batch_size, *, rank, world_size, seed):
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=torch.Generator().manual_seed(seed))


def loader_divided_batch(dataset, batch_size, *, rank, world_size, seed):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=seed)
    return DataLoader(dataset, batch_size=batch_size // world_size, sampler=sampler)


def loader_seed_ignored(dataset, batch_size, *, rank, world_size, seed):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def loader_rank_seeded(dataset, batch_size, *, rank, world_size, seed):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=seed + rank)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def loader_unshuffled(dataset, batch_size, *, rank, world_size, seed):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False, seed=seed)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


class FixedShard(Sampler[int]):
    """A hand-made shard: a seeded permutation, strided by rank, that never changes with the epoch."""

    def __init__(self, n: int, rank: int, world: int, seed: int) -> None:
        self.indices = torch.randperm(n, generator=torch.Generator().manual_seed(seed))[rank::world].tolist()

    def __iter__(self):
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)

    def set_epoch(self, epoch: int) -> None:
        """Accepted, and ignored: the bug."""


def loader_fixed_shard(dataset, batch_size, *, rank, world_size, seed):
    return DataLoader(dataset, batch_size=batch_size, sampler=FixedShard(len(dataset), rank, world_size, seed))


@pytest.mark.parametrize("solution", [loader_with_sampler, loader_drop_last])
def test_shard_loader_accepts_correct_solutions(solution, capsys):
    assert_check_passes("09-shard-loader", solution, capsys=capsys)


@pytest.mark.parametrize(
    ("solution", "code", "phrase"),
    [
        (loader_plain_shuffle, "overlapping-shards", "every rank reads the whole dataset"),
        (loader_divided_batch, "wrong-batch-size", "per-rank batch"),
        (loader_seed_ignored, "seed-ignored", "seed argument"),
        (loader_rank_seeded, "overlapping-shards", "different seeds"),
        (loader_unshuffled, "not-shuffled", "shuffle=False"),
        (loader_fixed_shard, "same-order-every-epoch", "set_epoch(1)"),
    ],
)
def test_shard_loader_rejects_planted_bugs(solution, code, phrase):
    assert_check_fails("09-shard-loader", solution, code=code, phrase=phrase)


# ---------------------------------------------------------------------------------------------- 09-train-ddp


def _loader(dataset, batch_size, seed):
    return loader_with_sampler(dataset, batch_size, rank=dist.get_rank(), world_size=dist.get_world_size(), seed=seed)


def train_reference(make_model, dataset, loss_fn, *, epochs, batch_size, lr, seed):
    loader = _loader(dataset, batch_size, seed)
    model = DDP(make_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            optimizer.step()
    return model.module.state_dict()


def train_zero_grad_after(make_model, dataset, loss_fn, *, epochs, batch_size, lr, seed):
    model = make_model()
    ddp = DDP(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)
    sampler = DistributedSampler(dataset, seed=seed)  # rank and world size read from the process group
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        ddp.train()
        for x, y in loader:
            loss = loss_fn(ddp(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    return {name: tensor.clone() for name, tensor in model.state_dict().items()}


def train_no_set_epoch(make_model, dataset, loss_fn, *, epochs, batch_size, lr, seed):
    loader = _loader(dataset, batch_size, seed)
    model = DDP(make_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(epochs):
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            optimizer.step()
    return model.module.state_dict()


def train_without_ddp(make_model, dataset, loss_fn, *, epochs, batch_size, lr, seed):
    loader = _loader(dataset, batch_size, seed)
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            optimizer.step()
    return model.state_dict()


def train_unsharded(make_model, dataset, loss_fn, *, epochs, batch_size, lr, seed):
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=torch.Generator().manual_seed(seed))
    model = DDP(make_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(epochs):
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            optimizer.step()
    return model.module.state_dict()


def train_wrapped_state(make_model, dataset, loss_fn, *, epochs, batch_size, lr, seed):
    train_reference(make_model, dataset, loss_fn, epochs=epochs, batch_size=batch_size, lr=lr, seed=seed)
    return DDP(make_model()).state_dict()


def train_scaled_lr(make_model, dataset, loss_fn, *, epochs, batch_size, lr, seed):
    return train_reference(make_model, dataset, loss_fn, epochs=epochs, batch_size=batch_size, lr=lr * 2, seed=seed)


@pytest.mark.parametrize("solution", [train_reference, train_zero_grad_after])
def test_train_ddp_accepts_correct_solutions(solution, capsys):
    assert_check_passes("09-train-ddp", solution, capsys=capsys)


@pytest.mark.parametrize(
    ("solution", "code", "phrase"),
    [
        (train_no_set_epoch, "missing-set-epoch", "set_epoch(epoch)"),
        (train_without_ddp, "ranks-differ", "not wrapped in DDP"),
        (train_unsharded, "not-sharded", "DistributedSampler"),
        (train_wrapped_state, "wrapped-state-dict", "model.module.state_dict()"),
        (train_scaled_lr, "not-ddp-equivalent", "one process with batch 16"),
    ],
)
def test_train_ddp_rejects_planted_bugs(solution, code, phrase):
    assert_check_fails("09-train-ddp", solution, code=code, phrase=phrase)


# ---------------------------------------------------------------------------------------------- 09-save-rank0


def save_guarded(model, optimizer, epoch, path):
    if dist.get_rank() == 0:
        torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, path)
    dist.barrier()


def save_with_helpers(model, optimizer, epoch, path):
    from harness.distributed import barrier, is_main_process

    state = {"epoch": epoch, "optimizer": optimizer.state_dict(), "model": model.module.state_dict()}
    if is_main_process():
        torch.save(state, path)
    barrier()


def save_every_rank(model, optimizer, epoch, path):
    torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, path)
    dist.barrier()


def save_without_barrier(model, optimizer, epoch, path):
    if dist.get_rank() == 0:
        torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, path)


def save_wrapper_state(model, optimizer, epoch, path):
    if dist.get_rank() == 0:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, path)
    dist.barrier()


def save_model_only(model, optimizer, epoch, path):
    if dist.get_rank() == 0:
        torch.save({"model": model.module.state_dict()}, path)
    dist.barrier()


def save_on_last_rank(model, optimizer, epoch, path):
    if dist.get_rank() == dist.get_world_size() - 1:
        torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, path)
    dist.barrier()


@pytest.mark.parametrize("solution", [save_guarded, save_with_helpers])
def test_save_rank0_accepts_correct_solutions(solution, capsys):
    assert_check_passes("09-save-rank0", solution, capsys=capsys)


@pytest.mark.parametrize(
    ("solution", "code", "phrase"),
    [
        (save_every_rank, "saved-on-every-rank", "only rank 0 writes"),
        (save_without_barrier, "missing-barrier", "dist.barrier()"),
        (save_wrapper_state, "wrapped-state-dict", "module."),
        (save_model_only, "incomplete-checkpoint", "'epoch'"),
        (save_on_last_rank, "not-saved-on-rank0", "ranks [1]"),
    ],
)
def test_save_rank0_rejects_planted_bugs(solution, code, phrase):
    assert_check_fails("09-save-rank0", solution, code=code, phrase=phrase)


# ---------------------------------------------------------------------------------------------- 09-no-sync


def accumulate_nullcontext(model, optimizer, micro_batches, loss_fn):
    for i, (x, y) in enumerate(micro_batches):
        last = i == len(micro_batches) - 1
        with nullcontext() if last else model.no_sync():
            (loss_fn(model(x), y) / len(micro_batches)).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def accumulate_split(model, optimizer, micro_batches, loss_fn):
    *early, (x_last, y_last) = micro_batches
    scale = 1.0 / len(micro_batches)
    optimizer.zero_grad(set_to_none=True)
    with model.no_sync():
        for x, y in early:
            (loss_fn(model(x), y) * scale).backward()
    (loss_fn(model(x_last), y_last) * scale).backward()
    optimizer.step()


def accumulate_always_sync(model, optimizer, micro_batches, loss_fn):
    for x, y in micro_batches:
        (loss_fn(model(x), y) / len(micro_batches)).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def accumulate_never_sync(model, optimizer, micro_batches, loss_fn):
    with model.no_sync():
        for x, y in micro_batches:
            (loss_fn(model(x), y) / len(micro_batches)).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def accumulate_unscaled(model, optimizer, micro_batches, loss_fn):
    for i, (x, y) in enumerate(micro_batches):
        with nullcontext() if i == len(micro_batches) - 1 else model.no_sync():
            loss_fn(model(x), y).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


@pytest.mark.parametrize("solution", [accumulate_nullcontext, accumulate_split])
def test_no_sync_accepts_correct_solutions(solution, capsys):
    assert_check_passes("09-no-sync", solution, capsys=capsys)


@pytest.mark.parametrize(
    ("solution", "code", "phrase"),
    [
        (accumulate_always_sync, "missing-no-sync", "micro-batch's backward synchronises"),
        (accumulate_never_sync, "never-synced", "outside no_sync"),
        (accumulate_unscaled, "wrong-update", "divide each micro-batch loss"),
    ],
)
def test_no_sync_rejects_planted_bugs(solution, code, phrase):
    assert_check_fails("09-no-sync", solution, code=code, phrase=phrase)
