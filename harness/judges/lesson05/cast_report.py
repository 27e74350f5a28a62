"""05-cast-report, the judge.

Overflow and underflow counts and the worst relative error equal the reference's; the input is kept.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.checks.lesson05.cast_report import cast_cases
from harness.contract.case import Case
from harness.contract.compare import judged, same_values, type_name
from harness.contract.compare import number as _number
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.recorded import recorded
from harness.contract.registry import judges
from harness.judges.lesson05.common import _name


@recorded
def reference_cast_report(x: torch.Tensor, dtype: torch.dtype) -> dict[str, float | int]:
    """What casting float32 `x` to `dtype` loses: overflows, underflows, worst relative rounding error."""
    y = x.to(dtype).float()
    overflow = torch.isfinite(x) & torch.isinf(y)
    underflow = (x != 0) & (y == 0)
    kept = torch.isfinite(y) & (y != 0) & (x != 0)
    rel = ((y[kept] - x[kept]).abs() / x[kept].abs()).max() if kept.any() else torch.tensor(0.0)
    return {"overflow": int(overflow.sum()), "underflow": int(underflow.sum()), "max_rel_error": float(rel)}


def _close(observed: float, want: float) -> bool:
    return abs(observed - want) <= 1e-3 * want + 1e-9


@recorded  # the larger of the two is the answer's max_rel_error: withheld from the student course too
def _signed_rel_errors(x: torch.Tensor, dtype: torch.dtype) -> list[float]:
    """The max of (y - x) / x and of (x - y) / x over the kept values: what a relative error without abs() gives."""
    y = x.to(dtype).float()
    kept = torch.isfinite(y) & (y != 0) & (x != 0)
    if not kept.any():
        return []
    signed = (y[kept] - x[kept]) / x[kept]
    return [float(signed.max()), float((-signed).max())]


@judges(
    "05-cast-report",
    hints=Hints(
        nudge="Cast to the 16-bit dtype, then back to float32 before comparing: differences computed in 16 bits "
        "are rounded too. torch.isinf, torch.isfinite and boolean masks do the counting.",
        concept="Overflow: finite before, inf after. Underflow: nonzero before, exactly 0 after (zeros do not "
        "count). The relative error is taken only where both values are finite and nonzero.",
        solution="y = x.to(dtype).float(); overflow = (isfinite(x) & isinf(y)).sum(); underflow = ((x != 0) & "
        "(y == 0)).sum(); kept = isfinite(y) & (y != 0) & (x != 0); max of |y - x| / |x| over kept, or 0.0",
        section="1. Three formats, one trade-off",
    ),
    requires={
        "input-modified": Requirement("leaves x unchanged",
                                      hint="Which operation of yours writes into x (a method ending in _, an "
                                      "assignment x[...] = ...)?"),
        "missing-key": Requirement("returns a dict with 'overflow', 'underflow' and 'max_rel_error'",
                                   hint="Print the keys of the dict you return and compare their spelling with the "
                                   "exercise's."),
        "wrong-overflow": Requirement("counts the finite values that became +-inf",
                                      hint="Which values count: those that are inf after the cast, or those that "
                                      "became inf because of it?"),
        "wrong-underflow": Requirement("counts the nonzero values that became exactly 0",
                                       hint="Does a value that was already 0 before the cast count as underflow?"),
        "wrong-rel-error": Requirement("reports the largest relative error, in float32, over the values finite "
                                       "and nonzero before and after, or 0.0 when there are none",
                                       hint="In which dtype do you subtract? And which entries do you leave out?"),
    },
)
def judge_cast_report(seen: dict, *, case: Case) -> str:
    """Overflow and underflow counts and the worst relative error equal the reference's; the input is kept."""
    for (x, dtype), result in judged(cast_cases(case), seen["results"]):
        signed = _signed_rel_errors(x, dtype)  # on every case: the release records what the tree needs
        _compare_cast_report(result["returned"], reference_cast_report(x, dtype), signed, result["input_after"], x,
                             dtype)
    return "overflow and underflow counts and the worst relative rounding error match, for bf16 and fp16"


def _compare_cast_report(got: Any, want: dict, signed: list[float], x: Any, original: torch.Tensor,
                         dtype: torch.dtype) -> None:
    if not (isinstance(x, torch.Tensor) and x.shape == original.shape and same_values(x, original, dtype=False)):
        fail(
            "input-modified",
            observed="the tensor passed in was changed by the call",
            expected="the input left as it was",
            cause="an in-place operation on x (x.copy_, x[...] = ..., x.abs_())",
            where="the operations applied to x inside cast_report",
        )
    if not isinstance(got, dict) or set(want) - set(got):
        fail(
            "missing-key",
            observed=f"returned {type_name(got)} with keys {sorted(got) if isinstance(got, dict) else '-'}",
            expected="a dict with keys 'overflow', 'underflow' and 'max_rel_error'",
            cause="a key is misspelt or missing",
            where="the dict cast_report returns",
        )
    for key, code, why in (
        ("overflow", "wrong-overflow", "count finite inputs that become +-inf (fp16's largest value is 65504)"),
        ("underflow", "wrong-underflow",
         "count nonzero inputs that become exactly 0 (inputs that were 0 do not count)"),
    ):
        if _number(got[key]) != want[key]:
            fail(
                code,
                observed=f"{key} = {got[key]} for {_name(dtype)} on a tensor of {original.numel()} values",
                expected=f"{key} = {want[key]}",
                cause=why,
                where=f"the '{key}' computation in cast_report",
            )
    observed = _number(got["max_rel_error"])
    if observed is None or not _close(observed, want["max_rel_error"]):
        if observed is not None and any(_close(observed, value) for value in signed):
            fail(
                "wrong-rel-error",
                observed=f"max_rel_error = {observed:.3g} for {_name(dtype)}, the largest *signed* relative error",
                expected=f"max_rel_error = {want['max_rel_error']:.3g}, the largest |y - x| / |x|",
                cause="the relative error without abs(): (y - x) / x is negative where the cast rounded toward 0, "
                "so its max misses the largest errors",
                where="the relative-error line of cast_report",
                hint="Take .abs() of the difference and of x before dividing.",
            )
        fail(
            "wrong-rel-error",
            observed=f"max_rel_error = {observed:.3g} for {_name(dtype)}" if observed is not None
            else f"max_rel_error = {got['max_rel_error']!r}, not a number",
            expected=f"max_rel_error = {want['max_rel_error']:.3g}",
            cause=(
                "the difference is computed in 16 bits (cast back with .float() first), or entries that "
                "overflowed, underflowed or were 0 are included"
            ),
            where="the relative-error line of cast_report",
        )
