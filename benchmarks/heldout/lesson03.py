"""Lesson 03 held-out entries (written from the exercise text only)."""

from entry import Entry

PRELUDE = '''
import multiprocessing
import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset, TensorDataset, get_worker_info
from harness.checks import check, hint
from harness.repro import make_generator, seed_everything
seed_everything(0)
torch.set_num_threads(1)
'''

SN = "def split_and_normalize(x, y, *, val_fraction, seed):\n"

ENTRIES = [
    Entry("03-dataset", "mistake", "transform applied once in __init__",
          "the transform runs once at construction: every read returns the same transformed copy", '''
class ArrayDataset(Dataset):
    def __init__(self, features, labels, transform=None):
        if len(features) != len(labels):
            raise ValueError("features and labels lengths differ")
        self.features = torch.stack([transform(f) for f in features]) if transform else features
        self.labels = labels

    def __len__(self):
        return len(self.features)

    def __getitem__(self, i):
        return self.features[i], self.labels[i]
''', ("ArrayDataset",)),
    Entry("03-dataset", "mistake", "no length check",
          "mismatched lengths are accepted (no ValueError)", '''
class ArrayDataset(Dataset):
    def __init__(self, features, labels, transform=None):
        self.features, self.labels, self.transform = features, labels, transform

    def __len__(self):
        return len(self.features)

    def __getitem__(self, i):
        x = self.features[i]
        return (self.transform(x) if self.transform else x), self.labels[i]
''', ("ArrayDataset",)),
    Entry("03-dataset", "mistake", "transform on the pair",
          "the transform is applied to the label too", '''
class ArrayDataset(Dataset):
    def __init__(self, features, labels, transform=None):
        if len(features) != len(labels):
            raise ValueError("features and labels lengths differ")
        self.features, self.labels, self.transform = features, labels, transform

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        x, y = self.features[i], self.labels[i]
        if self.transform is not None:
            x, y = self.transform(x), self.transform(y)
        return x, y
''', ("ArrayDataset",)),
    Entry("03-pad-collate", "mistake", "sorted by length (as for packing)",
          "the batch is sorted longest first: lengths and labels not in batch order", '''
def pad_collate(batch):
    batch = sorted(batch, key=lambda item: len(item[0]), reverse=True)
    seqs, labels = zip(*batch)
    return (pad_sequence(list(seqs), batch_first=True), torch.tensor([len(s) for s in seqs]),
            torch.stack(labels))
''', ("pad_collate",)),
    Entry("03-pad-collate", "mistake", "lengths as int32",
          "lengths tensor dtype int32 instead of int64", '''
def pad_collate(batch):
    seqs, labels = zip(*batch)
    return (pad_sequence(list(seqs), batch_first=True),
            torch.tensor([len(s) for s in seqs], dtype=torch.int32), torch.stack(labels))
''', ("pad_collate",)),
    Entry("03-pad-collate", "mistake", "time-major padding",
          "pad_sequence default batch_first=False: shape (longest, batch, features)", '''
def pad_collate(batch):
    seqs, labels = zip(*batch)
    return pad_sequence(list(seqs)), torch.tensor([len(s) for s in seqs]), torch.stack(labels)
''', ("pad_collate",)),
    Entry("03-seeded-loader", "mistake", "torch.manual_seed(seed) then shuffle",
          "re-seeds the global RNG: the order changes when something else draws from it", '''
def make_loader(dataset, batch_size, seed):
    torch.manual_seed(seed)
    return DataLoader(dataset, batch_size=batch_size, shuffle=True)
''', ("make_loader",)),
    Entry("03-seeded-loader", "mistake", "drop_last for even batches",
          "drop_last=True: the last partial batch is lost", '''
def make_loader(dataset, batch_size, seed):
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, drop_last=True,
                      generator=torch.Generator().manual_seed(seed))
''', ("make_loader",)),
    Entry("03-seeded-loader", "mistake", "a fixed permutation from the seed",
          "a SubsetRandomSampler-free fixed order: the same order every epoch", '''
def make_loader(dataset, batch_size, seed):
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed)).tolist()
    return DataLoader(dataset, batch_size=batch_size, sampler=order)
''', ("make_loader",)),
    Entry("03-worker-init", "mistake", "seeded from the worker id",
          "default_rng(worker_id): the same draws every epoch and for every loader seed", '''
def reseed_dataset_rng(worker_id):
    get_worker_info().dataset.rng = np.random.default_rng(worker_id)
''', ("reseed_dataset_rng",)),
    Entry("03-worker-init", "mistake", "seeded numpy's global RNG",
          "np.random.seed changes the global numpy RNG, not the dataset copy's rng attribute", '''
def reseed_dataset_rng(worker_id):
    np.random.seed(get_worker_info().seed % 2**32)
''', ("reseed_dataset_rng",)),
    Entry("03-worker-init", "mistake", "unseeded generator",
          "default_rng() from OS entropy: not reproducible from the loader's seed", '''
def reseed_dataset_rng(worker_id):
    get_worker_info().dataset.rng = np.random.default_rng()
''', ("reseed_dataset_rng",)),
    Entry("03-split-normalize", "mistake", "statistics over every row",
          "leakage: mean and std computed over all rows, validation included", SN + '''
    order = torch.randperm(len(x), generator=make_generator(seed))
    n_val = round(len(x) * val_fraction)
    val_rows, train_rows = order[:n_val], order[n_val:]
    mean, std = x.mean(0), x.std(0).clamp_min(1e-8)
    return (TensorDataset((x[train_rows] - mean) / std, y[train_rows]),
            TensorDataset((x[val_rows] - mean) / std, y[val_rows]), mean, std)
''', ("split_and_normalize",)),
    Entry("03-split-normalize", "mistake", "int() for the validation size",
          "int truncates: round(N * val_fraction) asked (off by one when the fraction part is >= .5)", SN + '''
    order = torch.randperm(len(x), generator=make_generator(seed))
    n_val = int(len(x) * val_fraction)
    val_rows, train_rows = order[:n_val], order[n_val:]
    mean, std = x[train_rows].mean(0), x[train_rows].std(0).clamp_min(1e-8)
    return (TensorDataset((x[train_rows] - mean) / std, y[train_rows]),
            TensorDataset((x[val_rows] - mean) / std, y[val_rows]), mean, std)
''', ("split_and_normalize",)),
    Entry("03-split-normalize", "mistake", "no guard on std",
          "a constant feature has std 0: division gives nan/inf", SN + '''
    order = torch.randperm(len(x), generator=make_generator(seed))
    n_val = round(len(x) * val_fraction)
    val_rows, train_rows = order[:n_val], order[n_val:]
    mean, std = x[train_rows].mean(0), x[train_rows].std(0)
    return (TensorDataset((x[train_rows] - mean) / std, y[train_rows]),
            TensorDataset((x[val_rows] - mean) / std, y[val_rows]), mean, std)
''', ("split_and_normalize",)),
    Entry("03-split-normalize", "mistake", "training rows first",
          "the first rows of the permutation are used for training, not validation", SN + '''
    order = torch.randperm(len(x), generator=make_generator(seed))
    n_train = len(x) - round(len(x) * val_fraction)
    train_rows, val_rows = order[:n_train], order[n_train:]
    mean, std = x[train_rows].mean(0), x[train_rows].std(0).clamp_min(1e-8)
    return (TensorDataset((x[train_rows] - mean) / std, y[train_rows]),
            TensorDataset((x[val_rows] - mean) / std, y[val_rows]), mean, std)
''', ("split_and_normalize",)),
    Entry("03-seeded-loader", "correct", "RandomSampler with its own generator", "", '''
from torch.utils.data import RandomSampler


def make_loader(dataset, batch_size, seed):
    g = torch.Generator()
    g.manual_seed(seed)
    return DataLoader(dataset, batch_size=batch_size, sampler=RandomSampler(dataset, generator=g))
''', ("make_loader",)),
    Entry("03-worker-init", "correct", "SeedSequence from the worker seed", "", '''
def reseed_dataset_rng(worker_id):
    info = get_worker_info()
    info.dataset.rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(info.seed)))
''', ("reseed_dataset_rng",)),
    Entry("03-pad-collate", "correct", "manual zeros and copy", "", '''
def pad_collate(batch):
    lengths = torch.tensor([s.shape[0] for s, _ in batch], dtype=torch.long)
    feats = batch[0][0].shape[1]
    out = batch[0][0].new_zeros(len(batch), int(lengths.max()), feats)
    for i, (s, _) in enumerate(batch):
        out[i, : s.shape[0]] = s
    return out, lengths, torch.stack([label for _, label in batch])
''', ("pad_collate",)),
]
