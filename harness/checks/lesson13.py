"""Checks of lesson 13, performance and memory: the training-memory formula, gradient accumulation with
uneven micro-batches, activation checkpointing, and a determinism context manager that restores the flags.

- 13-memory-formula: the probe calls the student's formula on models built from the case (frozen layers, a
  bfloat16 layer, a tied weight) and returns the numbers; the judge rebuilds the models and counts the bytes.
- 13-accumulate: the probe runs the student's step twice on a seeded MLP and records, through hooks, the
  size of every forward's batch, the model's mode and the gradients and parameters the optimizer saw; the
  judge recomputes the full-batch gradient at those parameters.
- 13-checkpoint: the probe runs the student's forward on seeded blocks with dropout, records the output,
  the shapes of what autograd saved outside the checkpoints, and the gradients after a seeded backward; the
  judge recomputes the plain forward and backward with the same dropout masks.
- 13-deterministic: the probe sets the global flags to the case's prior values, enters the student's
  context manager (normally and with an exception inside), records the flags inside and after, and restores
  the flags itself; the judge compares with the case's priors.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from harness.contract.case import Case
from harness.contract.compare import judged, matching_tensors, type_name
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.instruments import ForwardRecorder, StepRecorder, collect, snapshot
from harness.contract.registry import judges, register
from harness.contract.wire import WireError

Batch = tuple[torch.Tensor, torch.Tensor]


def _flat(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.reshape(-1).double() for t in tensors])


def _close(a: torch.Tensor, b: torch.Tensor, rtol: float = 1e-4) -> bool:
    return float((a - b).norm()) <= rtol * float(b.norm()) + 1e-9


# --------------------------------------------------------------------------------------------------
# 13-memory-formula
# --------------------------------------------------------------------------------------------------
STATE_COPIES = {"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2}
KEYS = ("params", "grads", "optimizer", "total")


class _Tied(nn.Module):
    """An embedding whose weight the output layer shares, with a bfloat16 layer between them."""

    def __init__(self, vocab: int, width: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.mid = nn.Linear(width, width).to(torch.bfloat16)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.embed.weight  # tied: one tensor, two modules


def _memory_models(case: Case) -> list[tuple[str, nn.Module, str]]:
    """(description, model, optimizer name) of each call. Values do not matter, only shapes and dtypes."""
    width, hidden = (5, 12) if case.hidden else (8, 16)
    mlp = nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, 4))
    mlp[0].requires_grad_(False)  # a frozen first layer
    tied = _Tied(11 if case.hidden else 10, 6 if case.hidden else 4)
    if case.hidden:
        tied.mid.bias.requires_grad_(False)
    mixed = nn.Sequential(nn.Linear(width, hidden).to(torch.float16), nn.Linear(hidden, 3).double())
    return [("an MLP with a frozen first layer, with SGD", mlp, "sgd"),
            ("the same MLP with SGD and momentum", mlp, "momentum"),
            ("a model with a tied embedding and a bfloat16 layer, with Adam", tied, "adam"),
            ("the same model with AdamW", tied, "adamw")] + (
        [("a float16 and float64 model with momentum", mixed, "momentum")] if case.hidden else [])


def reference_training_memory(model: nn.Module, optimizer: str) -> dict[str, int]:
    """The formula: parameters at their own element size (a tied weight once), gradients of the trainable
    ones, optimizer state of `STATE_COPIES[optimizer]` copies of the trainable ones."""
    params = list(model.parameters())  # deduplicated: a tied weight is one parameter
    sizes = {"params": sum(p.numel() * p.element_size() for p in params),
             "grads": sum(p.numel() * p.element_size() for p in params if p.requires_grad)}
    sizes["optimizer"] = STATE_COPIES[optimizer] * sizes["grads"]
    return {**sizes, "total": sum(sizes.values())}


@register(
    "13-memory-formula",
    hints=Hints(
        nudge="Each parameter costs numel() * element_size() bytes; its gradient the same if it is trained; "
        "the optimizer keeps 0, 1 or 2 more tensors like each trained parameter.",
        concept="Static training memory = parameters + gradients (trainable only) + optimizer state (SGD: none; "
        "momentum: one buffer; Adam/AdamW: exp_avg and exp_avg_sq). model.parameters() lists a tied weight once.",
        solution="params = list(model.parameters()); trained = [p for p in params if p.requires_grad]\n"
        "size = lambda ps: sum(p.numel() * p.element_size() for p in ps)\n"
        "grads = size(trained); optimizer = {'sgd': 0, 'momentum': 1, 'adam': 2, 'adamw': 2}[name] * grads",
        section="2. Where the memory goes",
    ),
    requires={
        "missing-key": Requirement(
            "returns a dict with exactly the keys params, grads, optimizer and total",
            hint="Print sorted(training_memory(model, 'sgd')): are the four keys spelled as the exercise says?"),
        "not-an-int": Requirement(
            "each value is an int number of bytes",
            hint="Print type(...) of each value: which one is a tensor or a float? sum() of Python ints is an int."),
        "wrong-params": Requirement(
            "params counts every parameter (frozen ones too) in bytes at its own dtype's size, a tied weight once",
            hint="Compare with the bytes of one small layer by hand: is yours counting elements, assuming 4 bytes, "
            "skipping frozen layers, or counting a shared weight twice?"),
        "wrong-grads": Requirement(
            "grads counts the trainable parameters only (requires_grad)",
            hint="Which parameters get a .grad in backward? Filter on p.requires_grad."),
        "wrong-optimizer-state": Requirement(
            "optimizer: no state for 'sgd', one copy of the trainable parameters for 'momentum', two for "
            "'adam' and 'adamw'",
            hint="What does each optimizer keep per parameter? Momentum: one velocity; Adam: two moments."),
        "wrong-total": Requirement(
            "total is the sum of the three others",
            hint="Print the four values and add the first three by hand."),
    },
)
def probe_memory_formula(training_memory: Callable[[nn.Module, str], dict], *, case: Case) -> dict:
    """Call the student's formula on each model and optimizer name; record what it returned."""
    return {"results": collect(_memory_models(case), lambda item: {"returned": training_memory(item[1], item[2])})}


def _params_cause(got: int, model: nn.Module) -> str:
    """Which known mistake gives `got` as the parameter bytes of `model` (candidates when none fits)."""
    params = list(model.parameters())
    elements = sum(p.numel() for p in params)
    every = [p for m in model.modules() for p in m.parameters(recurse=False)]  # a tied weight twice
    candidates = {
        elements: "elements were counted, not bytes (multiply numel() by element_size())",
        4 * elements: "4 bytes were assumed per element: a bfloat16 or float16 parameter has 2, a float64 one 8 "
        "(use p.element_size())",
        sum(p.numel() * p.element_size() for p in every): "a shared (tied) weight was counted twice: iterate over "
        "model.parameters(), which lists it once, not over each module's own parameters or the state_dict",
        sum(p.numel() * p.element_size() for p in params if p.requires_grad): "frozen parameters were left out: "
        "they take memory too (requires_grad=False only spares their gradient)",
    }
    want = sum(p.numel() * p.element_size() for p in params)
    return next((cause for value, cause in candidates.items() if value == got and value != want),
                "a different count: elements instead of bytes, a fixed 4 bytes per element, frozen parameters left "
                "out, or a tied weight counted twice")


@judges("13-memory-formula")
def judge_memory_formula(seen: dict, *, case: Case) -> str:
    """The four byte counts equal the formula, on every model and optimizer of the case."""
    for (description, model, name), result in judged(_memory_models(case), seen["results"]):
        got, want = result["returned"], reference_training_memory(model, name)
        if not isinstance(got, dict) or sorted(got) != sorted(KEYS):
            fail("missing-key", observed=f"returned {type_name(got)}" + (f" with keys {sorted(got)}"
                                                                          if isinstance(got, dict) else ""),
                 expected=f"a dict with the keys {list(KEYS)}", cause="a key is missing or spelled differently, or "
                 "something other than a dict is returned", where="the return statement of training_memory")
        for key in KEYS:
            if type(got[key]) is not int:
                fail("not-an-int", observed=f"{key} is {type_name(got[key])} for {description}",
                     expected="an int (bytes)", cause="a tensor sum (torch.tensor(...).sum()), a float division, or "
                     "a numpy number", where=f"the line that computes {key}")
        if got["params"] != want["params"]:
            fail("wrong-params", observed=f"params = {got['params']} for {description}",
                 expected=f"{want['params']} bytes", cause=_params_cause(got["params"], model),
                 where="the line that computes params")
        if got["grads"] != want["grads"]:
            cause = ("frozen parameters were counted: they get no gradient" if got["grads"] == want["params"]
                     else "a different count of the trainable parameters' bytes")
            fail("wrong-grads", observed=f"grads = {got['grads']} for {description}", expected=f"{want['grads']}",
                 cause=cause, where="the line that computes grads (filter on p.requires_grad)")
        if got["optimizer"] != want["optimizer"]:
            copies = got["optimizer"] / want["grads"] if want["grads"] else float("nan")
            fail("wrong-optimizer-state", observed=f"optimizer = {got['optimizer']} for {description} "
                 f"({copies:.3g} times the trainable parameters' bytes)",
                 expected=f"{want['optimizer']} ({STATE_COPIES[name]} copies of the trainable parameters for "
                 f"{name!r})", cause=f"the number of state tensors per parameter for {name!r} (SGD keeps none, "
                 "momentum one buffer, Adam and AdamW two moments), or state counted for frozen parameters",
                 where="the optimizer's entry of your formula")
        if got["total"] != got["params"] + got["grads"] + got["optimizer"]:
            fail("wrong-total", observed=f"total = {got['total']} for {description}",
                 expected=f"params + grads + optimizer = {want['total']}", cause="the total leaves out or repeats a "
                 "part", where="the line that computes total")
    return "bytes of parameters, gradients and optimizer state, with frozen, tied and 16-bit parameters"


# --------------------------------------------------------------------------------------------------
# 13-activation-formula
# --------------------------------------------------------------------------------------------------
def relu_mlp(widths: Sequence[int], dtype: torch.dtype) -> nn.Sequential:
    """Linear(widths[0], widths[1]), ReLU, ..., Linear(widths[-2], widths[-1]): no ReLU after the last Linear."""
    layers: list[nn.Module] = []
    for index, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        layers.append(nn.Linear(fan_in, fan_out))
        if index < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers).to(dtype)


def _activation_cases(case: Case) -> list[tuple[int, list[int], torch.dtype]]:
    """(batch size, widths, dtype) of each call."""
    if case.hidden:
        generator = torch.Generator().manual_seed(case.seeded(160))
        batch, hidden = (int(v) for v in torch.randint(2, 12, (2,), generator=generator))
        return [(batch, [4, hidden, hidden + 3, 2], torch.float64), (3, [3, 5], torch.float32),
                (hidden, [7, 9, 9, 9, 9, 1], torch.bfloat16)]
    return [(5, [8, 16, 4], torch.float32), (7, [8, 16, 32, 4], torch.bfloat16), (3, [6, 10, 10, 10, 2], torch.float16)]


def measured_activation_bytes(batch: int, widths: Sequence[int], dtype: torch.dtype) -> int:
    """Bytes saved for backward by one forward of `relu_mlp(widths, dtype)`, parameters left out, measured."""
    from harness.memory import saved_for_backward

    model = relu_mlp(widths, dtype)
    x = torch.zeros(batch, widths[0], dtype=dtype)
    with saved_for_backward(exclude=model.parameters()) as saved:
        model(x)
    return saved.bytes


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
        "wrong-bytes": Requirement(
            "equals the bytes autograd saves for backward in one forward of the MLP, measured",
            hint="Measure one small case with harness.memory.saved_for_backward and print saved.shapes: which "
            "tensors are they?"),
    },
)
def probe_activation_formula(activation_formula: Callable[[int, list[int], torch.dtype], int], *, case: Case) -> dict:
    """Call the student's formula on each case; record what it returned."""
    return {"results": collect(_activation_cases(case), lambda item: {
        "returned": activation_formula(item[0], list(item[1]), item[2])})}


@judges("13-activation-formula")
def judge_activation_formula(seen: dict, *, case: Case) -> str:
    """The formula equals the bytes measured on the MLP, in every case."""
    for (batch, widths, dtype), result in judged(_activation_cases(case), seen["results"]):
        got, want = result["returned"], measured_activation_bytes(batch, widths, dtype)
        what = f"batch {batch}, widths {widths}, {str(dtype).removeprefix('torch.')}"
        if type(got) is not int:
            fail("not-an-int", observed=f"returned {type_name(got)} for {what}", expected=f"the int {want}",
                 cause="a tensor product (torch.tensor(...)) or a float (a division, math.prod of floats)",
                 where="the return statement of activation_formula")
        if got == want:
            continue
        element = torch.empty((), dtype=dtype).element_size()
        rows, inputs = batch, sum(widths[:-1])
        weights = sum(a * b for a, b in zip(widths[:-1], widths[1:], strict=True)) * element
        later_weights = sum(a * b for a, b in zip(widths[1:-1], widths[2:], strict=True)) * element
        code, cause = "wrong-bytes", ("a different count: the first Linear's input left out, the last Linear's "
                                      "output counted (the model does not save it), or another layer's tensors")
        if got in (rows * inputs, rows * inputs * 4) and element != (1 if got == rows * inputs else 4):
            code, cause = "wrong-element-size", ("elements were counted, not bytes" if got == rows * inputs else
                                                 f"4 bytes were assumed per element; {dtype} takes {element}")
        elif got in (want + weights, want + later_weights):
            code, cause = "weights-counted", ("the weights that Linear layers save were added: they are the "
                                              "parameters, already in memory")
        elif got == rows * (widths[0] + 2 * sum(widths[1:-1])) * element:
            code, cause = "counted-twice", ("each ReLU output was counted twice: it is also the next Linear's "
                                            "input, one tensor")
        elif got == rows * sum(widths) * element:
            cause = "the last Linear's output was counted: the model does not save it (the loss's backward might)"
        elif got == rows * sum(widths[1:-1]) * element:
            cause = "the first Linear's input was left out: it is saved, to compute the weight's gradient"
        fail(code, observed=f"{got} bytes for {what}", expected=f"{want} bytes (measured with saved_tensors_hooks)",
             cause=cause, where="the sum in activation_formula")
    return "activation bytes of ReLU MLPs in float32, bfloat16 and float16, as measured"


# --------------------------------------------------------------------------------------------------
# 13-accumulate
# --------------------------------------------------------------------------------------------------
def _accum_cases(case: Case) -> list[tuple[int, int, int]]:
    """(seed, batch size, micro-batch size) of each run: uneven splits, and (hidden) one micro-batch."""
    if case.hidden:
        return [(case.seeded(131), 13, 5), (case.seeded(132), 6, 8), (case.seeded(133), 12, 4)]
    return [(case.seeded(130), 10, 4)]


def _accum_setup(seed: int, size: int) -> tuple[nn.Module, torch.optim.Optimizer, list[Batch]]:
    """A seeded MLP, its SGD optimizer and two batches of `size` rows."""
    generator = torch.Generator().manual_seed(seed)
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 2))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.5)
    batches = [(torch.randn(size, 5, generator=generator), torch.randn(size, 2, generator=generator))
               for _ in range(2)]
    return model, torch.optim.SGD(model.parameters(), lr=0.1), batches


def _grad_at(model: nn.Module, params: Sequence[torch.Tensor], batches: Sequence[Batch],
             weights: Sequence[float]) -> torch.Tensor:
    """The flat gradient of sum(weight * mean MSE) over `batches`, at `params` (on a copy of `model`)."""
    twin = copy.deepcopy(model)
    with torch.no_grad():
        for p, value in zip(twin.parameters(), params, strict=True):
            p.copy_(value)
    twin.zero_grad(set_to_none=True)
    for (inputs, targets), weight in zip(batches, weights, strict=True):
        (weight * nn.functional.mse_loss(twin(inputs), targets)).backward()
    return _flat([p.grad for p in twin.parameters()])


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
        model, optimizer, batches = _accum_setup(seed, size)
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

    return {"results": collect(_accum_cases(case), record)}


def _judge_accum_call(call: Any, model: nn.Module, start: list[torch.Tensor], batch: Batch, micro: int,
                      previous: torch.Tensor | None) -> torch.Tensor:
    """Judge one call (starting from `start`); the flat gradient the optimizer saw."""
    if not isinstance(call, dict) or not isinstance(call.get("sizes"), list) or not isinstance(call.get("steps"), list):
        raise WireError("malformed observation: a call record is not a dict of lists")
    size = len(batch[0])
    if any(not isinstance(s, int) for s in call["sizes"]) or not all(isinstance(t, bool) for t in call["training"]):
        raise WireError("malformed observation: forward sizes or modes are not data")
    if not all(call["training"]):
        fail("eval-mode", observed="a forward ran with the model in eval mode (the check leaves it in eval mode, as "
             "after validation)", expected="model.train() before the first forward",
             cause="model.train() is missing", where="the first line of accumulation_step")
    if any(s > micro for s in call["sizes"]):
        fail("micro-batch-too-large", observed=f"forwards on {call['sizes']} rows with micro_batch_size={micro}",
             expected=f"forwards of at most {micro} rows (the memory limit accumulation exists for)",
             cause="the whole batch goes through the model at once, or the chunks are cut wrongly",
             where="the split of the batch into micro-batches")
    if not call["steps"]:
        fail("no-step", observed="optimizer.step() never ran", expected="one step per call",
             cause="the optimizer step is missing", where="after the micro-batch loop")
    if len(call["steps"]) > 1:
        fail("steps-per-micro-batch", observed=f"optimizer.step() ran {len(call['steps'])} times in one call",
             expected="one step, after the last micro-batch", cause="the step is inside the micro-batch loop",
             where="the indentation of optimizer.step()")
    step = call["steps"][0]
    if not isinstance(step, dict):
        raise WireError("malformed observation: a step record is not a dict")
    params = matching_tensors(step.get("params"), start, "params")
    if not all(torch.equal(a, b.float()) for a, b in zip(params, start, strict=True)):
        raise WireError("malformed observation: the step did not start from the parameters of the call")
    grads = step.get("grads")
    if not isinstance(grads, list) or len(grads) != len(start):
        raise WireError("malformed observation: grads do not match the parameters")
    got = _flat([torch.zeros_like(p) if g is None else matching_tensors([g], [p], "grad")[0]
                 for g, p in zip(grads, start, strict=True)])
    chunks = list(zip(batch[0].split(micro), batch[1].split(micro), strict=True))
    shares = [len(x) / size for x, _ in chunks]
    want = _grad_at(model, start, chunks, shares)
    if _close(got, want):
        return got
    observed = f"the gradient at optimizer.step() differs from the full batch's (relative error " \
        f"{float((got - want).norm() / want.norm()):.2g}; {size} rows in micro-batches of {micro})"
    if previous is not None and _close(got, want + previous):
        fail("missing-zero-grad", observed=observed + ": it equals this call's plus the previous call's",
             expected="this call's gradient only", cause="the gradients are never cleared, so each call adds to "
             "the previous call's", where="optimizer.zero_grad(set_to_none=True) before the loop")
    if len(chunks) > 1 and _close(got, _grad_at(model, start, chunks[-1:], shares[-1:])):
        fail("only-last-micro-batch", observed=observed + ": it is the last micro-batch's alone",
             expected="the sum over every micro-batch", cause="zero_grad inside the micro-batch loop clears the "
             "earlier micro-batches' gradients", where="the position of zero_grad")
    if len(chunks) > 1 and _close(got, _grad_at(model, start, chunks, [1.0 / len(chunks)] * len(chunks))):
        cause = "each micro-batch's loss was divided by the number of micro-batches: the last, smaller one weighs " \
            "as much as a full one. Weight it by its share of the rows, len(chunk) / len(batch)"
    elif _close(got, _grad_at(model, start, chunks, [1.0] * len(chunks))):
        cause = "the micro-batch losses were summed without weighting: the gradient is about k times too large"
    else:
        cause = "another weighting of the micro-batch losses (or a micro-batch left out or used twice)"
    fail("wrong-weighting", observed=observed, expected="the gradient of the mean loss over all rows",
         cause=cause, where="the factor each micro-batch's loss is multiplied by before backward")


def _judge_accum_return(got: Any, model: nn.Module, start: list[torch.Tensor], batch: Batch) -> None:
    with torch.no_grad():
        twin = copy.deepcopy(model)
        for p, value in zip(twin.parameters(), start, strict=True):
            p.copy_(value)
        want = float(nn.functional.mse_loss(twin(batch[0]), batch[1]))
    if not isinstance(got, torch.Tensor) or got.dim() != 0 or got.requires_grad:
        fail("wrong-return", observed=f"returned {type_name(got)}" + (
            f" of shape {tuple(got.shape)}, requires_grad={got.requires_grad}" if isinstance(got, torch.Tensor)
            else ""), expected="a detached 0-dim tensor", cause="a Python number (.item(), float()), a list of "
             "micro-batch losses, or a loss still attached to the graph (add .detach())",
             where="the return statement of accumulation_step")
    if abs(float(got) - want) > 1e-4 * abs(want) + 1e-7:
        fail("wrong-return", observed=f"returned {float(got):.6g}", expected=f"the mean loss over the batch, "
             f"{want:.6g}", cause="the last micro-batch's loss, an unweighted sum or mean of micro-batch losses",
             where="how the returned loss is accumulated")


@judges("13-accumulate")
def judge_accumulate(seen: dict, *, case: Case) -> str:
    """Each step's gradient is the full batch's mean-loss gradient; forwards stay within micro_batch_size."""
    for (seed, size, micro), result in judged(_accum_cases(case), seen["results"]):
        model, _, batches = _accum_setup(seed, size)
        calls = result.get("calls") if isinstance(result, dict) else None
        if not isinstance(calls, list) or len(calls) != len(batches):
            raise WireError("malformed observation: not one record per call")
        start, previous = snapshot(model), None
        for call, batch in zip(calls, batches, strict=True):
            previous = _judge_accum_call(call, model, start, batch, micro, previous)
            _judge_accum_return(call.get("returned"), model, start, batch)
            after = matching_tensors(call.get("after"), start, "after")
            want_after = [p - 0.1 * g for p, g in zip(start, _unflat(previous, start), strict=True)]
            if not all(torch.allclose(a, w, rtol=1e-4, atol=1e-6) for a, w in zip(after, want_after, strict=True)):
                raise WireError("malformed observation: the parameters after the call are not one SGD step")
            start = [a.clone() for a in after]
    return "full-batch gradient from uneven micro-batches, forwards within the limit, one step per call"


def _unflat(flat: torch.Tensor, like: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    out, at = [], 0
    for p in like:
        out.append(flat[at:at + p.numel()].reshape(p.shape).float())
        at += p.numel()
    return out


# --------------------------------------------------------------------------------------------------
# 13-checkpoint
# --------------------------------------------------------------------------------------------------
def _blocks(seed: int, width: int, depth: int) -> nn.ModuleList:
    """`depth` blocks Linear -> GELU -> Dropout(0.25), seeded, in training mode (dropout active)."""
    generator = torch.Generator().manual_seed(seed)
    blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.Dropout(0.25)) for _ in range(depth))
    with torch.no_grad():
        for p in blocks.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) / width**0.5)
    return blocks.train()


def _checkpoint_cases(case: Case) -> list[tuple[int, int, int, int]]:
    """(seed, batch, width, depth) of each call."""
    if case.hidden:
        return [(case.seeded(141), 5, 12, 3), (case.seeded(142), 7, 6, 1)]
    return [(case.seeded(140), 6, 16, 4)]


def _checkpoint_inputs(seed: int, batch: int, width: int, depth: int) -> tuple[nn.ModuleList, torch.Tensor,
                                                                             torch.Tensor]:
    blocks = _blocks(seed, width, depth)
    generator = torch.Generator().manual_seed(seed + 1000)
    x = torch.randn(batch, width, generator=generator)  # data: it does not require grad
    upstream = torch.randn(batch, width, generator=generator)
    return blocks, x, upstream


@register(
    "13-checkpoint",
    hints=Hints(
        nudge="Wrap each block's call: h = checkpoint(block, h, use_reentrant=False).",
        concept="torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False) runs fn without keeping its "
        "activations and runs it again in backward; it restores the RNG state so dropout draws the same mask. "
        "The reentrant variant gives no parameter gradients when no input requires grad.",
        solution="h = x\nfor block in blocks:\n    h = checkpoint(block, h, use_reentrant=False)\nreturn h",
        section="4. Activation checkpointing: memory for time",
    ),
    requires={
        "wrong-output": Requirement("returns what running the blocks in order returns",
                                    hint="Compare with a plain loop over the blocks, under the same seed."),
        "no-param-grads": Requirement(
            "the parameters get gradients in backward, even though the input does not require grad",
            hint="Does your output have a grad_fn? Which checkpoint variant needs an input that requires grad?"),
        "reentrant": Requirement(
            "uses the non-reentrant checkpoint (use_reentrant=False)",
            hint="Which value of use_reentrant does the lesson recommend, and what does the other one do?"),
        "wrong-grads": Requirement(
            "the gradients equal those of the plain forward (the same dropout masks in the recomputation)",
            hint="Dropout draws a new mask each call: what must checkpoint restore before it runs a block again?"),
        "not-checkpointed": Requirement(
            "every block is checkpointed: autograd keeps only each block's input outside the checkpoints",
            hint="Count what is saved for backward with harness.memory.saved_for_backward: which block still "
            "keeps its activations?"),
    },
)
def probe_checkpoint(checkpointed_forward: Callable[[nn.ModuleList, torch.Tensor], torch.Tensor], *,
                     case: Case) -> dict:
    """Run the student's forward under a seed; record the output, what was saved outside the checkpoints, the
    output's grad_fn and the parameters' gradients after a seeded backward."""
    def record(item: tuple[int, int, int, int]) -> dict:
        seed, batch, width, depth = item
        blocks, x, upstream = _checkpoint_inputs(seed, batch, width, depth)
        saved: list[tuple[list[int], str]] = []
        excluded = {p.untyped_storage().data_ptr() for p in blocks.parameters()}

        def pack(tensor: torch.Tensor) -> torch.Tensor:
            if tensor.untyped_storage().data_ptr() not in excluded:
                saved.append(list(tensor.shape))
            return tensor

        torch.manual_seed(seed)  # dropout draws from the global generator, as in training
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            out = checkpointed_forward(blocks, x)
        grads = None
        if isinstance(out, torch.Tensor) and out.requires_grad:
            out.backward(upstream)
            grads = [None if p.grad is None else p.grad.clone() for p in blocks.parameters()]
        grad_fn = type(out.grad_fn).__name__ if isinstance(out, torch.Tensor) and out.grad_fn is not None else None
        return {"out": out.detach() if isinstance(out, torch.Tensor) else out, "saved": saved,
                "grad_fn": grad_fn, "grads": grads}

    return {"results": collect(_checkpoint_cases(case), record)}


@judges("13-checkpoint")
def judge_checkpoint(seen: dict, *, case: Case) -> str:
    """Output and gradients equal the plain forward's with the same dropout masks; only block inputs saved."""
    for (seed, batch, width, depth), result in judged(_checkpoint_cases(case), seen["results"]):
        blocks, x, upstream = _checkpoint_inputs(seed, batch, width, depth)
        torch.manual_seed(seed)
        h = x
        for block in blocks:
            h = block(h)
        h.backward(upstream)
        out, grad_fn, grads, saved = result["out"], result["grad_fn"], result["grads"], result["saved"]
        what = f"{depth} blocks of width {width}, batch {batch}"
        if not isinstance(out, torch.Tensor) or out.shape != h.shape or not torch.allclose(out, h.detach(), atol=1e-5):
            fail("wrong-output", observed=f"returned {type_name(out)}" + (
                f" of shape {tuple(out.shape)}" if isinstance(out, torch.Tensor) else "") + " that differs from "
                 f"running the blocks in order ({what})", expected=f"the output of shape {tuple(h.shape)}",
                 cause="a block skipped or applied twice, the input instead of the last output returned, or a "
                 "different random state for dropout", where="the loop over blocks and the return statement")
        if grads is None:
            fail("no-param-grads", observed="the output does not require grad: backward cannot reach the blocks' "
                 "parameters", expected="an output attached to the graph", cause="use_reentrant=True (or not passed, "
                 "which means True here) with an input that does not require grad, a forward under torch.no_grad(), "
                 "or a .detach()", where="the checkpoint call")
        if grad_fn is not None and not isinstance(grad_fn, str):
            raise WireError("malformed observation: grad_fn is not a name")
        if grad_fn is not None and "CheckpointFunction" in grad_fn:
            fail("reentrant", observed=f"the output's grad_fn is {grad_fn}: the reentrant checkpoint ran",
                 expected="the non-reentrant checkpoint", cause="use_reentrant=True, or use_reentrant not passed "
                 "(which means True, with a warning)", where="the checkpoint call: pass use_reentrant=False")
        want = [p.grad for p in blocks.parameters()]
        got = [torch.zeros_like(w) if g is None else g for g, w in
               zip(matching_list(grads, len(want)), want, strict=True)]
        got = matching_tensors(got, want, "grads")
        if not _close(_flat(got), _flat(want), rtol=1e-4):
            fail("wrong-grads", observed=f"the parameters' gradients differ from the plain forward's ({what})",
                 expected="the same gradients: checkpointing changes memory and time, never the result",
                 cause="preserve_rng_state=False: the recomputation draws new dropout masks; or the blocks ran "
                 "under a different random state", where="the checkpoint call's arguments")
        if not isinstance(saved, list) or not all(isinstance(s, list) and all(isinstance(d, int) for d in s)
                                                  for s in saved):
            raise WireError("malformed observation: saved shapes are not lists of ints")
        kept = sum(_numel(s) for s in saved)
        allowed = depth * batch * width
        if kept > allowed:
            fail("not-checkpointed", observed=f"autograd kept {kept} values for backward outside checkpoints "
                 f"({len(saved)} tensors)", expected=f"at most {allowed}: each block's input ({depth} x {batch} x "
                 f"{width})", cause="a block (or part of one) runs outside checkpoint, so its activations are kept",
                 where="the loop over blocks: every block goes through checkpoint")
    return "same output and gradients as the plain forward, with dropout, keeping only each block's input"


def matching_list(value: Any, length: int) -> list[Any]:
    """`value` checked to be a list of `length` items (WireError otherwise)."""
    if not isinstance(value, list) or len(value) != length:
        raise WireError("malformed observation: not one gradient per parameter")
    return value


def _numel(shape: Sequence[int]) -> int:
    count = 1
    for d in shape:
        count *= d
    return count


# --------------------------------------------------------------------------------------------------
# 13-deterministic
# --------------------------------------------------------------------------------------------------
FLAGS = ("deterministic", "warn_only", "benchmark", "cudnn_deterministic")


def read_flags() -> dict[str, bool]:
    """The four global flags the exercise sets and restores."""
    return {"deterministic": torch.are_deterministic_algorithms_enabled(),
            "warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
            "benchmark": bool(torch.backends.cudnn.benchmark),
            "cudnn_deterministic": bool(torch.backends.cudnn.deterministic)}


def write_flags(flags: dict[str, bool]) -> None:
    """Set the four global flags."""
    torch.use_deterministic_algorithms(flags["deterministic"], warn_only=flags["warn_only"])
    torch.backends.cudnn.benchmark = flags["benchmark"]
    torch.backends.cudnn.deterministic = flags["cudnn_deterministic"]


class _Planted(Exception):
    """The exception the check raises inside the block: it must come out of the context manager."""


def _priors(case: Case) -> list[tuple[dict[str, bool], bool]]:
    """(flags before entering, raise inside) of each use of the context manager."""
    speed = {"deterministic": False, "warn_only": False, "benchmark": True, "cudnn_deterministic": False}
    warned = {"deterministic": True, "warn_only": True, "benchmark": False, "cudnn_deterministic": True}
    if not case.hidden:
        return [(speed, False), (warned, False), (speed, True)]
    generator = torch.Generator().manual_seed(case.seeded(150))
    drawn = []
    for raises in (False, True, False, True):
        bits = torch.randint(0, 2, (3,), generator=generator).tolist()
        drawn.append(({"deterministic": bool(bits[0]), "warn_only": bool(bits[0] and bits[1]),
                       "benchmark": bool(bits[2]), "cudnn_deterministic": bool(bits[1])}, raises))
    return [(warned, True), *drawn]


@register(
    "13-deterministic",
    hints=Hints(
        nudge="Read the four flags first, set them, yield inside try, and write the old values back in finally.",
        concept="Global flags outlive a cell: a context manager that changes them must restore the values it found "
        "(including warn_only), also when the block raises: @contextlib.contextmanager with try/finally.",
        solution="before = (torch.are_deterministic_algorithms_enabled(), "
        "torch.is_deterministic_algorithms_warn_only_enabled(), cudnn.benchmark, cudnn.deterministic)\n"
        "torch.use_deterministic_algorithms(True); cudnn.benchmark = False; cudnn.deterministic = True\n"
        "try: yield\nfinally: torch.use_deterministic_algorithms(before[0], warn_only=before[1]); ...",
        section="6. Determinism against speed",
    ),
    requires={
        "not-deterministic": Requirement(
            "inside the block, deterministic algorithms are enforced (use_deterministic_algorithms(True), "
            "errors, not warnings)",
            hint="Print torch.are_deterministic_algorithms_enabled() and "
            "torch.is_deterministic_algorithms_warn_only_enabled() inside your block."),
        "benchmark-on": Requirement(
            "inside the block, cudnn.benchmark is False",
            hint="What does cudnn.benchmark choose, and why does that break run-to-run equality?"),
        "cudnn-not-deterministic": Requirement(
            "inside the block, cudnn.deterministic is True",
            hint="There are two cuDNN flags: which one asks for deterministic convolution algorithms?"),
        "not-restored": Requirement(
            "on exit, every flag (warn_only included) is back to the value it had before the block",
            hint="Enter your context with benchmark=True set beforehand: what is it after the block?"),
        "not-restored-on-error": Requirement(
            "the flags are restored also when the block raises",
            hint="What runs after a yield when the block raises? Put the restoring code where it always runs."),
        "exception-swallowed": Requirement(
            "an exception raised in the block propagates out of it",
            hint="Does your context manager catch the exception (except: pass, or a return in finally)?"),
    },
)
def probe_deterministic(deterministic: Callable[[], Any], *, case: Case) -> dict:
    """Use the student's context manager from each prior state; record the flags inside and after, and whether
    the planted exception came out. The check restores the flags it found, whatever the student's code did."""
    found = read_flags()

    def record(item: tuple[dict[str, bool], bool]) -> dict:
        prior, raises = item
        write_flags(prior)
        inside, propagated = None, False
        try:
            with deterministic():
                inside = read_flags()
                if raises:
                    raise _Planted("raised inside the block by the check")
        except _Planted:
            propagated = True
        return {"inside": inside, "after": read_flags(), "propagated": propagated}

    try:
        return {"results": collect(_priors(case), record)}
    finally:
        write_flags(found)


def _flag_text(flags: dict[str, bool]) -> str:
    return ", ".join(f"{name}={flags[name]}" for name in FLAGS)


def _valid_flags(value: Any) -> dict[str, bool]:
    if not isinstance(value, dict) or sorted(value) != sorted(FLAGS) or not all(
            isinstance(v, bool) for v in value.values()):
        raise WireError("malformed observation: flags are not the four booleans")
    return value


@judges("13-deterministic")
def judge_deterministic(seen: dict, *, case: Case) -> str:
    """Inside: deterministic, errors, no benchmark, cuDNN deterministic; after: the priors; exceptions propagate."""
    for (prior, raises), result in judged(_priors(case), seen["results"]):
        inside, after = _valid_flags(result["inside"]), _valid_flags(result["after"])
        if not isinstance(result["propagated"], bool):
            raise WireError("malformed observation: propagated is not a bool")
        before = f"(flags before the block: {_flag_text(prior)})"
        if not inside["deterministic"] or inside["warn_only"]:
            fail("not-deterministic", observed=f"inside the block: deterministic={inside['deterministic']}, "
                 f"warn_only={inside['warn_only']} {before}", expected="deterministic=True, warn_only=False",
                 cause="use_deterministic_algorithms(True) is missing, or warn_only=True was passed or kept from "
                 "before", where="the setup before the yield")
        if inside["benchmark"]:
            fail("benchmark-on", observed=f"inside the block: cudnn.benchmark=True {before}",
                 expected="cudnn.benchmark=False", cause="torch.backends.cudnn.benchmark is not set to False",
                 where="the setup before the yield")
        if not inside["cudnn_deterministic"]:
            fail("cudnn-not-deterministic", observed=f"inside the block: cudnn.deterministic=False {before}",
                 expected="cudnn.deterministic=True", cause="torch.backends.cudnn.deterministic is not set to True",
                 where="the setup before the yield")
        if raises and not result["propagated"]:
            fail("exception-swallowed", observed="an exception raised inside the block did not come out of it",
                 expected="the exception propagates to the caller", cause="an except clause that does not re-raise, "
                 "or a return inside finally", where="the code around the yield")
        if after != prior:
            changed = [name for name in FLAGS if after[name] != prior[name]]
            cause = "the old values were not read before changing them, or defaults were written back instead"
            if changed == ["warn_only"]:
                cause = "use_deterministic_algorithms(previous) without warn_only=: it resets warn_only to False"
            if raises:
                fail("not-restored-on-error", observed=f"after a block that raised: {_flag_text(after)}",
                     expected=f"the flags from before: {_flag_text(prior)}",
                     cause="the restoring code runs after the yield but not in a finally: an exception skips it",
                     where="wrap the yield in try/finally")
            fail("not-restored", observed=f"after the block: {', '.join(f'{n}={after[n]}' for n in changed)}",
                 expected=f"the flags from before: {_flag_text(prior)}", cause=cause,
                 where="the code after the yield")
    return "flags set inside, restored after (warn_only too), also when the block raises"
