"""Lesson 00 checks: each plausible mistake fails with its code and message, and correct variants pass."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from harness.checks import CheckFailed, check
from harness.checks.testing import Correct, Mistake, solution_cell


# ------------------------------------------------------------------------------------------------ 00-make-batch
def zeros_batch(n, device):
    return torch.zeros(n, 3, 8, 8, dtype=torch.float32, device=device)


def zeros_tuple_then_float(n, device):
    return torch.zeros((n, 3, 8, 8), device=device).float()


def full_of_zero_floats(n, device):
    return torch.full((n, 3, 8, 8), 0.0, device=device)


def empty_then_zeroed(n, device):
    return torch.empty(n, 3, 8, 8, device=device).zero_()


def zeros_on_cpu_then_moved(n, device):
    return torch.zeros(n, 3, 8, 8).to(device)


def numpy_zeros_moved(n, device):
    return torch.from_numpy(np.zeros((n, 3, 8, 8), dtype=np.float32)).to(device)


def zeros_ignoring_device(n, device):
    return torch.zeros(n, 3, 8, 8)


def zeros_on_the_best_device(n, device):
    return torch.zeros(n, 3, 8, 8, device="cuda" if torch.cuda.is_available() else "cpu")


# --------------------------------------------------------------------------------------------- 00-count-params
def count_with_numel(model):
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def count_with_named(model):
    total = 0
    for _, parameter in model.named_parameters():
        total += parameter.numel() if parameter.requires_grad else 0
    return int(total)


def count_with_shapes(model):
    return sum(math.prod(p.shape) for p in model.parameters() if p.requires_grad)


def count_each_module_own_parameters(model):
    return sum(p.numel() for module in model.modules() for p in module.parameters(recurse=False) if p.requires_grad)


def count_every_module_recursively(model):
    return sum(p.numel() for module in model.modules() for p in module.parameters() if p.requires_grad)


def count_rows(model):
    return sum(len(p) for p in model.parameters() if p.requires_grad)


# ------------------------------------------------------------------------------------------------- 00-accuracy
def accuracy_argmax(logits, targets):
    return (logits.argmax(dim=1) == targets).float().mean().item()


def accuracy_loop(logits, targets):
    correct = sum(int(torch.argmax(row) == t) for row, t in zip(logits, targets, strict=True))
    return correct / len(targets)


def accuracy_eq_sum(logits, targets):
    return torch.eq(logits.argmax(-1), targets).sum().item() / targets.numel()


MISTAKES = [
    Mistake("00-make-batch", "not-a-tensor", "torch.Tensor", (lambda n, d: [[0.0] * 8] * n,),
            story="builds nested Python lists, as in plain Python"),
    Mistake("00-make-batch", "wrong-shape", "(4, 3, 8, 8)", (lambda n, d: torch.zeros(3, 8, 8, device=d),),
            story="forgets the batch dimension: one image, not n (the lesson's own demo)"),
    Mistake("00-make-batch", "wrong-shape", "channels come second", (lambda n, d: torch.zeros(n, 8, 8, 3, device=d),),
            story="channels-last order (N, H, W, C), as in NumPy/PIL images"),
    Mistake("00-make-batch", "wrong-dtype", "float32",
            (lambda n, d: torch.zeros(n, 3, 8, 8, dtype=torch.float64, device=d),),
            story="float64, NumPy's default dtype"),
    Mistake("00-make-batch", "wrong-dtype", "integer fill value", (lambda n, d: torch.full((n, 3, 8, 8), 0, device=d),),
            story="torch.full with the int 0: an int64 tensor"),
    Mistake("00-make-batch", "wrong-device", "returned a tensor on cpu", (zeros_ignoring_device,),
            story="ignores the device argument (works on a CPU-only laptop)"),
    Mistake("00-make-batch", "wrong-device", "device argument is not used", (zeros_on_the_best_device,),
            story="picks a device itself instead of using the one it was given"),
    Mistake("00-make-batch", "copied-to-device", "return torch.zeros(n, 3, 8, 8).to(device)",
            (zeros_on_cpu_then_moved,),
            story="creates on the CPU, then .to(device): the transfer the exercise text warns about"),
    Mistake("00-make-batch", "copied-to-device", "torch.from_numpy", (numpy_zeros_moved,),
            story="builds the batch in NumPy, then moves it"),
    Mistake("00-make-batch", "not-zeros", "torch.zeros", (lambda n, d: torch.ones(n, 3, 8, 8, device=d),),
            story="torch.ones instead of torch.zeros"),
    Mistake("00-make-batch", "wrong-shape", "(4, 3, 8, 8)", solution_cell(
        "def make_batch(n, device):\n"
        "    return torch.zeros(3, 8, 8, device=device)\n",
        "make_batch"),
        story="forgets the batch dimension: one image, not n (the lesson's own demo)", planted=True),

    Mistake("00-count-params", "not-an-int", "Python int",
            (lambda m: torch.tensor(sum(p.numel() for p in m.parameters() if p.requires_grad)),),
            story="wraps the total in a tensor"),
    Mistake("00-count-params", "not-an-int", "float", (lambda m: sum(float(p.numel()) for p in m.parameters()),),
            story="sums floats"),
    Mistake("00-count-params", "counts-tensors", "numel",
            (lambda m: len([p for p in m.parameters() if p.requires_grad]),),
            story="counts parameter tensors, not numbers"),
    Mistake("00-count-params", "counts-frozen", "requires_grad", (lambda m: sum(p.numel() for p in m.parameters()),),
            story="forgets the requires_grad filter (the usual parameter count snippet)"),
    Mistake("00-count-params", "counts-buffers", "state_dict",
            (lambda m: sum(t.numel() for t in m.state_dict().values()),),
            story="counts the state_dict, which holds buffers too"),
    Mistake("00-count-params", "shared-counted-twice", "shared weight", (count_each_module_own_parameters,),
            story="walks modules() and counts each module's own parameters: a tied weight twice"),
    Mistake("00-count-params", "shared-counted-twice", "remove_duplicate",
            (lambda m: sum(p.numel() for _, p in m.named_parameters(remove_duplicate=False) if p.requires_grad),),
            story="named_parameters(remove_duplicate=False)"),
    Mistake("00-count-params", "wrong-count", "len(p) counts rows only", (count_rows,),
            story="len(p) for a tensor's size (its first dimension only)"),
    Mistake("00-count-params", "wrong-count", "at every level", (count_every_module_recursively,),
            story="modules() then parameters(): nested parameters counted at every level"),
    Mistake("00-count-params", "counts-frozen", "requires_grad", solution_cell(
        "def count_trainable_parameters(model):\n"
        "    return sum(p.numel() for p in model.parameters())\n",
        "count_trainable_parameters"),
        story="forgets the requires_grad filter (the usual parameter count snippet)", planted=True),

    Mistake("00-accuracy", "not-a-float", ".item()", (lambda lo, t: (lo.argmax(dim=1) == t).float().mean(),),
            story="returns the tensor (forgets .item())"),
    Mistake("00-accuracy", "not-a-float", "integer division",
            (lambda lo, t: int((lo.argmax(dim=1) == t).sum()) // len(t),),
            story="integer division: always 0 or 1"),
    Mistake("00-accuracy", "percent-not-fraction", "100",
            (lambda lo, t: 100 * (lo.argmax(dim=1) == t).float().mean().item(),),
            story="a percentage, as training logs print it"),
    Mistake("00-accuracy", "wrong-accuracy", "argmin", (lambda lo, t: (lo.argmin(dim=1) == t).float().mean().item(),),
            story="argmin (a loss-like reading of logits)"),
    Mistake("00-accuracy", "wrong-accuracy", "not divided by the batch size",
            (lambda lo, t: (lo.argmax(dim=1) == t).float().sum().item(),),
            story="the number of correct rows, not the fraction"),
    Mistake("00-accuracy", "wrong-accuracy", "number of classes",
            (lambda lo, t: (lo.argmax(dim=1) == t).float().sum().item() / lo.shape[1],),
            story="divides by logits.shape[1] (classes) instead of the batch size"),
    Mistake("00-accuracy", "wrong-accuracy", "dim=0",
            (lambda lo, t: (lo.argmax(dim=0) == t[: lo.shape[1]]).float().mean().item(),),
            story="argmax over the batch dimension"),
    Mistake("00-accuracy", "wrong-accuracy", "argmax over the batch (dim=0)",
            (lambda lo, t: (lo.argmax(dim=0) == t).float().mean().item(),),
            story="argmax over dim=0, compared with all the targets (a size mismatch)"),
    Mistake("00-accuracy", "wrong-accuracy", "integer division (//)",
            (lambda lo, t: float((lo.argmax(dim=1) == t).sum().item() // len(t)),),
            story="floor division of the correct count, wrapped in float()"),
    Mistake("00-accuracy", "wrong-accuracy", "argmin", solution_cell(
        "def accuracy(logits, targets):\n"
        "    return (logits.argmin(dim=1) == targets).float().mean().item()\n",
        "accuracy"),
        story="argmin (a loss-like reading of logits)", planted=True),
]

CORRECT = [
    Correct("00-make-batch", (zeros_batch,), story="the solution"),
    Correct("00-make-batch", (zeros_tuple_then_float,), story="a shape tuple, then .float()"),
    Correct("00-make-batch", (full_of_zero_floats,), story="torch.full with 0.0 on the device"),
    Correct("00-make-batch", (empty_then_zeroed,), story="torch.empty on the device, then zero_()"),
    Correct("00-count-params", (count_with_numel,), story="the solution"),
    Correct("00-count-params", (count_with_named,), story="a loop over named_parameters"),
    Correct("00-count-params", (count_with_shapes,), story="math.prod of the shapes"),
    Correct("00-accuracy", (accuracy_argmax,), story="the solution"),
    Correct("00-accuracy", (accuracy_loop,), story="a Python loop over rows"),
    Correct("00-accuracy", (accuracy_eq_sum,), story="torch.eq, sum and a division"),
    Correct("00-accuracy",
            (lambda lo, t: sum(int(row.argmax()) == int(y) for row, y in zip(lo, t, strict=True)) / len(t),),
            story="a generator of row-by-row comparisons divided by len"),
]


def test_a_shared_weight_model_is_counted_once():
    net = nn.Linear(3, 3)
    assert count_with_numel(nn.Sequential(net, net)) == 12


def test_a_check_reports_exceptions_in_student_code():
    def crashes(n, device):
        raise NotImplementedError()

    with pytest.raises(CheckFailed) as failure:
        check("00-make-batch", crashes)
    assert failure.value.code == "raised" and "NotImplementedError" in str(failure.value)
