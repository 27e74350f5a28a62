"""Distributed helpers: rank, world size, main-process duties, summed metrics, barriers, backend choice.

Every helper also works in a plain single process (no process group): rank 0 of a world of 1. A script
written with them runs unchanged as `python train.py`, under `torchrun --nproc-per-node=N train.py` on
one machine, and under torchrun's rendezvous on several machines: `init_distributed()` reads the
environment torchrun sets (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and does nothing
when it is absent. To run a script or a function on N processes from a notebook, see `harness.launch`.
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, DistributedSampler

BACKENDS = ("gloo", "nccl")
TORCHRUN_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
STEP_TIMEOUT_VARIABLE = "HARNESS_LAUNCH_STEP_TIMEOUT"  # the step deadline `harness.launch` gives its gloo ranks
JOIN_TIMEOUT_S = 300.0  # how long a new group waits for its slowest rank to start (imports, a busy machine)


def is_distributed() -> bool:
    """True inside an initialised process group."""
    return dist.is_available() and dist.is_initialized()


def get_rank() -> int:
    """This process's rank (0 without a process group)."""
    return dist.get_rank() if is_distributed() else 0


def get_world_size() -> int:
    """Number of processes in the group (1 without a process group)."""
    return dist.get_world_size() if is_distributed() else 1


def get_local_rank() -> int:
    """This process's rank on its own machine (LOCAL_RANK from torchrun; 0 outside torchrun).

    The local rank picks the GPU: on a machine with 8 GPUs, global ranks 8..15 of the second machine
    have local ranks 0..7 and use cuda:0..cuda:7.
    """
    return int(os.environ.get("LOCAL_RANK", "0"))


def is_main_process() -> bool:
    """True on rank 0: the process that logs, plots and writes checkpoints."""
    return get_rank() == 0


def all_reduce_sum(value: torch.Tensor) -> torch.Tensor:
    """The sum of `value` over all ranks (a copy)."""
    if not is_distributed():
        return value.clone()
    reduced = value.detach().clone()
    dist.all_reduce(reduced, op=dist.ReduceOp.SUM)
    return reduced


def barrier() -> None:
    """Wait until every rank reaches this point (a no-op in a single process)."""
    if is_distributed():
        dist.barrier()


def all_gather_int(value: int) -> list[int]:
    """`value` from every rank, indexed by rank (`[value]` without a process group)."""
    if not is_distributed():
        return [value]
    values: list[int] = [0] * get_world_size()
    dist.all_gather_object(values, value)
    return values


def default_backend(device: torch.device | str) -> str:
    """NCCL for CUDA devices, gloo otherwise."""
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def check_backend(backend: str) -> None:
    """Raise a clear error when `backend` cannot run on this machine.

    Raises:
        ValueError: an unknown backend name.
        RuntimeError: NCCL without a CUDA device (NCCL only moves tensors between GPUs).
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r} is not supported: use 'gloo' (CPU, any machine) or 'nccl' (CUDA GPUs).")
    if backend == "nccl" and not torch.cuda.is_available():
        raise RuntimeError(
            "backend 'nccl' needs CUDA GPUs and this machine has none visible to torch: "
            "use backend='gloo' on CPU (or leave backend unset to pick it from the device)."
        )


def init_distributed(backend: str | None = None, timeout_s: float | None = None) -> torch.device:
    """Join the process group torchrun describes in the environment, and return this rank's device once
    every rank has joined (`settle_group`).

    Outside torchrun (no RANK/WORLD_SIZE in the environment) nothing is initialised and the single
    process's device is returned, so the same script also runs as plain `python train.py`.

    Args:
        backend: "gloo" or "nccl"; None takes the one `harness.launch` was asked for (HARNESS_LAUNCH_BACKEND),
            else NCCL when CUDA is available, else gloo.
        timeout_s: the step deadline: how long a collective (DDP's gradient all-reduce in every step
            included) may wait for the other ranks before it fails, instead of hanging forever when a rank died,
            hangs in its step or took another code path. None: the deadline `harness.launch` gives its ranks
            (HARNESS_LAUNCH_STEP_TIMEOUT), else 300 s. Joining the group may take up to 300 s whatever it is:
            a rank still starting is not late.

    Returns:
        cuda:LOCAL_RANK under NCCL (that device is also made current), cpu under gloo.

    Raises:
        RuntimeError: torchrun's variables are incomplete, or NCCL was asked for without GPUs.
    """
    present = [name for name in TORCHRUN_VARIABLES if name in os.environ]
    if not present:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    missing = [name for name in TORCHRUN_VARIABLES if name not in os.environ]
    if missing:
        raise RuntimeError(
            f"torchrun's environment is incomplete: {', '.join(missing)} missing (found {', '.join(present)}). "
            "Start the script with torchrun (or harness.launch), or unset these variables to run one process."
        )
    backend = backend or os.environ.get("HARNESS_LAUNCH_BACKEND") or ("nccl" if torch.cuda.is_available() else "gloo")
    check_backend(backend)
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", get_local_rank())
        torch.cuda.set_device(device)
    if not is_distributed():
        if timeout_s is None:
            timeout_s = float(os.environ.get(STEP_TIMEOUT_VARIABLE, JOIN_TIMEOUT_S))
        dist.init_process_group(backend, timeout=timedelta(seconds=max(timeout_s, JOIN_TIMEOUT_S)))
        settle_group()
        if timeout_s < JOIN_TIMEOUT_S:  # every rank has joined: from here on a collective waits timeout_s at most
            _set_group_timeout(timedelta(seconds=timeout_s))
    return device


def _set_group_timeout(timeout: timedelta) -> None:
    """Give every later collective of the default group `timeout` (newer torch names this `dist.set_timeout`;
    torch 2.11, the oldest the course supports, `_set_pg_timeout`)."""
    set_timeout = getattr(dist, "set_timeout", None) or dist.distributed_c10d._set_pg_timeout
    set_timeout(timeout)


def settle_group() -> None:
    """Wait until every rank of a new process group is connected to every other.

    A rank returns from `init_process_group` once its own connections are made; if it then finishes and
    exits (a script or function with no collective), a peer still connecting fails with "Connection closed by
    peer" in gloo's connectFullMesh. After a barrier every connection is made.
    """
    if dist.get_backend() == "nccl":  # name the device: NCCL otherwise guesses it, with a warning
        dist.barrier(device_ids=[torch.cuda.current_device()])
    else:
        dist.barrier()


def cleanup_distributed() -> None:
    """Leave the process group (a no-op without one); call once at the end of a distributed script."""
    if is_distributed():
        dist.destroy_process_group()


def distributed_loader(
    dataset: Dataset,
    batch_size: int,
    shuffle: bool = True,
    seed: int = 0,
    *,
    drop_last: bool = False,
    num_workers: int = 0,
) -> DataLoader:
    """A DataLoader that gives this rank its own shard of `dataset` through a DistributedSampler.

    Each rank sees `len(dataset) / world_size` samples per epoch, in batches of `batch_size` (the per-rank
    batch: the global batch is `batch_size * world_size`). Call `loader.sampler.set_epoch(epoch)` at the
    start of every epoch, or every epoch repeats the first epoch's order. Without a process group the
    sampler is that of a world of one: the whole dataset, shuffled with `seed`.

    Args:
        dataset: the full dataset (the same on every rank).
        batch_size: samples per batch on this rank.
        shuffle: reshuffle every epoch (seeded by `seed + epoch`, identical on every rank).
        seed: shuffling seed; must be the same on every rank so that shards do not overlap.
        drop_last: drop the tail instead of padding it with repeated samples to split evenly.
        num_workers: DataLoader worker processes.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be a positive number of samples per rank, got {batch_size}.")
    sampler = DistributedSampler(
        dataset,
        num_replicas=get_world_size(),
        rank=get_rank(),
        shuffle=shuffle,
        seed=seed,
        drop_last=drop_last,
    )
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=num_workers)
