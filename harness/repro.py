"""Reproducibility: seeding every generator, seeding DataLoader workers, and capturing RNG states.

RNG states are captured as tensors and plain values only, so a checkpoint that holds them loads with
`torch.load(..., weights_only=True)`.
"""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import torch
import torch.utils.data


def seed_everything(seed: int, deterministic: bool = False) -> None:
    """Seed Python, NumPy and torch (CPU and every CUDA device).

    Args:
        seed: the seed.
        deterministic: also make kernels deterministic: cuDNN picks deterministic algorithms and stops
            benchmarking, `torch.use_deterministic_algorithms(True)` makes nondeterministic ops raise, and
            CUBLAS_WORKSPACE_CONFIG is set as cuBLAS requires. The cost: slower convolutions (no autotuned
            algorithm choice), errors from ops that have no deterministic implementation, and a little
            extra cuBLAS workspace memory. Leave it off except to debug or to compare runs bit for bit.
            CUBLAS_WORKSPACE_CONFIG only takes effect before the process's first cuBLAS call: seed first.
    """
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # seeds CUDA devices too
    torch.backends.cudnn.deterministic = deterministic
    torch.backends.cudnn.benchmark = False if deterministic else torch.backends.cudnn.benchmark
    if deterministic:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    torch.use_deterministic_algorithms(deterministic)


def seed_worker(worker_id: int) -> None:
    """DataLoader `worker_init_fn`: give each worker its own stream in every RNG the dataset uses.

    torch already seeds `random`, NumPy's global RNG and torch itself differently in each worker (from the
    loader's generator, so runs stay reproducible). What it cannot reach are generator objects the
    dataset created in `__init__`, such as `self.rng = np.random.default_rng(0)`: every worker receives an
    identical copy and draws identical "random" augmentations. This reseeds such an `rng` attribute from
    the worker's seed, and the global RNGs too, for datasets used with older torch versions.
    """
    worker_seed = torch.initial_seed() % 2**32
    np.random.seed(worker_seed)
    random.seed(worker_seed)
    info = torch.utils.data.get_worker_info()
    dataset = info.dataset if info is not None else None
    if isinstance(getattr(dataset, "rng", None), np.random.Generator):
        dataset.rng = np.random.default_rng(worker_seed)


def make_generator(seed: int) -> torch.Generator:
    """A CPU torch.Generator seeded with `seed`, for a DataLoader's shuffling or a random split."""
    generator = torch.Generator()
    generator.manual_seed(seed)
    return generator


def capture_rng_state() -> dict[str, Any]:
    """Every global RNG state, as tensors and plain values (loadable with weights_only=True)."""
    version, keys, gauss = random.getstate()
    np_kind, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    state: dict[str, Any] = {
        "python": {"version": version, "keys": torch.tensor(keys, dtype=torch.int64), "gauss": gauss},
        "numpy": {
            "kind": np_kind,
            "keys": torch.from_numpy(np_keys.astype(np.int64)),
            "pos": int(np_pos),
            "has_gauss": int(np_has_gauss),
            "gauss": float(np_gauss),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Restore the global RNG states captured by `capture_rng_state`."""
    python = state["python"]
    random.setstate((python["version"], tuple(int(k) for k in python["keys"].tolist()), python["gauss"]))
    numpy = state["numpy"]
    np.random.set_state(
        (numpy["kind"], numpy["keys"].numpy().astype(np.uint32), numpy["pos"], numpy["has_gauss"], numpy["gauss"])
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
