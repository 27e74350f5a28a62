"""harness.data's offline datasets: the sklearn digits, the tabular toys and the adding problem."""

from __future__ import annotations

import pytest
import torch
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.neighbors import KNeighborsClassifier
from torch import nn
from torch.utils.data import TensorDataset

from harness.data import adding_problem, binary_toy, digits, spirals, two_moons


def test_digits_are_sklearns_images_as_tensors() -> None:
    dataset = digits()
    images, labels = dataset.tensors
    assert isinstance(dataset, TensorDataset)
    assert images.shape == (1797, 1, 8, 8) and images.dtype == torch.float32
    assert labels.shape == (1797,) and labels.dtype == torch.int64
    assert images.min() == 0.0 and images.max() == 1.0
    oracle = load_digits()
    assert torch.equal(images[:, 0] * 16, torch.as_tensor(oracle.images, dtype=torch.float32))
    assert labels.tolist() == oracle.target.tolist()
    assert dataset.classes == tuple("0123456789")


@pytest.mark.parametrize("make", [two_moons, spirals, binary_toy, adding_problem])
def test_generators_are_deterministic_per_seed(make) -> None:
    first, again, other = make(200, seed=1), make(200, seed=1), make(200, seed=2)
    for a, b in zip(first.tensors, again.tensors, strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(first.tensors[0], other.tensors[0])
    assert first.tensors[0].dtype == torch.float32


def test_two_moons_need_a_nonlinear_model() -> None:
    (inputs, labels), (test_inputs, test_labels) = two_moons(600, seed=0).tensors, two_moons(600, seed=1).tensors
    assert inputs.shape == (600, 2) and labels.dtype == torch.int64
    assert torch.bincount(labels).tolist() == [300, 300]
    linear = LogisticRegression().fit(inputs, labels).score(test_inputs, test_labels)
    neighbours = KNeighborsClassifier(5).fit(inputs, labels).score(test_inputs, test_labels)
    assert linear < 0.9 < 0.97 < neighbours


def test_spirals_have_balanced_arms_a_line_cannot_separate() -> None:
    dataset = spirals(600, classes=3, seed=0)
    inputs, labels = dataset.tensors
    assert inputs.shape == (600, 2) and inputs.abs().max() < 2
    assert torch.bincount(labels).tolist() == [200, 200, 200]
    test_inputs, test_labels = spirals(600, classes=3, seed=1).tensors
    assert LogisticRegression().fit(inputs, labels).score(test_inputs, test_labels) < 0.6
    assert KNeighborsClassifier(5).fit(inputs, labels).score(test_inputs, test_labels) > 0.95
    assert len(spirals(10, classes=4).classes) == 4


def test_binary_toy_is_learnt_by_logistic_regression() -> None:
    inputs, labels = binary_toy(1200, features=20, seed=0).tensors
    assert inputs.shape == (1200, 20)
    assert labels.shape == (1200, 1) and labels.dtype == torch.float32
    assert set(labels.unique().tolist()) == {0.0, 1.0} and 0.3 < labels.mean() < 0.7
    torch.manual_seed(0)
    model = nn.Linear(20, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    for _ in range(100):
        loss = nn.functional.binary_cross_entropy_with_logits(model(inputs[:1000]), labels[:1000])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        accuracy = ((model(inputs[1000:]) > 0).float() == labels[1000:]).float().mean()
    assert accuracy > 0.8


def test_adding_problem_marks_one_value_in_each_half_and_sums_them() -> None:
    inputs, targets = adding_problem(500, seq_len=20, seed=0).tensors
    assert inputs.shape == (500, 20, 2) and targets.shape == (500, 1)
    values, markers = inputs[..., 0], inputs[..., 1]
    assert ((values >= 0) & (values < 1)).all()
    assert (markers[:, :10].sum(1) == 1).all() and (markers[:, 10:].sum(1) == 1).all()
    for row in range(5):
        marked = markers[row].nonzero().flatten().tolist()
        assert targets[row, 0].item() == pytest.approx(values[row, marked].sum().item())


def test_predicting_the_mean_scores_the_classic_baseline() -> None:
    _, targets = adding_problem(20_000, seed=0).tensors
    # The sum of two independent U(0, 1) has mean 1 and variance 1/6: the MSE a model must beat.
    assert nn.functional.mse_loss(torch.ones_like(targets), targets).item() == pytest.approx(1 / 6, abs=0.01)


def gradient_norm_before_and_after_clipping(nonlinearity: str, recurrent_gain: float) -> tuple[float, float]:
    """One backward pass of a vanilla RNN on the adding problem: total grad norm, then after clipping to 1."""
    torch.manual_seed(0)
    inputs, targets = adding_problem(64, seq_len=50, seed=0).tensors
    rnn, head = nn.RNN(2, 32, nonlinearity=nonlinearity, batch_first=True), nn.Linear(32, 1)
    with torch.no_grad():
        nn.init.orthogonal_(rnn.weight_hh_l0, gain=recurrent_gain)
    outputs, _ = rnn(inputs)
    nn.functional.mse_loss(head(outputs[:, -1]), targets).backward()
    parameters = [*rnn.parameters(), *head.parameters()]
    before = nn.utils.clip_grad_norm_(parameters, max_norm=1.0)  # returns the norm before clipping
    after = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in parameters]))
    return before.item(), after.item()


@pytest.mark.parametrize(
    ("nonlinearity", "small_gain", "large_gain", "factor"), [("tanh", 0.5, 3.0, 1e4), ("relu", 0.5, 1.5, 10)]
)
def test_adding_problem_explodes_rnn_gradients_that_clipping_bounds(
    nonlinearity: str, small_gain: float, large_gain: float, factor: float
) -> None:
    calm, _ = gradient_norm_before_and_after_clipping(nonlinearity, small_gain)
    exploded, clipped = gradient_norm_before_and_after_clipping(nonlinearity, large_gain)
    assert calm < 10
    assert exploded > factor * calm
    assert clipped == pytest.approx(1.0, rel=1e-4)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: two_moons(1), "at least 2"),
        (lambda: spirals(0), "at least 1"),
        (lambda: spirals(10, classes=1), "at least 2 arms"),
        (lambda: binary_toy(10, features=0), "at least one feature"),
        (lambda: adding_problem(10, seq_len=1), "at least 2 steps"),
    ],
)
def test_bad_sizes_are_rejected(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()
