"""Checks of lesson 00 (welcome): a tensor on the right device, counting parameters, accuracy.

Each probe calls the student's function on seeded inputs and records what came back; each judge rebuilds
the inputs and compares with what PyTorch itself computes. The hidden variants use other sizes, frozen and
shared parameters, and ties in the logits.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

from harness.checks.core import Case, fail, judges, register
from harness.checks.wire import Opaque, describe


@register(
    "00-make-batch",
    hints=(
        "torch.zeros takes the shape as separate numbers, and keyword arguments for the dtype and device.",
        "return torch.zeros(n, 3, 8, 8, dtype=torch.float32, device=device)",
    ),
)
def probe_make_batch(make_batch: Callable[[int, torch.device], torch.Tensor], *, case: Case) -> dict:
    """Call `make_batch(n, cpu)` for each size of the case; record what came back and its properties."""
    results = []
    for n in _batch_sizes(case):
        batch = make_batch(n, torch.device("cpu"))
        is_tensor = isinstance(batch, torch.Tensor)
        results.append({"value": batch if is_tensor else describe(batch), "is_tensor": is_tensor,
                        "device": str(batch.device.type) if is_tensor else None})
    return {"results": results}


def _batch_sizes(case: Case) -> tuple[int, ...]:
    return (1, 7, 32) if case.hidden else (4,)


@judges("00-make-batch")
def judge_make_batch(seen: dict, *, case: Case) -> str:
    """`make_batch(n, device)` returns zeros of shape (n, 3, 8, 8), float32, on `device`."""
    sizes = _batch_sizes(case)
    for n, result in zip(sizes, seen["results"], strict=True):
        batch = result["value"]
        if not result["is_tensor"]:
            fail("not-a-tensor", observed=f"make_batch({n}, cpu) returned {batch}",
                 expected="a torch.Tensor", cause="returning a list or a NumPy array",
                 where="the return statement of make_batch")
        if tuple(batch.shape) != (n, 3, 8, 8):
            fail("wrong-shape", observed=f"shape {tuple(batch.shape)} for n={n}", expected=f"shape ({n}, 3, 8, 8)",
                 cause="a fixed batch size, or the dimensions in another order (channels come second)",
                 where="the shape you pass to torch.zeros")
        if batch.dtype != torch.float32:
            fail("wrong-dtype", observed=f"dtype {batch.dtype}", expected="torch.float32",
                 cause="the default dtype of the function you used, or an integer fill value",
                 where="the dtype= argument")
        if result["device"] != "cpu":
            fail("wrong-device", observed=f"device {result['device']}", expected="the device you were given (cpu)",
                 cause="ignoring the device argument", where="the device= argument")
        if bool(batch.count_nonzero()):
            fail("not-zeros", observed=f"{int(batch.count_nonzero())} non-zero values", expected="all zeros",
                 cause="torch.empty (uninitialised memory) or torch.ones/rand instead of torch.zeros",
                 where="the function that creates the tensor")
    return f"shape (n, 3, 8, 8), float32, zeros, on the given device for n in {sizes}"


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
    """Models to count: a plain MLP visibly; partly frozen and shared-weight models hidden."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(case.seeded(0))
        if not case.hidden:
            return [nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))]
        width = 4 + case.seed % 5
        frozen = nn.Sequential(nn.Conv2d(3, width, 3), nn.BatchNorm2d(width), nn.Flatten(), nn.Linear(width * 6 * 6, 2))
        for parameter in frozen[0].parameters():
            parameter.requires_grad_(False)
        return [frozen, _TiedNet()]


@register(
    "00-count-params",
    hints=(
        "model.parameters() yields every parameter tensor once; .numel() counts a tensor's elements, and "
        ".requires_grad says whether it will be trained.",
        "return sum(p.numel() for p in model.parameters() if p.requires_grad)",
    ),
)
def probe_count_params(count_trainable_parameters: Callable[[nn.Module], int], *, case: Case) -> dict:
    """Count each of the case's models with the student's function."""
    return {"counts": [count_trainable_parameters(model) for model in _models(case)]}


@judges("00-count-params")
def judge_count_params(seen: dict, *, case: Case) -> str:
    """`count_trainable_parameters(model)` is the number of trainable scalars (frozen ones excluded)."""
    for model, counted in zip(_models(case), seen["counts"], strict=True):
        expected = sum(p.numel() for p in model.parameters() if p.requires_grad)
        everything = sum(p.numel() for p in model.parameters())
        if isinstance(counted, (torch.Tensor, Opaque)) or not isinstance(counted, int) or isinstance(counted, bool):
            fail("not-an-int", observed=f"returned {describe(counted)}", expected="a Python int",
                 cause="summing tensors or calling len() on something else",
                 where="the return statement: sum the .numel() of the tensors")
        if counted == len([p for p in model.parameters() if p.requires_grad]) and counted != expected:
            fail("counts-tensors", observed=f"{counted} (the number of parameter tensors)",
                 expected=f"{expected} scalar parameters", cause="counting tensors instead of their elements",
                 where="use p.numel() for each parameter p")
        if counted == everything and counted != expected:
            fail("counts-frozen", observed=f"{counted}, which includes frozen parameters",
                 expected=f"{expected} trainable parameters", cause="not filtering on p.requires_grad",
                 where="the condition inside your sum")
        if counted != expected:
            fail("wrong-count", observed=f"{counted} for {type(model).__name__}", expected=str(expected),
                 cause="counting buffers, or a shared weight twice (model.parameters() yields it once)",
                 where="iterate model.parameters(), not state_dict() or named_modules()")
    return "trainable scalars counted (frozen parameters, buffers and shared weights handled)" if case.hidden else (
        "trainable scalars counted on a small MLP")


def _accuracy_cases(case: Case) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Seeded (logits, targets) pairs; the hidden ones include a single sample and a batch of one class."""
    generator = torch.Generator().manual_seed(case.seeded(1 if case.hidden else 0))
    shapes = [(1, 4), (33, 10), (5, 2)] if case.hidden else [(16, 5)]
    cases = []
    for batch, classes in shapes:
        logits = torch.randn(batch, classes, generator=generator)
        targets = torch.randint(0, classes, (batch,), generator=generator)
        cases.append((logits, targets))
    return cases


@register(
    "00-accuracy",
    hints=(
        "The predicted class of each row is the index of its largest logit; compare it with the targets.",
        "return (logits.argmax(dim=1) == targets).float().mean().item()",
    ),
)
def probe_accuracy(accuracy: Callable[[torch.Tensor, torch.Tensor], float], *, case: Case) -> dict:
    """Call the student's accuracy on each (logits, targets) pair of the case."""
    return {"results": [accuracy(logits.clone(), targets.clone()) for logits, targets in _accuracy_cases(case)]}


@judges("00-accuracy")
def judge_accuracy(seen: dict, *, case: Case) -> str:
    """`accuracy(logits, targets)` is the fraction (0..1, a float) of rows whose argmax equals the target."""
    for (logits, targets), result in zip(_accuracy_cases(case), seen["results"], strict=True):
        expected = (logits.argmax(dim=1) == targets).float().mean().item()
        if not isinstance(result, float):
            fail("not-a-float", observed=f"returned {describe(result)}", expected="a Python float",
                 cause="returning a tensor", where="call .item() on the final scalar tensor")
        if math.isclose(result, 100 * expected, abs_tol=1e-6) and not math.isclose(expected, 0.0):
            fail("percent-not-fraction", observed=f"{result}", expected=f"{expected} (a fraction between 0 and 1)",
                 cause="multiplying by 100", where="the return statement")
        wrong_dim = (logits.argmax(dim=0)[: len(targets)] == targets[: logits.shape[1]]).float().mean().item()
        if not math.isclose(result, expected, abs_tol=1e-6):
            cause = ("taking the argmax over the batch (dim=0) instead of the classes (dim=1)"
                     if math.isclose(result, wrong_dim, abs_tol=1e-6) else "comparing the wrong things")
            fail("wrong-accuracy", observed=f"{result:.4f} on {len(targets)} samples",
                 expected=f"{expected:.4f}", cause=cause, where="the argmax dimension and the comparison")
    return "fraction of correct argmax predictions, as a float"
