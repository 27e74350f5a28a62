"""The mutation set of lesson 03 (data loading): plausible wrong answers, each failing its check with its code
and message, and different correct answers passing visible, hidden and drawn hidden checks."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import (
    DataLoader,
    Dataset,
    RandomSampler,
    TensorDataset,
    get_worker_info,
)

from harness.checks.testing import Correct, Mistake, assert_forgeries_refused, solution_cell
from harness.contract.case import Case
from harness.repro import make_generator, seed_everything
from tests.exercises import notebook_namespace

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
        self.pairs = list(zip(features, labels, strict=True))
        self.transform = transform or (lambda x: x)

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, index):
        x, y = self.pairs[index]
        return self.transform(x), y


class LengthIsFeatureCount(ArrayDataset):
    def __len__(self):
        return self.features.shape[1]


class SlicedItem(ArrayDataset):
    def __getitem__(self, index):
        return self.features[index : index + 1], self.labels[index : index + 1]


class LabelOffByOne(ArrayDataset):
    def __getitem__(self, index):
        return self.features[index], self.labels[index - 1]


class DictItem(ArrayDataset):
    def __getitem__(self, index):
        return {"x": self.features[index], "y": self.labels[index]}


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


class AssertLengths(ArrayDataset):
    def __init__(self, features, labels, transform=None):
        assert len(features) == len(labels), "features and labels differ in length"
        self.features, self.labels, self.transform = features, labels, transform


class SilentValueError(ArrayDataset):
    def __init__(self, features, labels, transform=None):
        if len(features) != len(labels):
            raise ValueError
        self.features, self.labels, self.transform = features, labels, transform


# ---------------------------------------------------------------------------------------------------- pad collate


def pad_collate(batch):
    sequences, labels = zip(*batch, strict=True)
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
    sequences, labels = zip(*batch, strict=True)
    return pad_sequence(list(sequences)), torch.tensor([len(s) for s in sequences]), torch.stack(labels)


def collate_sorted(batch):
    ordered = sorted(batch, key=lambda item: len(item[0]), reverse=True)
    sequences = [s for s, _ in ordered]
    return (pad_sequence(sequences, batch_first=True), torch.tensor([len(s) for s in sequences]),
            torch.stack([y for _, y in batch]))


def collate_normalised(batch):
    padded, lengths, labels = pad_collate(batch)
    return padded / padded.abs().amax().clamp_min(1e-8), lengths, labels


def collate_pad_minus_one(batch):
    sequences, labels = zip(*batch, strict=True)
    padded = pad_sequence(list(sequences), batch_first=True, padding_value=-1.0)
    return padded, torch.tensor([len(s) for s in sequences]), torch.stack(labels)


def collate_int32_lengths(batch):
    padded, lengths, labels = pad_collate(batch)
    return padded, lengths.int(), labels


def collate_padded_lengths(batch):
    padded, _, labels = pad_collate(batch)
    return padded, torch.full((len(batch),), padded.shape[1], dtype=torch.int64), labels


def collate_sorted_lengths(batch):
    padded, lengths, labels = pad_collate(batch)
    return padded, lengths.sort(descending=True).values, labels


def collate_labels_sorted(batch):
    padded, lengths, labels = pad_collate(batch)
    return padded, lengths, labels.sort().values


# ---------------------------------------------------------------------------------------------------- seeded loader


def make_loader(dataset, batch_size, seed):
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=make_generator(seed))


def make_loader_with_sampler(dataset, batch_size, seed):
    """Correct too: an explicit RandomSampler with its own generator."""
    generator = torch.Generator()
    generator.manual_seed(seed)
    return DataLoader(dataset, batch_size=batch_size, sampler=RandomSampler(dataset, generator=generator))


def make_loader_seeding_globally_too(dataset, batch_size, seed):
    """Correct too: re-seeds the global RNG (harmless here) but shuffles with the loader's own generator."""
    torch.manual_seed(seed)
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=make_generator(seed))


def loader_global_rng(dataset, batch_size, seed):
    return DataLoader(dataset, batch_size=batch_size, shuffle=True)


def loader_manual_seed(dataset, batch_size, seed):
    torch.manual_seed(seed)
    return DataLoader(dataset, batch_size=batch_size, shuffle=True)


def loader_seed_everything(dataset, batch_size, seed):
    seed_everything(seed)
    return DataLoader(dataset, batch_size=batch_size, shuffle=True)


def loader_sampler_without_generator(dataset, batch_size, seed):
    return DataLoader(dataset, batch_size=batch_size, sampler=RandomSampler(dataset), generator=make_generator(seed))


def loader_unshuffled(dataset, batch_size, seed):
    return DataLoader(dataset, batch_size=batch_size, generator=make_generator(seed))


def loader_fixed_permutation(dataset, batch_size, seed):
    order = torch.randperm(len(dataset), generator=make_generator(seed)).tolist()
    return DataLoader(dataset, batch_size=batch_size, sampler=order)


def loader_constant_seed(dataset, batch_size, seed):
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=make_generator(42))


def loader_unseeded_generator(dataset, batch_size, seed):
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=torch.Generator())


def loader_with_replacement(dataset, batch_size, seed):
    sampler = RandomSampler(dataset, replacement=True, generator=make_generator(seed))
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def loader_drop_last(dataset, batch_size, seed):
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, drop_last=True, generator=make_generator(seed))


def loader_default_batch(dataset, batch_size, seed):
    return DataLoader(dataset, shuffle=True, generator=make_generator(seed))


# ---------------------------------------------------------------------------------------------------- worker init
# These start real worker processes (fork where available), a fraction of a second each.


def reseed_dataset_rng(worker_id):
    info = get_worker_info()
    info.dataset.rng = np.random.default_rng(info.seed)


def reseed_with_seed_sequence(worker_id):
    """Correct too: torch's per-worker seed through a SeedSequence, plus the worker id as a stream key."""
    info = get_worker_info()
    sequence = np.random.SeedSequence([torch.initial_seed() % 2**32, worker_id])
    info.dataset.rng = np.random.Generator(np.random.PCG64(sequence))


def reseed_global_numpy_only(worker_id):
    np.random.seed(torch.initial_seed() % 2**32)
    random.seed(torch.initial_seed())


def reseed_numpy_state_recipe(worker_id):
    np.random.seed(np.random.get_state()[1][0] + worker_id)


def reseed_torch_only(worker_id):
    torch.manual_seed(get_worker_info().seed)


def reseed_wrong_attribute(worker_id):
    info = get_worker_info()
    info.dataset.generator = np.random.default_rng(info.seed)


def reseed_from_worker_id(worker_id):
    get_worker_info().dataset.rng = np.random.default_rng(worker_id)


def reseed_constant_plus_id(worker_id):
    get_worker_info().dataset.rng = np.random.default_rng(1234 + worker_id)


def reseed_from_pid(worker_id):
    get_worker_info().dataset.rng = np.random.default_rng(os.getpid())


def reseed_from_os_entropy(worker_id):
    get_worker_info().dataset.rng = np.random.default_rng()


# ---------------------------------------------------------------------------------------------------- split + normalise


def split_and_normalize(x, y, *, val_fraction, seed):
    order = torch.randperm(len(x), generator=make_generator(seed))
    n_val = round(len(x) * val_fraction)
    val, train = order[:n_val], order[n_val:]
    mean, std = x[train].mean(0), x[train].std(0).clamp_min(1e-8)
    return TensorDataset((x[train] - mean) / std, y[train]), TensorDataset((x[val] - mean) / std, y[val]), mean, std


def split_int_size(x, y, *, val_fraction, seed):
    order = torch.randperm(len(x), generator=make_generator(seed))
    n_val = int(len(x) * val_fraction)
    val, train = order[:n_val], order[n_val:]
    mean, std = x[train].mean(0), x[train].std(0).clamp_min(1e-8)
    return TensorDataset((x[train] - mean) / std, y[train]), TensorDataset((x[val] - mean) / std, y[val]), mean, std


def split_training_first(x, y, *, val_fraction, seed):
    order = torch.randperm(len(x), generator=make_generator(seed))
    n_train = len(x) - round(len(x) * val_fraction)
    train, val = order[:n_train], order[n_train:]
    mean, std = x[train].mean(0), x[train].std(0).clamp_min(1e-8)
    return TensorDataset((x[train] - mean) / std, y[train]), TensorDataset((x[val] - mean) / std, y[val]), mean, std


def split_half_up_generator(x, y, *, val_fraction, seed):
    """Correct too: its own seeded torch.Generator, the size rounded half up, boolean masks."""
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    is_val = torch.zeros(len(x), dtype=torch.bool)
    is_val[order[: int(len(x) * val_fraction + 0.5)]] = True
    mean, std = x[~is_val].mean(0), x[~is_val].std(0)
    std = torch.where(std == 0, torch.ones_like(std), std)
    return (TensorDataset((x[~is_val] - mean) / std, y[~is_val]), TensorDataset((x[is_val] - mean) / std, y[is_val]),
            mean, std)


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


def split_numpy_stats(x, y, *, val_fraction, seed):
    train_set, val_set, mean, std = split_and_normalize(x, y, val_fraction=val_fraction, seed=seed)
    return train_set, val_set, mean.numpy(), std.numpy()


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


def split_labels_own_permutation(x, y, *, val_fraction, seed):
    generator = make_generator(seed)
    n_val = round(len(x) * val_fraction)
    rows, label_rows = torch.randperm(len(x), generator=generator), torch.randperm(len(x), generator=generator)
    val, train = rows[:n_val], rows[n_val:]
    mean, std = x[train].mean(0), x[train].std(0).clamp_min(1e-8)
    return (TensorDataset((x[train] - mean) / std, y[label_rows[n_val:]]),
            TensorDataset((x[val] - mean) / std, y[label_rows[:n_val]]), mean, std)


def split_float_labels(x, y, *, val_fraction, seed):
    train_set, val_set, mean, std = split_and_normalize(x, y.float(), val_fraction=val_fraction, seed=seed)
    return train_set, val_set, mean, std


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
    std = x[train].std().expand_as(mean).clamp_min(1e-8)  # one std over every feature
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


# ---------------------------------------------------------------------------------------------------- the mutation set

# What the notebook's other cells define, for the planted cells that use it
NOTEBOOK = notebook_namespace("03_data_loading")

MISTAKES = [
    # 03-dataset
    Mistake("03-dataset", "wrong-length", "len(dataset) = 2 for 10 samples", (LengthIsFeatureCount,),
            story="__len__ returns shape[1], the feature count, instead of the number of rows"),
    Mistake("03-dataset", "wrong-item", "a slice (features[i:i + 1])", (SlicedItem,),
            story="slices features[i:i+1] instead of indexing: an extra leading dimension"),
    Mistake("03-dataset", "wrong-item", "y comes from another index", (LabelOffByOne,),
            story="labels[index - 1]: off by one between inputs and labels"),
    Mistake("03-dataset", "wrong-item", "is dict", (DictItem,),
            story="returns a dict (HF style) where the exercise asks for the (x, y) pair"),
    Mistake("03-dataset", "eager-transform", "while the dataset was being built", (EagerTransform,),
            story="transforms every row once in __init__: the augmentation is frozen for all epochs"),
    Mistake("03-dataset", "transform-not-applied", "called the transform 0 times", (IgnoresTransform,),
            story="stores the transform but __getitem__ never calls it"),
    Mistake("03-dataset", "transform-on-label", "label untouched", (TransformsPair,),
            story="applies the transform to the label as well as the input"),
    Mistake("03-dataset", "no-length-check", "was accepted", (NoLengthCheck,),
            story="no length check: the mismatch surfaces later as an IndexError in the loader"),
    Mistake("03-dataset", "no-length-check", "an `assert`", (AssertLengths,),
            story="checks the lengths with assert instead of raising ValueError"),
    Mistake("03-dataset", "no-length-check", "without a message", (SilentValueError,),
            story="raises a bare ValueError that does not say what is wrong"),
    Mistake("03-dataset", "eager-transform", "while the dataset was being built", solution_cell(
        "class ArrayDataset(Dataset):\n"
        "    def __init__(self, features, labels, transform=None):\n"
        "        if len(features) != len(labels):\n"
        '            raise ValueError("features and labels differ in length")\n'
        "        self.features = features if transform is None else torch.stack([transform(x) for x in features])\n"
        "        self.labels = labels\n"
        "\n"
        "    def __len__(self):\n"
        "        return len(self.features)\n"
        "\n"
        "    def __getitem__(self, index):\n"
        "        return self.features[index], self.labels[index]\n",
        "ArrayDataset", given=NOTEBOOK),
        story="transforms every row once in __init__: the augmentation is frozen for all epochs", planted=True),
    # 03-pad-collate
    Mistake("03-pad-collate", "wrong-return", "(padded, lengths, labels)", (collate_dict,),
            story="returns a dict of the three, as some tutorials do"),
    Mistake("03-pad-collate", "not-a-tensor", "lengths is a list", (collate_list_lengths,),
            story="keeps the lengths as a Python list"),
    Mistake("03-pad-collate", "wrong-shape", "fixed length instead of the batch's longest", (collate_fixed_length,),
            story="pads every batch to the dataset's maximum length"),
    Mistake("03-pad-collate", "wrong-shape", "time-first layout", (collate_time_first,),
            story="forgets batch_first=True: pad_sequence is time-first by default"),
    Mistake("03-pad-collate", "order-changed", "reordered", (collate_sorted,),
            story="sorts by length for pack_padded_sequence but keeps the labels in batch order"),
    Mistake("03-pad-collate", "wrong-values", "altered", (collate_normalised,),
            story="rescales the padded batch inside the collate"),
    Mistake("03-pad-collate", "nonzero-padding", "zeros after each sequence's end", (collate_pad_minus_one,),
            story="pads with -1 (a common 'ignore' value for labels) instead of 0"),
    Mistake("03-pad-collate", "wrong-lengths", "another dtype (torch.int32)", (collate_int32_lengths,),
            story="lengths as int32"),
    Mistake("03-pad-collate", "wrong-lengths", "taken from the padded tensor", (collate_padded_lengths,),
            story="takes every length from padded.shape[1]"),
    Mistake("03-pad-collate", "wrong-lengths", "lengths are sorted", (collate_sorted_lengths,),
            story="sorts the lengths (enforce_sorted habit) but not the batch"),
    Mistake("03-pad-collate", "wrong-labels", "batch order", (collate_labels_sorted,),
            story="labels sorted: they no longer follow the batch"),
    Mistake("03-pad-collate", "order-changed", "reordered", solution_cell(
        "def pad_collate(batch):\n"
        "    sequences = sorted((sequence for sequence, _ in batch), key=len, reverse=True)\n"
        "    lengths = torch.tensor([len(sequence) for sequence in sequences])\n"
        "    labels = torch.stack([label for _, label in batch])\n"
        "    return pad_sequence(sequences, batch_first=True), lengths, labels\n",
        "pad_collate", given=NOTEBOOK),
        story="sorts by length for pack_padded_sequence but keeps the labels in batch order", planted=True),
    # 03-seeded-loader
    Mistake("03-seeded-loader", "not-reproducible", "shuffle=True without generator=", (loader_global_rng,),
            story="shuffle=True alone: the order comes from the global RNG"),
    Mistake("03-seeded-loader", "seeds-global-rng", "re-seeded the global torch RNG with seed=0", (loader_manual_seed,),
            story="torch.manual_seed(seed) then shuffle=True: the pitfall section 3 demonstrates"),
    Mistake("03-seeded-loader", "seeds-global-rng", "seed_everything(seed)", (loader_seed_everything,),
            story="seed_everything(seed) in make_loader instead of a generator for the loader"),
    Mistake("03-seeded-loader", "not-reproducible", "a sampler built without its own generator",
            (loader_sampler_without_generator,),
            story="passes generator= to the DataLoader but builds RandomSampler(dataset) without it"),
    Mistake("03-seeded-loader", "not-shuffled", "no shuffle=True", (loader_unshuffled,),
            story="passes a generator but forgets shuffle=True"),
    Mistake("03-seeded-loader", "same-order-every-epoch", "fixed permutation", (loader_fixed_permutation,),
            story="draws one permutation with the seed and passes it as the sampler"),
    Mistake("03-seeded-loader", "seed-ignored", "seeds 0 and 1 give the same order", (loader_constant_seed,),
            story="make_generator(42): a constant seed copied from an example"),
    Mistake("03-seeded-loader", "seed-ignored", "left at its default seed", (loader_unseeded_generator,),
            story="generator=torch.Generator() without manual_seed"),
    Mistake("03-seeded-loader", "drops-samples", "exactly once per epoch", (loader_with_replacement,),
            story="RandomSampler(replacement=True)"),
    Mistake("03-seeded-loader", "drops-samples", "drop_last=True", (loader_drop_last,),
            story="drop_last=True copied from a training script: the partial batch is lost"),
    Mistake("03-seeded-loader", "wrong-batch-size", "batch_size=10", (loader_default_batch,),
            story="forgets batch_size: the DataLoader default is 1"),
    Mistake("03-seeded-loader", "not-reproducible", "shuffle=True without generator=", solution_cell(
        "def make_loader(dataset, batch_size, seed):\n"
        "    return DataLoader(dataset, batch_size=batch_size, shuffle=True)\n",
        "make_loader", given=NOTEBOOK),
        story="shuffle=True alone: the order comes from the global RNG", planted=True),
    # 03-worker-init
    Mistake("03-worker-init", "duplicate-across-workers", "same sequence", (reseed_global_numpy_only,),
            story="seeds the global np.random and random (the old seed_worker recipe), not the dataset's rng"),
    Mistake("03-worker-init", "duplicate-across-workers", "does not replace this worker's dataset.rng",
            (reseed_numpy_state_recipe,),
            story="np.random.seed(np.random.get_state()[1][0] + worker_id), a recipe from a blog post"),
    Mistake("03-worker-init", "duplicate-across-workers", "same sequence", (reseed_torch_only,),
            story="torch.manual_seed(info.seed): thinks seeding torch covers NumPy"),
    Mistake("03-worker-init", "duplicate-across-workers", "same sequence", (reseed_wrong_attribute,),
            story="stores the new generator under another attribute than the dataset's rng"),
    Mistake("03-worker-init", "same-every-epoch", "worker_id alone", (reseed_from_worker_id,),
            story="default_rng(worker_id): workers differ, epochs repeat"),
    Mistake("03-worker-init", "same-every-epoch", "exactly the same noise",
            (reseed_constant_plus_id,), story="default_rng(1234 + worker_id): a constant base seed"),
    Mistake("03-worker-init", "not-reproducible", "process id", (reseed_from_pid,),
            story="seeds from os.getpid(): unique, but not reproducible"),
    Mistake("03-worker-init", "not-reproducible", "same loader seed", (reseed_from_os_entropy,),
            story="np.random.default_rng() with no seed: fresh OS entropy every time"),
    Mistake("03-worker-init", "same-every-epoch", "worker_id alone", solution_cell(
        "def reseed_dataset_rng(worker_id):\n"
        "    get_worker_info().dataset.rng = np.random.default_rng(worker_id)\n",
        "reseed_dataset_rng", given=NOTEBOOK),
        story="default_rng(worker_id): workers differ, epochs repeat", planted=True),
    # 03-split-normalize
    Mistake("03-split-normalize", "wrong-return", "(train_set, val_set, mean, std)", (split_returns_pair,),
            story="returns only the two datasets"),
    Mistake("03-split-normalize", "not-a-tensor", "mean is a ndarray", (split_numpy_stats,),
            story="returns mean and std as NumPy arrays (sklearn habit)"),
    Mistake("03-split-normalize", "overlap", "in both the training and the validation split", (split_overlapping,),
            story="draws two independent permutations for the two splits"),
    Mistake("03-split-normalize", "rows-lost", "exactly one split", (split_off_by_one,),
            story="off by one at the cut: order[n_val + 1:]"),
    Mistake("03-split-normalize", "wrong-size", "val_fraction", (split_fraction_swapped,),
            story="val_fraction sizes the training split"),
    Mistake("03-split-normalize", "wrong-size", "int() truncates", (split_int_size,),
            story="int() for the validation size instead of round()"),
    Mistake("03-split-normalize", "val-not-first", "its front taken for training", (split_training_first,),
            story="the first rows of the permutation used for training"),
    Mistake("03-split-normalize", "not-shuffled", "sorted", (split_tail,),
            story="takes the last rows as validation without shuffling"),
    Mistake("03-split-normalize", "nonfinite", "which is constant in x (std 0)", (split_unguarded_std,),
            story="divides by an unguarded std: a constant feature gives NaN"),
    Mistake("03-split-normalize", "labels-misaligned", "different row orders", (split_labels_own_permutation,),
            story="shuffles x and y with two separate randperm calls"),
    Mistake("03-split-normalize", "labels-misaligned", "torch.float32", (split_float_labels,),
            story="converts the labels to float on the way"),
    Mistake("03-split-normalize", "not-normalized", "other statistics", (split_min_max,),
            story="min-max scales the training split while returning mean and std"),
    Mistake("03-split-normalize", "stats-from-all-data", "leaks validation information", (split_stats_from_all,),
            story="normalises with statistics of all rows before splitting (the classic leak)"),
    Mistake("03-split-normalize", "wrong-stats", "per-feature std", (split_std_over_rows,),
            story="x.std() without dim: one std for every feature"),
    Mistake("03-split-normalize", "val-own-stats", "their own", (split_val_own_stats,),
            story="normalises the validation split with its own statistics"),
    Mistake("03-split-normalize", "not-reproducible", "global RNG", (split_global_rng,),
            story="torch.randperm without a generator"),
    Mistake("03-split-normalize", "stats-from-all-data", "leaks validation information", solution_cell(
        "def split_and_normalize(x, y, *, val_fraction, seed):\n"
        "    mean, std = x.mean(dim=0), x.std(dim=0).clamp_min(1e-8)\n"
        "    order = torch.randperm(len(x), generator=make_generator(seed))\n"
        "    n_val = round(len(x) * val_fraction)\n"
        "    val_rows, train_rows = order[:n_val], order[n_val:]\n"
        "    train_set = TensorDataset((x[train_rows] - mean) / std, y[train_rows])\n"
        "    val_set = TensorDataset((x[val_rows] - mean) / std, y[val_rows])\n"
        "    return train_set, val_set, mean, std\n",
        "split_and_normalize", given=NOTEBOOK),
        story="normalises with statistics of all rows before splitting (the classic leak)", planted=True),
]

CORRECT = [
    Correct("03-dataset", (ArrayDataset,), story="the solution"),
    Correct("03-dataset", (PairsDataset,), story="pairs stored in a list, identity default transform"),
    Correct("03-pad-collate", (pad_collate,), story="pad_sequence(batch_first=True)"),
    Correct("03-pad-collate", (pad_collate_by_hand,), story="new_zeros and copies, labels rebuilt from ints"),
    Correct("03-seeded-loader", (make_loader,), story="shuffle=True with make_generator(seed)"),
    Correct("03-seeded-loader", (make_loader_with_sampler,), story="RandomSampler with its own generator"),
    Correct("03-seeded-loader", (make_loader_seeding_globally_too,),
            story="seeds the global RNG too, but shuffles with its own generator"),
    Correct("03-worker-init", (reseed_dataset_rng,), story="default_rng(get_worker_info().seed)"),
    Correct("03-worker-init", (reseed_with_seed_sequence,), story="SeedSequence of torch.initial_seed and worker id"),
    Correct("03-split-normalize", (split_and_normalize,), story="randperm with a generator, clamp_min"),
    Correct("03-split-normalize", (split_half_up_generator,), story="own Generator, half-up size, boolean masks"),
    Correct("03-split-normalize", (split_with_sklearn_style,), story="NumPy permutation, biased std, std 1 if 0"),
]


@pytest.mark.parametrize("correct", [c for c in CORRECT if c.objects[0] in (
    ArrayDataset, pad_collate, make_loader, reseed_dataset_rng, split_and_normalize)], ids=str)
def test_judges_refuse_truncated_observations(correct):
    assert_forgeries_refused(correct.task, *correct.objects, case=Case(hidden=True))
