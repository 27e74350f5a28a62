"""The failing vocabulary (harness.contract.expect, issue 42 item 3): each function validates type, shape, dtype,
then values, fails at the first that differs with a four-part message naming the leaf, and never passes NaN or
an infinity the reference does not hold."""

import math

import pytest
import torch

from harness.contract import expect
from harness.contract.failure import CheckFailed
from harness.contract.wire import Opaque

WANT = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
LEAF = "the leaf under test"


def _failure(call) -> CheckFailed:
    with pytest.raises(CheckFailed) as caught:
        call()
    message = str(caught.value)
    assert LEAF in message, message
    for part in ("Observed:", "Expected:", "Likely cause:", "Where to look:"):
        assert part in message, message
    return caught.value


def nan_at_0(t: torch.Tensor) -> torch.Tensor:
    t = t.clone()
    t.view(-1)[0] = math.nan
    return t


def inf_at_0(t: torch.Tensor) -> torch.Tensor:
    t = t.clone()
    t.view(-1)[0] = math.inf
    return t


TENSOR_CHECKS = {
    "close": lambda got, **kw: expect.close(LEAF, got, WANT, where="here", cause="a slip", rtol=1e-5, atol=1e-6, **kw),
    "equal": lambda got, **kw: expect.equal(LEAF, got, WANT, where="here", cause="a slip", **kw),
}


@pytest.mark.parametrize("check", sorted(TENSOR_CHECKS))
@pytest.mark.parametrize(("got", "code"), [
    (nan_at_0(WANT), "not-finite"),
    (inf_at_0(WANT), "not-finite"),
    (WANT.reshape(4), "wrong-shape"),
    (WANT.T.contiguous()[:1], "wrong-shape"),
    (WANT.tolist(), "not-a-tensor"),
    (3.0, "not-a-tensor"),
    (Opaque("Tensorish", "<object>"), "not-a-tensor"),
    (WANT + 1, "wrong-value"),
], ids=["nan", "inf", "flattened", "fewer-rows", "list", "float", "opaque", "off-by-one"])
def test_a_tensor_check_fails_naming_the_leaf(check, got, code):
    assert _failure(lambda: TENSOR_CHECKS[check](got)).code == code


@pytest.mark.parametrize("check", sorted(TENSOR_CHECKS))
def test_a_wrong_dtype_fails_when_the_dtype_is_asked_for_and_only_then(check):
    assert _failure(lambda: TENSOR_CHECKS[check](WANT.double(), dtype=True)).code == "wrong-dtype"
    assert TENSOR_CHECKS[check](WANT.double()) is not None  # values compared in float64 otherwise


@pytest.mark.parametrize("check", sorted(TENSOR_CHECKS))
def test_a_tensor_check_passes_the_reference_and_returns_it(check):
    got = WANT.clone()
    assert TENSOR_CHECKS[check](got) is got


def test_nan_never_satisfies_even_where_the_reference_holds_nan():
    want = nan_at_0(WANT)
    with pytest.raises(CheckFailed):
        expect.close(LEAF, want.clone(), want, where="here", cause="a slip")
    with pytest.raises(CheckFailed):
        expect.equal(LEAF, want.clone(), want, where="here", cause="a slip")


def test_close_uses_its_tolerance_and_the_callers_codes():
    assert expect.close(LEAF, WANT + 1e-7, WANT, where="here", cause="a slip", atol=1e-6, rtol=0.0) is not None
    failure = _failure(lambda: expect.close(LEAF, WANT + 1e-3, WANT, where="here", cause="the slip it made",
                                            atol=1e-6, rtol=0.0, code="scaled-twice", hint="look at the scale"))
    assert failure.code == "scaled-twice" and failure.hint == "look at the scale"
    assert "the slip it made" in str(failure)
    assert _failure(lambda: expect.close(LEAF, [1.0], WANT, where="here", cause="c", form_code="no-tensor")
                    ).code == "no-tensor"


@pytest.mark.parametrize(("got", "code"), [
    (math.nan, "not-finite"),
    (math.inf, "not-finite"),
    (torch.tensor(math.nan), "not-finite"),
    (torch.tensor([1.0, 2.0]), "not-a-number"),
    ("1.0", "not-a-number"),
    (True, "not-a-number"),
    (None, "not-a-number"),
    (1.5, "wrong-value"),
], ids=["nan", "inf", "nan-tensor", "two-elements", "str", "bool", "none", "off"])
def test_a_number_check_fails_naming_the_leaf(got, code):
    assert _failure(lambda: expect.number(LEAF, got, 1.0, where="here", cause="a slip")).code == code


@pytest.mark.parametrize("got", [1.0, 1, torch.tensor(1.0), torch.tensor([1.0]), 1.0 + 1e-9])
def test_a_number_check_passes_a_number_in_any_of_its_forms(got):
    assert expect.number(LEAF, got, 1.0, where="here", cause="a slip") == pytest.approx(1.0)


def test_finite_number_coerces_or_fails_with_the_callers_code():
    assert expect.finite_number(LEAF, torch.tensor([2.5]), where="here", cause="c") == 2.5
    assert _failure(lambda: expect.finite_number(LEAF, [2.5], where="here", cause="c", code="no-loss")
                    ).code == "no-loss"
    assert _failure(lambda: expect.finite_number(LEAF, -math.inf, where="here", cause="c")).code == "not-finite"


def test_the_predicates_never_pass_nan():
    want = torch.tensor([1.0, math.nan])
    assert not expect.close_values(want.clone(), want)
    assert not expect.same_values(want.clone(), want)
    assert not expect.close_tensors([want.clone()], [want])
    assert not expect.isclose_number(math.nan, math.nan)
    assert not expect.isclose_numbers([math.nan], [math.nan])


def test_one_type_name_on_the_floor():
    from harness.contract import compare, wire

    assert expect.type_name is compare.type_name is wire.type_name
    assert expect.type_name(Opaque("Model", "<Model>")) == "Model"
