"""09-ddp-mean, the probe.

Run ddp_mean on 2 ranks holding different values, then on 1; record what every rank got and its input afterwards.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist

from harness.checks.lesson09.common import _run_ranks
from harness.contract.case import Case
from harness.contract.registry import register


def mean_inputs(case: Case) -> list[list[torch.Tensor]]:
    """Per input, the value each rank holds: b + 1 on rank 0, -2b on rank 1, for a shifted base b that is never
    1 or -1/3 in every element (there the sum, the mean or a rank's own value would coincide)."""
    bases = [torch.tensor(3.0), torch.tensor([0.25, -2.0, 4.0], dtype=torch.float64)]
    if case.hidden:
        bases = [torch.tensor(1.5), torch.tensor([[0.75, 5.0], [-3.0, 2.5]], dtype=torch.float64)]
    shift = (case.seed % 101) / 4  # exact in float32: 0 for the visible and local cases
    pairs = [[base + shift + 1.0, (base + shift) * -2.0] for base in bases]
    # one rank, a world size other than 2 that every machine runs (harness.launch allows one gloo rank per core):
    # the mean is the value itself, and a divisor fixed at 2 halves it
    alone = torch.tensor([[2.0], [-5.0]]) if case.hidden else torch.tensor([3.0, -1.5])
    return [*pairs, [alone + shift]]


def _mean_worker(ddp_mean: Callable[[torch.Tensor], torch.Tensor], values: list[torch.Tensor]) -> dict[str, Any]:
    """In a rank: call ddp_mean on this rank's value; what it returned, and the value afterwards."""
    mine = values[dist.get_rank()].clone()
    out = ddp_mean(mine)
    return {"out": out.detach().clone() if isinstance(out, torch.Tensor) else out, "input_after": mine}


@register("09-ddp-mean")
def probe_ddp_mean(ddp_mean: Callable[[torch.Tensor], torch.Tensor], *, case: Case) -> dict:
    """Run ddp_mean on 2 ranks holding different values, then on 1 rank; record what every rank got and its input
    afterwards."""
    return {"runs": [_run_ranks(_mean_worker, ddp_mean, values, world=len(values)) for values in mean_inputs(case)]}
