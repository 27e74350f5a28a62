"""Sequence problems: the adding problem (Hochreiter and Schmidhuber, 1997), the classic long-range test
on which a vanilla RNN's gradients explode or vanish."""

from __future__ import annotations

import torch

from harness.data.tensors import LabeledTensorDataset


def adding_problem(n: int, *, seq_len: int = 50, seed: int = 0) -> LabeledTensorDataset:
    """Sequences of random values with two marked positions; the target is the sum of the marked values.

    Channel 0 holds values uniform in [0, 1); channel 1 is 1 at exactly two positions, one in each half
    of the sequence, and 0 elsewhere. Predicting 1.0 always (the mean) gives a mean squared error of
    about 1/6; a model has to carry the first marked value across half the sequence to beat it.

    Args:
        n: number of sequences.
        seq_len: sequence length, at least 2.
        seed: the seed.

    Returns:
        A dataset of X (n, seq_len, 2) float32 (batch first) and y (n, 1) float32.
    """
    if n < 1:
        raise ValueError(f"adding_problem(n={n}): n must be at least 1.")
    if seq_len < 2:
        raise ValueError(f"adding_problem(seq_len={seq_len}): need at least 2 steps to mark two values.")
    generator = torch.Generator().manual_seed(seed)
    values = torch.rand((n, seq_len), generator=generator)
    half = seq_len // 2
    first = torch.randint(0, half, (n,), generator=generator)
    second = torch.randint(half, seq_len, (n,), generator=generator)
    markers = torch.zeros(n, seq_len)
    rows = torch.arange(n)
    markers[rows, first] = 1.0
    markers[rows, second] = 1.0
    targets = (values * markers).sum(dim=1, keepdim=True)
    return LabeledTensorDataset(torch.stack([values, markers], dim=2), targets)
