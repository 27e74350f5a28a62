"""Drills on data loading: collate functions, worker seeding, leakage."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from harness.checks.core import fail
from harness.drills.core import Drill, add
from harness.drills.support import multiple_choice


def _check_collate(ns: dict) -> str:
    pad_collate = ns["pad_collate"]
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):
        lengths = torch.randint(1, 9, (int(torch.randint(1, 6, (1,), generator=gen)),), generator=gen).tolist()
        batch = [(torch.randn(n, 3, generator=gen), torch.tensor(i)) for i, n in enumerate(lengths)]
        padded, lens, labels = pad_collate(batch)
        if tuple(padded.shape) != (len(lengths), max(lengths), 3):
            fail("wrong-shape", observed=f"padded shape {tuple(padded.shape)} for lengths {lengths}",
                 expected=f"({len(lengths)}, {max(lengths)}, 3)", cause="padding to a fixed length or stacking "
                 "along the wrong dimension", where="torch.nn.utils.rnn.pad_sequence(..., batch_first=True)")
        if lens.tolist() != lengths:
            fail("wrong-lengths", observed=f"lengths {lens.tolist()}", expected=f"{lengths}",
                 cause="lengths must be the original ones, in batch order", where="the lengths tensor")
        for row, (seq, _) in enumerate(batch):
            if not torch.equal(padded[row, : len(seq)], seq) or padded[row, len(seq):].abs().sum() != 0:
                fail("wrong-padding", observed=f"row {row} is not the sequence followed by zeros",
                     expected="each sequence, then zero padding", cause="sequences sorted or padded on the left",
                     where="keep batch order; pad on the right with 0")
        if labels.tolist() != list(range(len(lengths))):
            fail("wrong-labels", observed=f"labels {labels.tolist()}", expected="the labels in batch order",
                 cause="labels reordered or lost", where="torch.stack of the labels")
    return "pads on the right, keeps order, returns true lengths"


add(
    Drill(
        id="data-pad-collate",
        title="A collate function for variable-length sequences",
        kind="write",
        topics=("data",),
        difficulty=2,
        prompt="Write pad_collate(batch) for a DataLoader whose items are (sequence (L_i, F), label) pairs: return "
        "(padded (B, max L, F) with zeros on the right, lengths (B,) int64, labels (B,)).",
        entry="pad_collate",
        starter="import torch\n\n\ndef pad_collate(batch):\n    raise NotImplementedError\n",
        solution=(
            "import torch\nfrom torch.nn.utils.rnn import pad_sequence\n\n\ndef pad_collate(batch):\n"
            "    sequences, labels = zip(*batch)\n    lengths = torch.tensor([len(s) for s in sequences])\n"
            "    return pad_sequence(list(sequences), batch_first=True), lengths, torch.stack(labels)\n"
        ),
        hints=("torch.nn.utils.rnn has a function for exactly this.",
               "pad_sequence(list_of_tensors, batch_first=True); lengths from len(s) for each s."),
        check=_check_collate,
        wrong_answers=(
            "import torch\nfrom torch.nn.utils.rnn import pad_sequence\n\ndef pad_collate(batch):\n"
            "    sequences, labels = zip(*batch)\n    lengths = torch.tensor([len(s) for s in sequences])\n"
            "    return pad_sequence(list(sequences)), lengths, torch.stack(labels)\n",
            "import torch\nfrom torch.nn.utils.rnn import pad_sequence\n\ndef pad_collate(batch):\n"
            "    batch = sorted(batch, key=lambda item: -len(item[0]))\n    sequences, labels = zip(*batch)\n"
            "    lengths = torch.tensor([len(s) for s in sequences])\n"
            "    return pad_sequence(list(sequences), batch_first=True), lengths, torch.stack(labels)\n",
        ),
    )
)


class _NumpyNoise(Dataset):
    """Each item draws its 'augmentation' from a NumPy Generator the dataset made in __init__."""

    def __init__(self) -> None:
        self.rng = np.random.default_rng(0)

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor(self.rng.random())


_WORKER_STARTER = '''import numpy as np
import torch


def worker_init_fn(worker_id):
    """Symptom: the dataset augments with self.rng = np.random.default_rng(0), made in its __init__.
    With num_workers=2, both workers produce the same 'random' augmentations."""
    pass
'''


def _check_worker_init(ns: dict) -> str:
    worker_init_fn = ns["worker_init_fn"]
    loader = DataLoader(_NumpyNoise(), batch_size=4, num_workers=2, worker_init_fn=worker_init_fn,
                        generator=torch.Generator().manual_seed(0), multiprocessing_context="fork")
    first, second = [batch.tolist() for batch in loader]
    if first == second:
        fail("duplicate-augmentations", observed="both workers drew identical NumPy random numbers",
             expected="different numbers in each worker",
             cause="each worker gets an identical copy of the dataset, its Generator included; "
             "torch reseeds only the global RNGs per worker", where="replace the worker's dataset.rng, seeded from "
             "torch.initial_seed()")
    again = [batch.tolist() for batch in DataLoader(_NumpyNoise(), batch_size=4, num_workers=2,
                                                     worker_init_fn=worker_init_fn,
                                                     generator=torch.Generator().manual_seed(0),
                                                     multiprocessing_context="fork")]
    if again != [first, second]:
        fail("not-reproducible", observed="the same loader seed gave different augmentations",
             expected="reproducible augmentations for a fixed generator seed",
             cause="seeding from time or os.urandom instead of torch.initial_seed()", where="worker_init_fn")
    return "workers draw different, reproducible NumPy numbers"


add(
    Drill(
        id="data-worker-seeding",
        title="Bug hunt: identical augmentations across workers",
        kind="bughunt",
        topics=("data", "repro"),
        difficulty=2,
        prompt="A dataset augments with a NumPy Generator it creates in __init__ (self.rng = "
        "np.random.default_rng(0)). With num_workers=2 both workers apply exactly the same random augmentations. "
        "Write the worker_init_fn that fixes it, keeping runs reproducible for a seeded DataLoader generator.",
        entry="worker_init_fn",
        starter=_WORKER_STARTER,
        solution="import numpy as np\nimport torch\n\n\ndef worker_init_fn(worker_id):\n"
        "    seed = torch.initial_seed() % 2**32  # differs per worker, derived from the loader's generator\n"
        "    torch.utils.data.get_worker_info().dataset.rng = np.random.default_rng(seed)\n",
        hints=("Inside a worker, torch.initial_seed() already differs per worker and follows the loader's generator; "
               "torch.utils.data.get_worker_info().dataset is that worker's copy of the dataset.",
               "get_worker_info().dataset.rng = np.random.default_rng(torch.initial_seed() % 2**32)"),
        check=_check_worker_init,
        wrong_answers=("import numpy as np\nimport torch\n\ndef worker_init_fn(worker_id):\n"
                       "    np.random.seed(torch.initial_seed() % 2**32)\n",
                       "import os\nimport numpy as np\nimport torch\n\ndef worker_init_fn(worker_id):\n"
                       "    torch.utils.data.get_worker_info().dataset.rng = np.random.default_rng(\n"
                       "        int.from_bytes(os.urandom(4), 'little'))\n"),
    )
)


def _leakage_experiment() -> None:
    gen = torch.Generator().manual_seed(0)
    data = torch.cat([torch.randn(900, 1, generator=gen), torch.randn(100, 1, generator=gen) + 3])
    train = data[:900]
    print(f"mean of the training split: {train.mean():.3f}; of all data: {data.mean():.3f}")
    print("normalising with the statistics of all data lets the test split shift what training sees: leakage.")


add(
    multiple_choice(
        id="data-normalisation-leakage",
        title="Which statistics normalise the test split?",
        topics=("data",),
        difficulty=1,
        prompt="You standardise features before training. Which mean and std should the validation and test splits "
        "be normalised with?\n  a) their own\n  b) those of the whole dataset\n  c) the training split's\n"
        "  d) it does not matter\n",
        correct="c",
        explanation="statistics come from the training split only",
        hints=("At deployment you only have the training data's statistics.",
               "Anything computed from validation or test data and used in training is leakage."),
        wrong=("b", "a"),
        experiment=_leakage_experiment,
    )
)
