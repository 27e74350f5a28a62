"""The judge's vocabulary (harness.contract.compare): every comparison holds only when it positively holds.

NaN, infinity, an empty or meta tensor, another type, shape or dtype: each fails every comparison that does
not expect it, and the validators refuse what no probe writes.
"""

from __future__ import annotations

import math

import pytest
import torch

from harness.contract import compare, inputs
from harness.contract.wire import WireError

WANT = torch.tensor([1.0, -2.0, 3.0])

# (name, compare(got) -> bool) for every tensor comparison, each given the reference WANT
TENSOR_COMPARISONS = [
    ("close_values", lambda got: compare.close_values(got, WANT)),
    ("close_values dtype=False", lambda got: compare.close_values(got, WANT, dtype=False)),
    ("close_scaled", lambda got: compare.close_scaled(got, WANT, tol=1e-3)),
    ("close_norm", lambda got: compare.close_norm(got, WANT, rel=1e-3, floor=1e-7)),
    ("same_values", lambda got: compare.same_values(got, WANT)),
    ("close_tensors", lambda got: compare.close_tensors([got], [WANT])),
    ("close_state", lambda got: compare.close_state({"w": got}, {"w": WANT})),
]


def _wrong(kind: str) -> object:
    values = {
        "nan": torch.tensor([1.0, math.nan, 3.0]),
        "all nan": torch.full((3,), math.nan),
        "inf": torch.tensor([1.0, -2.0, math.inf]),
        "-inf": torch.tensor([-math.inf, -2.0, 3.0]),
        "empty": torch.empty(0),
        "meta": torch.empty(3, device="meta"),
        "wrong shape": torch.tensor([[1.0, -2.0, 3.0]]),
        "list": [1.0, -2.0, 3.0],
        "float": 1.0,
        "none": None,
        "string": "tensor([1., -2., 3.])",
    }
    return values[kind]


@pytest.mark.parametrize("name, holds", TENSOR_COMPARISONS, ids=[name for name, _ in TENSOR_COMPARISONS])
def test_each_tensor_comparison_accepts_the_reference_itself(name: str, holds) -> None:
    assert holds(WANT.clone())


@pytest.mark.parametrize("kind", ["nan", "all nan", "inf", "-inf", "empty", "meta", "wrong shape", "list", "float",
                                  "none", "string"])
@pytest.mark.parametrize("name, holds", TENSOR_COMPARISONS, ids=[name for name, _ in TENSOR_COMPARISONS])
def test_each_tensor_comparison_refuses_a_wrong_leaf(name: str, holds, kind: str) -> None:
    assert not holds(_wrong(kind)), f"{name} accepted {kind}"


def test_dtype_is_compared_unless_told_otherwise() -> None:
    assert not compare.close_values(WANT.double(), WANT)
    assert compare.close_values(WANT.double(), WANT, dtype=False)
    assert not compare.same_values(WANT.double(), WANT)


def test_expected_nan_matches_nan_only_where_the_reference_has_it() -> None:
    want = torch.tensor([1.0, math.nan])
    assert compare.close_values(torch.tensor([1.0, math.nan]), want, expected_nan=True)
    assert not compare.close_values(torch.tensor([1.0, math.nan]), want)
    assert not compare.close_values(torch.tensor([math.nan, math.nan]), want, expected_nan=True)
    assert not compare.close_values(torch.tensor([1.0, 0.0]), want, expected_nan=True)


def test_same_values_with_expected_nan_asks_for_nan_exactly_where_the_reference_has_it() -> None:
    want = torch.tensor([1.0, math.nan, math.inf])
    assert compare.same_values(want.clone(), want, expected_nan=True)
    assert not compare.same_values(want.clone(), want)
    assert not compare.same_values(torch.tensor([1.0, math.nan, math.nan]), want, expected_nan=True)
    assert not compare.same_values(torch.tensor([1.0, 0.0, math.inf]), want, expected_nan=True)
    assert not compare.same_values(torch.tensor([1.0 + 1e-6, math.nan, math.inf]), want, expected_nan=True)
    assert not compare.same_values(want.double(), want, expected_nan=True)


def test_close_scaled_is_absolute_near_zero_and_relative_for_large_values() -> None:
    assert compare.close_scaled(torch.tensor([1000.5]), torch.tensor([1000.0]), tol=1e-3)
    assert not compare.close_scaled(torch.tensor([0.01]), torch.tensor([0.0]), tol=1e-3)


def test_close_norm_judges_the_whole_tensor() -> None:
    want = torch.ones(100)
    nudged = want.clone()
    nudged[0] += 0.05  # 5% off in one element, 0.5% of the norm
    assert compare.close_norm(nudged, want, rel=1e-2)
    assert not compare.close_values(nudged, want, rtol=1e-2)


@pytest.mark.parametrize("got", [math.nan, math.inf, -math.inf, True, None, "1.0", [1.0], torch.tensor([1.0, 2.0])])
def test_numbers_refuse_what_is_not_a_finite_number(got: object) -> None:
    assert not compare.close_number(got, 1.0)
    assert compare.number(got) is None


def test_numbers_accept_ints_floats_and_one_element_tensors() -> None:
    assert compare.close_number(1, 1.0) and compare.close_number(1.0 + 1e-9, 1.0)
    assert compare.number(torch.tensor(2.5)) == 2.5
    assert compare.numbers([1, 2.0]) == [1.0, 2.0]
    assert compare.numbers([1, math.nan]) is None


def test_real_passes_nan_and_infinity_through_and_refuses_what_is_not_one_real_number() -> None:
    assert compare.real(2) == 2.0 and compare.real(torch.tensor([2.5])) == 2.5
    assert compare.real(math.inf) == math.inf and math.isnan(compare.real(torch.tensor(math.nan)))
    for got in (True, None, "1.0", [1.0], torch.tensor([1.0, 2.0]), torch.tensor(1j), torch.empty(1, device="meta")):
        assert compare.real(got) is None, got


@pytest.mark.parametrize("got", [math.nan, math.inf, True, None, "1.0", [1.0], torch.tensor(1.0)])
def test_isclose_refuses_what_is_not_a_real_number(got: object) -> None:
    assert not compare.isclose_number(got, 1.0)
    assert not compare.isclose_numbers([got], [1.0])


def test_isclose_is_relative_to_the_larger_magnitude_with_an_absolute_floor() -> None:
    assert compare.isclose_number(100, 101.0, rel_tol=0.01)  # 1 <= 0.01 * 101
    assert not compare.isclose_number(100.0, 101.0, rel_tol=0.0099)
    assert compare.isclose_number(1e-7, 0.0, abs_tol=1e-6) and not compare.isclose_number(1e-7, 0.0)
    assert compare.isclose_numbers((1.0, 2.0), [1.0, 2.0 + 1e-9]) and not compare.isclose_numbers([1.0], [1.0, 2.0])


def test_isclose_matches_nan_only_when_the_reference_expects_it() -> None:
    assert not compare.isclose_number(math.nan, math.nan)
    assert compare.isclose_number(math.nan, math.nan, expected_nan=True)
    assert not compare.isclose_number(1.0, math.nan, expected_nan=True)


def test_same_number_allows_float_rounding_only() -> None:
    assert compare.same_number(0.1 + 0.2, 0.3) and compare.same_number(3, 3.0)
    assert not compare.same_number(1.0 + 1e-7, 1.0) and compare.isclose_number(1.0 + 1e-7, 1.0)
    assert not compare.same_number(1e-300, 0.0)
    for got in (None, True, math.nan, "0.3", torch.tensor(0.3)):
        assert not compare.same_number(got, 0.3), got
    assert not compare.same_number(math.nan, math.nan)


def test_max_difference_reads_infinite_for_nan() -> None:
    assert compare.max_difference(torch.tensor([1.0, math.nan]), torch.tensor([1.0, 1.0])) == math.inf
    assert compare.max_difference(torch.empty(0), torch.empty(0)) == 0.0


def test_max_difference_reads_infinite_for_another_shape_rather_than_broadcasting() -> None:
    assert compare.max_difference(torch.ones(1), torch.ones(3)) == math.inf
    assert compare.max_difference(torch.ones(3, 1), torch.ones(3)) == math.inf
    assert compare.max_difference(torch.empty(0), torch.ones(2)) == math.inf


def test_max_state_difference_reads_infinite_for_another_layout() -> None:
    want = {"w": torch.tensor([1.0, 2.0]), "step": torch.tensor(3)}
    assert compare.max_state_difference({"w": torch.tensor([1.0, 2.5]), "step": torch.tensor(3)}, want) == 0.5
    assert compare.max_state_difference({}, {}) == 0.0
    for got in ({"w": want["w"]}, {**want, "w": want["w"].double()}, {**want, "w": torch.ones(3)},
                {**want, "step": 3}, {**want, "w": torch.tensor([1.0, math.nan])}, [want["w"], want["step"]]):
        assert compare.max_state_difference(got, want) == math.inf, got


def test_malformed_raises_a_wire_error_naming_the_leaf() -> None:
    with pytest.raises(WireError, match="malformed observation: the loss is gone"):
        compare.malformed("the loss is gone")


@pytest.mark.parametrize("value", [[1.0], 1.0, None, "t", {"w": WANT}])
def test_tensor_refuses_anything_but_a_tensor(value: object) -> None:
    with pytest.raises(WireError, match=r"malformed observation: the output is \w+, not a tensor"):
        compare.tensor(value, "the output")


def test_tensor_returns_the_tensor_itself_nan_included() -> None:
    nan = torch.tensor([math.nan])  # validators check structure; the comparisons judge values
    assert compare.tensor(nan, "x") is nan


def test_tensor_detaches_only_when_told() -> None:
    leaf = torch.ones(2, requires_grad=True)
    assert compare.tensor(leaf, "x").requires_grad
    detached = compare.tensor(leaf, "x", detach=True)
    assert not detached.requires_grad and torch.equal(detached, leaf)


@pytest.mark.parametrize("value", [[WANT], [WANT, WANT[:2]], [WANT, WANT.double()], (WANT, WANT), [WANT, None], None])
def test_tensor_list_refuses_other_lengths_shapes_dtypes_and_types(value: object) -> None:
    with pytest.raises(WireError, match="malformed observation: grads"):
        compare.tensor_list(value, [WANT, WANT], "grads")


def test_tensor_list_allows_none_only_when_told() -> None:
    assert compare.tensor_list([WANT, None], [WANT, WANT], "grads", none_ok=True)[1] is None
    assert compare.tensor_list([], [], "grads") == []


@pytest.mark.parametrize("value", [[WANT], {"w": 1.0}, {"w": [WANT]}, None])
def test_tensor_dict_refuses_a_dict_that_is_not_of_tensors(value: object) -> None:
    with pytest.raises(WireError, match="malformed observation: the state is not a dict of tensors"):
        compare.tensor_dict(value, "the state")


@pytest.mark.parametrize("value", [[1, True], [1.0], (1, 2), None, [torch.tensor(1)]])
def test_int_list_refuses_what_is_not_a_list_of_ints(value: object) -> None:
    with pytest.raises(WireError, match="malformed observation: indices is not a list of ints"):
        compare.int_list(value, "indices")
    assert compare.int_list([], "indices") == []


def test_inputs_are_seeded_and_leave_the_global_stream_alone() -> None:
    torch.manual_seed(0)
    expected_next = torch.rand(1)
    torch.manual_seed(0)
    assert torch.equal(inputs.randn(2, 3, seed=5), inputs.randn(2, 3, seed=5))
    first = inputs.seeded(7, lambda: torch.nn.Linear(2, 2))
    again = inputs.seeded(7, lambda: torch.nn.Linear(2, 2))
    assert torch.equal(first.weight, again.weight)
    assert torch.equal(torch.rand(1), expected_next)
