"""09-save-rank0, the probe.

Call the save on 2 ranks, each in its own folder; record the files in each folder, whether rank 0's file
existed when each rank returned, and rank 0's checkpoint read back.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from harness.checks.lesson09.common import MODEL_SEED, WORLD, _hang_row, _run_ranks, make_model
from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
from harness.contract.registry import register

CHECKPOINT_NAME = "checkpoint.pt"


def _save_epoch(case: Case) -> int:
    """The epoch number the save is called with."""
    return (7 if case.hidden else 3) + case.seed % 89


def _save_model_step(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """The one step the model takes before it is saved (the same on every rank: equal inputs, equal gradients)."""
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()


def _save_worker(
    save_checkpoint_ddp: Callable[..., None], rank_dirs: list[str], epoch: int, model_seed: int
) -> dict[str, Any]:
    """In a rank, in its own folder: step a DDP model once, save it; whether rank 0's file existed on return."""
    rank = dist.get_rank()
    os.chdir(rank_dirs[rank])  # a relative path lands in this rank's own folder: who wrote is visible on disk
    model = DDP(make_model(model_seed))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    _save_model_step(model, optimizer)
    if rank == 0:
        time.sleep(0.4)  # rank 0 arrives late: a rank that does not wait for its save returns before the file exists
    save_checkpoint_ddp(model, optimizer, epoch, CHECKPOINT_NAME)
    return {"rank0_file_exists_on_return": (Path(rank_dirs[0]) / CHECKPOINT_NAME).exists()}


@register(
    "09-save-rank0",
    hints=Hints(
        nudge="Only one process should write the file, and the others must not go on before it exists.",
        concept="rank 0 does the once-only work; a dist.barrier() that every rank calls holds the others until it "
        "is done",
        solution="if dist.get_rank() == 0: torch.save({'model': model.module.state_dict(), "
        "'optimizer': optimizer.state_dict(), 'epoch': epoch}, path); then dist.barrier() on every rank",
        section="5. Rank 0's duties, and barriers"),
    requires={
        "saved-on-every-rank": Requirement("only rank 0 writes", hint="Several ranks wrote the file: who should?"),
        "not-saved-on-rank0": Requirement("rank 0 writes the checkpoint at `path`",
                                          hint="Rank 0's folder has no file at the path it was given: which rank "
                                          "saved, and under which name?"),
        "missing-barrier": Requirement("no rank returns before the file is complete",
                                       hint="Rank 1 returned while rank 0 was still saving: what makes it wait?"),
        "incomplete-checkpoint": Requirement("the checkpoint holds 'model', 'optimizer' and 'epoch'",
                                             hint="A key is missing from the saved dict: compare it with the text."),
        "wrapped-state-dict": Requirement("'model' is the unwrapped model's state_dict",
                                          hint="The saved keys start with 'module.': which model's state_dict is it?"),
        "wrong-state-dict": Requirement("'model' holds the model's current state_dict",
                                        hint="'model' is not the model's state after its step: what did you save?"),
        "wrong-epoch": Requirement("'epoch' is the epoch passed in",
                                   hint="The saved epoch is not the argument: save it as it was given."),
        **_hang_row("the barrier"),
    },
)
def probe_save_rank0(save_checkpoint_ddp: Callable[..., None], *, case: Case) -> dict:
    """Call the save on 2 ranks, each in its own folder; record the files in each folder, whether rank 0's file
    existed when each rank returned, and rank 0's checkpoint read back."""
    with tempfile.TemporaryDirectory(prefix="check-09-save-") as tmp:
        rank_dirs = [os.path.join(tmp, f"rank{r}") for r in range(WORLD)]
        for folder in rank_dirs:
            os.makedirs(folder)
        results = _run_ranks(_save_worker, save_checkpoint_ddp, rank_dirs, _save_epoch(case), case.seeded(MODEL_SEED))
        checkpoint_path = Path(rank_dirs[0]) / CHECKPOINT_NAME
        return {
            "files": [sorted(os.listdir(folder)) for folder in rank_dirs],
            "file_existed_on_return": [result["rank0_file_exists_on_return"] for result in results],
            "checkpoint": torch.load(checkpoint_path, weights_only=True) if checkpoint_path.is_file() else None,
        }
