"""03-worker-init, the probe.

Run real 2-worker loaders: record the noise drawn for each item in two epochs, then again in a new loader.
"""

from __future__ import annotations

import multiprocessing
from typing import Callable

import numpy as np
from torch.utils.data import DataLoader, Dataset

from harness.contract.case import Case
from harness.contract.registry import register
from harness.repro import make_generator


class NoisyDataset(Dataset):
    """Items `(index, noise)`, the noise drawn from a NumPy Generator created once, in the main process.

    This is the modern NumPy style (`np.random.default_rng`), and exactly the one PyTorch's automatic
    worker seeding does not reach: every forked worker starts with a copy of the same generator state.
    """

    def __init__(self, n: int, seed: int = 0) -> None:
        self.n = n
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[int, float]:
        return index, float(self.rng.standard_normal())


def _start_method() -> str:
    # fork lets a worker_init_fn defined in a notebook reach the workers without pickling it by name.
    return "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"


def worker_setting(case: Case) -> tuple[int, int, int]:
    """(workers, dataset size, loader seed). Two workers: more than the cores of a small machine makes
    DataLoader warn (and a warning fails a graded cell)."""
    workers, n, seed = (2, 36, 7) if case.hidden else (2, 16, 0)
    return workers, n, case.seeded(seed)


def _noise_by_index(worker_init_fn: Callable, *, case: Case, epochs: int) -> list[list[float]]:
    """Each epoch's noise values, ordered by item index."""
    workers, n, seed = worker_setting(case)
    loader = DataLoader(
        NoisyDataset(n, seed=case.seeded(0)), batch_size=4, shuffle=True, num_workers=workers,
        worker_init_fn=worker_init_fn, generator=make_generator(seed), multiprocessing_context=_start_method(),
    )
    runs = []
    for _ in range(epochs):
        noise: dict[int, float] = {}
        for indices, values in loader:
            noise.update(zip(indices.tolist(), values.tolist(), strict=True))
        runs.append([noise[i] for i in range(n)])
    return runs


@register("03-worker-init")
def probe_worker_init(worker_init_fn: Callable, *, case: Case) -> dict:
    """Run real 2-worker loaders: record the noise drawn for each item in two epochs, then again in a new loader."""
    return {"epochs": _noise_by_index(worker_init_fn, case=case, epochs=2),
            "again": _noise_by_index(worker_init_fn, case=case, epochs=1)[0]}
