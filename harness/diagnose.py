"""Tools for debugging a training run (lesson 12): where the first NaN appears, how the gradient flows, which
learning rates a model tolerates, and which units are dead or saturated.

Every tool attaches its hooks for one call and removes them before returning, even when the model raises,
and the LR range test leaves the model and the optimizer exactly as it found them.

- `first_nonfinite(model, *inputs)`: the first module, in execution order, whose output holds NaN or inf.
- `grad_norms(model)` and `GradNormRecorder`: the gradient norm of each parameter, once or step after step.
- `lr_range_test(...)`: an exponential learning-rate sweep that stops on divergence, then restores everything.
- `capture_activations`, `dead_fraction`, `saturated_fraction`: activations seen through forward hooks.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

Batch = tuple[torch.Tensor, torch.Tensor]


def _tensors(value: Any) -> list[torch.Tensor]:
    """The floating-point tensors in a module's output (a tensor, or a tuple, list or dict of them)."""
    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() or value.is_complex() else []
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _tensors(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _tensors(item)]
    return []


@dataclass(frozen=True)
class NonFinite:
    """Where a forward pass first produced a non-finite value.

    Attributes:
        module: the module's qualified name in the model (`"block.fc"`; `""` for the model itself).
        type_name: the module's class name (`"Linear"`).
        kind: `"nan"` when the output holds a NaN, else `"inf"`.
        inputs_finite: whether that module's inputs were all finite (False: the cause is upstream, in the
            model's inputs or in an operation that is not a module).
    """

    module: str
    type_name: str
    kind: str
    inputs_finite: bool


def first_nonfinite(model: nn.Module, *inputs: Any, **kwargs: Any) -> NonFinite | None:
    """Run `model(*inputs, **kwargs)` once and report the first module whose output holds NaN or inf.

    A forward hook on every module (the model included) looks at each output as it is produced; hooks fire in
    execution order, and a module's hook fires after its children's, so the first report is the innermost
    module that produced the value. The hooks are removed before returning, also when the forward raises.

    Args:
        model: the model to run (its mode is left as it is: call `model.eval()` first to rule out dropout).
        *inputs: the positional inputs of the forward pass.
        **kwargs: keyword inputs of the forward pass.

    Returns:
        The first non-finite output's module, or None when every output was finite.

    Raises:
        Whatever the forward pass raises (the hooks are removed first).
    """
    found: list[NonFinite] = []

    def hook(name: str) -> Callable[[nn.Module, Any, Any], None]:
        def look(module: nn.Module, args: Any, output: Any) -> None:
            if found:
                return
            bad = [t for t in _tensors(output) if not torch.isfinite(t).all()]
            if bad:
                kind = "nan" if any(torch.isnan(t).any() for t in bad) else "inf"
                inputs_finite = all(bool(torch.isfinite(t).all()) for t in _tensors(args))
                found.append(NonFinite(name, type(module).__name__, kind, inputs_finite))
        return look

    handles = [module.register_forward_hook(hook(name)) for name, module in model.named_modules()]
    try:
        with torch.no_grad():
            model(*inputs, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    return found[0] if found else None


def grad_norms(model: nn.Module) -> dict[str, torch.Tensor]:
    """The L2 norm of each parameter's gradient, keyed by the parameter's name, as 0-dim tensors.

    Parameters without a gradient (frozen, or unused by the last backward) are left out. The values stay on
    the parameters' device: reading them (`float(v)`) is the only host sync.

    Args:
        model: a model after `loss.backward()`.

    Returns:
        `{name: norm}` in the order of `model.named_parameters()`.
    """
    return {name: torch.linalg.vector_norm(p.grad.detach()) for name, p in model.named_parameters()
            if p.grad is not None}


@dataclass
class GradNormRecorder:
    """Records every parameter's gradient norm at each call of `record()` (after backward, before the step).

    Usage: `recorder = GradNormRecorder(model)`; in the loop, `recorder.record()` after `loss.backward()`;
    afterwards `recorder.history()` maps each parameter name to a 1-D tensor of its norms, step by step.
    """

    model: nn.Module
    steps: list[dict[str, torch.Tensor]] = field(default_factory=list)

    def record(self) -> dict[str, torch.Tensor]:
        """Record the current gradient norms (no host sync); returns them."""
        norms = grad_norms(self.model)
        self.steps.append(norms)
        return norms

    def history(self) -> dict[str, torch.Tensor]:
        """`{name: norms over the recorded steps}` (a parameter missing at a step reads NaN there), on the CPU."""
        names = list(dict.fromkeys(name for step in self.steps for name in step))
        return {name: torch.stack([step[name].float().cpu() if name in step else torch.tensor(math.nan)
                                   for step in self.steps]) for name in names}


@dataclass(frozen=True)
class LRRangeResult:
    """What an LR range test measured: one learning rate and one training loss per step taken.

    Attributes:
        lrs: the learning rate of each step.
        losses: the loss of each step's batch, before that step's update.
        diverged: whether the sweep stopped early because the loss diverged.
    """

    lrs: list[float]
    losses: list[float]
    diverged: bool

    def suggestion(self, smoothing: float = 0.8) -> float:
        """A starting learning rate: where the (exponentially smoothed) loss falls fastest against log(lr).

        Only a starting point: the usual practice is to take a value a little below it and confirm with a
        short run. Raises ValueError with fewer than three steps.
        """
        if len(self.losses) < 3:
            raise ValueError("the sweep took fewer than three steps: nothing to read")
        smooth, value = [], self.losses[0]
        for loss in self.losses:
            value = smoothing * value + (1 - smoothing) * loss if math.isfinite(loss) else value
            smooth.append(value)
        slopes = [(smooth[i + 1] - smooth[i]) / (math.log(self.lrs[i + 1]) - math.log(self.lrs[i]))
                  for i in range(len(smooth) - 1)]
        return self.lrs[min(range(len(slopes)), key=slopes.__getitem__)]


def exponential_lrs(start_lr: float, end_lr: float, num_steps: int) -> list[float]:
    """`num_steps` learning rates from `start_lr` to `end_lr` (both included), evenly spaced on a log scale."""
    if not 0 < start_lr < end_lr or num_steps < 2:
        raise ValueError("an LR sweep needs 0 < start_lr < end_lr and at least two steps")
    ratio = end_lr / start_lr
    return [start_lr * ratio ** (i / (num_steps - 1)) for i in range(num_steps)]


def lr_range_test(model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn: Callable[..., torch.Tensor],
                  batches: Sequence[Batch] | Iterable[Batch], *, start_lr: float = 1e-5, end_lr: float = 10.0,
                  num_steps: int = 100, diverge: float = 4.0) -> LRRangeResult:
    """Train with an exponentially growing learning rate and record the loss at each step (Smith, 2015).

    Step i uses `exponential_lrs(start_lr, end_lr, num_steps)[i]` on every parameter group and the next batch
    (the batches are cycled). The sweep stops after the first step whose loss is not finite or exceeds
    `diverge` times the lowest loss so far. Afterwards the model's and the optimizer's states (parameters,
    buffers, momentum, learning rates) are restored to what they were, also when a step raises.

    Each step reads its loss on the host (one sync per step): the stop rule needs it, and the sweep is a
    short diagnostic run, not training.

    Returns:
        The learning rates and losses of the steps taken, and whether the sweep stopped on divergence.
    """
    lrs = exponential_lrs(start_lr, end_lr, num_steps)
    batches = list(batches)
    if not batches:
        raise ValueError("lr_range_test needs at least one batch")
    saved_model = copy.deepcopy(model.state_dict())  # deep copies: state_dict() holds the live tensors
    saved_optimizer = copy.deepcopy(optimizer.state_dict())
    was_training = model.training
    taken, losses, best, diverged = [], [], math.inf, False
    try:
        model.train()
        for i, lr in enumerate(lrs):
            for group in optimizer.param_groups:
                group["lr"] = lr
            inputs, targets = batches[i % len(batches)]
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(inputs), targets)
            loss.backward()
            optimizer.step()
            value = float(loss.detach())
            taken.append(lr)
            losses.append(value)
            best = min(best, value)
            if not math.isfinite(value) or value > diverge * best:
                diverged = True
                break
    finally:
        model.load_state_dict(saved_model)
        optimizer.load_state_dict(saved_optimizer)
        optimizer.zero_grad(set_to_none=True)
        model.train(was_training)
    return LRRangeResult(taken, losses, diverged)


def capture_activations(model: nn.Module, inputs: torch.Tensor,
                        types: tuple[type[nn.Module], ...] = (nn.ReLU, nn.Tanh, nn.Sigmoid, nn.GELU)
                        ) -> dict[str, torch.Tensor]:
    """The outputs of every module of one of `types` on one forward pass (no graph), keyed by module name.

    Hooks are removed before returning, also when the forward raises. A module called several times keeps
    its last output.
    """
    seen: dict[str, torch.Tensor] = {}
    handles = []
    for name, module in model.named_modules():
        if isinstance(module, types):
            handles.append(module.register_forward_hook(
                lambda _m, _args, output, name=name: seen.__setitem__(name, output.detach())))
    try:
        with torch.no_grad():
            model(inputs)
    finally:
        for handle in handles:
            handle.remove()
    return seen


def dead_fraction(activation: torch.Tensor) -> torch.Tensor:
    """The fraction of units (features: every dimension but the first) that are zero for every example.

    A ReLU unit whose input is negative for every example gets no gradient either: it stays dead.
    """
    units = activation.reshape(activation.shape[0], -1)
    return (units <= 0).all(dim=0).float().mean()


def saturated_fraction(activation: torch.Tensor, low: float = -0.99, high: float = 0.99) -> torch.Tensor:
    """The fraction of activation values outside (low, high): for tanh, values whose local gradient
    1 - tanh^2 is below 2%, so almost nothing flows back through them. Use low=0.01 for a sigmoid."""
    return ((activation <= low) | (activation >= high)).float().mean()
