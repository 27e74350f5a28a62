"""03-split-normalize, the probe: Call split_and_normalize twice with the same seed; record both results as data."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils.data import TensorDataset

from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
from harness.contract.registry import register


def split_problem(case: Case) -> tuple[torch.Tensor, torch.Tensor, float, int]:
    """(x, ids, val_fraction, seed): inputs with offsets and scales per feature, the last one constant (std 0),
    labels a permutation of row ids, rows sorted by the first feature."""
    # N * val_fraction has a fraction part above .5 (20.6, 39.75): int() and round() give different sizes.
    n, features, fraction, seed = (159, 5, 0.25, 11) if case.hidden else (103, 4, 0.2, 0)
    seed = case.seeded(seed)
    generator = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(n, features, generator=generator) * torch.linspace(0.5, 3.0, features) + torch.arange(features)
    # Rows sorted by the first feature, as files often come sorted: an unshuffled split is then biased.
    x = x[x[:, 0].argsort()]
    x[:, -1] = 4.0
    ids = torch.randperm(n, generator=generator)
    return x, ids, fraction, seed


def _split_record(result: Any) -> dict:
    """What split_and_normalize returned, as data: each split's tensors (and its type), mean and std."""
    if not (isinstance(result, (tuple, list)) and len(result) == 4):
        return {"result": result}
    train_set, val_set, mean, std = result
    return {"splits": [list(s.tensors) if isinstance(s, TensorDataset) else None for s in (train_set, val_set)],
            "split_types": [type(s).__name__ for s in (train_set, val_set)], "mean": mean, "std": std}


@register(
    "03-split-normalize", unjudged=('again/*',), nonfinite=('*/splits/*',),
    hints=Hints(
        nudge="Shuffle the row indices with a generator seeded by `seed`, cut them into validation and training, "
        "and compute mean and std on the training rows only; normalise both splits with those two numbers per "
        "feature.",
        concept="Split first (one seeded permutation, cut in two), then compute statistics on the training rows "
        "alone and apply those same statistics to every split: anything computed from validation rows and fed "
        "into training leaks.",
        solution="`perm = torch.randperm(n, generator=make_generator(seed)); n_val = round(n * val_fraction)`; "
        "`val, train = perm[:n_val], perm[n_val:]`; `mean = x[train].mean(0); std = x[train].std(0).clamp_min(1e-8)`;"
        " return TensorDatasets of `(x[idx] - mean) / std` and `y[idx]`, then mean and std.",
        section="6. Splits without leakage, normalisation from training statistics",
    ),
    requires={
        "wrong-return": Requirement(
            "returns (train_set, val_set, mean, std), each set a TensorDataset(inputs, labels)",
            hint="The check unpacks `train_set, val_set, mean, std`, and reads each set's .tensors: what does your "
            "return statement give?"),
        "not-a-tensor": Requirement(
            "mean and std are tensors",
            hint="mean and std are used on tensors later: are yours NumPy arrays or Python numbers?"),
        "overlap": Requirement(
            "no row is in both splits",
            hint="Draw ONE permutation and cut it in two: two independent draws share rows."),
        "rows-lost": Requirement(
            "every row is in exactly one split",
            hint="Add the sizes of your two splits: do they give N? Look at the indices around the cut."),
        "wrong-size": Requirement(
            "the validation split has round(N * val_fraction) rows",
            hint="Which split should val_fraction size: the first round(N * val_fraction) shuffled rows go where?"),
        "val-not-first": Requirement(
            "the first round(N * val_fraction) rows of the seeded permutation are the validation split",
            hint="Cut the permutation as the text says: its first round(N * val_fraction) indices are validation, "
            "the rest training."),
        "labels-misaligned": Requirement(
            "each split's labels are y[rows], unchanged, next to x[rows] of the same rows",
            hint="Index x and y with the same row indices, and leave y's values and dtype alone."),
        "not-shuffled": Requirement(
            "the row indices are shuffled before the cut",
            hint="The rows of x come sorted (files often do): slicing them in order gives a biased validation set."),
        "nonfinite": Requirement(
            "a constant feature (std 0) still gives finite values",
            hint="One feature of the check's data is constant: what is its std, and what happens when you divide "
            "by it?"),
        "not-normalized": Requirement(
            "both splits hold (x[rows] - mean) / std with the returned mean and std",
            hint="Un-normalise your training inputs with the mean and std you return: do you get the rows of x "
            "back?"),
        "stats-from-all-data": Requirement(
            "mean and std come from the training rows only",
            hint="Which rows did you compute mean and std on? The validation rows must not contribute."),
        "wrong-stats": Requirement(
            "mean and std are the per-feature (shape (F,)) mean and std of the training rows",
            hint="Print mean.shape and std.shape: one number per feature means reducing over the rows (dim 0)."),
        "val-own-stats": Requirement(
            "the validation split uses the training mean and std",
            hint="Normalise the validation rows with the statistics you return, not with statistics of their own."),
        "not-reproducible": Requirement(
            "the same seed gives the same split",
            hint="Call your function twice with the same seed: where does the permutation get its randomness?"),
    },
)
def probe_split_normalize(split_and_normalize: Callable, *, case: Case) -> dict:
    """Call split_and_normalize twice with the same seed; record both results as data."""
    x, ids, fraction, seed = split_problem(case)
    first = _split_record(split_and_normalize(x.clone(), ids.clone(), val_fraction=fraction, seed=seed))
    again = _split_record(split_and_normalize(x.clone(), ids.clone(), val_fraction=fraction, seed=seed))
    return {"first": first, "again": again}
