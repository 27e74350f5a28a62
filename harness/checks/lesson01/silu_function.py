"""01-silu-function, the probe.

Record forward outputs, the input as left and the gradients for each input, then gradcheck in float64
and the float64 forward and backward (stopping where the output is unusable or the input changed).
"""

from __future__ import annotations

from typing import Any

import torch

from harness.checks.lesson01.common import _randn
from harness.contract.case import Case
from harness.contract.forbidden import CallRecorder
from harness.contract.registry import register


def silu_inputs(case: Case) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(x, grad_output) pairs in float32: moderate and large magnitudes, a single value (other shapes hidden)."""
    shapes = [((3, 4), 4), ((17,), 20), ((1,), 20)] if not case.hidden else [((2, 3, 5), 20), ((1,), 20), ((17,), 4)]
    return [(_randn(*shape, seed=case.seeded(index + (50 if case.hidden else 0))) * scale,
             _randn(*shape, seed=case.seeded(index + 200)))
            for index, (shape, scale) in enumerate(shapes)]


class _Context:
    """A stand-in for autograd's ctx, to call a Function's forward and backward directly (backward then runs
    where the call recorder sees it, which autograd's engine does not)."""

    needs_input_grad = (True,)

    def save_for_backward(self, *tensors: torch.Tensor) -> None:
        self.saved_tensors = tensors

    def mark_non_differentiable(self, *tensors: torch.Tensor) -> None:
        """Accepted and ignored."""

    def set_materialize_grads(self, value: bool) -> None:
        """Accepted and ignored."""


def _calls_of_function(silu_function: type, x: torch.Tensor, grad_output: torch.Tensor) -> dict[str, str]:
    """The torch calls of the student's forward and backward, called directly with a stand-in ctx. A Function
    that does not run that way (an unusual use of ctx) records what it called before it stopped: the record only
    serves to forbid calls, so it can only cost points."""
    ctx = _Context()
    with CallRecorder() as calls:
        try:
            with torch.no_grad():
                silu_function.forward(ctx, x)
                silu_function.backward(ctx, grad_output)
        except Exception:  # noqa: BLE001 (see the docstring: the real runs report the student's errors)
            pass
    return calls.seen


def silu_float64_input(case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, grad_output) in float64, for gradcheck and the precision of forward and backward."""
    shape = (4, 3) if not case.hidden else (2, 6)
    return (_randn(*shape, seed=case.seeded(77), dtype=torch.float64),
            _randn(*shape, seed=case.seeded(78), dtype=torch.float64))


@register("01-silu-function")
def probe_silu_function(silu_function: type, *, case: Case) -> dict:
    """Record forward outputs, the input as left and the gradients for each input, then gradcheck in float64
    and the float64 forward and backward (stopping where the output is unusable or the input changed)."""
    if not (isinstance(silu_function, type) and issubclass(silu_function, torch.autograd.Function)):
        return {"is_function": False, "what": repr(silu_function)[:200]}
    runs: list[dict] = []
    observation: dict[str, Any] = {"is_function": True, "runs": runs}
    for x, grad_output in silu_inputs(case):
        before = x.clone()
        x.requires_grad_()
        y = silu_function.apply(x)
        runs.append({"y": y, "x_after": x.detach().clone()})
        if not isinstance(y, torch.Tensor) or y.shape != x.shape or not torch.equal(x.detach(), before):
            return observation
        runs[-1]["grad"] = torch.autograd.grad(y, x, grad_output)[0]
    x64, grad_output64 = silu_float64_input(case)
    observation["calls"] = _calls_of_function(silu_function, x64.clone(), grad_output64)
    x64.requires_grad_()
    observation["gradcheck"] = torch.autograd.gradcheck(silu_function.apply, (x64,), eps=1e-6, atol=1e-5,
                                                        raise_exception=False)
    y64 = silu_function.apply(x64)
    observation["y64"] = y64
    observation["grad64"] = torch.autograd.grad(y64, x64, grad_output64)[0]
    return observation
