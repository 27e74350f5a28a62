"""Lesson 02: what several of its tasks share on the judge side (references)."""

from __future__ import annotations

from typing import Any

from torch import nn

from harness.contract.failure import fail

# The cause and hint of a parameter named by its position in state_dict(): one text for every lesson 02 judge.
ZIPPED_NAMES_CAUSE = ("names taken from model.state_dict() and paired with model.parameters() (zip): state_dict() "
                      "also lists buffers (a BatchNorm's running statistics), so from the first buffer on each "
                      "parameter gets another one's name")
ZIPPED_NAMES_HINT = ("state_dict() and parameters() list different things. Which method gives each parameter "
                     "together with its own name?")


def zipped_state_dict_names(model: nn.Module) -> dict[str, str]:
    """Each parameter's own name -> the state_dict() key at its position in model.parameters(): the name
    zip(model.state_dict(), model.parameters()) gives it."""
    return dict(zip((n for n, _ in model.named_parameters()), model.state_dict(), strict=False))


def _no_exception(record: dict[str, Any], what: str) -> None:
    """Fail if the probe recorded an exception of the student's code while running `what`."""
    if record.get("raised") is not None:
        fail("raised", observed=f"while {what}, your code raised {record['raised']}",
             expected="it runs on the check's inputs without an exception",
             cause="the exception named here, raised inside your code", where="the line named above")
