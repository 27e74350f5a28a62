"""Instrumentation the checks observe behaviour through: optimizer steps and module modes.

Checks never read source text; they attach these hooks, run the student's code, and read the records.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn


@dataclass
class StepRecord:
    """What the optimizer saw at the moment `step()` was called."""

    grad_norm: float  # total L2 norm over parameters that had a gradient
    grads: list[torch.Tensor | None]  # a copy of each parameter's .grad (None where it had none)
    params: list[torch.Tensor]  # a copy of each parameter before the update
    lrs: list[float]  # learning rate of each parameter group


@dataclass
class StepRecorder:
    """Records every `optimizer.step()` through a step pre-hook (skipped GradScaler steps never call it).

    Use as a context manager: `with StepRecorder(optimizer) as steps: ...; steps.records`.
    """

    optimizer: torch.optim.Optimizer
    records: list[StepRecord] = field(default_factory=list)

    def __enter__(self) -> "StepRecorder":
        self._handle = self.optimizer.register_step_pre_hook(self._record)
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.remove()

    def _record(self, optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        grads = [None if p.grad is None else p.grad.detach().clone() for p in params]
        present = [g.float() for g in grads if g is not None]
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in present])) if present else torch.tensor(0.0)
        self.records.append(
            StepRecord(
                grad_norm=float(norm),
                grads=grads,
                params=[p.detach().clone() for p in params],
                lrs=[float(group["lr"]) for group in optimizer.param_groups],
            )
        )


@dataclass
class ForwardRecord:
    """The state a module's forward ran in."""

    training: bool
    grad_enabled: bool
    inference_mode: bool
    autocast: bool
    batch_size: int | None


@dataclass
class ForwardRecorder:
    """Records the mode, grad mode and autocast state of every call of `module`'s forward."""

    module: nn.Module
    records: list[ForwardRecord] = field(default_factory=list)

    def __enter__(self) -> "ForwardRecorder":
        self._handle = self.module.register_forward_pre_hook(self._record)
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.remove()

    def _record(self, module: nn.Module, inputs: tuple[object, ...]) -> None:
        first = inputs[0] if inputs else None
        self.records.append(
            ForwardRecord(
                training=module.training,
                grad_enabled=torch.is_grad_enabled(),
                inference_mode=torch.is_inference_mode_enabled(),
                autocast=any(torch.is_autocast_enabled(kind) for kind in ("cpu", "cuda")),
                batch_size=first.shape[0] if isinstance(first, torch.Tensor) and first.dim() else None,
            )
        )
