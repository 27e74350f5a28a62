"""What several training-loop drill groups share: the recorded optimizer steps, checked, and the gradient check."""

from __future__ import annotations

from typing import Any

import torch

from harness.contract.compare import close_tensors, malformed
from harness.contract.failure import fail
from harness.contract.wire import describe


def checked_tensors(value: Any, n: int, what: str, *, none_ok: bool = False) -> list:
    """`value` checked to be a list of `n` tensors (None allowed where `none_ok`); malformed otherwise."""
    if not isinstance(value, list) or len(value) != n:
        malformed(f"{what}: expected a list of {n} tensors")
    for item in value:
        if not (isinstance(item, torch.Tensor) or (none_ok and item is None)):
            malformed(f"{what}: expected tensors, got {describe(item)}")
    return value


def validated_steps(seen: dict, n_params: int) -> list[dict]:
    """The recorded optimizer steps, each checked to hold `n_params` gradients and parameters; malformed otherwise."""
    steps = seen.get("steps")
    if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
        malformed("steps missing")
    for step in steps:
        checked_tensors(step.get("grads"), n_params, "a step's gradients", none_ok=True)
        checked_tensors(step.get("params"), n_params, "a step's parameters")
    return steps


# Why a loss came back as something other than one number, when it does.
NOT_A_LOSS = "returning the loss of the wrong object, or a whole batch of values"


def check_step_gradient(k: int, got: list, want: list, where: str) -> None:
    """The gradient the optimizer saw at step k (1-based) against the reference gradient of batch k."""
    if all(g is None for g in got):
        fail("step-before-backward", observed=f"at optimizer step {k} every parameter's .grad was None",
             expected=f"the gradient of batch {k}",
             cause="optimizer.step() ran before loss.backward() (or zero_grad ran between backward and step): "
             "the step had no gradient to use", where=where)
    if any(g is None for g in got) or not close_tensors(got, want, atol=1e-6, rtol=1e-4, dtype=False):
        fail("missing-zero-grad", observed=f"the gradient the optimizer used at step {k} is not the gradient of "
             f"batch {k} alone", expected=f"only batch {k}'s gradient at step {k}",
             cause=f"gradients accumulate in .grad: without zero_grad once per batch, step {k} uses the sum of "
             "the earlier batches' gradients too", where=where)
