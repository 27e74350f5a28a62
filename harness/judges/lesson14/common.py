"""Lesson 14: what several of its tasks share on the judge side (references)."""

from __future__ import annotations

from typing import Any

from harness.contract.failure import fail
from harness.contract.wire import WireError


def _no_exception(record: dict[str, Any], what: str) -> None:
    if record.get("raised") is not None:
        fail("raised", observed=f"while {what}, your code raised {record['raised']}",
             expected="it runs on the check's inputs without an exception",
             cause="the exception named here, raised inside your code", where="the line named above")


ATTRIBUTE_HINT = ("After one call, print vars(module).get('requires_grad') beside [p.requires_grad for p in "
                  "module.parameters()]: which of the two did your line change?")


def attribute_names(value: Any) -> list[str]:
    """The probe's list of modules that hold a plain `requires_grad` attribute, checked for shape.

    Raises:
        WireError: not a list of module names.
    """
    if not (isinstance(value, list) and all(isinstance(name, str) for name in value)):
        raise WireError("malformed observation: the modules with a requires_grad attribute")
    return value


def attribute_cause(modules: list[str]) -> str:
    """The cause of a flag that never changed although `module.requires_grad = flag` was run on `modules`."""
    shown = ", ".join(name or "the model itself" for name in modules)
    return (f"`requires_grad = ...` was assigned to the module object ({shown}), not to its parameters: that makes a "
            "plain attribute of the module and changes no parameter's flag; module.requires_grad_(flag), with the "
            "underscore, sets every parameter's")
