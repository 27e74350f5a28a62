"""09-no-sync, the probe.

Run the accumulation on 2 ranks; record DDP's all-reduces (counted by a comm hook) and the parameters.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from harness.checks.lesson09.common import MODEL_SEED, _run_ranks, detached_state, make_model
from harness.contract.case import Case
from harness.contract.registry import register


def accumulation_settings(case: Case) -> list[tuple[int, int, int]]:
    """(micro-batches per step, optimizer steps, data seed) of each run."""
    settings = [(3, 2, 5), (2, 3, 9)] if case.hidden else [(4, 2, 0)]
    return [(micro, steps, case.seeded(seed)) for micro, steps, seed in settings]


def rank_micro_batches(seed: int, step: int, rank: int, micro: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The micro-batches of one rank at one optimizer step."""
    generator = torch.Generator().manual_seed(seed + 1000 * step + rank)
    return [(torch.randn(4, 4, generator=generator), torch.randn(4, 1, generator=generator)) for _ in range(micro)]


def _accumulate_worker(
    accumulate_step: Callable[..., None], micro: int, steps: int, seed: int, model_seed: int
) -> dict[str, Any]:
    """In a rank: run the accumulation steps on a DDP model; its parameters and the all-reduces DDP made."""
    rank = dist.get_rank()
    model = DDP(make_model(model_seed))
    reductions = {"count": 0}
    forwards = {"count": 0}  # forwards in the current optimizer step
    synced_after: list[int] = []  # per all-reduce: how many forwards of its step had run (which micro-batch)

    def count_forward(module: nn.Module, args: Any) -> None:
        forwards["count"] += 1

    def counting_allreduce(state, bucket):  # no annotations: DDP checks them, and this module's are strings
        reductions["count"] += 1
        synced_after.append(forwards["count"])
        buffer = bucket.buffer().div_(dist.get_world_size())
        return dist.all_reduce(buffer, async_op=True).get_future().then(lambda fut: fut.value()[0])

    model.register_comm_hook(None, counting_allreduce)
    model.module.register_forward_pre_hook(count_forward)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        forwards["count"] = 0
        accumulate_step(model, optimizer, rank_micro_batches(seed, step, rank, micro), nn.functional.mse_loss)
    return {"state": detached_state(model.module.state_dict()), "reductions": reductions["count"],
            "synced_after": synced_after}


@register("09-no-sync")
def probe_no_sync(accumulate_step: Callable[..., None], *, case: Case) -> dict:
    """Run the accumulation on 2 ranks; record DDP's all-reduces (counted by a comm hook) and the parameters."""
    model_seed = case.seeded(MODEL_SEED)
    return {"runs": [_run_ranks(_accumulate_worker, accumulate_step, micro, steps, seed, model_seed)
                     for micro, steps, seed in accumulation_settings(case)]}
