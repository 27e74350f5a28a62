"""Lesson 02: what several of its tasks share on the probe side (inputs, instruments, models)."""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch
from torch import nn

from harness.contract.errors import explain
from harness.contract.failure import CheckFailed, fail


def _isolated_rng(probe: Callable[..., dict]) -> Callable[..., dict]:
    """Run a probe that seeds torch's global generator without changing the student's random stream."""

    @functools.wraps(probe)
    def wrapper(*args: Any, **kwargs: Any) -> dict:
        with torch.random.fork_rng(devices=[]):
            return probe(*args, **kwargs)

    return wrapper


def _snapshot(value: Any) -> Any:
    """A copy of a tensor as it is now (keeping requires_grad, which the wire carries); other values as they are."""
    if not isinstance(value, torch.Tensor):
        return value
    copy = value.detach().clone()
    return copy.requires_grad_(True) if value.requires_grad and copy.is_floating_point() else copy


def _attempt(record: dict[str, Any], run: Callable[[], None]) -> None:
    """Run the behavioural part of a probe; an exception of the student's code is recorded (explained, with the
    student's line), not raised, so that the judge can first report what the recorded structure already shows."""
    try:
        run()
    except CheckFailed:
        raise
    except Exception as error:  # the student's code raised
        record["raised"] = explain(error)[:2000]


def _build(factory: Callable[..., nn.Module], *args: Any, **kwargs: Any) -> nn.Module:
    try:
        return factory(*args, **kwargs)
    except AttributeError as error:
        if "Module.__init__() call" in str(error):
            fail("missing-super-init", observed=f"constructing the module raised AttributeError: {error}",
                 expected="the module builds", cause="nn.Module's own __init__ had not run when a layer, parameter "
                 "or buffer was assigned, so the registries for them did not exist yet",
                 where="call super().__init__() first in __init__")
        raise


def linear_layers(model: nn.Module) -> list[nn.Linear]:
    """The model's nn.Linear layers, in module order."""
    return [m for m in model.modules() if isinstance(m, nn.Linear)]
