"""04-train-step, the probe.

Call train_step once per batch; record every optimizer step, what .grad held at every backward, forward
mode, sync and returned loss; then one call with the model on a device it did not expect (meta).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn

from harness.checks.lesson04.common import META, _data, _model, one_thread
from harness.contract.case import Case
from harness.contract.errors import explain
from harness.contract.instruments import (
    ForwardRecorder,
    HostSyncCounter,
    StepRecord,
    StepRecorder,
)
from harness.contract.registry import register


def train_step_inputs(case: Case) -> tuple[nn.Module, list[tuple[torch.Tensor, torch.Tensor]]]:
    """The model (fresh, before any step) and the batches train_step is called on, one call each."""
    features, classes, batch_sizes = (7, 5, [12, 20, 9]) if case.hidden else (4, 3, [16, 16])
    model = _model(features, classes, seed=case.seeded(11 if case.hidden else 1))
    batches = [_data(b, features, classes, seed=case.seeded(100 + i)) for i, b in enumerate(batch_sizes)]
    return model, batches


def _stepped_without_gradients(record: StepRecord) -> bool:
    # grad_norm was computed by the step hook, so reading it here is no sync of the student's code
    return any(g is None for g in record.grads) or record.grad_norm == 0.0


@register("04-train-step")
@one_thread()
def probe_train_step(train_step: Callable, *, case: Case) -> dict:
    """Call train_step once per batch; record every optimizer step, what .grad held at every backward, forward
    mode, sync and returned loss; then one call with the model on a device it did not expect (meta)."""
    model, batches = train_step_inputs(case)
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model.eval()  # as evaluate() leaves it: train_step must switch the mode itself
    losses, steps_after_call = [], []
    with StepRecorder(optimizer) as steps, ForwardRecorder(model) as forwards, _GradsAtBackward(model) as held, \
            HostSyncCounter() as syncs:
        for call, batch in enumerate(batches, start=1):
            losses.append(train_step(model, batch, loss_fn, optimizer))
            steps_after_call.append(len(steps.records))
            # Stop after a step that saw no gradient: with step() between forward and backward, the next call
            # would fail inside backward (step modified weights the graph saved) and hide the cause.
            if len(steps.records) == call and _stepped_without_gradients(steps.records[-1]):
                break
    return {
        "steps": [{"grads": r.grads, "params": r.params} for r in steps.records],
        "steps_after_call": steps_after_call,
        "training": [r.training for r in forwards.records],
        "grads_at_backward": held.states,
        "syncs": syncs.count,
        "sync_calls": sorted(set(syncs.calls)),
        "losses": losses,
        "other_device": _step_elsewhere(train_step, case),
    }


@dataclass
class _GradsAtBackward:
    """What each parameter's .grad held when backward reached it, before adding into it: "none", "zeros" or
    "values" (a tensor hook on a leaf runs before the gradient is accumulated)."""

    model: nn.Module
    states: list[str] = field(default_factory=list)

    def __enter__(self) -> "_GradsAtBackward":
        self._handles = [p.register_hook(self._hook(p)) for p in self.model.parameters()]
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()

    def _hook(self, parameter: nn.Parameter) -> Callable[[torch.Tensor], None]:
        def record(grad: torch.Tensor) -> None:
            held = parameter.grad
            with torch._C.DisableTorchFunction():  # the check's own read: the sync counter must not see it
                self.states.append("none" if held is None else "values" if bool(held.detach().any()) else "zeros")
        return record


def _step_elsewhere(train_step: Callable, case: Case) -> dict[str, str]:
    """One call with the model on the meta device and the batch on the CPU: the device the forward got."""
    model, batches = train_step_inputs(case)
    model = model.to(META)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    devices: list[str] = []
    handle = model.register_forward_pre_hook(
        lambda module, inputs: devices.append(str(inputs[0].device) if inputs and isinstance(inputs[0], torch.Tensor)
                                              else "no tensor"))
    try:
        train_step(model, batches[0], nn.CrossEntropyLoss(), optimizer)
    except Exception as error:  # a batch left on the CPU fails in the forward: the input device says why
        return {"input": devices[0] if devices else "", "raised": explain(error)[:2000]}
    finally:
        handle.remove()
    return {"input": devices[0] if devices else ""}
