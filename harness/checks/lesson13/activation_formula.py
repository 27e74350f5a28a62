"""13-activation-formula, the probe: Call the student's formula on each case; record what it returned."""

from __future__ import annotations

from collections.abc import Callable

import torch

from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
from harness.contract.instruments import collect
from harness.contract.registry import register


def activation_cases(case: Case) -> list[tuple[int, list[int], torch.dtype]]:
    """(batch size, widths, dtype) of each call."""
    if case.hidden:
        generator = torch.Generator().manual_seed(case.seeded(160))
        # batches of 3 or more: with a batch of 2, a missing batch factor and float64 taken for 4 bytes give the
        # same number, and the check could not tell which slip it saw
        batch, hidden = (int(v) for v in torch.randint(3, 12, (2,), generator=generator))
        return [(batch, [4, hidden, hidden + 3, 2], torch.float64), (3, [3, 5], torch.float32),
                (hidden, [7, 9, 9, 9, 9, 1], torch.bfloat16)]
    return [(5, [8, 16, 4], torch.float32), (7, [8, 16, 32, 4], torch.bfloat16), (3, [6, 10, 10, 10, 2], torch.float16)]


@register(
    "13-activation-formula",
    hints=Hints(
        nudge="List what each layer saves: a Linear its input, a ReLU its output. Which of those are the same tensor?",
        concept="Autograd keeps, per Linear, its input (for the weight's gradient) and, per ReLU, its output; the ReLU "
        "output is the next Linear's input, one tensor. The last Linear's output is not saved by the model.",
        solution="element = torch.empty((), dtype=dtype).element_size()\n"
        "return batch_size * sum(widths[:-1]) * element",
        section="2. Where the memory goes",
    ),
    requires={
        "not-an-int": Requirement("returns an int number of bytes",
                                  hint="Print type(...) of what you return: a tensor or a float?"),
        "wrong-element-size": Requirement(
            "counts bytes at the dtype's element size (2 for bfloat16 and float16, 8 for float64)",
            hint="How many bytes does one bfloat16 value take? torch.empty((), dtype=dtype).element_size() says."),
        "weights-counted": Requirement(
            "leaves the parameters out (exercise 1 counts them)",
            hint="The weights a Linear saves are the parameters themselves: no new memory. Drop them from the sum."),
        "counted-twice": Requirement(
            "counts a tensor saved by two operations once",
            hint="The ReLU's output and the next Linear's input: how many tensors is that?"),
        "missing-batch": Requirement(
            "counts every row of the batch: the bytes grow with batch_size",
            hint="Call your formula with batch_size 1 and 2: does the result double? Every saved tensor has one row "
            "per example."),
        "wrong-bytes": Requirement(
            "equals the bytes autograd saves for backward in one forward of the MLP, measured",
            hint="Measure one small case with harness.memory.saved_for_backward and print saved.shapes: which "
            "tensors are they?"),
    },
)
def probe_activation_formula(activation_formula: Callable[[int, list[int], torch.dtype], int], *, case: Case) -> dict:
    """Call the student's formula on each case; record what it returned."""
    return {"results": collect(activation_cases(case), lambda item: {
        "returned": activation_formula(item[0], list(item[1]), item[2])})}
