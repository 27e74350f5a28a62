"""07-inverse-sqrt, the probe.

TODO(07-inverse-sqrt): what the probe calls and what it records, in a sentence.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from harness.contract.case import Case
from harness.contract.registry import register


def task_inputs(case: Case) -> torch.Tensor:
    """The case's inputs, built alike by the probe and the judge (hidden cases: other shapes)."""
    generator = torch.Generator().manual_seed(case.seeded(8849 + (1 if case.hidden else 0)))
    rows, columns = (7, 5) if case.hidden else (4, 3)
    return torch.randn(rows, columns, generator=generator)


@register("07-inverse-sqrt")
def probe_inverse_sqrt(inverse_sqrt: Callable[..., Any], *, case: Case) -> dict:
    """Call `inverse_sqrt` on the case's inputs; record what it returned (data only, never the expected value)."""
    return {"returned": inverse_sqrt(task_inputs(case))}
