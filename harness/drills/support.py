"""Small tools the drill checks share: seeded inputs, tensor comparison, multiple-choice answers."""

from __future__ import annotations

import torch

from harness.checks.core import fail


def assert_close(name: str, got: torch.Tensor, want: torch.Tensor, *, atol: float, rtol: float, where: str,
                 cause: str = "the computation differs from the reference") -> None:
    """Fail with a teaching message unless `got` matches `want` in shape and value within tolerances."""
    if not isinstance(got, torch.Tensor):
        fail("not-a-tensor", observed=f"{name} returned {type(got).__name__}", expected="a torch.Tensor",
             cause="returning a Python number or list", where=where)
    if got.shape != want.shape:
        fail("wrong-shape", observed=f"{name} has shape {tuple(got.shape)}", expected=f"shape {tuple(want.shape)}",
             cause="a reduction over the wrong dimension, or a lost keepdim", where=where)
    if not torch.isfinite(got).all() and torch.isfinite(want).all():
        fail("not-finite", observed=f"{name} contains inf or nan", expected="finite values",
             cause="overflow: exp of a large input, or log of zero", where=where)
    if not torch.allclose(got.double(), want.double(), atol=atol, rtol=rtol):
        worst = (got.double() - want.double()).abs().max().item()
        fail("wrong-value", observed=f"{name} differs from the reference by up to {worst:.3g}",
             expected=f"agreement within atol={atol}, rtol={rtol}", cause=cause, where=where)


def check_choice(namespace: dict, correct: str, choices: str, explanation: str) -> str:
    """Check a multiple-choice answer `answer = "x"` against the correct letter."""
    answer = namespace.get("answer")
    if not isinstance(answer, str) or answer.strip().lower() not in choices:
        fail("no-choice", observed=f"answer = {answer!r}", expected=f"one of {', '.join(repr(c) for c in choices)}",
             cause="the starter's answer was not replaced", where="the line `answer = ...`")
    if answer.strip().lower() != correct:
        fail("wrong-choice", observed=f"you chose {answer!r}", expected="another choice",
             cause="run the experiment (`harness drill experiment <id>`) and read what it prints",
             where="the prompt's choices")
    return explanation
