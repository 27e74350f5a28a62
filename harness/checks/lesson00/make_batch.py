"""00-make-batch, the probe.

Call `make_batch(n, cpu)` for each size of the case and record the batches; then call it once with a
device it did not expect (meta) and record where the result is and whether a CPU tensor was built first.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from harness.contract.case import Case
from harness.contract.errors import caller_line
from harness.contract.forbidden import CallRecorder, written_as
from harness.contract.registry import register
from harness.contract.wire import describe

# A device no student's code expects: tensors are created there without memory, on any machine, so that
# ignoring `device` (or creating on the CPU and copying) shows without a GPU.
UNEXPECTED_DEVICE = torch.device("meta")


class _PlacementRecorder(CallRecorder):
    """A `CallRecorder` that also notes the first torch call of the student's that returned or received a CPU
    tensor (how it was written and their line): while the target device is not the CPU, that is a tensor
    built on the CPU first (by a factory without device=, or outside torch, then moved by .to or .cuda)."""

    def __init__(self) -> None:
        super().__init__()
        self.built_on_cpu: str | None = None

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        result = super().__torch_function__(func, types, args, kwargs)
        on_cpu = [t for t in (result, *args) if isinstance(t, torch.Tensor) and t.device.type == "cpu"]
        if self.built_on_cpu is None and on_cpu:
            line = caller_line()
            self.built_on_cpu = written_as(func) + (f", {line}" if line else "")
        return result


@register("00-make-batch")
def probe_make_batch(make_batch: Callable[[int, torch.device], torch.Tensor], *, case: Case) -> dict:
    """Call `make_batch(n, cpu)` for each size of the case and record the batches; then call it once with a
    device it did not expect (meta) and record where the result is and whether a CPU tensor was built first."""
    results = []
    for n in batch_sizes(case):
        batch = make_batch(n, torch.device("cpu"))
        is_tensor = isinstance(batch, torch.Tensor)
        results.append({"value": batch if is_tensor else describe(batch), "is_tensor": is_tensor,
                        "device": str(batch.device.type) if is_tensor else None})
    with _PlacementRecorder() as calls:
        moved = make_batch(moved_size(case), UNEXPECTED_DEVICE)
    is_tensor = isinstance(moved, torch.Tensor)
    elsewhere = {"is_tensor": is_tensor, "device": moved.device.type if is_tensor else None,
                 "shape": list(moved.shape) if is_tensor else None, "dtype": moved.dtype if is_tensor else None,
                 "built_on_cpu": calls.built_on_cpu}
    return {"results": results, "elsewhere": elsewhere}


def batch_sizes(case: Case) -> tuple[int, ...]:
    """The batch sizes make_batch is called with."""
    return (1, 7, 32) if case.hidden else (4, 1)


def moved_size(case: Case) -> int:
    """The image size of the case's device-move call."""
    return 3 + case.seed % 5
