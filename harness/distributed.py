"""Distributed helpers: rank, world size, main-process duties, averaged metrics, barriers, backend choice.

Every helper also works in a plain single process (no process group): rank 0 of a world of 1.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def is_distributed() -> bool:
    """True inside an initialised process group."""
    return dist.is_available() and dist.is_initialized()


def get_rank() -> int:
    """This process's rank (0 without a process group)."""
    return dist.get_rank() if is_distributed() else 0


def get_world_size() -> int:
    """Number of processes in the group (1 without a process group)."""
    return dist.get_world_size() if is_distributed() else 1


def is_main_process() -> bool:
    """True on rank 0: the process that logs, plots and writes checkpoints."""
    return get_rank() == 0


def all_reduce_mean(value: torch.Tensor) -> torch.Tensor:
    """The mean of `value` over all ranks (a copy; `value` itself is unchanged)."""
    if not is_distributed():
        return value.clone()
    reduced = value.detach().clone()
    dist.all_reduce(reduced, op=dist.ReduceOp.SUM)
    return reduced / get_world_size()


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


def default_backend(device: torch.device | str) -> str:
    """NCCL for CUDA devices, gloo otherwise."""
    return "nccl" if torch.device(device).type == "cuda" else "gloo"
