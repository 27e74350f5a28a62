"""Probe-side instruments, one of each, for every check and drill: optimizer steps, module modes, host
syncs, a recording GradScaler, autocast during backward, and records frozen when taken.

Checks never read source text; they attach these hooks, run the student's code, and read the records.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.overrides import TorchFunctionMode

from harness.contract.failure import CheckFailed

T = TypeVar("T")


@dataclass
class StepRecord:
    """What the optimizer saw at the moment `step()` was called."""

    grad_norm: float  # total L2 norm over parameters that had a gradient
    grads: list[torch.Tensor | None]  # a copy of each parameter's .grad (None where it had none)
    params: list[torch.Tensor]  # a copy of each parameter before the update
    lrs: list[float]  # learning rate of each parameter group


@dataclass
class StepRecorder:
    """Records every `optimizer.step()` through step hooks (skipped GradScaler steps never call them).

    The parameters are recorded before the step; the gradients it applies before it too, or, for
    `optimizer.step(closure)` (LBFGS, or a loop written with a closure), after it: the closure computes them
    inside the step. Use as a context manager: `with StepRecorder(optimizer) as steps: ...; steps.records`.
    """

    optimizer: torch.optim.Optimizer
    records: list[StepRecord] = field(default_factory=list)

    def __enter__(self) -> "StepRecorder":
        self._pending: StepRecord | None = None
        self._handles = [self.optimizer.register_step_pre_hook(self._before),
                         self.optimizer.register_step_post_hook(self._after)]
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()

    @staticmethod
    def _params(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
        return [p for group in optimizer.param_groups for p in group["params"]]

    def _before(self, optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
        record = StepRecord(grad_norm=0.0, grads=[], params=[p.detach().clone() for p in self._params(optimizer)],
                            lrs=[float(group["lr"]) for group in optimizer.param_groups])
        if (args and args[0] is not None) or kwargs.get("closure") is not None:
            self._pending = record  # the closure computes the gradients inside the step
            return
        self._with_grads(record, optimizer)

    def _after(self, optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        if self._pending is not None:
            record, self._pending = self._pending, None
            self._with_grads(record, optimizer)

    def _with_grads(self, record: StepRecord, optimizer: torch.optim.Optimizer) -> None:
        grads = [None if p.grad is None else p.grad.detach().clone() for p in self._params(optimizer)]
        present = [g.float() for g in grads if g is not None]
        norm = (torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in present])) if present
                else torch.tensor(0.0))
        record.grads, record.grad_norm = grads, float(norm)
        self.records.append(record)


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


# Tensor methods that copy a value from the device to the host: on a GPU each one waits for every kernel
# queued so far, which stalls the pipeline when it happens at every step.
_SYNC_METHODS = frozenset(
    {"item", "tolist", "numpy", "cpu", "__bool__", "__float__", "__int__", "__index__", "__format__"}
)


class HostSyncCounter(TorchFunctionMode):
    """Counts device-to-host syncs (`.item()`, `float(t)`, `if t:`, `.tolist()`, `.cpu()`...) in a block.

    Use as a context manager: `with HostSyncCounter() as syncs: ...; syncs.count`. On a CPU nothing
    actually waits, but the count is what a GPU would pay for, so it is what the checks look at. Calls made
    inside `optimizer.step()` are not counted: they belong to the optimizer (Adam reads its step counter,
    which lives on the CPU) and to the checks' own step hooks.
    """

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.calls: list[str] = []
        self._in_step = 0

    def __enter__(self) -> "HostSyncCounter":
        self._hooks = (
            register_optimizer_step_pre_hook(self._enter_step),
            register_optimizer_step_post_hook(self._leave_step),
        )
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        for handle in self._hooks:
            handle.remove()
        super().__exit__(*exc)

    def _enter_step(self, *args: object) -> None:
        self._in_step += 1

    def _leave_step(self, *args: object) -> None:
        self._in_step -= 1

    def __torch_function__(self, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        name = getattr(func, "__name__", "")
        if name in _SYNC_METHODS and not self._in_step:
            self.count += 1
            self.calls.append(name)
        return func(*args, **(kwargs or {}))


class RecordingScaler(torch.amp.GradScaler):
    """A real GradScaler that also records which of its methods ran, in order (scale, unscale_, step, update).

    `in_step` is True while `step()` runs: an optimizer step pre-hook reads it to tell a step taken by the
    scaler from a direct `optimizer.step()` that bypasses the overflow check.
    """

    def __init__(self, device: str = "cpu", *, init_scale: float = 2.0**10, growth_interval: int = 2000,
                 **kwargs: Any) -> None:
        super().__init__(device, init_scale=init_scale, growth_interval=growth_interval, **kwargs)
        self.calls: list[str] = []
        self.in_step = False

    def scale(self, outputs: Any) -> Any:  # type: ignore[override]
        self.calls.append("scale")
        return super().scale(outputs)

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:  # type: ignore[override]
        self.calls.append("unscale_")
        super().unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        self.calls.append("step")
        self.in_step = True
        try:
            return super().step(optimizer, *args, **kwargs)
        finally:
            self.in_step = False

    def update(self, new_scale: Any = None) -> None:  # type: ignore[override]
        self.calls.append("update")
        super().update(new_scale)


class AutocastProbe(nn.Module):
    """Linear model whose backward records whether autocast was on while gradients were computed."""

    def __init__(self, n_in: int = 8) -> None:
        super().__init__()
        self.linear = nn.Linear(n_in, 1)
        self.backward_autocast: list[bool] = []
        self.forward_autocast: list[bool] = []
        self.fresh_at_backward: list[bool] = []  # were the parameters' .grad cleared when backward reached them?

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.forward_autocast.append(torch.is_autocast_enabled("cpu"))
        out = self.linear(x)
        if out.requires_grad:
            out.register_hook(self._on_grad)
        return out

    def _on_grad(self, grad: torch.Tensor) -> None:
        self.backward_autocast.append(torch.is_autocast_enabled("cpu"))
        self.fresh_at_backward.append(all(p.grad is None or not bool(p.grad.any()) for p in self.linear.parameters()))


def snapshot(model: nn.Module) -> list[torch.Tensor]:
    """A copy of every parameter of `model`, in order."""
    return [p.detach().clone() for p in model.parameters()]


def frozen(value: Any) -> Any:
    """`value` as it is now: containers and tensors copied, so later calls cannot change the record.

    Containers become the plain list, tuple or dict the wire sends anyway; a tensor keeps its requires_grad.
    """
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, dict):
        return {k: frozen(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(frozen(v) for v in value)
    if isinstance(value, list):
        return [frozen(v) for v in value]
    return value


def collect(items: Iterable[T], record: Callable[[T], Any]) -> list[Any]:
    """`record(item)` for each item, in order, stopping at the first failure or exception.

    Each record is frozen when taken. In the first item a failure propagates (the student sees their
    traceback); in a later one it is recorded as a last entry {"stopped": ...}, so that the judge reports
    what the earlier items showed first (`compare.judged`), as a check that stops at the first difference would.
    """
    results: list[Any] = []
    for item in items:
        try:
            results.append(frozen(record(item)))
        except Exception as error:  # a probe-side failure (CheckFailed) or the student's exception
            if not results:
                raise
            if isinstance(error, CheckFailed):
                results.append({"stopped": "failed", "code": error.code, "message": str(error)})
            else:
                results.append({"stopped": "raised", "message": f"{type(error).__name__}: {error}"[:500]})
            break
    return results
