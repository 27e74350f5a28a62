"""16-int8-weights, the probe.

Call `quantize_per_channel(weight)` on each case's weights; record what it returned and the weight after the call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
from harness.contract.instruments import collect
from harness.contract.registry import register


def case_weights(case: Case) -> list[torch.Tensor]:
    """The weights of each call: a float32 matrix whose rows differ in size by orders of magnitude, with one
    all-zero row (a pruned or dead unit), square so that a scale without keepdim broadcasts instead of raising
    (its shape then tells the mistake); then the same matrix in bfloat16 (the scale must keep the weight's dtype).
    Hidden: a larger matrix and, last, one with more columns than rows."""
    generator = torch.Generator().manual_seed(case.seeded(1800 + (5 if case.hidden else 0)))
    weights = []
    for rows, cols, zero in [(16, 16, 11), (16, 33, 5)] if case.hidden else [(6, 6, 3)]:
        magnitude = 10.0 ** torch.linspace(-3, 1, rows).unsqueeze(1)
        weight = torch.randn(rows, cols, generator=generator) * magnitude
        weight[zero] = 0.0
        weights.append(weight)
    weights.insert(1, weights[0].to(torch.bfloat16))
    return weights


@register(
    "16-int8-weights",
    hints=Hints(
        nudge="One scale per output row: the row's largest |w| divided by 127; q = round(w / scale), clamped to "
        "[-127, 127], as int8. A row of zeros needs a scale that is not 0.",
        concept="Symmetric per-channel int8: each output row r gets scale_r = max|W[r]| / 127, so its largest "
        "weight maps to ±127 and every weight is off by at most scale_r / 2 after rounding. One scale for the "
        "whole matrix would round the small rows to 0.",
        solution="scale = weight.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127\n"
        "return torch.round(weight / scale).clamp(-127, 127).to(torch.int8), scale",
        section="4. int8 weights",
    ),
    requires={
        "not-int8": Requirement(
            "returns q as an int8 tensor of the weight's shape",
            hint="Print q.dtype and q.shape: which conversion is missing at the end?"),
        "per-tensor": Requirement(
            "one scale per output row: scale has shape (out_features, 1)",
            hint="Print scale.shape: does each row of the weight get its own scale? amax takes a dim."),
        "wrong-scale": Requirement(
            "scale of row r = max |weight[r]| / 127, in the weight's dtype (bfloat16 for a bfloat16 weight)",
            hint="Which value of the row must map to ±127, and what do you divide it by? Print scale.dtype for a "
            "bfloat16 weight."),
        "not-rounded": Requirement(
            "q = round(weight / scale): every weight within scale / 2 of q * scale",
            hint="What does .to(torch.int8) do with 2.7, and with -2.7? Which function rounds to the nearest?"),
        "zero-point": Requirement(
            "symmetric: no zero point, so a weight of 0 is q = 0 and weight ≈ q * scale",
            hint="What does your q hold for a weight of exactly 0? Symmetric int8 adds no offset: the scale comes "
            "from max |w| alone, not from the row's range max - min."),
        "zero-row": Requirement(
            "a row of zeros gets zeros and a finite scale > 0 (no division by zero)",
            hint="What is 0 / 0 in floating point, and what does it become as int8? Give the scale a floor."),
        "weight-modified": Requirement(
            "leaves the weight unchanged",
            hint="Which of your operations ends with an underscore, or writes into weight?"),
    },
)
def probe_int8_weights(quantize_per_channel: Callable[[torch.Tensor], Any], *, case: Case) -> dict:
    """Call `quantize_per_channel(weight)` on each case's weights; record what it returned and the weight after
    the call."""
    def record(weight: torch.Tensor) -> dict:
        returned = quantize_per_channel(weight)
        return {"returned": tuple(returned) if isinstance(returned, (tuple, list)) else returned,
                "weight_after": weight.detach().clone()}

    return {"results": collect(case_weights(case), record)}
