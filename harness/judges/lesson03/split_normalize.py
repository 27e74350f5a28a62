"""03-split-normalize, the judge.

split_and_normalize(x, y, val_fraction=, seed=): disjoint shuffled split, stats from training rows only.
"""

from __future__ import annotations

from typing import NoReturn

import torch

from harness.checks.lesson03.split_normalize import split_problem
from harness.contract.case import Case
from harness.contract.compare import close_values, malformed, same_values
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import type_name
from harness.judges.lesson03.common import _tensor
from harness.repro import make_generator


def _unpack_split(record: dict, where: str) -> tuple[torch.Tensor, ...]:
    """(x_train, id_train, x_val, id_val, mean, std) from a recorded result, or the failure that says why not."""
    if "splits" not in record:
        fail(
            "wrong-return",
            observed=f"split_and_normalize returned {type_name(record['result'])}",
            expected="a tuple (train_set, val_set, mean, std)",
            cause="the return statement has another shape",
            where=where,
        )
    rows = []
    for tensors, split_type in zip(record["splits"], record["split_types"], strict=True):
        if tensors is None or len(tensors) != 2:
            fail(
                "wrong-return",
                observed=f"a split is a {split_type}" + ("" if tensors is None else f" of {len(tensors)} tensors"),
                expected="a TensorDataset(x, y) of normalised inputs and labels",
                cause="the split is returned as indices or a Subset",
                where=where,
            )
        if not all(isinstance(t, torch.Tensor) for t in tensors):
            malformed("a TensorDataset holds tensors")
        rows += tensors
    return (*rows, _tensor(record["mean"], "mean", where), _tensor(record["std"], "std", where))


@judges(
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
def judge_split_normalize(seen: dict, *, case: Case) -> str:
    """split_and_normalize(x, y, val_fraction=, seed=): disjoint shuffled split, stats from training rows only."""
    x, ids, fraction, seed = split_problem(case)
    n, features = x.shape
    where = "your split_and_normalize"
    x_train, id_train, x_val, id_val, mean, std = _unpack_split(seen["first"], where)

    train_ids, val_ids = set(id_train.tolist()), set(id_val.tolist())
    if train_ids & val_ids:
        fail(
            "overlap",
            observed=f"{len(train_ids & val_ids)} rows are in both the training and the validation split",
            expected="disjoint splits",
            cause="the two index sets are drawn independently, or overlap at the cut",
            where=where,
        )
    if len(train_ids | val_ids) != n or len(id_train) + len(id_val) != n:
        fail(
            "rows-lost",
            observed=f"{len(id_train)} + {len(id_val)} rows returned, {len(train_ids | val_ids)} distinct, of {n}",
            expected=f"every one of the {n} rows in exactly one split",
            cause="an off-by-one at the cut, or sampling with replacement",
            where=where,
        )
    if abs(len(id_val) - n * fraction) > 1:
        fail(
            "wrong-size",
            observed=f"{len(id_val)} validation rows",
            expected=f"about {n * fraction:.0f} (val_fraction={fraction} of {n})",
            cause="val_fraction applied to the wrong split",
            where=where,
        )
    if len(id_val) != round(n * fraction):
        truncated = len(id_val) == int(n * fraction)
        fail(
            "wrong-size",
            observed=f"{len(id_val)} validation rows for N={n}, val_fraction={fraction} (N * val_fraction = "
            f"{n * fraction:g})" + (", the size int() gives" if truncated else ""),
            expected=f"round({n * fraction:g}) = {round(n * fraction)} validation rows",
            cause="int() truncates N * val_fraction (or // floors it) where the text asks round()" if truncated
            else "the validation size is rounded another way than round(N * val_fraction)",
            where=where,
            hint=(f"Print int({n} * {fraction}) and round({n} * {fraction}): which one does the text ask for?"
                  if truncated else None),
        )
    if id_train.dtype != ids.dtype or id_val.dtype != ids.dtype:
        fail(
            "labels-misaligned",
            observed=f"the labels of the splits are {id_train.dtype} and {id_val.dtype}; y is {ids.dtype}",
            expected="y[rows] unchanged next to x[rows], in y's dtype",
            cause="the labels are converted (e.g. .float()) instead of only indexed",
            where=where,
        )
    if train_ids | val_ids != set(range(n)):
        fail(
            "labels-misaligned",
            observed=f"{len((train_ids | val_ids) - set(range(n)))} labels of the splits are not values of y",
            expected="y[rows] unchanged next to x[rows]: every label of y, in exactly one split",
            cause="the labels are altered (shifted, rescaled, re-encoded) instead of only indexed",
            where=where,
        )
    position = torch.empty(n, dtype=torch.long)
    position[ids] = torch.arange(n)  # row index of each id in x
    val_positions = sorted(position[id_val].tolist())
    if val_positions in (list(range(len(val_positions))), list(range(n - len(val_positions), n))):
        fail(
            "not-shuffled",
            observed="the validation split is the first or last rows of x, in order",
            expected="a random split drawn with the seed",
            cause="slicing without shuffling: files are often sorted (here by the first feature), so the "
            "validation set would come from another distribution",
            where=where,
        )
    _judge_cut_side(position, id_val, n, seed, where)
    if not (torch.isfinite(x_train).all() and torch.isfinite(x_val).all() and torch.isfinite(std).all()
            and torch.isfinite(mean).all()):
        _judge_nonfinite(x, x_train, x_val, mean, std, where)
    raw_train = x[position[id_train]]
    if x_train.shape != raw_train.shape or not close_values(
            *torch.broadcast_tensors(x_train * std + mean, raw_train), rtol=1e-4, atol=1e-4, dtype=False):
        centred = x_train.shape == raw_train.shape and close_values(
            x_train.mean(0), torch.zeros(features), atol=1e-3, dtype=False)
        fail(
            "labels-misaligned" if centred else "not-normalized",
            observed="the training inputs, un-normalised with the returned mean and std, do not match the rows "
            "of x that their labels come from",
            expected="train_set[i] == ((x[r] - mean) / std, y[r]) for the same row r",
            cause="inputs and labels indexed with different row orders (the inputs are centred, but they are not "
            "the rows their labels name)" if centred else "the training inputs are scaled with other statistics "
            "than the mean and std returned, or with another formula than (x - mean) / std, or left raw",
            where=where,
        )
    if (close_values(*torch.broadcast_tensors(mean, x.mean(0)), atol=1e-5, dtype=False)
            and not close_values(raw_train.mean(0), x.mean(0), atol=1e-5, dtype=False)):
        fail(
            "stats-from-all-data",
            observed="mean equals the mean of all rows, validation included",
            expected="statistics of the training rows only",
            cause="computing mean/std before splitting leaks validation information into training",
            where=where,
        )
    if mean.shape != (features,) or not close_values(mean, raw_train.mean(0), atol=1e-4, dtype=False):
        fail(
            "wrong-stats",
            observed=f"mean = {mean.tolist()}",
            expected=f"{raw_train.mean(0).tolist()}, the per-feature mean of the training rows",
            cause="the mean is reduced over the wrong dimension (dim 0 is the rows)" if mean.shape != (features,)
            else "the mean is taken over other rows than the training rows",
            where=where,
        )
    reference_std = raw_train.std(0)
    varying = reference_std > 1e-6
    if std.shape != (features,) or not close_values(std[varying], reference_std[varying], rtol=2e-2, dtype=False):
        fail(
            "wrong-stats",
            observed=f"std = {std.tolist()}",
            expected=f"{reference_std.tolist()}, the per-feature std of the training rows",
            cause="the std is reduced over the wrong dimension or over every value at once (dim 0 is the rows)"
            if std.shape != (features,) or len(set(std[varying].tolist())) == 1
            else "the std is taken over other rows than the training rows, or is another spread (a variance, a range)",
            where=where,
        )
    raw_val = x[position[id_val]]
    if x_val.shape != raw_val.shape or not close_values(
            *torch.broadcast_tensors(x_val * std + mean, raw_val), rtol=1e-4, atol=1e-4, dtype=False):
        own = x_val.shape == raw_val.shape and close_values(
            x_val.mean(0)[varying], torch.zeros(int(varying.sum())), atol=1e-4, dtype=False)
        fail(
            "val-own-stats" if own else "not-normalized",
            observed="the validation inputs are not (x - mean) / std with the training statistics"
            + (" (they were normalised with their own)" if own else ""),
            expected="both splits normalised with the same training mean and std",
            cause="normalising the validation split with its own statistics: the model would see a shifted input "
            "at test time" if own else "the validation inputs are scaled with other statistics than the mean and "
            "std returned, or with another formula, or left raw",
            where=where,
        )
    again_val_ids = _unpack_split(seen["again"], where)[3]
    if not same_values(again_val_ids, id_val, dtype=False):
        fail(
            "not-reproducible",
            observed="two calls with the same seed give different validation rows",
            expected="the split is determined by `seed`",
            cause="the permutation draws from the global RNG (torch.randperm without generator=), or from a "
            "generator not seeded with `seed`",
            where=where,
        )
    return (f"{n} rows: disjoint shuffled {len(id_train)}/{len(id_val)} split, training statistics (a constant "
            "feature included), reproducible")


def _judge_cut_side(position: torch.Tensor, id_val: torch.Tensor, n: int, seed: int, where: str) -> None:
    """Fail when the validation rows are exactly the LAST rows of torch.randperm(N, make_generator(seed)), the
    permutation the text's solution draws: the training rows were taken from its front. Another shuffle (NumPy,
    random) is not judged here: only this observed cut is named."""
    order = torch.randperm(n, generator=make_generator(seed))
    n_val = len(id_val)
    val_rows = sorted(position[id_val].tolist())
    if n_val and val_rows == sorted(order[n - n_val:].tolist()) and val_rows != sorted(order[:n_val].tolist()):
        fail(
            "val-not-first",
            observed=f"the {n_val} validation rows are the last {n_val} indices of torch.randperm({n}, "
            "generator=make_generator(seed)); the first ones went to training",
            expected="validation = the first round(N * val_fraction) indices of the permutation, training the rest",
            cause="the permutation is cut the other way round: its front taken for training",
            where=where,
        )


def _judge_nonfinite(x: torch.Tensor, x_train: torch.Tensor, x_val: torch.Tensor, mean: torch.Tensor,
                     std: torch.Tensor, where: str) -> NoReturn:
    """NaN or inf came out: name the features, and whether they are the constant ones (std 0)."""
    columns = set()
    for values in (x_train, x_val):
        if values.dim() == 2 and values.shape[1] == x.shape[1]:
            columns |= set((~torch.isfinite(values)).any(0).nonzero().flatten().tolist())
    for stat in (mean, std):
        if stat.shape == (x.shape[1],):
            columns |= set((~torch.isfinite(stat)).nonzero().flatten().tolist())
    constant = set((x.std(0) == 0).nonzero().flatten().tolist())
    named = f"feature{'s' if len(columns) != 1 else ''} {sorted(columns)}" if columns else "the returned tensors"
    if columns and columns <= constant:
        observed = f"NaN or inf in {named}, which {'is' if len(columns) == 1 else 'are'} constant in x (std 0)"
        cause = "dividing by a zero standard deviation: the std of a constant feature is not guarded"
    else:
        observed = f"NaN or inf in {named}"
        cause = "dividing by a zero or NaN statistic (an unguarded std of 0, a std of a single row) or NaN in the " \
            "statistics"
    fail("nonfinite", observed=observed, expected="finite values: guard the std, e.g. std.clamp_min(1e-8)",
         cause=cause, where=where)
