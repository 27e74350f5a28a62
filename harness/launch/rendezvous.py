"""A rendezvous no other group can meet: a TCPStore served by the launching process on a port the kernel picked.

Choosing a free port and binding it later leaves a window in which another group (another launch, another
test worker) takes it, and two groups meet ("Connection closed by peer" in gloo's connectFullMesh). Here the
launcher creates the store on port 0 before it forks the ranks: the port is bound, so reserved, for as long
as the launch lives, and the ranks join through it (`join_group`), which returns only once every rank is
connected to every other: a rank that finished without a collective and exited would otherwise cut off a peer
still connecting, the same "Connection closed by peer". A group that still fails to form (a
dropped connection on a machine under heavy load, a rank that died or hung before it joined) failed before the
launched code ran: the launchers start it again on a fresh store.
"""

from __future__ import annotations

from datetime import timedelta

import torch.distributed as dist

from harness.distributed import settle_group

HOST = "127.0.0.1"


def reserve_store(world_size: int) -> dist.TCPStore:
    """In the launcher, before starting the ranks: a store on a port the kernel picked, held until it is freed."""
    return dist.TCPStore(HOST, 0, world_size=world_size + 1, is_master=True, wait_for_workers=False)


def join_group(port: int, rank: int, world_size: int, timeout: timedelta) -> None:
    """In a rank: join the gloo process group of the launcher's store on `port`; returns once every rank has."""
    store = dist.TCPStore(HOST, port, world_size=world_size + 1, is_master=False, timeout=timeout)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size, timeout=timeout)
    settle_group()
