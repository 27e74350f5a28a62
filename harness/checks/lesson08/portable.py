"""08-portable, the probe.

Call the student's function on each wrapped state dict; record the result and the input's keys after.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
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


@register(
    "08-portable",
    hints=Hints(
        nudge="Wrappers only add prefixes in front of the real names: DDP/DataParallel add 'module.', "
        "torch.compile adds '_orig_mod.', and they can stack. Names inside the model must stay untouched.",
        concept="Strip from the start of each key only, and repeat until no wrapper prefix is left; build a new "
        "dict so the caller's state dict stays as it was.",
        solution="for key, value in state_dict.items(): while key.startswith(('module.', '_orig_mod.')): "
        "key = key.split('.', 1)[1]; clean[key] = value",
        section="2. Portable state dicts: no wrapper prefixes",
    ),
    requires={
        "mutated-input": Requirement(
            "the dict passed in is not modified",
            hint="After your call, print the keys of the dict you were given: are they still the wrapped ones?"),
        "not-a-dict": Requirement(
            "returns a dict",
            hint="What type does your return statement build? load_state_dict wants a dict."),
        "prefix-left": Requirement(
            "every leading wrapper prefix is removed, however many are stacked, in any order",
            hint="Try your function on {'module._orig_mod.w': 0} and {'_orig_mod.module.w': 0}: is a prefix left?"),
        "over-stripped": Requirement(
            "only leading prefixes are removed: names inside the model stay",
            hint="Try your function on {'head.module.weight': 0} and {'module_list.0.weight': 0}: they must "
            "come back unchanged."),
        "values-changed": Requirement(
            "every value is left untouched, with its renamed key",
            hint="Compare each value of your result with the value under the wrapped key: are they the same "
            "tensors?"),
    },
)
def probe_portable(portable_state_dict: Callable[[dict], dict], *, case: Case) -> dict:
    """Call the student's function on each wrapped state dict; record the result and the input's keys after."""
    results = []
    for _, state in wrapped_state_dicts(case):
        result = portable_state_dict(state)
        results.append({"keys_after": list(state), "result": result})
    return {"results": results}
