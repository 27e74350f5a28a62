"""What this machine can run, checked before a launch starts: the world size per backend, and a free port."""

from __future__ import annotations

import errno
import os
import socket

import torch


def max_world_size(backend: str) -> int:
    """The largest world size this machine runs: one process per GPU (NCCL) or per CPU core (gloo)."""
    if backend == "nccl":
        return torch.cuda.device_count()
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def check_world_size(nproc: int, backend: str) -> None:
    """Raise ValueError unless `nproc` is a positive number of processes that this machine runs with `backend`."""
    if not isinstance(nproc, int) or nproc < 1:
        raise ValueError(f"nproc must be a positive number of processes, got {nproc!r}.")
    limit = max_world_size(backend)
    if nproc > limit:
        unit = "GPUs" if backend == "nccl" else "CPU cores"
        raise ValueError(
            f"nproc={nproc} is more than this machine runs with {backend}: it has {limit} {unit}. "
            f"Use nproc<={limit}; to go beyond one machine, start torchrun on each machine "
            "(see the README's multi-node command)."
        )


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when nothing listens on `port` (we can bind it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError as error:
            if error.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def check_port(port: int) -> None:
    """Raise ValueError unless `port` is an unprivileged port that nothing on this machine listens on."""
    if not 1024 <= port <= 65535:
        raise ValueError(f"port {port} is outside 1024..65535: pick an unprivileged port, or leave port=None.")
    if not port_is_free(port):
        raise ValueError(
            f"port {port} is already in use on this machine (another launch, a notebook server, or a "
            "leftover process). Pick another port, or leave port=None and a free one is chosen."
        )
