"""06-grad-norm, the probe.

Call `total_grad_norm` on each set of parameters; record what it returned and the gradients after.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch
from torch import nn

from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
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


@register(
    "06-grad-norm",
    hints=Hints(
        nudge="The total norm treats all gradients as one long vector: the square root of the sum of every "
        "gradient entry squared.",
        concept="Total norm = sqrt(sum over parameters of ||p.grad||^2), skipping parameters whose .grad is None. "
        "model.parameters() is a generator: read it once, into a list, before doing anything else with it.",
        solution="grads = [p.grad for p in parameters if p.grad is not None]\n"
        "return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))",
        section="1. Exploding gradients, seen",
    ),
    requires={
        "wrong-norm": Requirement(
            "returns the L2 norm of all gradient entries together",
            hint="Compare your result with torch.cat([g.flatten() for g in grads]).norm() on two small gradients: "
            "is yours a sum of norms, a mean, or a maximum?"),
        "generator-consumed": Requirement(
            "works when given model.parameters(), a generator that can be read only once",
            hint="Call your function on model.parameters() twice in a row and print the results: a generator is "
            "empty after its first pass. What does your code iterate more than once?"),
        "not-a-tensor": Requirement(
            "returns a tensor, not a Python number (no .item(), no float())",
            hint="Print type(total_grad_norm(model.parameters())): which call turned the tensor into a number?"),
        "not-0-dim": Requirement(
            "returns a 0-dim tensor",
            hint="Print the .shape of what you return: it should be torch.Size([]). Which operation kept a "
            "dimension (keepdim=True, unsqueeze, a reshape)?"),
        "grads-modified": Requirement(
            "leaves the gradients unchanged",
            hint="Which of your operations ends with an underscore, or writes into p.grad? Compute on new "
            "tensors instead."),
    },
)
def probe_grad_norm(total_grad_norm: Callable[[Iterable[nn.Parameter]], torch.Tensor], *, case: Case) -> dict:
    """Call `total_grad_norm` on each set of parameters; record what it returned and the gradients after."""
    def record(item: tuple[str, list[nn.Parameter], bool]) -> dict:
        _, params, as_generator = item
        got = total_grad_norm(_Holder(params).parameters()) if as_generator else total_grad_norm(list(params))
        return {"returned": got, "grads_after": [None if p.grad is None else p.grad.detach().clone() for p in params]}

    return {"results": collect(norm_cases(case), record)}
