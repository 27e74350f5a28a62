"""00-make-batch, the judge.

`make_batch(n, device)` returns zeros of shape (n, 3, 8, 8), float32, created directly on `device`.
"""

from __future__ import annotations

import torch

from harness.checks.lesson00.make_batch import UNEXPECTED_DEVICE, batch_sizes, moved_size
from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import WireError, describe


@judges(
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
def judge_make_batch(seen: dict, *, case: Case) -> str:
    """`make_batch(n, device)` returns zeros of shape (n, 3, 8, 8), float32, created directly on `device`."""
    sizes = batch_sizes(case)
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
    moved, n = seen["elsewhere"], moved_size(case)
    if moved["is_tensor"] is not True:
        fail("not-a-tensor", observed=f"make_batch({n}, meta) returned something else than a tensor",
             expected="a torch.Tensor on any device", cause="a list or a NumPy array built instead of a tensor",
             where="the return statement of make_batch")
    if not isinstance(moved["shape"], list) or not isinstance(moved["dtype"], torch.dtype):
        raise WireError("malformed observation: the batch made on the meta device")
    _check_layout(n, tuple(moved["shape"]), moved["dtype"], "meta")
    if moved["device"] != UNEXPECTED_DEVICE.type:
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
