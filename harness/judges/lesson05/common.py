"""Lesson 05: what several of its tasks share on the judge side (references)."""

from __future__ import annotations

from typing import NoReturn

import torch

from harness.contract.failure import Requirement, fail

_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def _name(dtype: object) -> str:
    return _NAMES.get(dtype, repr(dtype))  # type: ignore[arg-type]


def other_dtype(dtype: torch.dtype) -> torch.dtype:
    """The other 16-bit autocast dtype: what a step that hard-codes one runs when asked for the other."""
    return torch.float16 if dtype == torch.bfloat16 else torch.bfloat16


def fail_autocast_dtype(dtype: torch.dtype, what: str) -> NoReturn:
    """Fail with [wrong-autocast-dtype]: the step's numbers are those of an autocast in the other 16-bit dtype."""
    fail(
        "wrong-autocast-dtype",
        observed=f"asked for {_name(dtype)}, the step computed exactly what autocast in {_name(other_dtype(dtype))} "
        "computes",
        expected=f"the forward and loss under torch.autocast(device_type, dtype=dtype), here {_name(dtype)}",
        cause=f"the autocast dtype is written in the code ({_name(other_dtype(dtype))}) instead of the dtype argument",
        where=f"the `with torch.autocast(...)` line of {what}",
    )


# The requirements `scope_failures` and `scaler_failures` enforce, for the tables of every AMP step exercise.
AMP_SCOPE_REQUIREMENTS = {
    "no-forward": Requirement("runs the model's forward as model(inputs)",
                              hint="How does your step call the model? Calling model.forward(...) skips its hooks."),
    "no-autocast": Requirement("runs the forward under torch.autocast(device_type, dtype=dtype)",
                               hint="Was autocast on, for the device type you were given, when the model ran?"),
    "backward-in-autocast": Requirement("runs backward outside the autocast block",
                                        hint="Look at the indentation of your backward line: is it still inside "
                                        "the with-block?"),
    "loss-outside-autocast": Requirement("computes the loss inside the autocast block",
                                         hint="Where is loss_fn called: inside the with-block, with the forward, or "
                                         "after it?"),
}


AMP_SCALER_REQUIREMENTS = {
    "step-bypasses-scaler": Requirement("steps the optimizer only through scaler.step(optimizer)",
                                        hint="Who calls optimizer.step() in your code: you, or the scaler (which "
                                        "skips steps with inf gradients)?"),
    "missing-scale": Requirement("runs backward on scaler.scale(loss)",
                                 hint="Which tensor do you call backward() on: the loss, or the scaled loss?"),
    "missing-step": Requirement("steps through scaler.step(optimizer)",
                                hint="Which line updates the parameters in your step?"),
    "missing-update": Requirement("calls scaler.update() after scaler.step",
                                  hint="After an overflow the scale must drop: which scaler call adapts it?"),
}
