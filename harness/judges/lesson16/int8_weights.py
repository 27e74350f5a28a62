"""16-int8-weights, the judge.

q int8 of the weight's shape, one scale per row equal to max|w| / 127, q = round(w / scale); zero rows
fine; the weight unchanged.
"""

from __future__ import annotations

import torch

from harness.checks.lesson16.int8_weights import case_weights
from harness.contract.case import Case
from harness.contract.compare import close_values, judged, same_values, type_name
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import WireError


def _quantisation_failure(q: torch.Tensor, scale: torch.Tensor, weight: torch.Tensor, zero: torch.Tensor) -> None:
    """Fail with the first requirement (q, scale) breaks, given they have the right dtype and shapes; `zero`
    marks the all-zero rows (1-D)."""
    amax = weight.abs().amax(dim=1, keepdim=True)
    if not bool(torch.isfinite(scale).all()) or bool((scale[zero] <= 0).any()):
        bad = int(zero.nonzero()[0, 0]) if bool(zero.any()) else 0
        fail("zero-row", observed=f"scale of the all-zero row {bad} is {float(scale[bad, 0]):.3g}",
             expected="a finite scale > 0 and q = 0 for that row",
             cause="max|w| / 127 is 0 for a row of zeros, and w / 0 is nan: give the scale a floor (clamp(min=...))",
             where="the scale computation of quantize_per_channel")
    if bool((q[zero] != 0).any()):
        values = sorted({int(v) for v in q[zero].unique().tolist()})[:4]
        fail("zero-point", observed=f"the all-zero row was quantised to {values}, with a finite scale > 0",
             expected="q = 0 for a weight of 0 (symmetric quantisation: w ≈ q * scale)",
             cause="an offset (a zero point) was added to round(w / scale): that is asymmetric quantisation, "
             "where 0 maps to the zero point; the exercise asks for the symmetric form, without one",
             where="the line that computes q in quantize_per_channel")
    nonzero = ~zero
    span = (weight.amax(dim=1, keepdim=True) - weight.amin(dim=1, keepdim=True)) / 255
    if close_values(scale[nonzero], span[nonzero].to(scale.dtype), rtol=1e-5, atol=0.0):
        fail("zero-point", observed="each row's scale is (max - min) / 255, the row's range over 255 steps",
             expected="scale = max |w| of the row / 127 (symmetric)",
             cause="the asymmetric scheme, whose scale spans the row's range and which needs a zero point; "
             "symmetric int8 uses max |w| / 127 and no offset", where="the scale computation of quantize_per_channel")
    if bool(close_values(scale[nonzero], scale[nonzero][0].expand_as(scale[nonzero]), dtype=False)):
        fail("per-tensor", observed=f"every row has the same scale {float(scale[nonzero][0, 0]):.3g}",
             expected="one scale per row, from that row's own largest |w| (rows here differ by 10^4 in size)",
             cause="the maximum was taken over the whole matrix (amax() without dim, or .max())",
             where="the scale computation of quantize_per_channel")
    want = amax / 127
    if not close_values(scale[nonzero], want[nonzero], rtol=1e-5, atol=0, dtype=False):
        ratio = float((scale[nonzero] / want[nonzero]).median())
        fail("wrong-scale", observed=f"scales are {ratio:.4g} times max|w| / 127",
             expected="scale = max |w| of the row / 127",
             cause="another divisor (128, 255) or a maximum without abs() (the row's largest positive weight)",
             where="the scale computation of quantize_per_channel")
    error = (q.double() * scale.double() - weight.double()).abs()
    if bool((error > scale.double() / 2 * (1 + 1e-4) + 1e-12).any()):
        fail("not-rounded", observed=f"a weight is {float((error / scale.double()).max()):.3g} scale steps from "
             "q * scale", expected="at most half a step: q = round(w / scale)",
             cause="w / scale was truncated toward zero (.to(torch.int8) or .int() without round) or floored",
             where="the line that computes q in quantize_per_channel")


@judges(
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
def judge_int8_weights(seen: dict, *, case: Case) -> str:
    """q int8 of the weight's shape, one scale per row equal to max|w| / 127, q = round(w / scale); zero rows
    fine; the weight unchanged."""
    for weight, result in judged(case_weights(case), seen.get("results")):
        _judge_call(weight, result)
    return ("int8 q with one scale per row (max|w| / 127) in the weight's dtype, every weight within half a step, "
            "zero rows safe, the weight unchanged")


def _judge_call(weight: torch.Tensor, result: dict) -> None:
    """Fail with the first requirement one call breaks; the values are judged on float32 weights only (a bfloat16
    division rounds before round() does, so its q may be a step off), the scale's dtype on every weight."""
    if not isinstance(result, dict):
        raise WireError("malformed observation: a call's result is not a record")
    after = result.get("weight_after")
    if not isinstance(after, torch.Tensor) or after.shape != weight.shape:
        raise WireError("malformed observation: weight_after is not the case's weight")
    if after.dtype != weight.dtype or not same_values(after, weight, dtype=False):
        fail("weight-modified", observed="the weight changed during the call", expected="the weight left as it was",
             cause="an in-place operation on weight (div_, abs_, clamp_, round_) or an assignment into it",
             where="the body of quantize_per_channel")
    returned = result.get("returned")
    if not (isinstance(returned, tuple) and len(returned) == 2):
        fail("not-int8", observed=f"quantize_per_channel returned {type_name(returned)}",
             expected="a pair (q, scale)", cause="one value is returned instead of the pair",
             where="the return statement of quantize_per_channel")
    q, scale = returned
    if not isinstance(q, torch.Tensor) or q.dtype != torch.int8 or q.shape != weight.shape:
        fail("not-int8", observed=f"q is {type_name(q)}" + (f" of dtype {q.dtype}, shape {tuple(q.shape)}"
                                                          if isinstance(q, torch.Tensor) else ""),
             expected=f"an int8 tensor of shape {tuple(weight.shape)}",
             cause="the rounded values were kept as float (a missing .to(torch.int8))"
             if isinstance(q, torch.Tensor) and q.is_floating_point() else "another dtype or shape",
             where="the line that computes q in quantize_per_channel")
    if not isinstance(scale, torch.Tensor) or not scale.is_floating_point() or scale.shape != (weight.shape[0], 1):
        shape = tuple(scale.shape) if isinstance(scale, torch.Tensor) else None
        fail("per-tensor",
             observed=f"scale is {type_name(scale)}" + (f" of shape {shape}" if shape is not None else "")
             + f" for a weight of shape {tuple(weight.shape)}",
             expected=f"a float tensor of shape ({weight.shape[0]}, 1): one scale per output row",
             cause="a single scale for the whole matrix (amax() without dim, or a Python number)"
             if shape in ((), (1,), (1, 1)) or shape is None else _shape_cause(shape, weight),
             where="the scale computation of quantize_per_channel")
    if scale.dtype != weight.dtype:
        upcast = weight.dtype == torch.bfloat16 and scale.dtype == torch.float32
        fail("wrong-scale", observed=f"scale is {scale.dtype} for a {weight.dtype} weight",
             expected=f"{weight.dtype}, the weight's dtype",
             cause="the scale was computed in float32 (an upcast such as weight.float(), or a float32 tensor in the "
             "formula) and returned so: for a bfloat16 weight it must be bfloat16, with .to(weight.dtype)"
             if upcast else "the scale was computed in or converted to another dtype (.double(), .half(), a "
             "float64 constant)", where="the scale computation of quantize_per_channel")
    if weight.dtype == torch.float32:
        _quantisation_failure(q, scale, weight, (weight == 0).all(dim=1))
    else:
        _low_precision_failure(q, scale, weight)


def _low_precision_failure(q: torch.Tensor, scale: torch.Tensor, weight: torch.Tensor) -> None:
    """The values of a low-precision call, at its precision: scales within 1% of max|w| / 127 (zero rows finite
    and > 0), every weight below 126 steps within one step of q * scale (at the top of the range a scale rounded
    down gives w / scale >= 127.5, which an unclamped int8 cast wraps: the float32 call judges that range)."""
    zero = (weight == 0).all(dim=1)
    exact = scale.double()
    want = weight.double().abs().amax(dim=1, keepdim=True) / 127
    finite = bool(torch.isfinite(exact).all()) and not bool((exact[zero] <= 0).any())
    if not finite or not close_values(exact[~zero], want[~zero], rtol=1e-2, atol=0.0):
        fail("wrong-scale", observed=f"the scales for the {weight.dtype} weight are not max|w| / 127 of each row",
             expected="the same scales as for the float32 weight, to the weight's precision",
             cause="the scale depends on the dtype: look for a constant or a floor written for float32",
             where="the scale computation of quantize_per_channel")
    error = (q.double() * exact - weight.double()).abs()
    inside = (weight.double() / exact).abs() < 126
    if bool((error[inside] > exact.expand_as(error)[inside] * (1 + 1e-2)).any()):
        fail("not-rounded", observed=f"for the {weight.dtype} weight a weight is "
             f"{float((error[inside] / exact.expand_as(error)[inside]).max()):.3g} scale steps from q * scale",
             expected="at most about half a step: q = round(w / scale)",
             cause="q depends on the dtype: look for a cast or a rounding written for float32",
             where="the line that computes q in quantize_per_channel")


def _shape_cause(shape: tuple[int, ...], weight: torch.Tensor) -> str:
    """Why a scale of `shape` (not a single value) is not (out_features, 1)."""
    if shape == (weight.shape[0],):
        return (f"keepdim=True is missing: amax(dim=1) gives shape ({weight.shape[0]},), which lines up with the "
                "weight's columns, not its rows, when you divide (here it broadcast; with more columns than rows "
                "it raises a size mismatch)")
    return "keepdim=True is missing, or the maximum was taken over another dim"
