"""Drills on data loading: collate functions, worker seeding, class imbalance, loader settings, leakage.

The probes build datasets and batches from the case, run the answer's collate function, worker_init_fn,
sampler or loader, and send back what came out of it (batches, indices, worker process ids); the judges rebuild
the same inputs and check what must hold of the output.
"""

from __future__ import annotations

import os

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from harness.contract.case import Case
from harness.drills.core import Drill, add
from harness.drills.support import case_generator, explain

# ---------------------------------------------------------------------------------------------------------------
# data-pad-collate


_COLLATE_SIZES = (5, 2, 4, 1, 3)


def pad_collate_batches(case: Case) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    """Batches of (sequence (n, 3), label) pairs of varying lengths; the first batch's longest sequence comes last."""
    gen = case_generator(case, 0)
    batches = []
    for i, size in enumerate(_COLLATE_SIZES):
        lengths = torch.randint(1, 9, (size,), generator=gen).tolist()
        if i == 0:
            lengths[-1] = 9  # the longest last: the batch is not sorted, and max length != batch size
        batches.append([(torch.randn(n, 3, generator=gen), torch.randint(0, 10, (), generator=gen))
                        for n in lengths])
    return batches


def _probe_pad_collate(answer: dict, *, case: Case) -> dict:
    return {"outputs": [answer["pad_collate"](batch) for batch in pad_collate_batches(case)]}


# ---------------------------------------------------------------------------------------------------------------
# data-worker-seeding


class _NumpyNoise(Dataset):
    """Each item draws its 'augmentation' from a NumPy Generator the dataset made in __init__."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor(self.rng.random())


def _probe_worker_seeding(answer: dict, *, case: Case) -> dict:
    def two_epochs(seed: int) -> list[list[torch.Tensor]]:
        loader = DataLoader(_NumpyNoise(case.seeded(0)), batch_size=4, num_workers=2,
                            worker_init_fn=answer["worker_init_fn"], generator=torch.Generator().manual_seed(seed),
                            multiprocessing_context="fork")
        return [list(loader) for _ in range(2)]

    return {"first": two_epochs(case.seeded(1)), "again": two_epochs(case.seeded(1))}


# ---------------------------------------------------------------------------------------------------------------
# data-balanced-sampler


SAMPLER_EPOCHS = 10


def imbalanced_labels(case: Case) -> torch.Tensor:
    """120 shuffled labels of three classes: many zeros, some ones, a few twos."""
    gen = case_generator(case, 10)
    rare = int(torch.randint(3, 8, (), generator=gen))
    middle = int(torch.randint(15, 30, (), generator=gen))
    labels = torch.cat([torch.zeros(120 - rare - middle), torch.ones(middle), torch.full((rare,), 2)]).long()
    return labels[torch.randperm(len(labels), generator=gen)]


def _probe_sampler(answer: dict, *, case: Case) -> dict:
    make = answer["balanced_sampler"]
    labels = imbalanced_labels(case)
    sampler = make(labels.clone(), torch.Generator().manual_seed(case.seeded(11)))
    epochs = [[int(i) for i in sampler] for _ in range(SAMPLER_EPOCHS)]
    again = [int(i) for i in make(labels.clone(), torch.Generator().manual_seed(case.seeded(11)))]
    other = [int(i) for i in make(labels.clone(), torch.Generator().manual_seed(case.seeded(12)))]
    return {"epochs": epochs, "again": again, "other": other}


add(
    Drill(
        id="data-balanced-sampler",
        title="A sampler for an imbalanced dataset",
        kind="write",
        topics=("data",),
        difficulty=2,
        prompt="labels is a 1-D int64 tensor of class ids for a heavily imbalanced training set. Write "
        "balanced_sampler(labels, generator) -> a sampler for the DataLoader that draws len(labels) indices per "
        "epoch with every class equally likely, reproducibly from the torch.Generator given.",
        entry="balanced_sampler",
        starter="import torch\nfrom torch.utils.data import WeightedRandomSampler\n\n\n"
        "def balanced_sampler(labels, generator):\n    raise NotImplementedError\n",
        hints=("WeightedRandomSampler draws index i with probability proportional to weights[i].",
               "weights = 1 / bincount(labels)[labels], num_samples=len(labels), replacement=True, "
               "generator=generator"),
        probe=_probe_sampler,
    )
)


# ---------------------------------------------------------------------------------------------------------------
# data-train-loader


class _IndexDataset(Dataset):
    """Item i is the tensor [i, pid of the process that loaded it]."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([index, os.getpid()])


def loader_setup(case: Case) -> tuple[int, int, int]:
    """(dataset size, batch size, seed) of the loader drill; the size leaves a partial last batch."""
    gen = case_generator(case, 20)
    batch_size = int(torch.randint(4, 9, (), generator=gen))
    full = int(torch.randint(3, 6, (), generator=gen))
    size = batch_size * full + int(torch.randint(1, batch_size, (), generator=gen))
    return size, batch_size, case.seeded(21)


def _probe_train_loader(answer: dict, *, case: Case) -> dict:
    make = answer["make_train_loader"]
    size, batch_size, seed = loader_setup(case)
    loader = make(_IndexDataset(size), batch_size, seed)
    epochs = [list(loader) for _ in range(2)]
    again = list(make(_IndexDataset(size), batch_size, seed))
    other = list(make(_IndexDataset(size), batch_size, seed + 1))
    return {"epochs": epochs, "again": again, "other": other, "main_pid": os.getpid(),
            "pin_memory": bool(getattr(loader, "pin_memory", False)), "cuda": torch.cuda.is_available()}


add(
    Drill(
        id="data-train-loader",
        title="A training DataLoader, configured",
        kind="write",
        topics=("data", "performance"),
        difficulty=2,
        prompt="Write make_train_loader(dataset, batch_size, seed) -> a DataLoader for TRAINING: a new shuffled "
        "order every epoch, reproducible for a given seed; only full batches (the model has BatchNorm); 2 worker "
        "processes that stay alive from one epoch to the next; pinned memory only when a CUDA device exists.",
        entry="make_train_loader",
        starter="import torch\nfrom torch.utils.data import DataLoader\n\n\n"
        "def make_train_loader(dataset, batch_size, seed):\n    raise NotImplementedError\n",
        hints=("Each requirement is one DataLoader argument: shuffle/generator, drop_last, num_workers, "
               "persistent_workers, pin_memory.",
               "DataLoader(dataset, batch_size, shuffle=True, generator=torch.Generator().manual_seed(seed), "
               "drop_last=True, num_workers=2, persistent_workers=True, pin_memory=torch.cuda.is_available())"),
        probe=_probe_train_loader,
    )
)


# ---------------------------------------------------------------------------------------------------------------
# data-normalisation-leakage


def _leakage_experiment() -> None:
    gen = torch.Generator().manual_seed(0)
    data = torch.cat([torch.randn(900, 1, generator=gen), torch.randn(100, 1, generator=gen) + 3])
    train = data[:900]
    print(f"mean of the training split: {train.mean():.3f}; of all data: {data.mean():.3f}")
    print("normalising with the statistics of all data lets the test split shift what training sees: leakage.")


add(
    explain(
        id="data-normalisation-leakage",
        title="Which statistics normalise the test split?",
        topics=("data",),
        difficulty=1,
        question="You standardise features before training. Which mean and std should the validation and test "
        "splits be normalised with?",
        hints=("At deployment you only have the training data's statistics.",
               "Anything computed from validation or test data and used in training is leakage."),
        experiment=_leakage_experiment,
    )
)
