"""14-load-pretrained, the judge.

Backbone loaded (buffers too), new head kept, an error for anything else missing or unexpected, the
head's keys returned, the caller's checkpoint untouched.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.checks.lesson14.load_pretrained import (
    GOOD,
    MISSING,
    RESHAPED,
    load_cases,
    new_model,
    pretrained_checkpoint,
)
from harness.contract.case import Case
from harness.contract.compare import same_values
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import Opaque, WireError, type_name
from harness.finetune import TransferNet
from harness.judges.lesson14.common import _no_exception


@judges(
    "14-load-pretrained", unjudged=('loads/*/state/*',),
    hints=Hints(
        nudge="Leave the old head out of what you load, load the rest with strict=False, then look at what "
              "load_state_dict returns: the only keys allowed to be missing are the new head's, and nothing may be "
              "unexpected.",
        concept="load_state_dict(strict=False) returns (missing_keys, unexpected_keys) instead of raising; a shape "
                "mismatch still raises. Filtering the checkpoint into a new dict leaves the caller's untouched; "
                "checking both lists yourself keeps strict loading's safety for everything but the head.",
        solution="result = model.load_state_dict({k: v for k, v in state_dict.items() if not k.startswith('head.')}, "
                 "strict=False); if result.unexpected_keys or any(not k.startswith('head.') for k in "
                 "result.missing_keys): raise RuntimeError(...); return sorted(result.missing_keys)",
        section="2. Loading a checkpoint into a changed model"),
    requires={
        "backbone-not-loaded": Requirement(
            "every tensor of the model's backbone (parameters and BatchNorm buffers) equals the checkpoint's",
            hint="After your function, compare model.state_dict()['backbone.1.1.running_mean'] and "
                 "['backbone.0.0.weight'] with the checkpoint's: which were copied? What names did the keys you "
                 "loaded have, relative to the module you loaded them into?"),
        "head-overwritten": Requirement(
            "the new head keeps its own initialisation: the checkpoint's head is never loaded, even when its shape "
            "fits",
            hint="Build the model with a 5-class head (the old shape) and run your function: is model.head.weight "
                 "still what it was before?"),
        "missing-ignored": Requirement(
            "raises an error when the checkpoint lacks a key of the model other than the head's",
            hint="Delete one backbone key from a copy of the checkpoint and call your function: does it complain? "
                 "strict=False returns the missing keys; who looks at them?"),
        "unexpected-ignored": Requirement(
            "raises an error when the checkpoint has a key the model does not have",
            hint="Add a key 'backbone.3.weight' to a copy of the checkpoint and call your function: does it "
                 "complain? Which list of load_state_dict's result holds that key?"),
        "wrong-return": Requirement(
            "returns the model's keys the checkpoint did not provide (the new head's) as a list of str",
            hint="Print what your function returns: a list of names such as 'head.weight', or the whole result "
                 "object of load_state_dict?"),
        "checkpoint-modified": Requirement(
            "leaves the checkpoint dict it was given unchanged",
            hint="Print len(state_dict) before and after your function: did it delete or pop the head's keys from "
                 "the caller's dict? Build a new dict instead."),
    },
)
def judge_load_pretrained(seen: dict, *, case: Case) -> str:
    """Backbone loaded (buffers too), new head kept, an error for anything else missing or unexpected, the
    head's keys returned, the caller's checkpoint untouched."""
    cases, records = load_cases(case), seen["loads"]
    if not isinstance(records, list) or len(records) != len(cases):
        raise WireError("malformed observation: not one record per checkpoint")
    for index, ((description, classes, width, defect), record) in enumerate(zip(cases, records, strict=True)):
        checkpoint = pretrained_checkpoint(case, width, defect)
        _judge_checkpoint_kept(record["checkpoint"], checkpoint, description)
        if defect == GOOD:
            _no_exception(record, f"loading {description}")
            fresh = new_model(case, index, classes, width)
            _judge_loaded_state(record["state"], fresh, checkpoint, description)
            _judge_returned_keys(record["returned"], sorted(k for k in fresh.state_dict() if k.startswith("head.")),
                                 description)
        elif record.get("raised") is None:
            missing = defect in (MISSING, RESHAPED)
            fail("missing-ignored" if missing else "unexpected-ignored",
                 observed=f"given {description}, your function returned {_describe(record['returned'])} without "
                          "raising",
                 expected="an error: a checkpoint that does not match the model (beyond the new head) must stop "
                          "the run, not load partly",
                 cause=("strict=False was used and the missing_keys it returned were not checked (or a test that "
                        "allows every missing key, not only the head's)" if defect == MISSING else
                        "the shape mismatch that load_state_dict raises was caught and ignored, or that key was "
                        "filtered out before loading" if defect == RESHAPED else
                        "strict=False was used and the unexpected_keys it returned were not checked"),
                 where="after load_state_dict(..., strict=False): raise when result.unexpected_keys is not empty or "
                       "a missing key is not the head's")
    return "backbone and its BatchNorm buffers loaded, new head kept, mismatches raise, caller's checkpoint untouched"


def _describe(value: Any) -> str:
    if isinstance(value, list) and len(value) <= 6:
        return repr(value)
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)} items"
    return type_name(value) if isinstance(value, Opaque) else repr(value)[:80]


def _judge_checkpoint_kept(after: Any, checkpoint: dict[str, torch.Tensor], description: str) -> None:
    if not isinstance(after, dict):
        raise WireError("malformed observation: the checkpoint is not a dict")
    removed = [k for k in checkpoint if k not in after]
    added = [k for k in after if k not in checkpoint]
    changed = [k for k in checkpoint if k in after and not (isinstance(after[k], torch.Tensor)
                                                           and same_values(after[k], checkpoint[k], dtype=False))]
    if removed or added or changed:
        what = (f"keys removed: {removed[:4]}" if removed else f"keys added: {added[:4]}" if added
                else f"values changed: {changed[:4]}")
        fail("checkpoint-modified", observed=f"given {description}, the caller's checkpoint dict changed ({what})",
             expected="the dict left as it was given: the caller may load it again, or into another model",
             cause="the head's keys were deleted or popped from the dict passed in (del state_dict[k], "
                   "state_dict.pop(k)), or its entries reassigned" if removed or added
             else "its tensors were written in place",
             where="build a new, filtered dict: {k: v for k, v in state_dict.items() if ...}")


def _judge_loaded_state(state: Any, fresh: TransferNet, checkpoint: dict[str, torch.Tensor], description: str) -> None:
    own = fresh.state_dict()
    if not isinstance(state, dict) or list(state) != list(own) or not all(
            isinstance(state[k], torch.Tensor) and state[k].shape == own[k].shape for k in own):
        raise WireError("malformed observation: the state after loading is not the model's")
    backbone = [k for k in own if k.startswith("backbone.")]
    not_loaded = [k for k in backbone if not same_values(state[k], checkpoint[k], dtype=False)]
    if not_loaded:
        untouched = [k for k in not_loaded if same_values(state[k], own[k], dtype=False)]
        buffers = {n for n, _ in fresh.named_buffers()}
        if len(untouched) == len(not_loaded) and all(same_values(state[k], own[k], dtype=False) for k in backbone):
            cause = ("nothing was loaded into the backbone: the keys did not match the module they were loaded into "
                     "(model.backbone.load_state_dict expects keys without the 'backbone.' prefix), and strict=False "
                     "hid it")
        elif all(k in buffers for k in not_loaded):
            cause = ("the parameters were copied but not the BatchNorm buffers (running_mean, running_var, "
                     "num_batches_tracked): copying model.parameters() one by one misses them; state_dict holds both")
        else:
            cause = "only part of the backbone was loaded, or it was changed after loading"
        fail("backbone-not-loaded", observed=f"given {description}, {len(not_loaded)} of the {len(backbone)} "
                                             f"backbone tensors differ from the checkpoint's (e.g. {not_loaded[:3]})",
             expected="every backbone.* parameter and buffer equal to the checkpoint's",
             cause=cause, where="the load_state_dict call: model.load_state_dict(filtered, strict=False), on the "
                                "whole model, so the keys keep their 'backbone.' prefix")
    head = [k for k in own if k.startswith("head.")]
    changed = [k for k in head if not same_values(state[k], own[k], dtype=False)]
    if changed:
        loaded_old = all(k in checkpoint and same_values(state[k], checkpoint[k], dtype=False) for k in changed)
        fail("head-overwritten", observed=f"given {description}, the new head's {changed} changed",
             expected="the new head as the model was built: the checkpoint's head belongs to the old task",
             cause=("the checkpoint's head was loaded: every key whose shape fits was kept (or nothing was filtered), "
                    "and this head has the old shape") if loaded_old else
             "the head was re-initialised or replaced by your function",
             where="leave every key starting with 'head.' out of what you load, whatever its shape")


def _judge_returned_keys(returned: Any, head_keys: list[str], description: str) -> None:
    if isinstance(returned, list) and all(isinstance(k, str) for k in returned) and sorted(returned) == head_keys:
        return
    if returned is None:
        cause = "nothing is returned (a missing return statement)"
    elif isinstance(returned, tuple) and len(returned) == 2:
        cause = "the whole result of load_state_dict (missing and unexpected keys) was returned; return its " \
                "missing keys"
    elif isinstance(returned, list) and not returned:
        cause = "the list of unexpected keys, or the missing keys of a load that left the head's keys in"
    else:
        cause = "another list than the model's keys that the checkpoint did not provide"
    fail("wrong-return", observed=f"given {description}, your function returned {_describe(returned)}",
         expected=f"the keys the checkpoint did not provide, the new head's: {head_keys}",
         cause=cause, where="the return statement: the missing_keys of load_state_dict's result, as a list")
