"""08-portable, the judge: The result must load strictly into the plain model, with every value untouched."""

from __future__ import annotations

import torch

from harness.checks.lesson08.portable import Net, plain_state_dict, wrapped_state_dicts
from harness.contract.case import Case
from harness.contract.compare import same_values
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import describe


def _prefix_count(key: str) -> int:
    """How many wrapper prefixes ('module.', '_orig_mod.') stand at the start of `key`."""
    count = 0
    while key.startswith(("module.", "_orig_mod.")):
        key, count = key.split(".", 1)[1], count + 1
    return count


@judges(
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
def judge_portable(seen: dict, *, case: Case) -> str:
    """The result must load strictly into the plain model, with every value untouched."""
    reference = plain_state_dict(case)
    cases = wrapped_state_dicts(case)
    for (name, state), observed in zip(cases, seen["results"], strict=True):
        if observed["keys_after"] != list(state):
            fail(
                "mutated-input",
                observed=f"the state dict of {name} passed in was changed",
                expected="a new dict; the caller's state dict left as it was",
                cause="deleting or renaming keys in place",
                where="build and return a new dict",
            )
        result = observed["result"]
        if not isinstance(result, dict):
            fail(
                "not-a-dict",
                observed=f"for {name} it returned {describe(result)}",
                expected="a dict from the plain model's key names to the same tensors",
                cause="returning the items, a generator or a list instead of building a dict",
                where="the return statement",
            )
        left = [k for k in result if k.startswith(("module.", "_orig_mod."))]
        if left:
            stacked, kept = _prefix_count(next(iter(state))), _prefix_count(left[0])
            fail(
                "prefix-left",
                observed=f"for {name} the result still has keys like {left[0]!r}"
                + (f": {stacked - kept} of the {stacked} stacked prefixes removed" if stacked > kept else ""),
                expected=f"the plain model's keys: {sorted(reference)[:3]}...",
                cause="the stripping stops after a fixed number of prefixes, or removes them in one fixed order, "
                "while wrappers stack in any order and however deep (compile around DDP, DDP around compile, "
                "DDP twice, DDP around compile around DDP)",
                where="repeat the stripping until no wrapper prefix is left",
                hint="Try your function on {'module._orig_mod.module.w': 0}: how many prefixes does it remove? "
                "'However many' has no limit: loop until none is left." if stacked - kept >= 2 else None,
            )
        if set(result) != set(reference):
            odd = sorted(set(result) - set(reference))
            fail(
                "over-stripped",
                observed=f"for {name} the result has keys {odd[:3]} that the plain model does not have",
                expected="exactly the plain model's keys, e.g. 'module_list.0.weight' and 'head.module.weight'",
                cause="str.replace, str.lstrip (which strips characters, not a prefix) or startswith('module') "
                "without the dot removes parts of real names, not only the leading prefix",
                where="remove a prefix only from the start of the key",
            )
        for key, value in result.items():
            source = reference[key]
            if not isinstance(value, torch.Tensor) or value.dtype != source.dtype or not same_values(value, source):
                fail(
                    "values-changed",
                    observed=f"for {name}, {key!r} does not hold the wrapped model's tensor",
                    expected="the same tensors, only renamed",
                    cause="values copied from the wrong key, or modified",
                    where="keep each value with its renamed key",
                )
        with torch.random.fork_rng(devices=[]):
            Net().load_state_dict(result, strict=True)
    return f"{len(cases)} wrapped state dicts load strictly into the plain model"
