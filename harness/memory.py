"""Where a training run's memory goes, measured on the live tensors: parameters, gradients, optimizer state
and the activations autograd saves for backward (lesson 13).

Every figure here is counted from tensors that exist, each distinct storage once (a view, a tied weight or
`weight.t()` saved by a linear layer costs nothing extra), so the numbers hold on a CPU as on a GPU:

- `static_memory(model, optimizer)`: the bytes that stay for the whole run (parameters, gradients,
  optimizer state), as a dict with the keys of lesson 13's formula;
- `saved_for_backward(exclude=...)`: a context manager that counts what autograd keeps between a forward
  and its backward (the activations), through `torch.autograd.graph.saved_tensors_hooks`;
- `cuda_peak_bytes(fn, device)`: what the CUDA caching allocator reports as the peak while `fn` runs
  (None off CUDA, where no allocator keeps such statistics).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

__all__ = [
    "SavedTensors",
    "cuda_peak_bytes",
    "gradient_bytes",
    "optimizer_state_bytes",
    "parameter_bytes",
    "saved_for_backward",
    "static_memory",
    "tensor_bytes",
]


def _storage_key(tensor: torch.Tensor) -> tuple[str, int]:
    storage = tensor.untyped_storage()
    return str(tensor.device), storage.data_ptr()


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the storages behind `tensors`, each distinct storage counted once.

    Args:
        tensors: any tensors (views of one storage, or one tensor listed twice, count once).

    Returns:
        The total of `untyped_storage().nbytes()` over the distinct storages.
    """
    sizes: dict[tuple[str, int], int] = {}
    for tensor in tensors:
        sizes[_storage_key(tensor)] = tensor.untyped_storage().nbytes()
    return sum(sizes.values())


def parameter_bytes(model: nn.Module) -> int:
    """Bytes of `model`'s parameters (frozen ones included; a tied weight once)."""
    return tensor_bytes(model.parameters())


def gradient_bytes(model: nn.Module) -> int:
    """Bytes of the `.grad` tensors `model`'s parameters hold now (zero before the first backward, and after
    `zero_grad(set_to_none=True)`)."""
    return tensor_bytes(p.grad for p in model.parameters() if p.grad is not None)


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of every tensor in `optimizer.state` (momentum buffers, Adam's moments and step counters).

    Optimizers create their state lazily, at the first `step()`: before it this is zero.
    """
    return tensor_bytes(value for state in optimizer.state.values() for value in state.values()
                        if isinstance(value, torch.Tensor))


def static_memory(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """The memory a training run holds between steps, measured now.

    Args:
        model: the trained model.
        optimizer: its optimizer (after at least one `step()`, or its state is still empty).

    Returns:
        {"params", "grads", "optimizer", "total"}: bytes of each, and their sum.
    """
    sizes = {"params": parameter_bytes(model), "grads": gradient_bytes(model),
             "optimizer": optimizer_state_bytes(optimizer)}
    return {**sizes, "total": sum(sizes.values())}


@dataclass
class SavedTensors:
    """What autograd saved for backward in a block (`saved_for_backward`).

    `bytes` counts each distinct storage once; `count` is the number of tensors saved (a storage saved by
    two operations counts twice there); `shapes` lists each saved tensor's shape and dtype, in order.
    """

    count: int = 0
    bytes: int = 0
    shapes: list[tuple[tuple[int, ...], torch.dtype]] = field(default_factory=list)
    _sizes: dict[tuple[str, int], int] = field(default_factory=dict, repr=False)
    _excluded: set[tuple[str, int]] = field(default_factory=set, repr=False)

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        key = _storage_key(tensor)
        if key not in self._excluded:
            self.count += 1
            self.shapes.append((tuple(tensor.shape), tensor.dtype))
            self._sizes[key] = tensor.untyped_storage().nbytes()
            self.bytes = sum(self._sizes.values())
        return tensor


@contextlib.contextmanager
def saved_for_backward(exclude: Iterable[torch.Tensor] = ()) -> Iterator[SavedTensors]:
    """Count the tensors autograd saves for backward while the block runs (CPU and CUDA alike).

    Tensors sharing a storage with one of `exclude` (pass `model.parameters()` to count activations only:
    a linear layer saves its weight, which is memory the model holds anyway) are left out.

    Example:
        >>> with saved_for_backward(exclude=model.parameters()) as saved:
        ...     loss = loss_fn(model(x), y)
        >>> saved.bytes  # the activations this forward keeps until loss.backward()

    A saved view counts its whole storage, which it keeps alive: a slice of a dataset tensor counts as the
    dataset (copy the batch, as a DataLoader's collate does, to count the batch alone). Only what is saved
    while the block runs is counted; the tensors themselves are kept as autograd would.
    Activation checkpointing (`torch.utils.checkpoint`, `use_reentrant=False`) installs hooks of its own
    inside each checkpointed segment: only the segment's inputs reach these hooks, which is what it keeps.
    """
    saved = SavedTensors()
    saved._excluded = {_storage_key(t) for t in exclude}
    with torch.autograd.graph.saved_tensors_hooks(saved._pack, _unpack):
        yield saved


def _unpack(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


def cuda_peak_bytes(fn: Callable[[], Any], device: torch.device | str) -> int | None:
    """The peak of CUDA memory allocated while `fn()` runs, above what was allocated before it.

    Args:
        fn: the work to measure (a training step, a forward and backward).
        device: where it runs; off CUDA nothing is measured.

    Returns:
        Bytes, or None when `device` is not a CUDA device (`fn` is not run then).
    """
    device = torch.device(device)
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - before
