"""13-accumulate, the probe.

Two calls of the student's step per run, the model left in eval mode before each; record the forward
batch sizes and modes, the steps the optimizer took and what each call returned.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
from harness.contract.instruments import ForwardRecorder, StepRecorder, collect, snapshot
from harness.contract.registry import register

Batch = tuple[torch.Tensor, torch.Tensor]


def accum_cases(case: Case) -> list[tuple[int, int, int]]:
    """(seed, batch size, micro-batch size) of each run: uneven splits, and (hidden) one micro-batch."""
    if case.hidden:
        # 11 rows in 3s: chunk(3) gives 4-row pieces, as the visible case's 10 rows do
        return [(case.seeded(131), 13, 5), (case.seeded(132), 6, 8), (case.seeded(133), 12, 4),
                (case.seeded(135), 11, 3)]
    return [(case.seeded(130), 10, 4), (case.seeded(134), 10, 3)]  # 10 rows in 3s: chunk(3) gives a 4-row piece


def accum_setup(seed: int, size: int) -> tuple[nn.Module, torch.optim.Optimizer, list[Batch]]:
    """A seeded MLP, its SGD optimizer and two batches of `size` rows."""
    generator = torch.Generator().manual_seed(seed)
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 2))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.5)
    batches = [(torch.randn(size, 5, generator=generator), torch.randn(size, 2, generator=generator))
               for _ in range(2)]
    return model, torch.optim.SGD(model.parameters(), lr=0.1), batches


@register(
    "13-accumulate",
    hints=Hints(
        nudge="Split the batch with .split(micro_batch_size); weight each micro-batch's mean loss by its share of "
        "the rows, len(chunk) / len(batch), so the last, smaller one counts for less.",
        concept="Gradients add up in .grad across backward calls: clear once, backward on each micro-batch's loss "
        "times its share of the rows, step once. Then the update equals the full batch's, with a fraction of "
        "the activation memory.",
        solution="for x, y in zip(inputs.split(micro_batch_size), targets.split(micro_batch_size)):\n"
        "    loss = loss_fn(model(x), y) * (len(x) / len(inputs)); loss.backward(); total += loss.detach()",
        section="3. Fitting a bigger run: gradient accumulation",
    ),
    requires={
        "eval-mode": Requirement("puts the model in training mode",
                                 hint="Which call switches dropout and batch norm to training behaviour?"),
        "micro-batch-too-large": Requirement(
            "never runs a forward on more than micro_batch_size rows",
            hint="Print x.shape[0] inside your loop: is the whole batch going through the model at once?"),
        "missing-zero-grad": Requirement(
            "clears the gradients once, before the first micro-batch",
            hint="Call your step twice: does the second step's gradient still hold the first one's?"),
        "only-last-micro-batch": Requirement(
            "the gradient accumulates over every micro-batch",
            hint="What does zero_grad inside the loop do to the micro-batches before the last one?"),
        "wrong-weighting": Requirement(
            "the accumulated gradient equals the gradient of the mean loss over the whole batch, also when the "
            "last micro-batch is smaller",
            hint="With 10 rows in micro-batches of 4, 4 and 2, how much should the 2-row micro-batch weigh?"),
        "no-step": Requirement("calls optimizer.step() once per call",
                               hint="Where is optimizer.step()? Once, after the loop."),
        "steps-per-micro-batch": Requirement(
            "steps once, after the last micro-batch (not once per micro-batch)",
            hint="Is optimizer.step() indented inside your loop?"),
        "wrong-return": Requirement(
            "returns the mean loss over the whole batch as a detached 0-dim tensor (no .item())",
            hint="Add up each weighted micro-batch loss with .detach(); what does that sum equal?"),
    },
)
def probe_accumulate(accumulation_step: Callable[..., Any], *, case: Case) -> dict:
    """Two calls of the student's step per run, the model left in eval mode before each; record the forward
    batch sizes and modes, the steps the optimizer took and what each call returned."""
    def record(item: tuple[int, int, int]) -> dict:
        seed, size, micro = item
        model, optimizer, batches = accum_setup(seed, size)
        calls = []
        for batch in batches:
            model.eval()  # as after a validation pass: the step must switch back
            with ForwardRecorder(model) as forwards, StepRecorder(optimizer) as steps:
                returned = accumulation_step(model, batch, nn.functional.mse_loss, optimizer, micro)
            calls.append({"returned": returned, "sizes": [r.batch_size for r in forwards.records],
                          "training": [r.training for r in forwards.records],
                          "steps": [{"grads": r.grads, "params": r.params} for r in steps.records],
                          "after": snapshot(model)})
        return {"calls": calls}

    return {"results": collect(accum_cases(case), record)}
