"""The judge's vocabulary: every observed number and tensor is compared through these, and nothing else.

Type, shape and dtype come first, values second. Each comparison is named for what it compares and passes
only when the relation positively holds: `abs(got - want) <= tol`, never `not abs(got - want) > tol`, so a
NaN (or anything that is not a number) can never satisfy one. Where a task expects a NaN (a diverged run
that must report NaN), `expected_nan=True` asks for NaN exactly where the reference has it.

Like PrairieLearn's `Feedback.check_*` and minitorch's single `assert_close`: judges never write a private
`_close`. Predicates return bool; the judge chooses the failure code and the teaching message.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NoReturn, TypeVar

import torch

from harness.contract.failure import RAISED, CheckFailed, fail
from harness.contract.wire import Opaque, WireError, type_name

__all__ = [
    "close_norm", "close_number", "close_scaled", "close_state", "close_tensors", "close_values", "fail_raised",
    "int_list", "is_tensor_like", "isclose_number", "isclose_numbers", "judged", "malformed", "matching_tensors",
    "max_difference", "max_state_difference", "number", "numbers", "real", "same_number", "same_values", "tensor",
    "tensor_dict", "tensor_list", "type_name",
]

T = TypeVar("T")


# ----------------------------------------------------------------------------------------------- types
def real(value: Any) -> float | None:
    """`value` as a float when it is a real number or a one-element real tensor, NaN and infinity included;
    None for anything else (a bool, a meta or complex tensor, a tensor of several elements).

    For a returned value that is judged even when it is not finite (a diverged run's loss, which must match
    the reference's NaN); `number` when only a finite number will do.
    """
    if isinstance(value, (bool, Opaque)):
        return None
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.is_complex() or value.device.type == "meta":
            return None
        return float(value.detach())  # detached: converting a live tensor prints no warning
    return float(value) if isinstance(value, (int, float)) else None


def number(value: Any) -> float | None:
    """`value` as a float when it is a finite number or a one-element real tensor; None for anything else."""
    value = real(value)
    return value if value is not None and math.isfinite(value) else None


def numbers(value: Any) -> list[float] | None:
    """A list or tuple of finite numbers as floats; None when any item is not one."""
    if not isinstance(value, (list, tuple)):
        return None
    floats = [number(v) if not isinstance(v, torch.Tensor) else None for v in value]
    return None if any(f is None for f in floats) else floats  # type: ignore[return-value]


def is_tensor_like(got: Any, want: torch.Tensor, *, dtype: bool = True) -> bool:
    """`got` is a real tensor with `want`'s shape (and dtype, unless `dtype=False`)."""
    return (isinstance(got, torch.Tensor) and got.device.type != "meta" and got.shape == want.shape
            and (not dtype or got.dtype == want.dtype))


# ---------------------------------------------------------------------------------------------- numbers
def close_number(got: Any, want: float, *, rtol: float = 1e-6, atol: float = 1e-12) -> bool:
    """`got` is a finite number within `atol + rtol * |want|` of `want`."""
    value = number(got) if not isinstance(got, torch.Tensor) else None
    return value is not None and math.isfinite(want) and abs(value - want) <= atol + rtol * abs(want)


def isclose_number(got: Any, want: float, *, rel_tol: float = 1e-6, abs_tol: float = 1e-12,
                   expected_nan: bool = False) -> bool:
    """`got` is a real number (bool excluded) `math.isclose` to `want`: within `rel_tol` times the larger of the
    two magnitudes, or within `abs_tol`.

    Symmetric, unlike `close_number` (relative to the reference only). A NaN is never close to anything; with
    `expected_nan`, a NaN `want` asks for a NaN.
    """
    if not isinstance(got, (int, float)) or isinstance(got, bool):
        return False
    if math.isnan(want):
        return expected_nan and math.isnan(got)
    return math.isclose(got, want, rel_tol=rel_tol, abs_tol=abs_tol)


def isclose_numbers(got: Any, want: Sequence[float], *, rel_tol: float = 1e-6, abs_tol: float = 1e-12) -> bool:
    """`got` is a list or tuple of `len(want)` numbers, each `isclose_number` to its counterpart."""
    return (isinstance(got, (list, tuple)) and len(got) == len(want)
            and all(isclose_number(g, w, rel_tol=rel_tol, abs_tol=abs_tol) for g, w in zip(got, want, strict=True)))


def same_number(got: Any, want: float) -> bool:
    """`got` is `want` but for float rounding: `isclose_number` with `math.isclose`'s own tolerances (rel_tol=1e-9,
    abs_tol=0), for a number the student's code passes on or stores rather than computes. NaN is never the same."""
    return isclose_number(got, want, rel_tol=1e-9, abs_tol=0.0)


# ---------------------------------------------------------------------------------------------- tensors
def _nan_where_expected(got: torch.Tensor, want: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Both tensors with the reference's NaN positions removed, or None when `got` has NaN elsewhere or lacks
    one the reference has."""
    expected = torch.isnan(want)
    if not torch.equal(torch.isnan(got), expected):
        return None
    return got[~expected], want[~expected]


def close_values(got: Any, want: torch.Tensor, *, rtol: float = 1e-5, atol: float = 1e-8, dtype: bool = True,
                 expected_nan: bool = False) -> bool:
    """Elementwise `|got - want| <= atol + rtol * |want|` (torch.allclose), after type, shape and dtype.

    Args:
        got: the observed value.
        want: the reference.
        dtype: require `got.dtype == want.dtype` (False compares values in float64 whatever the dtypes).
        expected_nan: the reference holds NaN on purpose: `got` must hold NaN at exactly those positions.
    """
    if not is_tensor_like(got, want, dtype=dtype):
        return False
    if not (got.is_floating_point() or got.is_complex()) and not (want.is_floating_point() or want.is_complex()):
        return bool(torch.equal(got, want))
    a, b = got.detach().double(), want.detach().double()
    if expected_nan:
        kept = _nan_where_expected(a, b)
        if kept is None:
            return False
        a, b = kept
    return bool(torch.allclose(a, b, rtol=rtol, atol=atol, equal_nan=False))


def close_scaled(got: Any, want: torch.Tensor, *, tol: float = 1e-5, dtype: bool = True) -> bool:
    """Elementwise `|got - want| <= tol * (1 + |want|)`: relative for large values, absolute near zero."""
    return close_values(got, want, rtol=tol, atol=tol, dtype=dtype)


def close_norm(got: Any, want: torch.Tensor, *, rel: float = 1e-4, floor: float = 1e-9, dtype: bool = False) -> bool:
    """The whole tensor within a relative distance: `||got - want|| <= rel * ||want|| + floor`.

    For results whose elements may each move by rounding (a sum over many terms, another summation order)
    while the tensor as a whole must match.
    """
    if not is_tensor_like(got, want, dtype=dtype):
        return False
    a, b = got.detach().double(), want.detach().double()
    distance = float(torch.linalg.vector_norm(a - b)) if a.numel() else 0.0
    scale = float(torch.linalg.vector_norm(b)) if b.numel() else 0.0
    return math.isfinite(distance) and math.isfinite(scale) and distance <= rel * scale + floor


def same_values(got: Any, want: torch.Tensor, *, dtype: bool = True, expected_nan: bool = False) -> bool:
    """Bit-for-bit equal: the same type, shape, dtype (unless `dtype=False`) and values (NaN never equals).

    With `expected_nan`, a floating reference holds NaN on purpose (a saved state that is itself NaN): `got` must
    hold NaN at exactly those positions and equal the reference everywhere else.
    """
    if not is_tensor_like(got, want, dtype=dtype):
        return False
    if expected_nan and got.is_floating_point() and want.is_floating_point():
        kept = _nan_where_expected(got.detach(), want.detach())
        if kept is None:
            return False
        got, want = kept
    return bool(torch.equal(got, want)) and not bool(
        (got.is_floating_point() or got.is_complex()) and torch.isnan(got).any())


def max_difference(got: torch.Tensor, want: torch.Tensor) -> float:
    """The largest elementwise |got - want| (inf when the shapes differ or any value is not finite), for messages."""
    if got.shape != want.shape:
        return math.inf
    if got.numel() == 0:
        return 0.0
    difference = (got.detach().double() - want.detach().double()).abs()
    return float(difference.nan_to_num(nan=math.inf).max())


def max_state_difference(got: Any, want: Mapping[str, torch.Tensor]) -> float:
    """The largest `max_difference` over a state dict's tensors (0.0 for an empty one); inf when `got` is not a
    dict with `want`'s keys, each a tensor of its counterpart's shape and dtype."""
    if not isinstance(got, dict) or got.keys() != want.keys() or not all(
            is_tensor_like(got[key], value) for key, value in want.items()):
        return math.inf
    return max((max_difference(got[key], value) for key, value in want.items()), default=0.0)


def close_tensors(got: Any, want: Sequence[torch.Tensor], **tolerance: Any) -> bool:
    """A list or tuple of `len(want)` tensors, each `close_values` to its counterpart (same keywords)."""
    return (isinstance(got, (list, tuple)) and len(got) == len(want)
            and all(close_values(g, w, **tolerance) for g, w in zip(got, want, strict=True)))


def close_state(got: Any, want: Mapping[str, torch.Tensor], **tolerance: Any) -> bool:
    """A state dict with exactly `want`'s keys, each tensor `close_values` to its counterpart."""
    return (isinstance(got, dict) and got.keys() == want.keys()
            and all(close_values(got[key], want[key], **tolerance) for key in want))


# ------------------------------------------------------------------------------------- observed structure
def matching_tensors(value: Any, like: Sequence[torch.Tensor], what: str) -> list[torch.Tensor]:
    """`value` checked to be a list of tensors shaped like `like`, as float; WireError for anything else."""
    if not isinstance(value, list) or len(value) != len(like) or not all(
        isinstance(t, torch.Tensor) and t.device.type != "meta" and t.shape == r.shape
        for t, r in zip(value, like, strict=True)
    ):
        raise WireError(f"malformed observation: {what} is not a list of {len(like)} tensors of the model's shapes")
    return [t.detach().float() for t in value]


def malformed(what: str) -> NoReturn:
    """Refuse an observation that no probe writes (forged or corrupted): WireError "malformed observation: ..."."""
    raise WireError(f"malformed observation: {what}")


def tensor(value: Any, what: str, *, detach: bool = False) -> torch.Tensor:
    """`value` when it is a tensor, as the probe recorded it (detached from any graph when `detach`); WireError
    for anything else.

    For a leaf every probe writes as a tensor: a value of another type is not an observation of the probe.
    """
    if not isinstance(value, torch.Tensor):
        malformed(f"{what} is {type_name(value)}, not a tensor")
    return value.detach() if detach else value


def tensor_list(value: Any, like: Sequence[torch.Tensor], what: str, *,
                none_ok: bool = False) -> list[torch.Tensor | None]:
    """`value` checked to be a list of tensors with `like`'s shapes and dtypes (None allowed where `none_ok`),
    returned as it is; WireError for anything else."""
    if not isinstance(value, list) or len(value) != len(like):
        malformed(f"{what} is not a list of {len(like)} tensors")
    for item, reference in zip(value, like, strict=True):
        if item is None and none_ok:
            continue
        if not isinstance(item, torch.Tensor) or item.shape != reference.shape or item.dtype != reference.dtype:
            malformed(f"{what} holds a value that is not a {reference.dtype} tensor of shape {tuple(reference.shape)}")
    return value


def tensor_dict(value: Any, what: str) -> dict[str, torch.Tensor]:
    """`value` checked to be a dict whose values are tensors (a recorded state_dict); WireError otherwise."""
    if not isinstance(value, dict) or not all(isinstance(v, torch.Tensor) for v in value.values()):
        malformed(f"{what} is not a dict of tensors")
    return value


def int_list(value: Any, what: str) -> list[int]:
    """`value` checked to be a list of ints (bools excluded), such as recorded indices; WireError otherwise."""
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        malformed(f"{what} is not a list of ints")
    return value


def fail_raised(error: str) -> NoReturn:
    """Fail the way a check fails when the student's code raised `error` ("TypeError: ...")."""
    fail(RAISED, observed=f"your code raised {error}",
         expected="it runs on the check's inputs without an exception",
         cause="see the message of the exception", where="the cell that defines what you passed to check()")


def judged(inputs: Sequence[T], results: Any) -> Iterator[tuple[T, Any]]:
    """Pair each input with what `instruments.collect` recorded for it; raise a recorded stop when reached."""
    if not isinstance(results, list) or len(results) > len(inputs):
        raise WireError("malformed observation: not one result per input")
    # results end early at a recorded stop (raised below); a tail missing without one is caught after the loop
    for item, result in zip(inputs, results, strict=False):
        if isinstance(result, dict) and "stopped" in result:
            if result["stopped"] == "failed":
                raise CheckFailed(str(result["message"]), code=str(result["code"]))
            fail_raised(str(result["message"]))
        yield item, result
    if len(results) != len(inputs):
        raise WireError("malformed observation: results missing without a recorded stop")
