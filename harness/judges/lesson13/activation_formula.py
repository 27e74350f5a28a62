"""13-activation-formula, the judge: The formula equals the bytes measured on the MLP, in every case."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from harness.checks.lesson13.activation_formula import activation_cases
from harness.contract.case import Case
from harness.contract.compare import judged, type_name
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.recorded import recorded
from harness.contract.registry import judges


def relu_mlp(widths: Sequence[int], dtype: torch.dtype) -> nn.Sequential:
    """Linear(widths[0], widths[1]), ReLU, ..., Linear(widths[-2], widths[-1]): no ReLU after the last Linear."""
    layers: list[nn.Module] = []
    for index, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        layers.append(nn.Linear(fan_in, fan_out))
        if index < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers).to(dtype)


@recorded
def measured_activation_bytes(batch: int, widths: Sequence[int], dtype: torch.dtype) -> int:
    """Bytes saved for backward by one forward of `relu_mlp(widths, dtype)`, parameters left out, measured."""
    from harness.memory import saved_for_backward

    model = relu_mlp(widths, dtype)
    x = torch.zeros(batch, widths[0], dtype=dtype)
    with saved_for_backward(exclude=model.parameters()) as saved:
        model(x)
    return saved.bytes


@recorded  # its counts hold the answer's terms, one slip each: withheld from the student course too
def activation_miscounts(batch: int, widths: Sequence[int], dtype: torch.dtype) -> dict[str, int]:
    """The dtype's element size ("element") and the bytes each known slip counts for this case that need no
    measurement (the other keys, read by `_activation_cause`)."""
    element = torch.empty((), dtype=dtype).element_size()
    inputs = sum(widths[:-1])

    def weights(start: int) -> int:
        return sum(a * b for a, b in zip(widths[start:-1], widths[start + 1:], strict=True)) * element

    return {"element": element, "elements": batch * inputs, "four-bytes": batch * inputs * 4,
            "weights": weights(0), "later-weights": weights(1),
            "relu-twice": batch * (widths[0] + 2 * sum(widths[1:-1])) * element,
            "last-output": batch * sum(widths) * element, "outputs": batch * sum(widths[1:]) * element,
            "first-input-left-out": batch * sum(widths[1:-1]) * element}


def _activation_cause(got: int, want: int, batch: int, miscounts: dict[str, int],
                      dtype: torch.dtype) -> tuple[str, str]:
    """The failure code and cause of a wrong byte count: the known slips whose count equals `got` (`want` and
    `activation_miscounts`), listed as candidates when several give the same number."""
    rows, element = batch, miscounts["element"]
    slips = [
        (want // rows if want % rows == 0 else None, "missing-batch",
         f"exactly {rows} times too few, the batch size: the count is one example's bytes, the batch_size factor is "
         "missing"),
        (miscounts["elements"] if element != 1 else None, "wrong-element-size", "elements were counted, not bytes"),
        (miscounts["four-bytes"] if element != 4 else None, "wrong-element-size",
         f"4 bytes were assumed per element; {dtype} takes {element}"),
        (want + miscounts["weights"], "weights-counted", "the weights that Linear layers save were added: they are "
         "the parameters, already in memory"),
        (want + miscounts["later-weights"], "weights-counted", "the weights that Linear layers save were added: they "
         "are the parameters, already in memory"),
        (miscounts["relu-twice"], "counted-twice",
         "each ReLU output was counted twice: it is also the next Linear's input, one tensor"),
        (miscounts["last-output"], "wrong-bytes",
         "the last Linear's output was counted: the model does not save it (the loss's backward might)"),
        (miscounts["outputs"], "wrong-bytes",
         "each Linear's output was counted instead of its input: the first input is saved, the last output is not"),
        (miscounts["first-input-left-out"], "wrong-bytes",
         "the first Linear's input was left out: it is saved, to compute the weight's gradient"),
    ]
    matches = list(dict.fromkeys((code, cause) for value, code, cause in slips if value == got and value != want))
    if not matches:
        return "wrong-bytes", ("a different count: the first Linear's input left out, the last Linear's output "
                               "counted (the model does not save it), or another layer's tensors")
    if len(matches) == 1:
        return matches[0]
    return matches[0][0], "one of these slips, which give the same number here: " + "; or ".join(
        cause for _, cause in matches)


@judges(
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
def judge_activation_formula(seen: dict, *, case: Case) -> str:
    """The formula equals the bytes measured on the MLP, in every case."""
    for (batch, widths, dtype), result in judged(activation_cases(case), seen["results"]):
        got, want = result["returned"], measured_activation_bytes(batch, widths, dtype)
        miscounts = activation_miscounts(batch, widths, dtype)  # on every case: the release records what the tree needs
        what = f"batch {batch}, widths {widths}, {str(dtype).removeprefix('torch.')}"
        if type(got) is not int:
            fail("not-an-int", observed=f"returned {type_name(got)} for {what}", expected=f"the int {want}",
                 cause="a tensor: the count was computed with torch (torch.tensor(...), a product of tensors, "
                 ".element_size() times a tensor) and not converted" if isinstance(got, torch.Tensor) else
                 "a float: a division (/ instead of //) or a product of floats" if isinstance(got, float) else
                 f"a {type_name(got)}, not an int",
                 where="the return statement of activation_formula")
        if got == want:
            continue
        code, cause = _activation_cause(got, want, batch, miscounts, dtype)
        fail(code, observed=f"{got} bytes for {what}", expected=f"{want} bytes (measured with saved_tensors_hooks)",
             cause=cause, where="the sum in activation_formula")
    return "activation bytes of ReLU MLPs in float32, bfloat16 and float16, as measured"
