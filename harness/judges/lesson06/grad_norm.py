"""06-grad-norm, the judge.

`total_grad_norm(parameters)` is the L2 norm of all gradients together, a 0-dim tensor; gradients kept.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from harness.checks.lesson06.common import flat_grads
from harness.checks.lesson06.grad_norm import norm_cases
from harness.contract.case import Case
from harness.contract.compare import judged, same_values, type_name
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import WireError


def _generator_cause(value: float, grads: Sequence[torch.Tensor | None]) -> str | None:
    """Why a generator call returned `value` when the same parameters as a list gave the right norm; None when
    `value` is not the norm of some trailing part of the parameters (what a partly read generator leaves)."""
    present = [g for g in grads if g is not None]
    for skipped in range(1, len(grads) + 1):
        rest = [g for g in grads[skipped:] if g is not None]
        norm = float(flat_grads(rest).norm()) if rest else 0.0
        if abs(value - norm) <= 1e-4 * max(norm, 1e-12) + 1e-12:
            saw = f"none of the {len(grads)} parameters" if not rest else \
                f"only the parameters after the first {skipped} of {len(grads)}"
            return (f"your function saw {saw} ({len(rest)} of {len(present)} gradients): the generator was read "
                    "before the pass that adds the squares (a first loop, next(iter(parameters)), "
                    "sum(1 for _ in parameters))")
    return None


@judges(
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
def judge_grad_norm(seen: dict, *, case: Case) -> str:
    """`total_grad_norm(parameters)` is the L2 norm of all gradients together, a 0-dim tensor; gradients kept."""
    for (description, params, as_generator), result in judged(norm_cases(case), seen["results"]):
        got, after = result["returned"], result["grads_after"]
        before = [p.grad for p in params]
        if not isinstance(after, list) or len(after) != len(before):
            raise WireError("malformed observation: grads_after does not match the parameters")
        if any(b is not None and not same_values(a, b, dtype=False)
               for a, b in zip(after, before, strict=True)):
            fail("grads-modified", observed=f"the gradients changed during the call on {description}",
                 expected="gradients left as they were",
                 cause="an in-place operation on p.grad (a method ending in _, such as mul_, pow_, clamp_, or an "
                 "assignment into p.grad)", where="the body of total_grad_norm")
        if not isinstance(got, torch.Tensor):
            fail(
                "not-a-tensor",
                observed=f"returned {type_name(got)} for {description}",
                expected="a 0-dim tensor (torch.nn.utils.clip_grad_norm_ returns one too): no host sync",
                cause="the tensor was turned into a Python number (.item(), float(), or a Python sum of numbers), "
                "which waits for the device every step",
                where="the return statement of total_grad_norm",
            )
        want = float(flat_grads(before).norm())
        value = float(got.detach()) if got.numel() == 1 else float("nan")
        if not abs(value - want) <= 1e-4 * want:
            per_param = sum(float(g.norm()) for g in before if g is not None)
            generator_cause = _generator_cause(value, before) if as_generator else None
            if generator_cause:
                code, cause = "generator-consumed", generator_cause
            elif abs(value - per_param) < 1e-4 * per_param:
                code, cause = "wrong-norm", "the per-parameter norms were added; the total norm is the norm of all " \
                    "entries together"
            else:
                code, cause = "wrong-norm", "a different formula: a mean instead of a sum of squares, a maximum, a " \
                    "missing square root, or another norm"
            fail(
                code,
                observed=f"total norm {value:.6g} for {description}" if got.numel() == 1
                else f"a tensor of shape {tuple(got.shape)} for {description}",
                expected=f"{want:.6g}" + (" (the same parameters as a list gave it)" if as_generator else ""),
                cause=cause,
                where="the computation in total_grad_norm",
            )
        if got.dim() != 0:
            fail("not-0-dim", observed=f"a tensor of shape {tuple(got.shape)} for {description}",
                 expected="a 0-dim tensor, shape torch.Size([])",
                 cause="an operation kept a dimension (keepdim=True, unsqueeze, reshape, a stack of one value)",
                 where="the last operation of total_grad_norm")
    return "the total L2 norm over all gradients as a 0-dim tensor, from a list or from model.parameters(), " \
        "parameters without .grad skipped, gradients unchanged"
