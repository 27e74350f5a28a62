"""08-portable, the probe.

Call the student's function on each wrapped state dict; record the result and the input's keys after.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from harness.contract.case import Case
from harness.contract.registry import register


class Net(nn.Module):
    """Key names chosen to trip naive prefix stripping: `module_list.*`, `head.module.*`."""

    def __init__(self) -> None:
        super().__init__()
        self.module_list = nn.ModuleList([nn.Linear(3, 4), nn.Linear(4, 4)])
        self.head = nn.Sequential()
        self.head.add_module("module", nn.Linear(4, 2))
        self.register_buffer("steps", torch.tensor(7))


# DataParallel and DDP name their model's keys 'module.' + key, torch.compile '_orig_mod.' + key, and the
# prefixes stack, in either order and three deep (the text says "however many": a stripper that stops after two
# fails); the tests compare these with the real wrappers' state dicts. Visible and hidden cases use them all; the
# hidden ones hold other weights.
_WRAPPERS = (
    ("a plain model", ""),
    ("nn.DataParallel(model)", "module."),
    ("torch.compile(model)", "_orig_mod."),
    ("torch.compile(DataParallel(model))", "_orig_mod.module."),
    ("DataParallel(torch.compile(model))", "module._orig_mod."),
    ("DataParallel(DataParallel(model))", "module.module."),
    ("DataParallel(torch.compile(DataParallel(model)))", "module._orig_mod.module."),
)


def plain_state_dict(case: Case) -> dict[str, torch.Tensor]:
    """The seeded plain model's state dict."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(case.seeded(3 if case.hidden else 1))
        return Net().state_dict()


def wrapped_state_dicts(case: Case) -> list[tuple[str, dict[str, torch.Tensor]]]:
    """The state dict of the case's model as each wrapper names it, each with its own copy of the values."""
    plain = plain_state_dict(case)
    return [(name, {prefix + k: v.clone() for k, v in plain.items()}) for name, prefix in _WRAPPERS]


@register("08-portable")
def probe_portable(portable_state_dict: Callable[[dict], dict], *, case: Case) -> dict:
    """Call the student's function on each wrapped state dict; record the result and the input's keys after."""
    results = []
    for _, state in wrapped_state_dicts(case):
        result = portable_state_dict(state)
        results.append({"keys_after": list(state), "result": result})
    return {"results": results}
