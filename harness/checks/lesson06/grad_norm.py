"""06-grad-norm, the probe.

Call `total_grad_norm` on each set of parameters; record what it returned and the gradients after.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch
from torch import nn

from harness.contract.case import Case
from harness.contract.instruments import collect
from harness.contract.registry import register


class _Holder(nn.Module):
    """A module that holds the case's parameters, so the check can pass `holder.parameters()` as students will."""

    def __init__(self, params: Sequence[nn.Parameter]) -> None:
        super().__init__()
        self.params = nn.ParameterList(params)


def norm_cases(case: Case) -> list[tuple[str, list[nn.Parameter], bool]]:
    """(description, parameters, passed as a generator) of each call: a list, model.parameters(), and
    parameters some of which have no .grad, visible and hidden alike (hidden: other shapes and values)."""
    generator = torch.Generator().manual_seed(case.seeded(61 if case.hidden else 60))
    shapes = [(4, 3), (3,), (2, 5), (7,)] if case.hidden else [(4, 3), (3,), (2, 2)]
    params = [nn.Parameter(torch.randn(s, generator=generator)) for s in shapes]
    for i, p in enumerate(params):  # hidden: the largest gradient first, so losing the first parameter shows
        p.grad = torch.randn(p.shape, generator=generator) * (2.0 ** (len(params) - 1 - i) if case.hidden else 10.0**i)
    holey = [nn.Parameter(torch.zeros(3)), *params, nn.Parameter(torch.zeros(2, 2))]
    return [("a list of parameters", params, False),
            ("model.parameters() (a generator: it can be read only once)", params, True),
            ("model.parameters() where some parameters have no .grad", holey, True)]


@register("06-grad-norm")
def probe_grad_norm(total_grad_norm: Callable[[Iterable[nn.Parameter]], torch.Tensor], *, case: Case) -> dict:
    """Call `total_grad_norm` on each set of parameters; record what it returned and the gradients after."""
    def record(item: tuple[str, list[nn.Parameter], bool]) -> dict:
        _, params, as_generator = item
        got = total_grad_norm(_Holder(params).parameters()) if as_generator else total_grad_norm(list(params))
        return {"returned": got, "grads_after": [None if p.grad is None else p.grad.detach().clone() for p in params]}

    return {"results": collect(norm_cases(case), record)}
