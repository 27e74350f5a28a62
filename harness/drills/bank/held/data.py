"""The bank side of held drills of data whose answer passes a graded exercise and which lesson 11's notebook does not
hold: data-pad-collate, data-worker-seeding.

Their prompts, starters and hints answer that exercise too nearly, so a graded student tree ships neither this module
nor their index entries (`harness.grading.held_drills`); their probes stay in the topic's module.
"""

from __future__ import annotations

from harness.drills.bank.data import _probe_pad_collate, _probe_worker_seeding
from harness.drills.core import Drill, add

_WORKER_STARTER = '''import numpy as np
import torch


def worker_init_fn(worker_id):
    """Symptom: the dataset augments with self.rng = np.random.default_rng(seed), made in its __init__.
    With num_workers=2, both workers produce the same 'random' augmentations."""
    pass
'''


add(
    Drill(
        id="data-pad-collate",
        title="A collate function for variable-length sequences",
        kind="write",
        topics=("data", "sequences"),
        difficulty=2,
        prompt="Write pad_collate(batch) for a DataLoader whose items are (sequence (L_i, F), label) pairs: return "
        "(padded (B, max L, F) with zeros on the right, lengths (B,) int64, labels (B,)), in the batch's order.",
        entry="pad_collate",
        starter="import torch\n\n\ndef pad_collate(batch):\n    raise NotImplementedError\n",
        hints=("torch.nn.utils.rnn has a function for exactly this.",
               "pad_sequence(list_of_tensors, batch_first=True); lengths from len(s) for each s."),
        probe=_probe_pad_collate,
    )
)


add(
    Drill(
        id="data-worker-seeding",
        title="Bug hunt: identical augmentations across workers",
        kind="bughunt",
        topics=("data", "repro"),
        difficulty=2,
        prompt="A dataset augments with a NumPy Generator it creates in __init__ (self.rng = "
        "np.random.default_rng(seed)). With num_workers=2 both workers apply exactly the same random augmentations. "
        "Write the worker_init_fn that fixes it: different in each worker and each epoch, reproducible for a "
        "seeded DataLoader generator.",
        entry="worker_init_fn",
        starter=_WORKER_STARTER,
        hints=("Inside a worker, torch.initial_seed() already differs per worker and per epoch, and follows the "
               "loader's generator; torch.utils.data.get_worker_info().dataset is that worker's copy of the dataset.",
               "get_worker_info().dataset.rng = np.random.default_rng(torch.initial_seed() % 2**32)"),
        probe=_probe_worker_seeding,
    )
)

