"""04-running-mean, the probe.

Feed one instance the case's values (parts of a graph, as fresh losses are), a second one a single 1.0,
and a third one values on a device it did not expect (meta: it holds no data, so it cannot be read).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from harness.checks.lesson04.common import META, one_thread
from harness.contract.case import Case
from harness.contract.errors import explain
from harness.contract.instruments import (
    HostSyncCounter,
)
from harness.contract.registry import register
from harness.contract.wire import type_name


def running_mean_inputs(case: Case) -> tuple[list[torch.Tensor], list[int]]:
    """The values and sample counts fed to update(); both end with a smaller batch and hold a batch of one."""
    generator = torch.Generator().manual_seed(case.seeded(7 if case.hidden else 3))
    counts = [5, 32, 32, 1, 17] if case.hidden else [32, 32, 1, 8]
    return [torch.rand((), generator=generator) * 4 for _ in counts], counts


@register("04-running-mean")
@one_thread()
def probe_running_mean(cls: type, *, case: Case) -> dict:
    """Feed one instance the case's values (parts of a graph, as fresh losses are), a second one a single 1.0,
    and a third one values on a device it did not expect (meta: it holds no data, so it cannot be read)."""
    values, counts = running_mean_inputs(case)
    first, second = cls(), cls()
    leaf = torch.ones((), requires_grad=True)
    with HostSyncCounter() as syncs:
        for value, n in zip(values, counts, strict=True):
            first.update(value * leaf, n)  # a value that is part of a graph, as a fresh loss is
        result = first.compute()
    second.update(torch.tensor(1.0), 1)
    return {"syncs": syncs.count, "sync_calls": sorted(set(syncs.calls)), "result": result, "fresh": second.compute(),
            "other_device": _result_device(lambda: _fed(cls(), values, counts, META).compute())}


def _fed(meter: Any, values: list[torch.Tensor], counts: list[int], device: torch.device) -> Any:
    """`meter` after one update per value, each value moved to `device`."""
    for value, n in zip(values, counts, strict=True):
        meter.update(value.to(device), n)
    return meter


def _result_device(run: Callable[[], Any]) -> dict[str, str]:
    """The device of the tensor `run` returns, or what it raised (explained) or returned instead."""
    try:
        result = run()
    except Exception as error:  # the judge reports it after the failures that explain it better
        return {"raised": explain(error)[:2000]}
    return {"device": f"a tensor on {result.device}" if isinstance(result, torch.Tensor) else f"a {type_name(result)}"}
