"""The failing vocabulary: check one leaf the judge received against its reference, and fail naming it.

PrairieLearn's `check_*` shape with this course's four-part message (`failure.fail`): each function validates
the leaf's type, then its shape, then its dtype, then its values, and fails at the first that differs, naming
the leaf (`name`) and where the student should look. On success it returns the leaf, typed. NaN never satisfies
a comparison (`compare`'s predicates are the values step), and an infinity satisfies one only where the
reference holds the same infinity.

A judge that must name a cause among several (the teaching ladder: "scaled by sqrt(d)", "masked the wrong
side") asks the bool predicates re-exported here (`close_values`, `same_values`, ...) and fails itself; a
judge whose leaf should simply match its reference calls `close`, `equal` or `number` (`finite_number` when
any finite number will do). A leaf that no probe writes (forged or corrupted) is refused with `malformed`, the
one way to say so.

    expect.close("logsumexp(x, dim)", got, want, rtol=1e-5, atol=1e-5, where="logsumexp", cause="...")
"""

from __future__ import annotations

import math
from typing import Any

import torch

from harness.contract import compare
from harness.contract.compare import (
    close_norm,
    close_number,
    close_state,
    close_tensors,
    close_values,
    is_tensor_like,
    isclose_number,
    isclose_numbers,
    malformed,
    max_difference,
    same_values,
    tensor,
    type_name,
)
from harness.contract.failure import NOT_FINITE, fail

__all__ = [
    "DTYPE", "NOT_A_NUMBER", "NOT_A_TENSOR", "NOT_FINITE", "SHAPE", "WRONG_VALUE", "close", "close_norm",
    "close_number", "close_state", "close_tensors", "close_values", "equal", "finite_number", "is_tensor_like",
    "isclose_number", "isclose_numbers", "malformed", "max_difference", "number", "same_values", "tensor",
    "type_name",
]

# The codes a leaf fails with before its values are compared (a judge may pass its own `form_code` instead).
NOT_A_TENSOR = "not-a-tensor"
NOT_A_NUMBER = "not-a-number"
SHAPE = "wrong-shape"
DTYPE = "wrong-dtype"
WRONG_VALUE = "wrong-value"


def _form(name: str, got: Any, want: torch.Tensor, *, where: str, dtype: bool, form_code: str | None) -> torch.Tensor:
    """Fail unless `got` is a real tensor of `want`'s shape (and dtype, when `dtype`); return it."""
    __tracebackhide__ = True
    if not isinstance(got, torch.Tensor) or got.device.type == "meta":
        fail(form_code or NOT_A_TENSOR, observed=f"{name} is {type_name(got)}", expected="a torch.Tensor",
             cause="returning a Python number or list, or the wrong variable", where=where)
    if got.shape != want.shape:
        fail(form_code or SHAPE, observed=f"{name} has shape {tuple(got.shape)}", expected=f"shape {tuple(want.shape)}",
             cause="a reduction over the wrong dimension, a lost keepdim, or a missing reshape", where=where)
    if dtype and got.dtype != want.dtype:
        fail(form_code or DTYPE, observed=f"{name} has dtype {got.dtype}", expected=f"dtype {want.dtype}",
             cause="a conversion (.float(), .long(), an integer literal) where the reference keeps the dtype",
             where=where)
    return got


def _finite(name: str, got: torch.Tensor, want: torch.Tensor, *, where: str) -> None:
    """Fail with `not-finite` when `got` holds NaN or inf where the reference is finite."""
    __tracebackhide__ = True
    if not (got.is_floating_point() or got.is_complex()):
        return
    if bool((~torch.isfinite(got.detach()) & torch.isfinite(want.detach())).any()):
        fail(NOT_FINITE, observed=f"{name} contains inf or nan", expected="finite values",
             cause="overflow: exp of a large input, a division by zero, or log of zero", where=where)


def close(name: str, got: Any, want: torch.Tensor, *, where: str,
          cause: str = "the computation differs from the reference", rtol: float = 1e-5, atol: float = 1e-8,
          code: str = WRONG_VALUE, dtype: bool = False, form_code: str | None = None,
          hint: str | None = None) -> torch.Tensor:
    """Fail unless `got` is a tensor of `want`'s shape (and dtype, when `dtype`) and within `atol + rtol * |want|`
    of it elementwise; return `got`.

    Args:
        name: the leaf as the student knows it ("logsumexp(x, dim)", "the updated parameter").
        cause: the likely cause when the values differ (the type, shape and dtype steps name their own).
        code: the failure code of differing values; `form_code`, when given, that of a wrong type, shape or dtype
            (otherwise `not-a-tensor`, `wrong-shape`, `wrong-dtype`). Non-finite values fail with `not-finite`.
        hint: the first hint for `cause`, when narrower than the requirement's (`failure.fail`).
    """
    __tracebackhide__ = True
    got = _form(name, got, want, where=where, dtype=dtype, form_code=form_code)
    _finite(name, got, want, where=where)
    if not close_values(got, want, rtol=rtol, atol=atol, dtype=dtype):
        fail(code, observed=f"{name} differs from the reference by up to {max_difference(got, want):.3g}",
             expected=f"agreement within atol={atol}, rtol={rtol}", cause=cause, where=where, hint=hint)
    return got


def equal(name: str, got: Any, want: torch.Tensor, *, where: str, cause: str, code: str = WRONG_VALUE,
          dtype: bool = False, form_code: str | None = None, hint: str | None = None) -> torch.Tensor:
    """Fail unless `got` equals `want` bit for bit (type, shape, dtype when `dtype`, values; NaN never equals);
    return `got`. Arguments as `close`."""
    __tracebackhide__ = True
    got = _form(name, got, want, where=where, dtype=dtype, form_code=form_code)
    _finite(name, got, want, where=where)
    if not same_values(got, want, dtype=dtype):
        differing = int((got.detach() != want.detach().to(got.dtype)).sum()) if got.numel() else 0
        fail(code, observed=f"{name} differs from the reference in {differing} of {got.numel()} elements",
             expected="exactly the reference's values", cause=cause, where=where, hint=hint)
    return got


def finite_number(name: str, got: Any, *, where: str, cause: str, code: str = NOT_A_NUMBER) -> float:
    """`got` as a float when it is a finite real number or a one-element real tensor (bool excluded); fail with
    `code` for anything else, with `not-finite` for NaN or inf."""
    __tracebackhide__ = True
    if isinstance(got, torch.Tensor) and got.numel() == 1 and got.is_floating_point() and not bool(
            torch.isfinite(got.detach()).all()) or isinstance(got, float) and not math.isfinite(got):
        fail(NOT_FINITE, observed=f"{name} is {float(got)}", expected="a finite number",
             cause="overflow: exp of a large input, a division by zero, or log of zero", where=where)
    value = compare.number(got)
    if value is None:
        fail(code, observed=f"{name} is {type_name(got)}"
             + (f" of shape {tuple(got.shape)}" if isinstance(got, torch.Tensor) else ""),
             expected="a number (a Python float or a one-element tensor)", cause=cause, where=where)
    return value


def number(name: str, got: Any, want: float, *, where: str, cause: str, rel_tol: float = 1e-6,
          abs_tol: float = 1e-12, code: str = WRONG_VALUE, form_code: str = NOT_A_NUMBER,
          hint: str | None = None) -> float:
    """Fail unless `got` is a finite number (`finite_number`) `math.isclose` to `want`; return it as a float.

    Args:
        want: the reference, a finite number.
        rel_tol, abs_tol: as `math.isclose` (symmetric).
        code: the failure code of a differing number; `form_code` that of a value that is not a number.
    """
    __tracebackhide__ = True
    got_number = finite_number(name, got, where=where, cause="returning something other than the number asked for",
                               code=form_code)
    if not isclose_number(got_number, want, rel_tol=rel_tol, abs_tol=abs_tol):
        fail(code, observed=f"{name} is {got_number:.6g}", expected=f"{want:.6g} (within rel_tol={rel_tol:g})",
             cause=cause, where=where, hint=hint)
    return got_number
