"""12-dead-units, the judge.

{ReLU name: fraction of units zero on every example of every batch}, as tensors; hooks removed.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from harness.checks.lesson12.dead_units import dead_setup
from harness.contract.case import Case
from harness.contract.compare import isclose_number, malformed, type_name
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.judges.lesson12.common import _scalar


def _alive(model: nn.Module, batches: Sequence[torch.Tensor]) -> dict[str, list[torch.Tensor]]:
    """Judge side: each ReLU's per-batch 'active on some example' masks (per unit)."""
    outputs = {name: [] for name, m in model.named_modules() if isinstance(m, nn.ReLU)}
    handles = [m.register_forward_hook(lambda _m, _a, out, name=name: outputs[name].append((out > 0).any(dim=0)))
               for name, m in model.named_modules() if isinstance(m, nn.ReLU)]
    try:
        with torch.no_grad():
            for x in batches:
                model(x)
    finally:
        for handle in handles:
            handle.remove()
    return outputs


def _outputs_of(model: nn.Module, name: str, batches: Sequence[torch.Tensor]) -> torch.Tensor:
    """Judge side: the outputs of module `name` over every batch, concatenated."""
    outs: list[torch.Tensor] = []
    handle = model.get_submodule(name).register_forward_hook(lambda _m, _a, out: outs.append(out))
    try:
        with torch.no_grad():
            for x in batches:
                model(x)
    finally:
        handle.remove()
    return torch.cat(outs)


@judges(
    "12-dead-units",
    hints=Hints(
        nudge="A forward hook on each nn.ReLU can keep, per unit, whether it was ever positive: "
        "alive |= (output > 0).any(dim=0), accumulated over every batch.",
        concept="A unit is dead when it outputs 0 for every example you show it: per unit (a column of the "
        "(batch, units) output), over all batches together. Keep a running 'ever active' mask per ReLU, then "
        "dead fraction = 1 - mask.float().mean(). Remove the hooks in a finally block.",
        solution="alive[name] = alive.get(name, False) | (out > 0).any(dim=0)  # in the hook, per batch\n"
        "return {name: 1 - mask.float().mean() for name, mask in alive.items()}",
        section="5. Dead units and saturated activations",
    ),
    requires={
        "wrong-fraction": Requirement(
            "each value is the fraction of that ReLU's units that output 0 for every example",
            hint="Is your count per unit (a column of the output), and is a unit dead only when it is zero for "
            "every example, not for some?"),
        "last-batch-only": Requirement(
            "a unit counts as dead only if it is zero on every batch (all batches together)",
            hint="Does your hook replace what it stored at each batch, or combine it with the earlier batches?"),
        "wrong-keys": Requirement(
            "keys are the names of the nn.ReLU modules, as model.named_modules() gives them",
            hint="Print the keys you return: are they the ReLU modules' names?"),
        "not-a-tensor": Requirement(
            "returns the fractions as tensors (no .item() or float() per layer)",
            hint="Print type() of one of your values: which call turned it into a Python number?"),
        "hooks-left": Requirement(
            "removes every hook it registered before returning",
            hint="Keep the handles that register_forward_hook returns, and remove them in a finally block."),
    },
)
def judge_dead_units(seen: dict, *, case: Case) -> str:
    """{ReLU name: fraction of units zero on every example of every batch}, as tensors; hooks removed."""
    model, batches = dead_setup(case)
    masks = _alive(model, batches)
    want = {name: 1.0 - float(torch.stack(m).any(dim=0).float().mean()) for name, m in masks.items()}
    got = seen["returned"]
    if not isinstance(got, dict) or set(got) != set(want):
        fail("wrong-keys", observed=f"returned {type_name(got)}" + (f" with keys {sorted(got)}" if isinstance(got, dict)
                                                                     else ""),
             expected=f"a dict with the ReLU modules' names {sorted(want)}",
             cause=_keys_cause(got, model, set(want)),
             where="the modules your hooks go on, and the keys you store")
    for name, value in want.items():
        number = _scalar(got[name])
        if not isinstance(got[name], torch.Tensor):
            fail("not-a-tensor", observed=f"the value for {name} is {type_name(got[name])}",
                 expected="a 0-dim tensor (one host sync for the caller, not one per layer)",
                 cause=".item() or float() on each fraction", where="the values of the dict you return")
        if isclose_number(number, value, rel_tol=1e-5, abs_tol=1e-6):
            continue
        stacked = torch.stack(masks[name])
        last_only = 1.0 - float(stacked[-1].float().mean())
        every = _outputs_of(model, name, batches)  # (all examples, units)
        per_value = float((every <= 0).float().mean())
        any_zero = float((every <= 0).any(dim=0).float().mean())
        if isclose_number(number, last_only, rel_tol=1e-5, abs_tol=1e-6):
            fail("last-batch-only", observed=f"{name}: {number:.4f}, the dead fraction on the last batch alone",
                 expected=f"{value:.4f}: dead on every batch ({len(batches)} batches)",
                 cause="the hook replaces what it stored at each call, so only the last batch counts",
                 where="combine the masks across calls: alive |= (out > 0).any(dim=0)")
        per_batch = float((1.0 - stacked.float().mean(dim=1)).mean())
        causes = {"the fraction of zero values (over examples and units), not of units": per_value,
                  "units zero on at least one example, instead of on every example": any_zero,
                  "the fraction of negative outputs (a ReLU's output is never negative)": 0.0,
                  "the dead fraction of each batch, averaged over the batches: a unit silent on one batch counts "
                  "as partly dead": per_batch}
        named = [c for c, v in causes.items() if isclose_number(number, v, rel_tol=1e-5, abs_tol=1e-6)]
        negative = bool(named) and named[0].startswith("the fraction of negative")
        averaged = bool(named) and named[0].startswith("the dead fraction of each batch")
        fail("wrong-fraction", observed=f"{name}: {number if number is not None else type_name(got[name])}",
             expected=f"{value:.4f}, the fraction of its {stacked.shape[1]} units that output 0 for every example",
             cause=f"your value is {named[0]}" if named else "another quantity than the dead-unit fraction",
             where="how your hook reduces the output, and the final fraction",
             hint="What does a ReLU output for an input it does not let through: a negative number, or 0?"
             if negative else "Do you decide that a unit is dead once per batch, or once over all the batches "
             "together?" if averaged else None)
    if not isinstance(seen["hooks_left"], int):
        malformed("hooks_left")
    if seen["hooks_left"]:
        fail("hooks-left", observed=f"{seen['hooks_left']} hooks still on the model after the call",
             expected="none", cause="the handles returned by register_forward_hook were not removed",
             where="after the forward passes: for handle in handles: handle.remove()")
    return f"the dead-unit fraction of each of the {len(want)} ReLUs over all batches, as tensors, hooks removed"


def _keys_cause(got: object, model: nn.Module, want: set[str]) -> str:
    """What the returned keys are, against the model's module names."""
    if not isinstance(got, dict):
        return f"a {type_name(got)} instead of a dict {{ReLU name: fraction}}"
    linears = {name for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    if set(got) == linears:
        return "the keys are the Linear layers' names: the hooks went on nn.Linear, not on nn.ReLU"
    if set(got) > want:
        return "keys of other modules besides the ReLUs: hooks on every module"
    if set(got) < want:
        return f"ReLUs missing: {sorted(want - set(got))} (a hook on some ReLUs only, or a result overwritten)"
    return "other keys than the ReLU modules' names (indices, or names of your own)"
