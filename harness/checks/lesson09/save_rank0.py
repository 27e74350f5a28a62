"""09-save-rank0, the probe.

Call the save on 2 ranks, each in its own folder; record the files in each folder, whether rank 0's file
existed when each rank returned, the collectives rank 1 called, and rank 0's checkpoint read back.

The verdict on the barrier must not depend on which rank the scheduler runs first, so the probe imposes the
worst schedule a correct save must survive: rank 0 lags as far as it can. It is held at the start of the save,
and again after each collective it leaves, until rank 1 has either returned or waits in a collective rank 0 has
not reached yet (from which only rank 0 can release it). A save whose barrier comes before the write, or that
has none, lets rank 1 return while rank 0 is held, before the file exists, on every run; a correct one never
does, since rank 1 then waits in the barrier until rank 0 has written.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from harness.checks.lesson09.common import MODEL_SEED, WORLD, _run_ranks, make_model
from harness.contract.case import Case
from harness.contract.registry import register

CHECKPOINT_NAME = "checkpoint.pt"

# The collectives a save may call (module attributes of torch.distributed, looked up when the student calls them).
_COLLECTIVES = ("barrier", "monitored_barrier", "all_reduce", "reduce", "broadcast", "all_gather",
                "all_gather_into_tensor", "gather", "scatter", "reduce_scatter", "reduce_scatter_tensor", "all_to_all",
                "all_to_all_single", "broadcast_object_list", "all_gather_object", "gather_object",
                "scatter_object_list")

# Rank 0 is held at most this long: only rank 1 stuck where no hook sees it (a point-to-point wait, an async
# collective's wait()) gets that far, and waits there for rank 0 anyway, so rank 0 then goes on.
_HOLD_LIMIT_S = 10.0

# The board rank 1 writes and rank 0 reads (shared memory, inherited by the forked ranks).
_INSIDE, _RETURNED = 0, 1  # the number of the collective rank 1 waits in (0: none); whether rank 1 has returned


def save_epoch(case: Case) -> int:
    """The epoch number the save is called with."""
    return (7 if case.hidden else 3) + case.seed % 89


def save_model_step(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """The one step the model takes before it is saved (the same on every rank: equal inputs, equal gradients)."""
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()


@contextmanager
def _patched_collectives(wrap: Callable[[str, Callable[..., Any]], Callable[..., Any]]) -> Iterator[None]:
    """Replace each collective of torch.distributed by wrap(name, collective) (in this forked rank only)."""
    originals = {name: getattr(dist, name) for name in _COLLECTIVES if hasattr(dist, name)}
    for name, collective in originals.items():
        setattr(dist, name, functools.wraps(collective)(wrap(name, collective)))
    try:
        yield
    finally:
        for name, collective in originals.items():
            setattr(dist, name, collective)


def _rank1_reporting(board: Any, called: list[str]) -> Callable[[str, Callable[..., Any]], Callable[..., Any]]:
    """On rank 1: each collective posts its number on the board while it waits in it."""
    def wrap(name: str, collective: Callable[..., Any]) -> Callable[..., Any]:
        def reported(*args: Any, **kwargs: Any) -> Any:
            called.append(name)
            board[_INSIDE] = len(called)
            try:
                return collective(*args, **kwargs)
            finally:
                board[_INSIDE] = 0
        return reported
    return wrap


class _LaggingRank0:
    """On rank 0: holds the rank back until rank 1 has returned or waits in a collective rank 0 has not reached."""

    def __init__(self, board: Any) -> None:
        self.board = board
        self.entered = 0  # the collectives rank 0 has entered

    def hold(self) -> None:
        deadline = time.monotonic() + _HOLD_LIMIT_S
        while not (self.board[_RETURNED] or self.board[_INSIDE] > self.entered) and time.monotonic() < deadline:
            time.sleep(0.001)

    def wrap(self, name: str, collective: Callable[..., Any]) -> Callable[..., Any]:
        def lagging(*args: Any, **kwargs: Any) -> Any:
            self.entered += 1
            result = collective(*args, **kwargs)
            self.hold()
            return result
        return lagging


def _save_worker(save_checkpoint_ddp: Callable[..., None], rank_dirs: list[str], epoch: int, model_seed: int,
                 board: Any) -> dict[str, Any]:
    """In a rank, in its own folder: step a DDP model once, save it under the lagging schedule; whether rank 0's
    file existed on return, and (rank 1) the collectives called."""
    rank = dist.get_rank()
    if rank == 1:
        board[_INSIDE] = board[_RETURNED] = 0  # a fresh board: DDP's construction below makes rank 0 wait for this
    os.chdir(rank_dirs[rank])  # a relative path lands in this rank's own folder: who wrote is visible on disk
    model = DDP(make_model(model_seed))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    save_model_step(model, optimizer)
    called: list[str] = []
    if rank == 0:
        lagging = _LaggingRank0(board)
        with _patched_collectives(lagging.wrap):
            lagging.hold()
            save_checkpoint_ddp(model, optimizer, epoch, CHECKPOINT_NAME)
    else:
        with _patched_collectives(_rank1_reporting(board, called)):
            save_checkpoint_ddp(model, optimizer, epoch, CHECKPOINT_NAME)
    existed = (Path(rank_dirs[0]) / CHECKPOINT_NAME).exists()
    if rank == 1:
        board[_RETURNED] = 1  # only after looking: rank 0, held until now, has not written since rank 1 returned
    return {"rank0_file_exists_on_return": existed, "collectives": called}


@register("09-save-rank0")
def probe_save_rank0(save_checkpoint_ddp: Callable[..., None], *, case: Case) -> dict:
    """Call the save on 2 ranks, each in its own folder, rank 0 lagging; record the files in each folder, whether
    rank 0's file existed when each rank returned, the collectives rank 1 called, and rank 0's checkpoint."""
    board = multiprocessing.RawArray("q", 2)
    with tempfile.TemporaryDirectory(prefix="check-09-save-") as tmp:
        rank_dirs = [os.path.join(tmp, f"rank{r}") for r in range(WORLD)]
        for folder in rank_dirs:
            os.makedirs(folder)
        results = _run_ranks(_save_worker, save_checkpoint_ddp, rank_dirs, save_epoch(case),
                             case.seeded(MODEL_SEED), board)
        checkpoint_path = Path(rank_dirs[0]) / CHECKPOINT_NAME
        return {
            "files": [sorted(os.listdir(folder)) for folder in rank_dirs],
            "file_existed_on_return": [result["rank0_file_exists_on_return"] for result in results],
            "rank1_collectives": results[1]["collectives"],
            "checkpoint": torch.load(checkpoint_path, weights_only=True) if checkpoint_path.is_file() else None,
        }
