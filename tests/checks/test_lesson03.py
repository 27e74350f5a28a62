"""Planted bugs for the checks of lesson 03 (data loading): every failure code is reached by a wrong
implementation, and two different correct implementations pass, visible and hidden."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset, RandomSampler, TensorDataset, get_worker_info

from harness.checks import CheckFailed, check
from harness.checks.core import Case, decide, observe
from harness.checks.testing import DRAWN_CASE, assert_check_fails, assert_forgeries_refused
from harness.repro import make_generator

# ---------------------------------------------------------------------------------------------------- dataset


class ArrayDataset(Dataset):
    def __init__(self, features, labels, transform=None):
        if len(features) != len(labels):
            raise ValueError("features and labels differ in length")
        self.features, self.labels, self.transform = features, labels, transform

    def __len__(self):
        return len(self.features)

    def __getitem__(self, index):
        x = self.features[index]
        return (self.transform(x) if self.transform else x), self.labels[index]


class PairsDataset(Dataset):
    """Correct too: stores pairs and an identity default transform."""

    def __init__(self, features, labels, transform=None):
        if features.shape[0] != labels.shape[0]:
            raise ValueError(f"{features.shape[0]} inputs but {labels.shape[0]} labels")
        self.pairs = list(zip(features, labels))
        self.transform = transform or (lambda x: x)

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, index):
        x, y = self.pairs[index]
        return self.transform(x), y


class WrongLength(ArrayDataset):
    def __len__(self):
        return len(self.features) - 1


class WrongItem(ArrayDataset):
    def __getitem__(self, index):
        return self.features[index], self.labels[index - 1]


class NestedItem(ArrayDataset):
    def __getitem__(self, index):
        x, y = super().__getitem__(index)
        return x, y.unsqueeze(0)


class EagerTransform(ArrayDataset):
    def __init__(self, features, labels, transform=None):
        if transform is not None:
            features = torch.stack([transform(x) for x in features])
        super().__init__(features, labels)


class IgnoresTransform(ArrayDataset):
    def __getitem__(self, index):
        return self.features[index], self.labels[index]


class TransformsPair(ArrayDataset):
    def __getitem__(self, index):
        if self.transform is None:
            return self.features[index], self.labels[index]
        return self.transform(self.features[index]), self.transform(self.labels[index])


class NoLengthCheck(ArrayDataset):
    def __init__(self, features, labels, transform=None):
        self.features, self.labels, self.transform = features, labels, transform


@pytest.mark.parametrize("cls", [ArrayDataset, PairsDataset])
@pytest.mark.parametrize("hidden", [False, True])
def test_dataset_passes(cls, hidden):
    check("03-dataset", cls, hidden=hidden)


@pytest.mark.parametrize(
    "cls, code, phrase",
    [
        (WrongLength, "wrong-length", "number of samples"),
        (WrongItem, "wrong-item", "(features[0], labels[0])"),
        (NestedItem, "wrong-item", "a DataLoader batch of 4"),
        (EagerTransform, "eager-transform", "while the dataset was being built"),
        (IgnoresTransform, "transform-not-applied", "called the transform 0 times"),
        (TransformsPair, "transform-on-label", "label untouched"),
        (NoLengthCheck, "no-length-check", "ValueError"),
    ],
)
def test_dataset_rejects(cls, code, phrase):
    assert_check_fails("03-dataset", cls, code=code, phrase=phrase)


# ---------------------------------------------------------------------------------------------------- pad collate


def pad_collate(batch):
    sequences, labels = zip(*batch)
    lengths = torch.tensor([len(s) for s in sequences])
    return pad_sequence(list(sequences), batch_first=True), lengths, torch.stack(labels)


def pad_collate_by_hand(batch):
    """Correct too: allocates the padded tensor and copies each sequence in."""
    longest = max(len(s) for s, _ in batch)
    padded = batch[0][0].new_zeros(len(batch), longest, batch[0][0].shape[1])
    for i, (sequence, _) in enumerate(batch):
        padded[i, : len(sequence)] = sequence
    return padded, torch.tensor([len(s) for s, _ in batch], dtype=torch.int64), torch.tensor([int(y) for _, y in batch])


def collate_dict(batch):
    padded, lengths, labels = pad_collate(batch)
    return {"x": padded, "lengths": lengths, "y": labels}


def collate_list_lengths(batch):
    padded, lengths, labels = pad_collate(batch)
    return padded, lengths.tolist(), labels


def collate_fixed_length(batch):
    padded, lengths, labels = pad_collate(batch)
    return torch.nn.functional.pad(padded, (0, 0, 0, 12 - padded.shape[1])), lengths, labels


def collate_time_first(batch):
    sequences, labels = zip(*batch)
    return pad_sequence(list(sequences)), torch.tensor([len(s) for s in sequences]), torch.stack(labels)


def collate_sorted(batch):
    ordered = sorted(batch, key=lambda item: len(item[0]), reverse=True)
    sequences = [s for s, _ in ordered]
    return (pad_sequence(sequences, batch_first=True), torch.tensor([len(s) for s in sequences]),
            torch.stack([y for _, y in batch]))


def collate_scaled(batch):
    padded, lengths, labels = pad_collate(batch)
    return padded * 2, lengths, labels


def collate_pad_minus_one(batch):
    sequences, labels = zip(*batch)
    padded = pad_sequence(list(sequences), batch_first=True, padding_value=-1.0)
    return padded, torch.tensor([len(s) for s in sequences]), torch.stack(labels)


def collate_int32_lengths(batch):
    padded, lengths, labels = pad_collate(batch)
    return padded, lengths.int(), labels


def collate_padded_lengths(batch):
    padded, _, labels = pad_collate(batch)
    return padded, torch.full((len(batch),), padded.shape[1], dtype=torch.int64), labels


def collate_shifted_labels(batch):
    padded, lengths, labels = pad_collate(batch)
    return padded, lengths, labels.roll(1) + 1


@pytest.mark.parametrize("fn", [pad_collate, pad_collate_by_hand])
@pytest.mark.parametrize("hidden", [False, True])
def test_pad_collate_passes(fn, hidden):
    check("03-pad-collate", fn, hidden=hidden)


@pytest.mark.parametrize(
    "fn, code, phrase",
    [
        (collate_dict, "wrong-return", "(padded, lengths, labels)"),
        (collate_list_lengths, "not-a-tensor", "lengths is a list"),
        (collate_fixed_length, "wrong-shape", "batch's longest"),
        (collate_time_first, "wrong-shape", "batch first"),
        (collate_sorted, "order-changed", "reordered"),
        (collate_scaled, "wrong-values", "altered"),
        (collate_pad_minus_one, "nonzero-padding", "zeros after each sequence's end"),
        (collate_int32_lengths, "wrong-lengths", "int64"),
        (collate_padded_lengths, "wrong-lengths", "true length"),
        (collate_shifted_labels, "wrong-labels", "batch order"),
    ],
)
def test_pad_collate_rejects(fn, code, phrase):
    assert_check_fails("03-pad-collate", fn, code=code, phrase=phrase)


# ---------------------------------------------------------------------------------------------------- seeded loader


def make_loader(dataset, batch_size, seed):
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=make_generator(seed))


def make_loader_with_sampler(dataset, batch_size, seed):
    """Correct too: an explicit RandomSampler with its own generator."""
    generator = torch.Generator()
    generator.manual_seed(seed)
    return DataLoader(dataset, batch_size=batch_size, sampler=RandomSampler(dataset, generator=generator))


def loader_global_rng(dataset, batch_size, seed):
    return DataLoader(dataset, batch_size=batch_size, shuffle=True)


def loader_unshuffled(dataset, batch_size, seed):
    return DataLoader(dataset, batch_size=batch_size, generator=make_generator(seed))


def loader_fixed_permutation(dataset, batch_size, seed):
    order = torch.randperm(len(dataset), generator=make_generator(seed)).tolist()
    return DataLoader(dataset, batch_size=batch_size, sampler=order)


def loader_constant_seed(dataset, batch_size, seed):
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=make_generator(42))


def loader_with_replacement(dataset, batch_size, seed):
    sampler = RandomSampler(dataset, replacement=True, generator=make_generator(seed))
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def loader_default_batch(dataset, batch_size, seed):
    return DataLoader(dataset, shuffle=True, generator=make_generator(seed))


@pytest.mark.parametrize("fn", [make_loader, make_loader_with_sampler])
@pytest.mark.parametrize("hidden", [False, True])
def test_seeded_loader_passes(fn, hidden):
    check("03-seeded-loader", fn, hidden=hidden)


@pytest.mark.parametrize(
    "fn, code, phrase",
    [
        (loader_global_rng, "not-reproducible", "global RNG"),
        (loader_unshuffled, "not-shuffled", "shuffle=True"),
        (loader_fixed_permutation, "same-order-every-epoch", "fixed permutation"),
        (loader_constant_seed, "seed-ignored", "constant"),
        (loader_with_replacement, "drops-samples", "exactly once per epoch"),
        (loader_default_batch, "wrong-batch-size", "batch_size="),
    ],
)
def test_seeded_loader_rejects(fn, code, phrase):
    assert_check_fails("03-seeded-loader", fn, code=code, phrase=phrase)


# ---------------------------------------------------------------------------------------------------- worker init
# These start real worker processes (fork where available), a second or so each.


def reseed_dataset_rng(worker_id):
    info = get_worker_info()
    info.dataset.rng = np.random.default_rng(info.seed)


def reseed_with_seed_sequence(worker_id):
    """Correct too: torch's per-worker seed through a SeedSequence, plus the worker id as a stream key."""
    info = get_worker_info()
    info.dataset.rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([torch.initial_seed() % 2**32, worker_id])))


def reseed_global_numpy_only(worker_id):
    np.random.seed(torch.initial_seed() % 2**32)
    random.seed(torch.initial_seed())


def reseed_from_worker_id(worker_id):
    get_worker_info().dataset.rng = np.random.default_rng(worker_id)


def reseed_from_pid(worker_id):
    get_worker_info().dataset.rng = np.random.default_rng(os.getpid())


@pytest.mark.slow
@pytest.mark.parametrize("fn", [reseed_dataset_rng, reseed_with_seed_sequence])
@pytest.mark.parametrize("hidden", [False, True])
def test_worker_init_passes(fn, hidden):
    check("03-worker-init", fn, hidden=hidden)


@pytest.mark.slow
@pytest.mark.parametrize(
    "fn, code, phrase",
    [
        (reseed_global_numpy_only, "duplicate-across-workers", "same sequence"),
        (reseed_from_worker_id, "same-every-epoch", "worker_id alone"),
        (reseed_from_pid, "not-reproducible", "process id"),
    ],
)
def test_worker_init_rejects(fn, code, phrase):
    assert_check_fails("03-worker-init", fn, code=code, phrase=phrase)


# ---------------------------------------------------------------------------------------------------- split + normalise


def split_and_normalize(x, y, *, val_fraction, seed):
    order = torch.randperm(len(x), generator=make_generator(seed))
    n_val = round(len(x) * val_fraction)
    val, train = order[:n_val], order[n_val:]
    mean, std = x[train].mean(0), x[train].std(0).clamp_min(1e-8)
    return TensorDataset((x[train] - mean) / std, y[train]), TensorDataset((x[val] - mean) / std, y[val]), mean, std


def split_with_sklearn_style(x, y, *, val_fraction, seed):
    """Correct too: NumPy permutation, biased std, constant features mapped to std 1."""
    rng = np.random.default_rng(seed)
    order = torch.from_numpy(rng.permutation(len(x)))
    n_train = len(x) - int(round(len(x) * val_fraction))
    train, val = order[:n_train], order[n_train:]
    mean = x[train].mean(0)
    std = x[train].std(0, unbiased=False)
    std = torch.where(std > 0, std, torch.ones_like(std))
    return TensorDataset((x[train] - mean) / std, y[train]), TensorDataset((x[val] - mean) / std, y[val]), mean, std


def split_returns_pair(x, y, *, val_fraction, seed):
    return split_and_normalize(x, y, val_fraction=val_fraction, seed=seed)[:2]


def split_overlapping(x, y, *, val_fraction, seed):
    generator = make_generator(seed)
    n_val = round(len(x) * val_fraction)
    val = torch.randperm(len(x), generator=generator)[:n_val]
    train = torch.randperm(len(x), generator=generator)[n_val:]
    mean, std = x[train].mean(0), x[train].std(0).clamp_min(1e-8)
    return TensorDataset((x[train] - mean) / std, y[train]), TensorDataset((x[val] - mean) / std, y[val]), mean, std


def split_off_by_one(x, y, *, val_fraction, seed):
    order = torch.randperm(len(x), generator=make_generator(seed))
    n_val = round(len(x) * val_fraction)
    val, train = order[:n_val], order[n_val + 1 :]
    mean, std = x[train].mean(0), x[train].std(0).clamp_min(1e-8)
    return TensorDataset((x[train] - mean) / std, y[train]), TensorDataset((x[val] - mean) / std, y[val]), mean, std


def split_fraction_swapped(x, y, *, val_fraction, seed):
    return split_and_normalize(x, y, val_fraction=1 - val_fraction, seed=seed)


def split_tail(x, y, *, val_fraction, seed):
    n_train = len(x) - round(len(x) * val_fraction)
    train, val = torch.arange(n_train), torch.arange(n_train, len(x))
    mean, std = x[train].mean(0), x[train].std(0).clamp_min(1e-8)
    return TensorDataset((x[train] - mean) / std, y[train]), TensorDataset((x[val] - mean) / std, y[val]), mean, std


def split_unguarded_std(x, y, *, val_fraction, seed):
    order = torch.randperm(len(x), generator=make_generator(seed))
    n_val = round(len(x) * val_fraction)
    val, train = order[:n_val], order[n_val:]
    mean, std = x[train].mean(0), x[train].std(0)
    return TensorDataset((x[train] - mean) / std, y[train]), TensorDataset((x[val] - mean) / std, y[val]), mean, std


def split_misaligned(x, y, *, val_fraction, seed):
    train_set, val_set, mean, std = split_and_normalize(x, y, val_fraction=val_fraction, seed=seed)
    inputs, labels = train_set.tensors
    return TensorDataset(inputs, labels.roll(1)), val_set, mean, std


def split_min_max(x, y, *, val_fraction, seed):
    train_set, val_set, mean, std = split_and_normalize(x, y, val_fraction=val_fraction, seed=seed)
    order = torch.randperm(len(x), generator=make_generator(seed))
    train = order[round(len(x) * val_fraction):]
    low, high = x[train].min(0).values, x[train].max(0).values
    return TensorDataset((x[train] - low) / (high - low).clamp_min(1e-8), y[train]), val_set, mean, std


def split_stats_from_all(x, y, *, val_fraction, seed):
    mean, std = x.mean(0), x.std(0).clamp_min(1e-8)
    order = torch.randperm(len(x), generator=make_generator(seed))
    n_val = round(len(x) * val_fraction)
    val, train = order[:n_val], order[n_val:]
    return TensorDataset((x[train] - mean) / std, y[train]), TensorDataset((x[val] - mean) / std, y[val]), mean, std


def split_std_over_rows(x, y, *, val_fraction, seed):
    order = torch.randperm(len(x), generator=make_generator(seed))
    n_val = round(len(x) * val_fraction)
    val, train = order[:n_val], order[n_val:]
    mean = x[train].mean(0)
    std = x[train].std().expand_as(mean)  # one std over every feature
    return TensorDataset((x[train] - mean) / std, y[train]), TensorDataset((x[val] - mean) / std, y[val]), mean, std


def split_val_own_stats(x, y, *, val_fraction, seed):
    train_set, _, mean, std = split_and_normalize(x, y, val_fraction=val_fraction, seed=seed)
    order = torch.randperm(len(x), generator=make_generator(seed))
    val = order[: round(len(x) * val_fraction)]
    own_mean, own_std = x[val].mean(0), x[val].std(0).clamp_min(1e-8)
    return train_set, TensorDataset((x[val] - own_mean) / own_std, y[val]), mean, std


def split_global_rng(x, y, *, val_fraction, seed):
    order = torch.randperm(len(x))
    n_val = round(len(x) * val_fraction)
    val, train = order[:n_val], order[n_val:]
    mean, std = x[train].mean(0), x[train].std(0).clamp_min(1e-8)
    return TensorDataset((x[train] - mean) / std, y[train]), TensorDataset((x[val] - mean) / std, y[val]), mean, std


@pytest.mark.parametrize("fn", [split_and_normalize, split_with_sklearn_style])
@pytest.mark.parametrize("hidden", [False, True])
def test_split_normalize_passes(fn, hidden):
    check("03-split-normalize", fn, hidden=hidden)


@pytest.mark.parametrize(
    "fn, code, phrase",
    [
        (split_returns_pair, "wrong-return", "(train_set, val_set, mean, std)"),
        (split_overlapping, "overlap", "in both the training and the validation split"),
        (split_off_by_one, "rows-lost", "exactly one split"),
        (split_fraction_swapped, "wrong-size", "val_fraction"),
        (split_tail, "not-shuffled", "sorted"),
        (split_misaligned, "labels-misaligned", "different permutations"),
        (split_min_max, "not-normalized", "other statistics"),
        (split_stats_from_all, "stats-from-all-data", "leaks validation information"),
        (split_std_over_rows, "wrong-stats", "per-feature std"),
        (split_val_own_stats, "val-own-stats", "their own"),
        (split_global_rng, "not-reproducible", "global RNG"),
    ],
)
def test_split_normalize_rejects(fn, code, phrase):
    assert_check_fails("03-split-normalize", fn, code=code, phrase=phrase)


def test_split_normalize_rejects_division_by_zero_std():
    with pytest.raises(CheckFailed) as failure:
        check("03-split-normalize", split_unguarded_std, hidden=True)  # the hidden data has a constant feature
    assert failure.value.code == "nonfinite"
    assert "clamp_min" in str(failure.value)


# ---------------------------------------------------------------------------------------------------- graded cases
CORRECT = [
    ("03-dataset", ArrayDataset), ("03-dataset", PairsDataset),
    ("03-pad-collate", pad_collate), ("03-pad-collate", pad_collate_by_hand),
    ("03-seeded-loader", make_loader), ("03-seeded-loader", make_loader_with_sampler),
    pytest.param("03-worker-init", reseed_dataset_rng, marks=pytest.mark.slow),
    pytest.param("03-worker-init", reseed_with_seed_sequence, marks=pytest.mark.slow),
    ("03-split-normalize", split_and_normalize), ("03-split-normalize", split_with_sklearn_style),
]


@pytest.mark.parametrize("task, solution", CORRECT)
def test_correct_solutions_pass_a_drawn_hidden_case(task, solution):
    decide(task, observe(task, (solution,), DRAWN_CASE), DRAWN_CASE)


@pytest.mark.parametrize("task, solution", CORRECT[::2])
def test_judges_refuse_truncated_observations(task, solution):
    case = Case(hidden=True)
    assert_forgeries_refused(task, solution, case=case)
