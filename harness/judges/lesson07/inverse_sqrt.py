"""07-inverse-sqrt, the judge.

TODO(07-inverse-sqrt): what the judge verifies, in a sentence.
"""

from __future__ import annotations

import torch

from harness.checks.lesson07.inverse_sqrt import task_inputs
from harness.contract.case import Case
from harness.contract.compare import close_values, type_name
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges


def reference(inputs: torch.Tensor) -> torch.Tensor:
    """TODO(07-inverse-sqrt): the expected result, recomputed by the judge with its own torch."""
    return inputs * 2


@judges(
    "07-inverse-sqrt",
    hints=Hints(
        nudge="TODO(07-inverse-sqrt): the first hint, a nudge",
        concept="TODO(07-inverse-sqrt): the idea behind the exercise, and why it matters",
        solution="TODO(07-inverse-sqrt): the solution, in a line or two",
        section="8. Warm-up without an end: the inverse square root",
    ),
    requires={
        # One entry per requirement the exercise's text states, keyed by the failure code its violation gets.
        "wrong-output": Requirement(
            "TODO(07-inverse-sqrt): returns the inputs doubled, as the text states it",
            hint="TODO(07-inverse-sqrt): what a student reads after this failure (a nudge, never the solution)"),
    },
)
def judge_inverse_sqrt(seen: dict, *, case: Case) -> str:
    """TODO(07-inverse-sqrt): what is verified, in a sentence."""
    got, want = seen.get("returned"), reference(task_inputs(case))
    if not close_values(got, want):
        fail("wrong-output", observed=f"inverse_sqrt returned {type_name(got)}"
             + (f" of shape {tuple(got.shape)}, {got.dtype}" if isinstance(got, torch.Tensor) else ""),
             expected=f"the inputs doubled: shape {tuple(want.shape)}, {want.dtype}",
             cause="TODO(07-inverse-sqrt): the likely causes, as candidates", where="the return statement of inverse_sqrt")
    return "TODO(07-inverse-sqrt): what was verified, in a few words"
