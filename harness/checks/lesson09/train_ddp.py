"""09-train-ddp, the probe.

Train on 2 ranks; record each rank's returned state_dict and the dataset indices it loaded.
"""

from __future__ import annotations

import functools
import sys
from collections import Counter
from typing import Any, Callable

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import Dataset, TensorDataset

from harness.checks.lesson09.common import MODEL_SEED, _run_ranks, make_model
from harness.contract.case import Case
from harness.contract.registry import register
from harness.contract.wire import type_name


def regression_data(n: int, seed: int) -> TensorDataset:
    """n samples of a noisy linear target: X (n, 4), y (n, 1)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1 * torch.randn(n, 1, generator=generator)
    return TensorDataset(x, y)


class IndexRecorder(Dataset):
    """Wraps a dataset and records the index of every sample loaded (in this process)."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset
        self.seen: list[int] = []

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> Any:
        self.seen.append(int(index))
        return self.dataset[index]


def train_configs(case: Case) -> list[dict[str, Any]]:
    """Each training run: dataset size n, the train_ddp arguments, and the seeds of the data and the model."""
    configs = [dict(n=64, epochs=3, batch_size=8, lr=0.05, seed=0)]
    if case.hidden:
        configs = [dict(n=48, epochs=2, batch_size=4, lr=0.1, seed=7),
                   dict(n=80, epochs=3, batch_size=10, lr=0.02, seed=3)]
    return [{**config, "seed": case.seeded(config["seed"]), "data_seed": case.seeded(config["seed"] + 100),
             "model_seed": case.seeded(MODEL_SEED)} for config in configs]


def train_arguments(config: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments train_ddp receives."""
    return {key: config[key] for key in ("epochs", "batch_size", "lr", "seed")}


def _forward_path(module: nn.Module) -> str:
    """How this forward of `module` was reached, read from the calling frames: 'ddp' through
    DistributedDataParallel's forward; 'bypassed' around it, while a caller holds a DDP that wraps `module` (a
    forward through ddp.module); 'plain' otherwise."""
    frame, wrapped = sys._getframe(1), False
    while frame is not None:
        if frame.f_code is _DDP_FORWARD:
            return "ddp"
        wrapped = wrapped or any(isinstance(value, DistributedDataParallel) and value.module is module
                                 for value in frame.f_locals.values())
        frame = frame.f_back
    return "bypassed" if wrapped else "plain"


_DDP_FORWARD = DistributedDataParallel.forward.__code__


def _watched_model(model_seed: int, paths: Counter[str]) -> nn.Module:
    """make_model(model_seed), counting in `paths` how each of its forwards was reached (_forward_path)."""
    model = make_model(model_seed)
    model.register_forward_pre_hook(lambda module, args: paths.update([_forward_path(module)]))
    return model


def _train_worker(
    train_ddp: Callable[..., Any], model_seed: int, dataset: Dataset, arguments: dict[str, Any]
) -> dict[str, Any]:
    """In a rank: train with train_ddp; the state_dict it returned, the dataset indices this rank loaded and how
    the model's forwards were reached."""
    recorder, paths = IndexRecorder(dataset), Counter[str]()
    state = train_ddp(functools.partial(_watched_model, model_seed, paths), recorder, nn.functional.mse_loss,
                      **arguments)
    if not isinstance(state, dict):
        return {"state": type_name(state), "seen": recorder.seen, "forwards": dict(paths)}
    # a value that is no tensor (a nested dict: a checkpoint instead of a state_dict) travels as its type's name
    sent = {str(k): v.detach().clone() if isinstance(v, torch.Tensor) else type_name(v) for k, v in state.items()}
    return {"state": sent, "seen": recorder.seen, "forwards": dict(paths)}


@register("09-train-ddp")
def probe_train_ddp(train_ddp: Callable[..., dict[str, torch.Tensor]], *, case: Case) -> dict:
    """Train on 2 ranks; record each rank's returned state_dict and the dataset indices it loaded."""
    runs = []
    for config in train_configs(case):
        dataset = regression_data(config["n"], seed=config["data_seed"])
        runs.append(_run_ranks(_train_worker, train_ddp, config["model_seed"], dataset, train_arguments(config)))
    return {"runs": runs}
