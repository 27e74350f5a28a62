"""Checks of lesson 00 (welcome): a tensor on the right device, counting parameters, accuracy.

Each probe calls the student's function on seeded inputs and records what came back; each judge rebuilds
the inputs and compares with what PyTorch itself computes. The visible case already holds every edge case
the exercise text states (a device the function did not expect, frozen and shared parameters, buffers, a
single sample); the hidden variants use other sizes and seeds.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
from torch import nn

from harness.contract.case import Case
from harness.contract.errors import caller_line
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.forbidden import CallRecorder, written_as
from harness.contract.registry import judges, register
from harness.contract.wire import Opaque, WireError, describe

# A device no student's code expects: tensors are created there without memory, on any machine, so that
# ignoring `device` (or creating on the CPU and copying) shows without a GPU.
_UNEXPECTED_DEVICE = torch.device("meta")


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


@register(
    "00-make-batch",
    hints=Hints(
        nudge="torch.zeros takes the shape as separate numbers, and keyword arguments for the dtype and device.",
        concept="A factory function (torch.zeros, torch.ones, torch.empty...) allocates the tensor where its "
                "device= argument says, with the dtype= it is given: nothing is copied afterwards.",
        solution="return torch.zeros(n, 3, 8, 8, dtype=torch.float32, device=device)",
        section="1. Your machine"),
    requires={
        "not-a-tensor": Requirement(
            "returns a torch.Tensor",
            hint="What type does your function return? Lists and NumPy arrays cannot go to a GPU."),
        "wrong-shape": Requirement(
            "the shape is (n, 3, 8, 8): n images first, then channels, height, width",
            hint="Print make_batch(4, torch.device('cpu')).shape: which dimension is missing or misplaced?"),
        "wrong-dtype": Requirement(
            "the dtype is torch.float32",
            hint="Print the .dtype of your batch: which argument of the factory sets it?"),
        "wrong-device": Requirement(
            "the batch is on the `device` argument, whatever device that is",
            hint="Call make_batch(2, torch.device('meta')) and print .device: does your code use its argument?"),
        "copied-to-device": Requirement(
            "the batch is created directly on `device`, not on the CPU and then copied",
            hint="Which device does the tensor live on at the moment it is created? A factory can take device=."),
        "not-zeros": Requirement(
            "every value is 0",
            hint="Print a few values of your batch: does the function you used fill the tensor with zeros?"),
    },
)
def probe_make_batch(make_batch: Callable[[int, torch.device], torch.Tensor], *, case: Case) -> dict:
    """Call `make_batch(n, cpu)` for each size of the case and record the batches; then call it once with a
    device it did not expect (meta) and record where the result is and whether a CPU tensor was built first."""
    results = []
    for n in _batch_sizes(case):
        batch = make_batch(n, torch.device("cpu"))
        is_tensor = isinstance(batch, torch.Tensor)
        results.append({"value": batch if is_tensor else describe(batch), "is_tensor": is_tensor,
                        "device": str(batch.device.type) if is_tensor else None})
    with _PlacementRecorder() as calls:
        moved = make_batch(_moved_size(case), _UNEXPECTED_DEVICE)
    is_tensor = isinstance(moved, torch.Tensor)
    elsewhere = {"is_tensor": is_tensor, "device": moved.device.type if is_tensor else None,
                 "shape": list(moved.shape) if is_tensor else None, "dtype": moved.dtype if is_tensor else None,
                 "built_on_cpu": calls.built_on_cpu}
    return {"results": results, "elsewhere": elsewhere}


def _batch_sizes(case: Case) -> tuple[int, ...]:
    return (1, 7, 32) if case.hidden else (4, 1)


def _moved_size(case: Case) -> int:
    return 3 + case.seed % 5


@judges("00-make-batch")
def judge_make_batch(seen: dict, *, case: Case) -> str:
    """`make_batch(n, device)` returns zeros of shape (n, 3, 8, 8), float32, created directly on `device`."""
    sizes = _batch_sizes(case)
    for n, result in zip(sizes, seen["results"], strict=True):
        batch = result["value"]
        if result["is_tensor"] is not True or not isinstance(batch, torch.Tensor):
            fail("not-a-tensor", observed=f"make_batch({n}, cpu) returned {describe(batch)}",
                 expected="a torch.Tensor", cause="a list or a NumPy array built instead of a tensor",
                 where="the return statement of make_batch")
        _check_layout(n, tuple(batch.shape), batch.dtype, "cpu")
        if result["device"] != "cpu":
            fail("wrong-device", observed=f"make_batch({n}, cpu) returned a tensor on {result['device']}",
                 expected="the device you were given (cpu)",
                 cause="the device argument is not used: a fixed device (such as 'cuda' or 'meta') is passed instead",
                 where="the device= argument")
        if bool(batch.count_nonzero()):
            fail("not-zeros", observed=f"{int(batch.count_nonzero())} non-zero values", expected="all zeros",
                 cause="torch.empty (uninitialised memory) or torch.ones/rand instead of torch.zeros",
                 where="the function that creates the tensor")
    moved, n = seen["elsewhere"], _moved_size(case)
    if moved["is_tensor"] is not True:
        fail("not-a-tensor", observed=f"make_batch({n}, meta) returned something else than a tensor",
             expected="a torch.Tensor on any device", cause="a list or a NumPy array built instead of a tensor",
             where="the return statement of make_batch")
    if not isinstance(moved["shape"], list) or not isinstance(moved["dtype"], torch.dtype):
        raise WireError("malformed observation: the batch made on the meta device")
    _check_layout(n, tuple(moved["shape"]), moved["dtype"], "meta")
    if moved["device"] != _UNEXPECTED_DEVICE.type:
        fail("wrong-device", observed=f"make_batch({n}, torch.device('meta')) returned a tensor on {moved['device']}",
             expected="a tensor on the device you were given (here the meta device, which has no memory: on a "
                      "GPU machine it would be cuda)",
             cause="the device argument is not used: no device= in the factory call, or a fixed device instead "
                   "of the argument",
             where="pass device=device to the function that creates the tensor")
    built = moved["built_on_cpu"]
    if built is not None:
        if not isinstance(built, str):
            raise WireError("malformed observation: the call that built a CPU tensor")
        fail("copied-to-device",
             observed=f"asked for device meta, your code made or moved a tensor on the CPU: {built}",
             expected="the batch allocated on `device` by the call that creates it",
             cause="the tensor is created on the CPU (by a factory without device=, or in NumPy) and then "
                   "copied with .to(device) or .cuda(): on a GPU that is an extra allocation and a transfer",
             where=built.split(", ", 1)[-1] if ", " in built else "the call that creates the tensor")
    return f"shape (n, 3, 8, 8), float32, zeros, created directly on the given device for n in {sizes}"


def _check_layout(n: int, shape: tuple[int, ...], dtype: torch.dtype, device: str) -> None:
    """Fail on a batch of `make_batch(n, device)` whose shape or dtype is wrong."""
    if shape != (n, 3, 8, 8):
        fail("wrong-shape", observed=f"shape {shape} for make_batch({n}, {device})",
             expected=f"shape ({n}, 3, 8, 8)",
             cause="a fixed batch size, a missing batch dimension, or the dimensions in another order "
                   "(channels come second)",
             where="the shape you pass to the factory")
    if dtype != torch.float32:
        fail("wrong-dtype", observed=f"dtype {dtype}", expected="torch.float32",
             cause="a dtype= argument other than torch.float32, an integer fill value, or a conversion after "
                   "creating the tensor",
             where="the dtype= argument")


class _TiedNet(nn.Module):
    """Encoder and decoder that share one weight matrix, with a frozen embedding and a buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.embed.weight.requires_grad_(False)
        self.encoder = nn.Linear(6, 6)
        self.decoder = nn.Linear(6, 6)
        self.decoder.weight = self.encoder.weight  # shared: must be counted once
        self.register_buffer("running_scale", torch.ones(4))


def _models(case: Case) -> list[nn.Module]:
    """Models to count: a plain MLP, a partly frozen CNN with BatchNorm buffers, and a model with a shared
    weight, a frozen embedding and a buffer (other widths and seeds hidden)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(case.seeded(0))
        width = 4 + case.seed % 5 + (1 if case.hidden else 0)
        mlp = nn.Sequential(nn.Linear(5, width), nn.ReLU(), nn.Linear(width, 3))
        frozen = nn.Sequential(nn.Conv2d(3, width, 3), nn.BatchNorm2d(width), nn.Flatten(), nn.Linear(width * 6 * 6, 2))
        for parameter in frozen[0].parameters():
            parameter.requires_grad_(False)
        return [mlp, frozen, _TiedNet()]


@register(
    "00-count-params",
    hints=Hints(
        nudge="model.parameters() yields every parameter tensor once; .numel() counts a tensor's elements, and "
              ".requires_grad says whether it will be trained.",
        concept="A model's trainable size is the sum of the element counts of its parameters that require "
                "grad; buffers (BatchNorm statistics) are not parameters, and a shared weight is one parameter.",
        solution="return sum(p.numel() for p in model.parameters() if p.requires_grad)",
        section="3. Exercises"),
    requires={
        "not-an-int": Requirement(
            "returns a Python int",
            hint="Print type(count_trainable_parameters(model)): is it an int, or a tensor?"),
        "counts-tensors": Requirement(
            "counts scalar parameters, not parameter tensors",
            hint="A Linear(5, 8) has 2 parameter tensors but 48 numbers: which one does your function count?"),
        "counts-frozen": Requirement(
            "excludes frozen parameters (requires_grad=False)",
            hint="Freeze a layer with p.requires_grad_(False): does your count go down?"),
        "counts-buffers": Requirement(
            "counts parameters only, not buffers such as BatchNorm's running statistics",
            hint="Compare model.state_dict() with model.parameters() on a model with BatchNorm: what is in one "
                 "and not the other?"),
        "shared-counted-twice": Requirement(
            "counts a weight shared by two layers once",
            hint="Two layers can hold the very same weight tensor: does your loop see it twice?"),
        "wrong-count": Requirement(
            "the count is the number of trainable scalars",
            hint="Count by hand for nn.Linear(5, 8): 5 * 8 weights + 8 biases. Does your function agree?"),
    },
)
def probe_count_params(count_trainable_parameters: Callable[[nn.Module], int], *, case: Case) -> dict:
    """Count each of the case's models with the student's function."""
    return {"counts": [count_trainable_parameters(model) for model in _models(case)]}


def _miscounts(model: nn.Module) -> dict[str, tuple[int, str]]:
    """What the usual miscounts give on `model`: failure code -> (count, what was counted)."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    buffers = sum(b.numel() for b in model.buffers())
    return {
        "counts-tensors": (len(trainable), "the number of trainable parameter tensors, not their elements"),
        "counts-frozen": (sum(p.numel() for p in model.parameters()), "frozen parameters included"),
        "counts-buffers": (sum(p.numel() for p in trainable) + buffers, "buffers included"),
        "shared-counted-twice": (sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False)
                                     if p.requires_grad), "the shared weight counted twice"),
    }


_MISCOUNT_CAUSES = {
    "counts-tensors": ("counting tensors (len of the parameter list) instead of their elements",
                       "use p.numel() for each parameter p"),
    "counts-frozen": ("not filtering on p.requires_grad", "the condition inside your sum"),
    "counts-buffers": ("iterating model.state_dict() or model.buffers(), which hold BatchNorm's running "
                       "statistics: they are not parameters", "iterate model.parameters()"),
    "shared-counted-twice": ("iterating named_parameters(remove_duplicate=False) or each module's own "
                             "parameters, which yields a shared weight once per layer",
                             "iterate model.parameters(), which yields a shared weight once"),
}


@judges("00-count-params")
def judge_count_params(seen: dict, *, case: Case) -> str:
    """`count_trainable_parameters(model)` is the number of trainable scalars (frozen ones, buffers excluded,
    shared weights once)."""
    for index, (model, counted) in enumerate(zip(_models(case), seen["counts"], strict=True)):
        expected = sum(p.numel() for p in model.parameters() if p.requires_grad)
        kind = ("MLP", "partly frozen CNN with BatchNorm", "model with a shared weight")[index]
        name = f"{kind} ({type(model).__name__})"
        if isinstance(counted, (torch.Tensor, Opaque)) or not isinstance(counted, int) or isinstance(counted, bool):
            fail("not-an-int", observed=f"returned {describe(counted)}", expected="a Python int",
                 cause="a sum of tensors (a tensor), a float, or len() of something else",
                 where="the return statement: sum the .numel() of the tensors (ints)")
        if counted == expected:
            continue
        wrong = [code for code, (count, _) in _miscounts(model).items() if count == counted and count != expected]
        if wrong:
            code = wrong[0]
            cause, where = _MISCOUNT_CAUSES[code]
            fail(code, observed=f"{counted} for the {name} ({_miscounts(model)[code][1]})",
                 expected=f"{expected} trainable scalar parameters", cause=cause, where=where)
        state = sum(t.numel() for t in model.state_dict().values())
        if counted == state:
            fail("counts-buffers", observed=f"{counted} for the {name}: the size of its state_dict()",
                 expected=f"{expected} trainable scalar parameters",
                 cause="state_dict() holds buffers (BatchNorm's running statistics) and frozen parameters, and "
                       "lists a shared weight under each name",
                 where="iterate model.parameters(), filtering on p.requires_grad")
        nested = sum(p.numel() for module in model.modules() for p in module.parameters() if p.requires_grad)
        fail("wrong-count", observed=f"{counted} for the {name}", expected=str(expected),
             cause="model.modules() walked with each module's parameters(), which include its children's: nested "
                   "parameters are counted at every level" if counted == nested else
                   "a count of something else than elements (p.shape[0] or len(p) counts rows only), or a "
                   "filter that skips some trainable parameters",
             where="sum p.numel() over model.parameters() where p.requires_grad")
    return "trainable scalars counted (frozen parameters, buffers and shared weights handled)"


def _accuracy_cases(case: Case) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Seeded (logits, targets) pairs: a batch, a single sample and two classes (other sizes hidden)."""
    generator = torch.Generator().manual_seed(case.seeded(1 if case.hidden else 0))
    shapes = [(1, 4), (33, 10), (5, 2)] if case.hidden else [(16, 5), (1, 4), (6, 2)]
    cases = []
    for batch, classes in shapes:
        logits = torch.randn(batch, classes, generator=generator)
        targets = torch.randint(0, classes, (batch,), generator=generator)
        cases.append((logits, targets))
    return cases


@register(
    "00-accuracy",
    hints=Hints(
        nudge="The predicted class of each row is the index of its largest logit; compare it with the targets.",
        concept="argmax(dim=1) picks the class of each row of a (batch, classes) tensor; comparing with the "
                "targets gives booleans, and their mean is the fraction correct. .item() makes it a float.",
        solution="return (logits.argmax(dim=1) == targets).float().mean().item()",
        section="3. Exercises"),
    requires={
        "not-a-float": Requirement(
            "returns a Python float",
            hint="Print type(accuracy(logits, targets)): a one-element tensor is not a float yet."),
        "percent-not-fraction": Requirement(
            "a fraction between 0 and 1, not a percentage",
            hint="What should accuracy return when every prediction is right: 1 or 100?"),
        "wrong-accuracy": Requirement(
            "the fraction of rows whose largest logit is at the target class",
            hint="Work the 3-row example of the lesson by hand: which class does each row predict, and how many "
                 "match?"),
    },
)
def probe_accuracy(accuracy: Callable[[torch.Tensor, torch.Tensor], float], *, case: Case) -> dict:
    """Call the student's accuracy on each (logits, targets) pair of the case."""
    return {"results": [accuracy(logits.clone(), targets.clone()) for logits, targets in _accuracy_cases(case)]}


def _accuracy_slip(result: float, logits: torch.Tensor, targets: torch.Tensor) -> str | None:
    """The usual slips that give `result` on (logits, targets), as a cause (candidates when several do)."""
    hits = logits.argmax(dim=1) == targets
    slips = {
        "the number of correct rows, not divided by the batch size": hits.sum().item(),
        "a division by the number of classes instead of the batch size": hits.sum().item() / logits.shape[1],
        "argmin instead of argmax (the least likely class)": (logits.argmin(dim=1) == targets).float().mean().item(),
        "the largest logit's value (max(...).values) compared with the target, not its index":
            (logits.max(dim=1).values == targets).float().mean().item(),
    }
    if logits.shape[0] >= logits.shape[1]:
        slips["the argmax over the batch (dim=0) instead of over the classes (dim=1)"] = (
            (logits.argmax(dim=0) == targets[: logits.shape[1]]).float().mean().item())
    expected = hits.float().mean().item()
    found = [slip for slip, value in slips.items()
             if math.isclose(result, value, abs_tol=1e-6) and not math.isclose(value, expected, abs_tol=1e-6)]
    if len(found) > 1:
        return "one of these slips, which all give this value here: " + "; ".join(found)
    return found[0] if found else None


@judges("00-accuracy")
def judge_accuracy(seen: dict, *, case: Case) -> str:
    """`accuracy(logits, targets)` is the fraction (0..1, a float) of rows whose argmax equals the target."""
    for (logits, targets), result in zip(_accuracy_cases(case), seen["results"], strict=True):
        expected = (logits.argmax(dim=1) == targets).float().mean().item()
        shape = tuple(logits.shape)
        if not isinstance(result, float):
            fail("not-a-float", observed=f"returned {describe(result)}", expected="a Python float",
                 cause="a tensor returned (a mean of tensors is still a tensor), or an int from integer division",
                 where="call .item() on the final scalar tensor")
        if math.isclose(result, 100 * expected, abs_tol=1e-6) and not math.isclose(expected, 0.0):
            fail("percent-not-fraction", observed=f"{result} on logits of shape {shape}",
                 expected=f"{expected} (a fraction between 0 and 1)", cause="a multiplication by 100",
                 where="the return statement")
        if not math.isclose(result, expected, abs_tol=1e-6):
            slip = _accuracy_slip(result, logits, targets)
            fail("wrong-accuracy", observed=f"{result:.4f} on logits of shape {shape}", expected=f"{expected:.4f}",
                 cause=slip or "the predicted classes or the comparison with the targets: the result matches none "
                               "of the usual slips (argmax over dim=0, argmin, a count not divided by the batch size)",
                 where="the argmax dimension, the comparison and the division")
    return "fraction of correct argmax predictions, as a float, for a batch, a single sample and two classes"
