"""Small tabular problems, generated from a seed: two moons, spirals, and a noisy linear binary rule."""

from __future__ import annotations

import math

import torch

from harness.data.tensors import LabeledTensorDataset


def _check_count(function: str, n: int, minimum: int = 1) -> None:
    """Reject a sample count below `minimum` with a message naming the function."""
    if n < minimum:
        raise ValueError(f"{function}(n={n}): n must be at least {minimum}.")


def two_moons(n: int, *, noise: float = 0.1, seed: int = 0) -> LabeledTensorDataset:
    """Two interleaving half circles (scikit-learn's make_moons): a 2-D problem a linear model cannot solve.

    Args:
        n: number of points (split evenly between the two classes).
        noise: standard deviation of the Gaussian noise added to each coordinate.
        seed: the seed.

    Returns:
        A dataset of X (n, 2) float32 and y (n,) int64 in {0, 1}.
    """
    _check_count("two_moons", n, minimum=2)
    from sklearn.datasets import make_moons  # imported here: two seconds that code not using it never pays

    points, labels = make_moons(n_samples=n, noise=noise, random_state=seed)
    return LabeledTensorDataset(
        torch.as_tensor(points, dtype=torch.float32), torch.as_tensor(labels, dtype=torch.int64),
        classes=("upper", "lower"),
    )


def spirals(n: int, *, classes: int = 3, noise: float = 0.2, seed: int = 0) -> LabeledTensorDataset:
    """`classes` interleaved spiral arms in the plane: needs a nonlinear model with a few hidden units.

    Args:
        n: number of points (split evenly between the arms, the first arms taking any remainder).
        classes: number of arms, at least 2.
        noise: standard deviation of the angular noise, in radians.
        seed: the seed.

    Returns:
        A dataset of X (n, 2) float32 within about [-1, 1] and y (n,) int64 in [0, classes).
    """
    _check_count("spirals", n)
    if classes < 2:
        raise ValueError(f"spirals(classes={classes}): need at least 2 arms.")
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % classes
    labels = labels[torch.randperm(n, generator=generator)]
    radius = torch.rand(n, generator=generator)
    # Each arm turns once and a half from the centre outwards, rotated by its share of the full circle.
    angle = 3 * math.pi * radius + 2 * math.pi * labels / classes + noise * torch.randn(n, generator=generator)
    points = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], dim=1)
    return LabeledTensorDataset(points, labels, classes=tuple(f"arm {k}" for k in range(classes)))


def binary_toy(n: int, *, features: int = 20, noise: float = 0.5, seed: int = 0) -> LabeledTensorDataset:
    """A random binary problem for a first training loop: a hidden linear rule plus label noise.

    The label is 1 where w·x + b + noise > 0, for a random unit vector w and Gaussian inputs, so logistic
    regression can learn it, up to the noise.

    Args:
        n: number of samples.
        features: input dimension.
        noise: standard deviation of the Gaussian noise added to the score before thresholding.
        seed: the seed.

    Returns:
        A dataset of X (n, features) float32 and y (n, 1) float32 in {0, 1} (the shape BCEWithLogitsLoss
        expects for a model with one output).
    """
    _check_count("binary_toy", n)
    if features < 1:
        raise ValueError(f"binary_toy(features={features}): need at least one feature.")
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(features, generator=generator)
    weight /= weight.norm()
    bias = 0.2 * torch.randn((), generator=generator)
    inputs = torch.randn((n, features), generator=generator)
    score = inputs @ weight + bias + noise * torch.randn(n, generator=generator)
    labels = (score > 0).to(torch.float32).unsqueeze(1)
    return LabeledTensorDataset(inputs, labels, classes=("negative", "positive"))
