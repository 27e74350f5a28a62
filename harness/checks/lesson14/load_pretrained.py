"""14-load-pretrained, the probe.

Call the student's function on each (model, checkpoint) pair; record what it returned or raised, the model's
state dict after it, and the checkpoint dict as it was left.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from harness.checks.lesson14.common import _attempt, _pretrained_like
from harness.contract.case import Case
from harness.contract.inputs import randn, seeded
from harness.contract.registry import register
from harness.contract.wire import type_name
from harness.finetune import TransferNet


def _net(seed: int, classes: int, width: int) -> TransferNet:
    return _pretrained_like(seeded(seed, functools.partial(TransferNet, classes, width)), seed + 1)  # type: ignore


# (description, classes of the new head, width, what is wrong with the checkpoint)
GOOD, MISSING, _UNEXPECTED, _PREFIXED, RESHAPED = "good", "missing", "unexpected", "prefixed", "reshaped"


def load_cases(case: Case) -> list[tuple[str, int, int, str]]:
    """(description, classes of the new head, width, defect) of each checkpoint the check loads."""
    if not case.hidden:
        return [("a checkpoint of the 5-class model, loaded into a model with a new 10-class head", 10, 4, GOOD),
                ("the same checkpoint, loaded into a model whose new head has the old shape (5 classes)", 5, 4, GOOD),
                ("a checkpoint without the backbone key 'backbone.1.1.running_var'", 10, 4, MISSING),
                ("a checkpoint with a key the model does not have, 'backbone.3.weight'", 10, 4, _UNEXPECTED)]
    return [("a checkpoint of the 5-class model, loaded into a model with a new 3-class head", 3, 6, GOOD),
            ("the same checkpoint, loaded into a model whose new head has the old shape (5 classes)", 5, 6, GOOD),
            ("a checkpoint without the backbone key 'backbone.0.0.weight'", 7, 6, MISSING),
            ("a checkpoint saved from a DDP-wrapped model (every key starts with 'module.')", 10, 6, _PREFIXED),
            ("a checkpoint whose 'backbone.2.0.weight' has another shape", 10, 6, RESHAPED),
            ("a checkpoint with a key the model does not have, 'backbone.2.1.scale'", 4, 6, _UNEXPECTED)]


def pretrained_checkpoint(case: Case, width: int, defect: str) -> dict[str, torch.Tensor]:
    """The pretrained checkpoint of a case: a 5-class model's full state dict, with the case's defect."""
    state = {k: v.clone() for k, v in _net(case.seeded(140), 5, width).state_dict().items()}
    if defect == MISSING:
        del state["backbone.1.1.running_var" if not case.hidden else "backbone.0.0.weight"]
    elif defect == _UNEXPECTED:
        state["backbone.3.weight" if not case.hidden else "backbone.2.1.scale"] = randn(4, seed=case.seeded(141))
    elif defect == _PREFIXED:
        state = {f"module.{k}": v for k, v in state.items()}
    elif defect == RESHAPED:
        state["backbone.2.0.weight"] = randn(4 * width, 2 * width, 1, 1, seed=case.seeded(142))
    return state


def new_model(case: Case, index: int, classes: int, width: int) -> TransferNet:
    """The model a checkpoint is loaded into: its own (random) weights, a new head."""
    return seeded(case.seeded(143 + index), functools.partial(TransferNet, classes, width))  # type: ignore


@register("14-load-pretrained")
def probe_load_pretrained(load_pretrained: Callable[[nn.Module, dict[str, torch.Tensor]], Any], *, case: Case) -> dict:
    """Call the student's function on each (model, checkpoint) pair; record what it returned or raised, the model's
    state dict after it, and the checkpoint dict as it was left."""
    records = []
    for index, (_, classes, width, defect) in enumerate(load_cases(case)):
        model = new_model(case, index, classes, width)
        given = pretrained_checkpoint(case, width, defect)
        record: dict[str, Any] = {}
        returned = _attempt(record, functools.partial(load_pretrained, model, given))
        record["returned"] = _frozen(returned)
        record["state"] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        record["checkpoint"] = {k: v.detach().clone() if isinstance(v, torch.Tensor) else _frozen(v)
                                for k, v in given.items()} if isinstance(given, dict) else type_name(given)
        records.append(record)
    return {"loads": records}


def _frozen(value: Any) -> Any:
    """A returned value as plain data (a namedtuple as a tuple, tensors copied)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_frozen(v) for v in value) if type(value) in (list, tuple) else tuple(map(_frozen, value))
    if isinstance(value, dict):
        return {str(k): _frozen(v) for k, v in value.items()}
    return value
