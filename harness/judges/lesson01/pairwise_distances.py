"""01-pairwise-distances, the judge.

`pairwise_distances(x, y)` is the (n, m) matrix of Euclidean distances, in the inputs' dtype, finite,
computed without a Python loop.
"""

from __future__ import annotations

import torch

from harness.checks.lesson01.pairwise_distances import distance_inputs
from harness.contract.case import Case
from harness.contract.compare import malformed, max_difference
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.judges.lesson01.common import _require_tensor


def _reference_distances(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x.double()[:, None, :] - y.double()[None, :, :]).pow(2).sum(-1).sqrt()


# More torch calls than this in one pairwise_distances call means a Python loop: a broadcast needs about ten.
_LOOP_CALLS = 25


@judges("01-pairwise-distances", nonfinite=('results/*',), hints=Hints(
    nudge="Give x a new axis so that x is (n, 1, d) and y is (1, m, d): their difference broadcasts to (n, m, d).",
    concept="Broadcasting aligns shapes from the right and stretches the axes of size 1, so one subtraction "
            "computes every x_i - y_j; reduce over the feature axis only. If you use |x|^2 - 2 x.y + |y|^2, clamp "
            "it at 0 before the square root.",
    solution="return (x[:, None, :] - y[None, :, :]).pow(2).sum(dim=-1).sqrt()",
    section="3. Broadcasting"),
    requires={
        "not-a-tensor": Requirement("returns a torch.Tensor", hint="Keep the result a tensor: no .tolist()."),
        "wrong-shape": Requirement("returns the (n, m) matrix: one distance per (row of x, row of y)",
                                   hint="Write the shape of each intermediate for x (5, 3) and y (7, 3)."),
        "dtype-changed": Requirement("keeps the inputs' dtype",
                                     hint="Call it on two float64 tensors and print the result's dtype."),
        "non-finite": Requirement("the distance of a point to itself is 0, not nan",
                                  hint="Can a squared distance computed by your formula come out slightly "
                                       "negative? What is the square root of that?"),
        "wrong-values": Requirement("D[i, j] is the Euclidean distance ||x[i] - y[j]||",
                                    hint="Check D[0, 0] by hand against (x[0] - y[0]).norm()."),
        "python-loop": Requirement("uses no Python loop (one broadcast operation)",
                                   hint="How many tensor operations does your function run for 30 points? One "
                                        "broadcast subtraction can replace every iteration."),
    })
def judge_pairwise_distances(seen: dict, *, case: Case) -> str:
    """`pairwise_distances(x, y)` is the (n, m) matrix of Euclidean distances, in the inputs' dtype, finite,
    computed without a Python loop."""
    inputs = distance_inputs(case)
    calls = seen["calls"]
    if not (isinstance(calls, list) and len(calls) == len(inputs) and all(type(c) is int for c in calls)):
        malformed("the call counts")
    for (x, y), result, count in zip(inputs, seen["results"], calls, strict=True):
        result = _require_tensor(result, "pairwise_distances", "the return statement")
        n, m = x.shape[0], y.shape[0]
        if count > _LOOP_CALLS:
            fail("python-loop", observed=f"pairwise_distances on x {tuple(x.shape)} and y {tuple(y.shape)} ran "
                 f"{count} torch operations",
                 expected=f"a handful (a broadcast computes all {n * m} distances in about ten)",
                 cause="a Python loop over the rows of x or y (or over both), running small tensor operations at "
                       "each step",
                 where="replace the loop by x[:, None, :] - y[None, :, :], which is (n, m, d)")
        if tuple(result.shape) != (n, m):
            fail("wrong-shape", observed=f"shape {tuple(result.shape)} for x {tuple(x.shape)} and y {tuple(y.shape)}",
                 expected=f"({n}, {m}): one distance per (row of x, row of y)",
                 cause="the new axes are in the wrong place, or the sum runs over the wrong dimension",
                 where="x[:, None, :] - y[None, :, :] is (n, m, d); reduce over the last dimension only")
        if result.dtype != x.dtype:
            fail("dtype-changed", observed=f"{x.dtype} inputs gave a {result.dtype} result",
                 expected=f"a {x.dtype} result",
                 cause="a .float()/.double() conversion or a new tensor of the default dtype",
                 where="keep every intermediate in the inputs' dtype")
        if not torch.isfinite(result).all():
            fail("non-finite", observed="nan or inf distances (for example between identical points)",
                 expected="finite distances, 0 between a point and itself",
                 cause="the |x|^2 - 2 x.y + |y|^2 form rounding to a tiny negative number (sqrt of it is nan), "
                       "or a division by a distance that is 0",
                 where="clamp the squared distances at 0 (clamp_min(0)) before sqrt, or use the difference form")
        reference = _reference_distances(x, y)
        scale = float(torch.cat([x, y]).double().norm(dim=1).max())
        atol = (3e-3 if x.dtype == torch.float32 else 1e-6) * max(scale, 1.0)
        error = max_difference(result, reference)
        if error > atol:
            squared = max_difference(result, reference.pow(2)) <= atol * max(scale, 1.0)
            fail("wrong-values", observed=f"largest error {error:.3g} against the Euclidean distance"
                 + (" (you returned squared distances)" if squared else ""),
                 expected=f"errors below {atol:.2g}",
                 cause="the square root is missing" if squared else
                 "the difference or the reduction is over the wrong axis",
                 where="sqrt of the sum over the feature axis of (x_i - y_j)^2")
    return "(n, m) Euclidean distances by broadcasting (no loop), dtype kept, finite for identical points"
