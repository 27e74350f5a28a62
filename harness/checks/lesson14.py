"""Checks of lesson 14, fine-tuning: loading a checkpoint into a model with a new head, training mode with frozen
BatchNorm layers, parameter groups for fine-tuning, and a LoRA linear layer.

Every model is a small `harness.finetune.TransferNet` (or built around one) made from the case's seeds, with
BatchNorm statistics drawn at random so that a buffer that was not loaded shows. Each probe runs the student's
function or class on those models and records data: the state after loading, the modes and the outputs of a
seeded forward pass, the optimizer's groups by parameter name, the LoRA layer's outputs and gradients. Each judge
rebuilds the same models and inputs, recomputes what the result must be, and decides; flags the probe reports
(a module's mode, a parameter's requires_grad) only name a cause or fail a task, and the outputs the judge
recomputes decide every pass.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from harness.checks.param_groups import check_weight_decay, describe_groups, group_lr, group_of_each_parameter
from harness.contract.case import Case
from harness.contract.errors import explain
from harness.contract.failure import CheckFailed, Hints, Requirement, fail
from harness.contract.registry import judges, register
from harness.contract.wire import Opaque, WireError, type_name
from harness.finetune import TransferNet

_BATCHNORMS = (nn.BatchNorm1d, nn.BatchNorm2d)


def _seeded(seed: int, build: Callable[[], nn.Module]) -> nn.Module:
    """`build()` after torch.manual_seed(seed), leaving the global random stream as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _pretrained_like(model: nn.Module, seed: int) -> nn.Module:
    """`model` with BatchNorm scales, shifts and statistics drawn at random (as after pretraining), so that a tensor
    left unloaded shows."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, _BATCHNORMS):
                module.weight.copy_(1 + 0.2 * torch.randn(module.weight.shape, generator=generator))
                module.bias.copy_(0.2 * torch.randn(module.bias.shape, generator=generator))
                module.running_mean.copy_(torch.randn(module.running_mean.shape, generator=generator) * 0.3)
                module.running_var.copy_(torch.rand(module.running_var.shape, generator=generator) + 0.5)
                module.num_batches_tracked.fill_(1000)
    return model


def _net(seed: int, classes: int, width: int) -> TransferNet:
    return _pretrained_like(_seeded(seed, functools.partial(TransferNet, classes, width)), seed + 1)  # type: ignore


def _tensor(value: Any, what: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise WireError(f"malformed observation: {what} is {type(value).__name__}, not a tensor")
    return value.detach()


def _close(a: torch.Tensor, b: torch.Tensor, tolerance: float = 1e-4) -> bool:
    return a.shape == b.shape and bool(((a.float() - b.float()).abs() <= tolerance * (1 + b.float().abs())).all())


def _attempt(record: dict[str, Any], run: Callable[[], Any]) -> Any:
    """Run the student's code; an exception is recorded (explained, with the student's line), not raised."""
    try:
        return run()
    except CheckFailed:
        raise
    except Exception as error:  # the student's code raised
        record["raised"] = explain(error)[:2000]
        return None


def _no_exception(record: dict[str, Any], what: str) -> None:
    if record.get("raised") is not None:
        fail("raised", observed=f"while {what}, your code raised {record['raised']}",
             expected="it runs on the check's inputs without an exception",
             cause="the exception named here, raised inside your code", where="the line named above")


# ------------------------------------------------------------------------------------------ 14-load-pretrained
# (description, classes of the new head, width, what is wrong with the checkpoint)
_GOOD, _MISSING, _UNEXPECTED, _PREFIXED, _RESHAPED = "good", "missing", "unexpected", "prefixed", "reshaped"


def _load_cases(case: Case) -> list[tuple[str, int, int, str]]:
    if not case.hidden:
        return [("a checkpoint of the 5-class model, loaded into a model with a new 10-class head", 10, 4, _GOOD),
                ("the same checkpoint, loaded into a model whose new head has the old shape (5 classes)", 5, 4, _GOOD),
                ("a checkpoint without the backbone key 'backbone.1.1.running_var'", 10, 4, _MISSING),
                ("a checkpoint with a key the model does not have, 'backbone.3.weight'", 10, 4, _UNEXPECTED)]
    return [("a checkpoint of the 5-class model, loaded into a model with a new 3-class head", 3, 6, _GOOD),
            ("the same checkpoint, loaded into a model whose new head has the old shape (5 classes)", 5, 6, _GOOD),
            ("a checkpoint without the backbone key 'backbone.0.0.weight'", 7, 6, _MISSING),
            ("a checkpoint saved from a DDP-wrapped model (every key starts with 'module.')", 10, 6, _PREFIXED),
            ("a checkpoint whose 'backbone.2.0.weight' has another shape", 10, 6, _RESHAPED),
            ("a checkpoint with a key the model does not have, 'backbone.2.1.scale'", 4, 6, _UNEXPECTED)]


def _checkpoint(case: Case, width: int, defect: str) -> dict[str, torch.Tensor]:
    """The pretrained checkpoint of a case: a 5-class model's full state dict, with the case's defect."""
    state = {k: v.clone() for k, v in _net(case.seeded(140), 5, width).state_dict().items()}
    if defect == _MISSING:
        del state["backbone.1.1.running_var" if not case.hidden else "backbone.0.0.weight"]
    elif defect == _UNEXPECTED:
        state["backbone.3.weight" if not case.hidden else "backbone.2.1.scale"] = _randn(4, seed=case.seeded(141))
    elif defect == _PREFIXED:
        state = {f"module.{k}": v for k, v in state.items()}
    elif defect == _RESHAPED:
        state["backbone.2.0.weight"] = _randn(4 * width, 2 * width, 1, 1, seed=case.seeded(142))
    return state


def _new_model(case: Case, index: int, classes: int, width: int) -> TransferNet:
    """The model a checkpoint is loaded into: its own (random) weights, a new head."""
    return _seeded(case.seeded(143 + index), functools.partial(TransferNet, classes, width))  # type: ignore


@register(
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
def probe_load_pretrained(load_pretrained: Callable[[nn.Module, dict[str, torch.Tensor]], Any], *, case: Case) -> dict:
    """Call the student's function on each (model, checkpoint) pair; record what it returned or raised, the model's
    state dict after it, and the checkpoint dict as it was left."""
    records = []
    for index, (_, classes, width, defect) in enumerate(_load_cases(case)):
        model = _new_model(case, index, classes, width)
        given = _checkpoint(case, width, defect)
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


@judges("14-load-pretrained")
def judge_load_pretrained(seen: dict, *, case: Case) -> str:
    """Backbone loaded (buffers too), new head kept, an error for anything else missing or unexpected, the
    head's keys returned, the caller's checkpoint untouched."""
    cases, records = _load_cases(case), seen["loads"]
    if not isinstance(records, list) or len(records) != len(cases):
        raise WireError("malformed observation: not one record per checkpoint")
    for index, ((description, classes, width, defect), record) in enumerate(zip(cases, records, strict=True)):
        checkpoint = _checkpoint(case, width, defect)
        _judge_checkpoint_kept(record["checkpoint"], checkpoint, description)
        if defect == _GOOD:
            _no_exception(record, f"loading {description}")
            fresh = _new_model(case, index, classes, width)
            _judge_loaded_state(record["state"], fresh, checkpoint, description)
            _judge_returned_keys(record["returned"], sorted(k for k in fresh.state_dict() if k.startswith("head.")),
                                 description)
        elif record.get("raised") is None:
            missing = defect in (_MISSING, _RESHAPED)
            fail("missing-ignored" if missing else "unexpected-ignored",
                 observed=f"given {description}, your function returned {_describe(record['returned'])} without "
                          "raising",
                 expected="an error: a checkpoint that does not match the model (beyond the new head) must stop "
                          "the run, not load partly",
                 cause=("strict=False was used and the missing_keys it returned were not checked (or a test that "
                        "allows every missing key, not only the head's)" if defect == _MISSING else
                        "the shape mismatch that load_state_dict raises was caught and ignored, or that key was "
                        "filtered out before loading" if defect == _RESHAPED else
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
                                                           and torch.equal(after[k], checkpoint[k]))]
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
    not_loaded = [k for k in backbone if not torch.equal(state[k], checkpoint[k])]
    if not_loaded:
        untouched = [k for k in not_loaded if torch.equal(state[k], own[k])]
        buffers = {n for n, _ in fresh.named_buffers()}
        if len(untouched) == len(not_loaded) and all(torch.equal(state[k], own[k]) for k in backbone):
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
    changed = [k for k in head if not torch.equal(state[k], own[k])]
    if changed:
        loaded_old = all(k in checkpoint and checkpoint[k].shape == state[k].shape and torch.equal(state[k],
                         checkpoint[k]) for k in changed)
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


# ------------------------------------------------------------------------------------------ 14-train-mode
class _ModeNet(nn.Module):
    """A TransferNet backbone (some blocks frozen) with a head that has its own (trainable) BatchNorm and dropout."""

    def __init__(self, width: int, frozen_blocks: int, classes: int) -> None:
        super().__init__()
        self.backbone = TransferNet(classes, width).backbone
        features = 4 * width
        self.head = nn.Sequential(nn.Linear(features, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Dropout(0.3),
                                  nn.Linear(8, classes))
        for block in list(self.backbone)[:frozen_blocks]:
            block.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


def _mode_cases(case: Case) -> list[tuple[int, int, bool]]:
    """(width, frozen conv blocks, the model comes in eval mode)."""
    if not case.hidden:
        return [(4, 2, True)]
    return [(6, 1, False), (4, 3, True)]


def _mode_model(case: Case, index: int, width: int, frozen_blocks: int, starts_in_eval: bool) -> _ModeNet:
    model = _seeded(case.seeded(150 + index), functools.partial(_ModeNet, width, frozen_blocks, 3))
    _pretrained_like(model, case.seeded(160 + index))
    return model.eval() if starts_in_eval else model.train()  # type: ignore


def _mode_input(case: Case, index: int) -> torch.Tensor:
    return torch.rand(8, 3, 16, 16, generator=torch.Generator().manual_seed(case.seeded(170 + index)))


def _seeded_forward(model: nn.Module, x: torch.Tensor, seed: int) -> torch.Tensor:
    """model(x) with dropout's masks drawn from `seed` (the global stream restored after)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return model(x).detach()


def _frozen_batchnorm(module: nn.Module) -> bool:
    params = list(module.parameters())
    return isinstance(module, _BATCHNORMS) and bool(params) and not any(p.requires_grad for p in params)


@register(
    "14-train-mode", unjudged=('models/*/buffers/*',),
    hints=Hints(
        nudge="Call model.train() first (it sets every module), then walk model.modules() and put back in eval mode "
              "each BatchNorm layer whose parameters are all frozen.",
        concept="Freezing (requires_grad False) stops gradients; it does not stop a BatchNorm in training mode from "
                "normalising with the batch's statistics and overwriting its running statistics. Only eval mode "
                "does, and model.train() undoes it, so it must be redone after every model.train().",
        solution="model.train(); for m in model.modules(): if isinstance(m, nn.modules.batchnorm._BatchNorm) and "
                 "not any(p.requires_grad for p in m.parameters()): m.eval()",
        section="3. Freezing done right"),
    requires={
        "frozen-bn-training": Requirement(
            "every BatchNorm layer whose parameters are all frozen is in eval mode (its running statistics do not "
            "move)",
            hint="After your function, print [(n, m.training) for n, m in model.named_modules() if 'BatchNorm' in "
                 "type(m).__name__]: which frozen ones still say True?"),
        "trainable-bn-eval": Requirement(
            "BatchNorm layers with trainable parameters stay in training mode",
            hint="Which BatchNorm layers did you put in eval mode? Print requires_grad of their weight: are some of "
                 "them being trained?"),
        "not-training": Requirement(
            "the model and its other layers (dropout included) are in training mode, also when the model came in "
            "eval mode",
            hint="Call model.eval() before your function: after it, is model.training True? Is the head's dropout "
                 "active?"),
        "flags-changed": Requirement(
            "changes no parameter's requires_grad",
            hint="Compare [p.requires_grad for p in model.parameters()] before and after your function: mode and "
                 "freezing are two separate things; this function sets modes only."),
    },
)
def probe_train_mode(train_mode: Callable[[nn.Module], Any], *, case: Case) -> dict:
    """Call the student's function on each model; record the flags, the modes, then the output of a seeded forward
    pass and the BatchNorm statistics after it."""
    records = []
    for index, setting in enumerate(_mode_cases(case)):
        model = _mode_model(case, index, *setting)
        record: dict[str, Any] = {}
        _attempt(record, functools.partial(train_mode, model))
        record["requires_grad"] = {n: p.requires_grad for n, p in model.named_parameters()}
        record["training"] = {n or "model": m.training for n, m in model.named_modules()}
        if record.get("raised") is None:
            record["out"] = _attempt(record, functools.partial(_seeded_forward, model, _mode_input(case, index),
                                                               case.seeded(180 + index)))
            record["buffers"] = {n: b.detach().clone() for n, b in model.named_buffers()}
        records.append(record)
    return {"models": records}


@judges("14-train-mode")
def judge_train_mode(seen: dict, *, case: Case) -> str:
    """Frozen BatchNorm layers in eval mode, every other layer training: the judge recomputes the forward pass
    with those modes and compares the output and the statistics."""
    settings, records = _mode_cases(case), seen["models"]
    if not isinstance(records, list) or len(records) != len(settings):
        raise WireError("malformed observation: not one record per model")
    for index, (setting, record) in enumerate(zip(settings, records, strict=True)):
        _no_exception(record, "running your function and a forward pass after it")
        model = _mode_model(case, index, *setting)
        came = "eval" if setting[2] else "train"
        flags, modes = record["requires_grad"], record["training"]
        names = [n for n, _ in model.named_parameters()]
        modules = {n or "model": m for n, m in model.named_modules()}
        if not (isinstance(flags, dict) and list(flags) == names and isinstance(modes, dict)
                and list(modes) == list(modules)):
            raise WireError("malformed observation: the flags or modes are not the model's")
        changed = [n for n, p in model.named_parameters() if flags[n] is not p.requires_grad]
        if changed:
            fail("flags-changed", observed=f"requires_grad changed on {changed[:4]}",
                 expected="the flags left as they came: this function sets modes, the caller decides what is frozen",
                 cause="a requires_grad_ call in your function (freezing the BatchNorm layers, or the backbone)",
                 where="remove requires_grad_ from the function; use .eval() / .train() only")
        frozen = [n for n, m in modules.items() if _frozen_batchnorm(m)]
        trainable = [n for n, m in modules.items() if isinstance(m, _BATCHNORMS) and n not in frozen]
        still = [n for n in frozen if modes[n] is not False]
        if still:
            fail("frozen-bn-training", observed=f"frozen BatchNorm layers in training mode: {still}",
                 expected="every BatchNorm whose parameters are all frozen in eval mode",
                 cause="model.train() sets every module to training mode, and no BatchNorm was put back in eval after "
                       "it" if len(still) == len(frozen) else "the test that picks the frozen BatchNorm layers misses "
                       "these (a single class such as nn.BatchNorm2d, or only the top-level modules)",
                 where="after model.train(): m.eval() for each BatchNorm module whose parameters all have "
                       "requires_grad False")
        idle = [n for n, m in modules.items() if (n == "model" or isinstance(m, nn.Dropout)) and modes[n] is not True]
        if idle:
            fail("not-training", observed=f"in eval mode: {idle} (the model came in {came} mode)",
                 expected="the model and its dropout layers in training mode",
                 cause="model.train() is not called (the model stays in the mode it came in), or a part of the model "
                       "was put in eval mode after it",
                 where="start the function with model.train()")
        evaluated = [n for n in trainable if modes[n] is not True]
        if evaluated:
            fail("trainable-bn-eval", observed=f"BatchNorm layers with trainable parameters in eval mode: {evaluated}",
                 expected="those in training mode: they are being fine-tuned, with batch statistics",
                 cause="a whole part of the model was put in eval mode (model.backbone.eval(), or every BatchNorm "
                       "layer), not only the frozen BatchNorm layers",
                 where="the test that picks which BatchNorm layers go to eval: all of their parameters frozen")
        _judge_seeded_forward(record, model, case, index, frozen)
    return "frozen BatchNorm layers in eval mode (statistics kept), everything else in training mode, flags untouched"


def _judge_seeded_forward(record: dict[str, Any], model: _ModeNet, case: Case, index: int, frozen: list[str]) -> None:
    """The output and the statistics after one forward pass equal the judge's, run with the right modes."""
    model.train()
    for name, module in model.named_modules():
        if name in frozen:
            module.eval()
    want = _seeded_forward(model, _mode_input(case, index), case.seeded(180 + index))
    buffers = record["buffers"]
    own = dict(model.named_buffers())
    if not (isinstance(buffers, dict) and list(buffers) == list(own)):
        raise WireError("malformed observation: the buffers are not the model's")
    moved = [f"{n}" for n in own if n.rpartition(".")[0] in frozen and not torch.equal(_tensor(buffers[n], n), own[n])]
    if moved:
        fail("frozen-bn-training",
             observed=f"after one forward pass, the frozen BatchNorm statistics {moved[:3]} moved",
             expected="the pretrained statistics kept: frozen BatchNorm layers in eval mode",
             cause="these layers still normalise with the batch's statistics and update their running ones (a "
                   "changed momentum or track_running_stats does not put a layer in eval mode)",
             where="m.eval() on each frozen BatchNorm layer, after model.train()")
    if not _close(_tensor(record["out"], "the output"), want):
        fail("not-training", observed="the output of a forward pass differs from that of the model with the frozen "
                                      "BatchNorm layers in eval mode and everything else training",
             expected="the same output (the same dropout masks are drawn in both)",
             cause="a layer behaves differently from its mode (a changed momentum, track_running_stats, or dropout "
                   "probability), or a layer's mode differs from what was recorded",
             where="set modes only: model.train(), then .eval() on the frozen BatchNorm layers")


# ------------------------------------------------------------------------------------------ 14-param-groups
def _group_settings(case: Case) -> list[tuple[int, int, int, float, float, float]]:
    """(width, classes, frozen conv blocks, head_lr, backbone_lr, weight_decay)."""
    if not case.hidden:
        return [(4, 10, 1, 1e-2, 1e-4, 0.05)]
    return [(6, 3, 2, 3e-3, 3e-5, 0.1), (4, 7, 0, 1e-1, 1e-3, 0.2)]


def _group_model(case: Case, index: int, width: int, classes: int, frozen_blocks: int) -> TransferNet:
    model = _seeded(case.seeded(190 + index), functools.partial(TransferNet, classes, width))
    for block in list(model.backbone)[:frozen_blocks]:  # type: ignore[arg-type]
        block.requires_grad_(False)
    return model  # type: ignore[return-value]


_ADAMW_DEFAULT_WEIGHT_DECAY = 0.01


@register(
    "14-param-groups",
    hints=Hints(
        nudge="Sort each trainable parameter by two questions: backbone or head (its learning rate), matrix or kernel "
              "(p.ndim >= 2: weight decay) or bias and norm scale (no decay). Each answer pair is one group.",
        concept="An optimizer takes groups: dicts with 'params' and their own options, each parameter in one group "
                "only, options left out taking the optimizer's defaults (AdamW's weight_decay is 0.01). Frozen "
                "parameters stay out: they would only cost memory for their optimizer state.",
        solution="for name, p in model.named_parameters(): if p.requires_grad: groups[(name.startswith('backbone.'), "
                 "p.ndim >= 2)].append(p); return torch.optim.AdamW([{'params': ps, 'lr': backbone_lr if backbone "
                 "else head_lr, 'weight_decay': weight_decay if decay else 0.0} for (backbone, decay), ps in "
                 "groups.items() if ps])",
        section="4. Full fine-tuning with differential learning rates"),
    requires={
        "frozen-params-included": Requirement(
            "frozen parameters are in no group",
            hint="The model you get has a frozen block. Which attribute of a parameter tells, and does your function "
                 "look at it?"),
        "missing-params": Requirement(
            "every trainable parameter is in a group (the parameters themselves, not copies)",
            hint="Count the parameters in your groups and the trainable ones of the model: which kind does no "
                 "selection of yours take?"),
        "duplicate-params": Requirement(
            "each parameter is in exactly one group",
            hint="Can one parameter pass two of your selections (a group of everything plus a group of biases)?"),
        "decay-on-bias-or-norm": Requirement(
            "biases and normalisation weights (ndim < 2) get weight_decay 0.0",
            hint="Print p.ndim for a BatchNorm weight and for a bias: which group do they land in? A BatchNorm "
                 "weight's name does not contain 'bias'."),
        "no-decay-on-weights": Requirement(
            "conv kernels and linear weights (ndim >= 2) get weight_decay, set explicitly in their group",
            hint="A conv kernel has 4 dimensions: does your test for 'a weight matrix' take it? And does every group "
                 "with weights set 'weight_decay' itself?"),
        "wrong-lr": Requirement(
            "backbone parameters get backbone_lr, head parameters head_lr",
            hint="Print each group's lr with the names of its parameters: which get backbone_lr?"),
        "not-adamw": Requirement(
            "returns a torch.optim.AdamW built on those groups",
            hint="Print type(finetune_optimizer(...)): is it the optimizer, or the list of groups you built?"),
    },
)
def probe_param_groups(finetune_optimizer: Callable[..., Any], *, case: Case) -> dict:
    """Call the student's function on each model; record the optimizer's type and its groups by parameter name."""
    described: list[Any] = []
    for index, (width, classes, frozen, head_lr, backbone_lr, weight_decay) in enumerate(_group_settings(case)):
        model = _group_model(case, index, width, classes, frozen)
        try:
            optimizer = finetune_optimizer(model, head_lr=head_lr, backbone_lr=backbone_lr, weight_decay=weight_decay)
        except ValueError as error:
            if "more than one" not in str(error):
                raise
            fail("duplicate-params", observed=f"building the optimizer raised: {error}",
                 expected="each parameter in exactly one group",
                 cause="overlapping selections: a parameter passes the tests of two groups (for example a group of "
                       "all parameters plus a group of biases and norms)",
                 where="make the selections disjoint: one test per parameter decides its single group")
        if not isinstance(optimizer, torch.optim.AdamW):
            described.append({"type": type_name(optimizer)})
            break
        described.append({"type": "AdamW", "groups": describe_groups(model, optimizer.param_groups)})
    return {"optimizers": described}


@judges("14-param-groups")
def judge_param_groups(seen: dict, *, case: Case) -> str:
    """An AdamW holding every trainable parameter once, frozen ones in none; decay on kernels and matrices only;
    the backbone at backbone_lr, the head at head_lr."""
    settings, records = _group_settings(case), seen["optimizers"]
    if not isinstance(records, list) or not records or len(records) > len(settings):
        raise WireError("malformed observation: not one optimizer per model")
    for index, (setting, record) in enumerate(zip(settings, records, strict=False)):
        width, classes, frozen, head_lr, backbone_lr, weight_decay = setting
        if record.get("type") != "AdamW":
            fail("not-adamw", observed=f"finetune_optimizer returned {record.get('type')}",
                 expected="a torch.optim.AdamW built on your parameter groups",
                 cause="the groups were returned instead of the optimizer built on them"
                 if record.get("type") in ("list", "tuple", "dict") else "another optimizer class, or nothing",
                 where="the return statement: return torch.optim.AdamW(groups)")
        model = _group_model(case, index, width, classes, frozen)
        groups = record["groups"]
        try:
            holders = group_of_each_parameter(model, groups)
        except ValueError as error:
            raise WireError(f"malformed observation: {error}") from None
        lrs = {name: group_lr(group, name) for name, group in holders.items()}
        for name, group in holders.items():
            check_weight_decay(model, name, group, weight_decay, default=_ADAMW_DEFAULT_WEIGHT_DECAY,
                               default_is="AdamW's default")
            in_backbone = name.startswith("backbone.")
            wanted = backbone_lr if in_backbone else head_lr
            got = lrs[name]
            if not math.isclose(got, wanted):
                fail("wrong-lr", observed=f"{name} has lr {got:g}",
                     expected=f"{wanted:g} " + ("(backbone_lr: a pretrained parameter)" if in_backbone
                                                else "(head_lr: the new head)"),
                     cause=_lr_cause(lrs, head_lr, backbone_lr),
                     where="set 'lr' in every group: backbone_lr for names starting with 'backbone.', head_lr "
                           "otherwise")
    if len(records) != len(settings):
        raise WireError("malformed observation: optimizers missing")
    return "AdamW with every trainable parameter once, decay on kernels and matrices only, backbone at its own lr"


def _lr_cause(lrs: dict[str, float], head_lr: float, backbone_lr: float) -> str:
    """Why some parameter has the wrong lr, from the lr of every parameter."""
    values = set(lrs.values())
    if len(values) == 1:
        return f"one learning rate for every group ({values.pop():g}): the pretrained layers need backbone_lr"
    if all(math.isclose(lr, head_lr if name.startswith("backbone.") else backbone_lr) for name, lr in lrs.items()):
        return "head_lr and backbone_lr swapped"
    return ("the test that tells a backbone parameter (name.startswith('backbone.')) picks the wrong ones, or another "
            "value than head_lr and backbone_lr")


# ------------------------------------------------------------------------------------------ 14-unfreeze
class _DeepNet(nn.Module):
    """A TransferNet-like model whose backbone has four conv blocks (for the hidden case)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        blocks = TransferNet(3, width).backbone
        self.backbone = nn.Sequential(*list(blocks)[:3], nn.Sequential(nn.Conv2d(4 * width, 4 * width, 1),
                                                                         nn.BatchNorm2d(4 * width)), *list(blocks)[3:])
        self.head = nn.Linear(4 * width, 3)


def _unfreeze_cases(case: Case) -> list[tuple[str, int, int]]:
    """(architecture, width, every)."""
    if not case.hidden:
        return [("TransferNet", 4, 2)]
    return [("TransferNet", 6, 1), ("four blocks", 4, 3)]


def _unfreeze_model(case: Case, index: int, architecture: str, width: int) -> nn.Module:
    build = functools.partial(TransferNet, 3, width) if architecture == "TransferNet" else \
        functools.partial(_DeepNet, width)
    return _seeded(case.seeded(230 + index), build)


def _blocks(model: nn.Module) -> list[str]:
    """The names of the backbone's blocks that hold parameters, bottom (first) to top (last)."""
    return [f"backbone.{name}" for name, block in model.backbone.named_children() if list(block.parameters())]


def _block_of(name: str) -> str:
    return ".".join(name.split(".")[:2])


@register(
    "14-unfreeze",
    hints=Hints(
        nudge="Each call decides every flag: the head always trains; block i of n unfreezes from epoch "
              "every * (n - i), so the last block (next to the head) is first.",
        concept="Gradual unfreezing trains the new head alone first, then unfreezes one block at a time from the top "
                "down, so that the large, noisy gradients of a random head never reach the general early layers. "
                "requires_grad_(flag) on a block sets all its parameters; setting the flag both ways on every call "
                "makes the function independent of the model's state before it.",
        solution="blocks = [b for b in model.backbone if list(b.parameters())]; for i, block in enumerate(blocks): "
                 "block.requires_grad_(epoch >= every * (len(blocks) - i)); model.head.requires_grad_(True)",
        section="5. Gradual unfreezing"),
    requires={
        "head-frozen": Requirement(
            "the head is trainable at every epoch",
            hint="Print [n for n, p in model.head.named_parameters() if not p.requires_grad] after a call at epoch "
                 "0: is the head trainable?"),
        "not-frozen": Requirement(
            "blocks not yet due are frozen, also when the model came in trainable",
            hint="Call your function at epoch 0 on a freshly built model (everything trainable): is the backbone "
                 "frozen afterwards? Each call must set both directions."),
        "wrong-order": Requirement(
            "blocks unfreeze from the top (the last block, next to the head) down to the first",
            hint="Print which block is trainable at epoch `every`: the one next to the head, or the first?"),
        "wrong-timing": Requirement(
            "block i of n is trainable from epoch every * (n - i) on, and frozen before it, for a backbone of any "
            "number of blocks",
            hint="Tabulate, for epochs 0 to 3 * every + 1, which blocks your function leaves trainable, and compare "
                 "with every * (n - i): an off-by-one (> instead of >=), or blocks counted from the wrong end?"),
    },
)
def probe_unfreeze(gradual_unfreeze: Callable[..., Any], *, case: Case) -> dict:
    """Call the student's function epoch after epoch on a model that came in trainable, then on one that came in
    frozen; record every parameter's flag after each call."""
    runs = []
    for index, (architecture, width, every) in enumerate(_unfreeze_cases(case)):
        for came_frozen in (False, True):
            model = _unfreeze_model(case, index, architecture, width)
            if came_frozen:
                model.requires_grad_(False)
            flags = []
            for epoch in range(every * len(_blocks(model)) + 2):
                gradual_unfreeze(model, epoch, every)
                flags.append([p.requires_grad for p in model.parameters()])
            runs.append(flags)
    return {"runs": runs}


@judges("14-unfreeze")
def judge_unfreeze(seen: dict, *, case: Case) -> str:
    """The head always trainable; block i of n trainable exactly from epoch every * (n - i), whatever the flags
    were before the call."""
    runs = seen["runs"]
    cases = _unfreeze_cases(case)
    if not isinstance(runs, list) or len(runs) != 2 * len(cases):
        raise WireError("malformed observation: not two runs per model")
    for index, (architecture, width, every) in enumerate(cases):
        model = _unfreeze_model(case, index, architecture, width)
        names = [n for n, _ in model.named_parameters()]
        blocks = _blocks(model)
        epochs = every * len(blocks) + 2
        came_trainable, came_frozen = (_flag_table(runs[2 * index + k], names, epochs) for k in (0, 1))
        want = [[_due(name, epoch, every, blocks) for name in names] for epoch in range(epochs)]
        what = f"a backbone of {len(blocks)} blocks, every={every}"
        for table, came in ((came_frozen, "frozen"), (came_trainable, "trainable")):
            for epoch, (got, expected) in enumerate(zip(table, want, strict=True)):
                if got == expected:
                    continue
                head = [n for n, flag in zip(names, got, strict=True) if n.startswith("head.") and not flag]
                if head:
                    fail("head-frozen", observed=f"after the call at epoch {epoch} ({what}), {head} do not require "
                         "grad", expected="the head trainable at every epoch",
                         cause="the head is frozen with the backbone (model.requires_grad_(False) and no unfreezing "
                               "of the head), or its flag is never set and the model came in frozen",
                         where="model.head.requires_grad_(True) in every call")
                if came == "trainable" and came_frozen == want:
                    early = sorted({_block_of(n) for n, flag, w in zip(names, got, expected, strict=True)
                                    if flag and not w})
                    fail("not-frozen", observed=f"the model came in trainable; after the call at epoch {epoch} "
                         f"({what}) the blocks {early} are still trainable", expected="blocks not yet due frozen",
                         cause="the function only unfreezes (sets requires_grad True when a block is due) and never "
                               "freezes the blocks that are not due yet",
                         where="set each block's flag both ways: block.requires_grad_(epoch >= ...)")
                _fail_schedule(table, names, blocks, every, epoch, what, len(list(model.backbone.children())))
    return "head always trainable, blocks unfrozen from the top down at every * (n - i), whatever came in"


def _due(name: str, epoch: int, every: int, blocks: list[str]) -> bool:
    if name.startswith("head."):
        return True
    index = blocks.index(_block_of(name))
    return epoch >= every * (len(blocks) - index)


def _flag_table(value: Any, names: list[str], epochs: int) -> list[list[bool]]:
    if not (isinstance(value, list) and len(value) == epochs and all(
            isinstance(row, list) and len(row) == len(names) and all(isinstance(f, bool) for f in row)
            for row in value)):
        raise WireError("malformed observation: the flags are not one row per epoch, one flag per parameter")
    return value


def _schedule_cause(table: list[list[bool]], names: list[str], blocks: list[str], every: int, children: int) -> str:
    """The slip whose schedule `table` follows exactly; the candidates when it follows none of them."""
    n = len(blocks)
    slips = {
        "an off-by-one in the epoch test (> instead of >=)": lambda e, i: e > every * (n - i),
        "all blocks unfrozen at once": lambda e, i: e >= every,
        f"every child of the backbone counted as a block ({children}, pooling and flatten included), not only "
        "those with parameters": lambda e, i: e >= every * (children - i),
        "no block's flag ever changes: a plain attribute `block.requires_grad = ...` (which sets no parameter) "
        "instead of block.requires_grad_(...)": lambda e, i: bool(table[0][names.index(next(
            m for m in names if _block_of(m) == blocks[i]))]),
    }
    for cause, due in slips.items():
        if all(row == [name.startswith("head.") or due(e, blocks.index(_block_of(name))) for name in names]
               for e, row in enumerate(table)):
            return cause
    return ("the epoch test: one of an off-by-one (> instead of >=), all blocks at once, a fixed number of blocks "
            "instead of the backbone's, or a layer without parameters counted as a block")


def _fail_schedule(table: list[list[bool]], names: list[str], blocks: list[str], every: int, epoch: int,
                   what: str, children: int) -> None:
    """Fail with wrong-order when the blocks unfreeze bottom-up at the right epochs, else with wrong-timing."""
    def trainable_blocks(row: list[bool]) -> list[str]:
        return [b for b in blocks if all(flag for n, flag in zip(names, row, strict=True) if _block_of(n) == b)]

    partial = [b for b in blocks if len({flag for n, flag in zip(names, table[epoch], strict=True)
                                          if _block_of(n) == b}) > 1]
    got = trainable_blocks(table[epoch])
    wanted = [b for i, b in enumerate(blocks) if epoch >= every * (len(blocks) - i)]
    bottom_up = all(trainable_blocks(row) == blocks[:len([b for i, b in enumerate(blocks)
                                                           if e >= every * (len(blocks) - i)])]
                    for e, row in enumerate(table))
    if bottom_up and not partial:
        fail("wrong-order", observed=f"at epoch {epoch} ({what}) the trainable blocks are {got}",
             expected=f"{wanted}: the top block (next to the head) unfreezes first",
             cause="the blocks are counted from the bottom: block 0 (edges and colours, the most general) unfreezes "
                   "first instead of last", where="block i of n unfreezes at every * (n - i)")
    fail("wrong-timing", observed=f"at epoch {epoch} ({what}) the trainable blocks are {got}"
         + (f", and {partial} are partly trainable" if partial else ""),
         expected=f"{wanted} (block i of n trainable from epoch every * (n - i) on)",
         cause="only some parameters of a block were set (a loop over a block's direct parameters only)" if partial
         else _schedule_cause(table, names, blocks, every, children),
         where="blocks = the backbone's children that have parameters; block.requires_grad_(epoch >= every * (n - i))")


# ------------------------------------------------------------------------------------------ 14-lora
def _lora_cases(case: Case) -> list[tuple[int, int, int, float, bool, tuple[int, ...]]]:
    """(in_features, out_features, r, alpha, bias, input shape)."""
    if not case.hidden:
        return [(6, 5, 2, 8.0, True, (7, 6)), (8, 3, 4, 2.0, False, (5, 8))]
    return [(10, 7, 3, 6.0, True, (2, 4, 10)), (5, 9, 1, 4.0, True, (3, 5)), (12, 4, 4, 16.0, False, (2, 3, 12))]


def _lora_base(case: Case, index: int, fan_in: int, fan_out: int, bias: bool) -> nn.Linear:
    return _seeded(case.seeded(200 + index), functools.partial(nn.Linear, fan_in, fan_out, bias=bias))  # type: ignore


def _lora_inputs(case: Case, index: int, setting: tuple) -> dict[str, torch.Tensor]:
    """The input, the weights of the loss whose gradient is taken, and the adapter values the check sets."""
    fan_in, fan_out, r, _, _, shape = setting
    generator = torch.Generator().manual_seed(case.seeded(210 + index))
    return {"x": torch.randn(shape, generator=generator),
            "grad_weights": torch.randn(*shape[:-1], fan_out, generator=generator),
            "A": torch.randn(r, fan_in, generator=generator) * 0.5,
            "B": torch.randn(fan_out, r, generator=generator) * 0.5}


def _snapshot(value: Any) -> Any:
    return value.detach().clone() if isinstance(value, torch.Tensor) else type_name(value)


@register(
    "14-lora",
    hints=Hints(
        nudge="Keep the pretrained layer as self.base and freeze it; add two small nn.Parameters, lora_A (r x in) "
              "random and lora_B (out x r) zero; forward adds (alpha / r) * (x @ A.T) @ B.T to base(x).",
        concept="LoRA learns a low-rank change B @ A of a frozen weight: r * (in + out) trainable numbers instead of "
                "in * out. With B = 0 the layer starts exactly as the pretrained one, and A random lets B's gradient "
                "be non-zero from the first step. Merging folds the change into one weight: W + (alpha / r) * B @ A.",
        solution="forward: return self.base(x) + (x @ self.lora_A.T @ self.lora_B.T) * self.scaling; merge: merged = "
                 "nn.Linear(in, out, bias=...); merged.weight.copy_(W + self.scaling * self.lora_B @ self.lora_A); "
                 "copy the bias",
        section="6. LoRA from scratch"),
    requires={
        "base-trainable": Requirement(
            "keeps the base layer as self.base, its weight and bias frozen (requires_grad False); only lora_A and "
            "lora_B train",
            hint="Print [n for n, p in layer.named_parameters() if p.requires_grad]: what is there besides lora_A and "
                 "lora_B? eval() does not freeze."),
        "wrong-adapter": Requirement(
            "lora_A (r, in_features) and lora_B (out_features, r) are registered nn.Parameters that gradients reach",
            hint="Print dict(layer.named_parameters()).keys() and the shapes of lora_A and lora_B: are both "
                 "there, as nn.Parameter, and does loss.backward() give them a .grad?"),
        "start-differs": Requirement(
            "a new layer computes exactly what the base layer computes",
            hint="Compare layer(x) with layer.base(x) right after construction: which of lora_A and lora_B must "
                 "start at zero for the added term to vanish?"),
        "wrong-init": Requirement(
            "lora_B starts at zeros and lora_A at random values",
            hint="Print layer.lora_A.abs().sum() and layer.lora_B.abs().sum() after construction: which is zero? If "
                 "both are, what gradient can either of them get?"),
        "wrong-forward": Requirement(
            "forward returns base(x) + (alpha / r) * x @ A.T @ B.T, for inputs of any number of leading dimensions",
            hint="Set lora_A and lora_B to small known tensors and compare layer(x) with the formula by hand: is your "
                 "scaling alpha / r?"),
        "merge-differs": Requirement(
            "merge() returns an nn.Linear computing the same outputs as the layer",
            hint="Compare layer.merge()(x) with layer(x) for non-zero lora_A and lora_B: is the scaling in the merged "
                 "weight, and did the bias come along?"),
        "merge-modifies": Requirement(
            "merge() leaves the LoRA layer itself unchanged",
            hint="Compute layer(x), call layer.merge(), compute layer(x) again: the same? Build the merged weight in "
                 "a new tensor, not in self.base.weight."),
    },
)
def probe_lora(lora_linear: Callable[..., nn.Module], *, case: Case) -> dict:
    """Build the student's layer around each seeded base; record its parameters, its first output and gradients, its
    output with the check's adapter values, the merged layer's output, and its output after merging."""
    records = []
    for index, setting in enumerate(_lora_cases(case)):
        fan_in, fan_out, r, alpha, bias, _ = setting
        inputs = _lora_inputs(case, index, setting)
        base = _lora_base(case, index, fan_in, fan_out, bias)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(case.seeded(220 + index))
            layer = lora_linear(base, r=r, alpha=alpha)
        records.append(_probe_one_lora(layer, inputs))
    return {"layers": records}


def _probe_one_lora(layer: nn.Module, inputs: dict[str, torch.Tensor]) -> dict[str, Any]:
    named = dict(layer.named_parameters())
    record: dict[str, Any] = {"trainable": [n for n, p in named.items() if p.requires_grad],
                              "parameters": list(named),
                              "A": _snapshot(getattr(layer, "lora_A", None)),
                              "B": _snapshot(getattr(layer, "lora_B", None))}
    adapters = [getattr(layer, "lora_A", None), getattr(layer, "lora_B", None)]
    if not all(isinstance(a, torch.Tensor) for a in adapters):
        return record
    x = inputs["x"]
    out = layer(x)
    record["out_start"] = out.detach().clone()
    if out.requires_grad:
        (out * inputs["grad_weights"]).sum().backward()
    record["grad_B"] = _snapshot(adapters[1].grad)
    with torch.no_grad():
        for adapter, value in zip(adapters, (inputs["A"], inputs["B"]), strict=True):
            if adapter.shape != value.shape:
                return record
            adapter.copy_(value)
    with torch.no_grad():
        record["out"] = layer(x).clone()
        merged = layer.merge()
        record["merged_type"] = type_name(merged)
        record["merged_out"] = merged(x).clone() if isinstance(merged, nn.Linear) else None
        record["out_after_merge"] = layer(x).clone()
    return record


def _expected(base: nn.Linear, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, scale: float) -> torch.Tensor:
    with torch.no_grad():
        return base(x) + scale * (x @ a.T @ b.T)


@judges("14-lora")
def judge_lora(seen: dict, *, case: Case) -> str:
    """Base frozen, adapters registered with gradients, the start equal to the base, B zero and A random, the
    forward formula, and a merge that equals the layer and leaves it unchanged."""
    settings, records = _lora_cases(case), seen["layers"]
    if not isinstance(records, list) or len(records) != len(settings):
        raise WireError("malformed observation: not one record per layer")
    for index, (setting, record) in enumerate(zip(settings, records, strict=True)):
        fan_in, fan_out, r, alpha, bias, shape = setting
        inputs = _lora_inputs(case, index, setting)
        base = _lora_base(case, index, fan_in, fan_out, bias)
        what = f"LoRALinear(nn.Linear({fan_in}, {fan_out}, bias={bias}), r={r}, alpha={alpha:g})"
        _judge_lora_parameters(record, what, fan_in, fan_out, r, bias)
        x = inputs["x"]
        start = _tensor(record["out_start"], "the first output")
        a0, b0 = _tensor(record["A"], "lora_A"), _tensor(record["B"], "lora_B")
        with torch.no_grad():
            reference = base(x)
        if not _close(start, reference):
            fail("start-differs", observed=f"a new {what} gives outputs that differ from the base layer's "
                                           f"(largest difference {float((start - reference).abs().max()):.3g})",
                 expected="exactly base(x): fine-tuning starts from the pretrained model",
                 cause="lora_B does not start at zero, so the added term B @ A x is not zero" if b0.abs().sum() > 0
                 else "the base layer's weight or bias was changed in __init__, or forward adds something else",
                 where="__init__: nn.Parameter(torch.zeros(out_features, r)) for lora_B; leave base's values alone")
        if b0.abs().sum() > 0 or a0.abs().sum() == 0:
            fail("wrong-init", observed=f"a new {what} has |lora_A| sum {float(a0.abs().sum()):.3g} and |lora_B| sum "
                                       f"{float(b0.abs().sum()):.3g}",
                 expected="lora_B all zeros, lora_A random (non-zero)",
                 cause="both start at zero: the gradient of each is proportional to the other, so neither ever "
                       "moves" if a0.abs().sum() == 0 and b0.abs().sum() == 0 else "A and B swapped: the convention "
                       "(the LoRA paper's, and what loaders of LoRA weights expect) is B zero, A random",
                 where="__init__: lora_A drawn at random (for example kaiming_uniform_ or randn * 0.01), lora_B zeros")
        grad_b = record["grad_B"]
        if not isinstance(grad_b, torch.Tensor) or grad_b.abs().sum() == 0:
            fail("wrong-adapter", observed="after loss.backward() on a new layer, lora_B has "
                 + ("no gradient" if not isinstance(grad_b, torch.Tensor) else "a zero gradient"),
                 expected="a non-zero gradient on lora_B (lora_A is random)",
                 cause="forward does not use lora_B in a way autograd follows (.data, .detach(), torch.no_grad, a "
                       "copy made in __init__)", where="forward: use self.lora_A and self.lora_B directly")
        want = _expected(base, x, inputs["A"], inputs["B"], alpha / r)
        got = _tensor(record["out"], "the output")
        if not _close(got, want):
            fail("wrong-forward", observed=f"with lora_A and lora_B set by the check, {what} on an input of shape "
                                           f"{tuple(shape)} gives other outputs",
                 expected="base(x) + (alpha / r) * x @ lora_A.T @ lora_B.T",
                 cause=_forward_cause(got, base, x, inputs, alpha, r), where="forward, and the scaling set in __init__")
        if record["merged_type"] != "Linear" or record["merged_out"] is None:
            fail("merge-differs", observed=f"merge() returned {record['merged_type']}",
                 expected="an nn.Linear", cause="another module (or nothing) is returned",
                 where="merge: build and return an nn.Linear(in_features, out_features)")
        merged = _tensor(record["merged_out"], "the merged output")
        if not _close(merged, want):
            fail("merge-differs", observed="the merged nn.Linear gives other outputs than the LoRA layer",
                 expected="the same outputs: W + (alpha / r) * B @ A as its weight, and the base's bias",
                 cause=_merge_cause(merged, base, x, inputs, alpha, r),
                 where="merge: the merged weight and bias")
        after = _tensor(record["out_after_merge"], "the output after merging")
        if not _close(after, want):
            fail("merge-modifies", observed="after merge(), the LoRA layer itself gives other outputs",
                 expected="the layer unchanged: merging builds a new layer",
                 cause="the merged weight was written into self.base.weight (in place), so the update is now counted "
                       "twice", where="merge: compute the merged weight into a new tensor and a new nn.Linear")
    return "base frozen, B zero and A random (start = base), the forward formula, merge equal and non-destructive"


def _judge_lora_parameters(record: dict[str, Any], what: str, fan_in: int, fan_out: int, r: int,
                           bias: bool) -> None:
    trainable, names = record["trainable"], record["parameters"]
    if not (isinstance(trainable, list) and isinstance(names, list) and set(trainable) <= set(names)):
        raise WireError("malformed observation: parameter names")
    base = ["base.weight", "base.bias"] if bias else ["base.weight"]
    if not set(base) <= set(names):
        fail("base-trainable", observed=f"{what} has the parameters {names}, without {base}",
             expected=f"the pretrained layer kept as self.base: parameters {base}, frozen",
             cause="the base layer is stored under another name, or its weight copied into a plain tensor",
             where="__init__: self.base = base, then self.base.requires_grad_(False)")
    extra = [n for n in trainable if n not in ("lora_A", "lora_B")]
    if extra:
        fail("base-trainable", observed=f"{what} has trainable parameters {extra} besides the adapters",
             expected="only lora_A and lora_B trainable: the pretrained weight stays frozen",
             cause="the base layer was not frozen (eval() changes the mode, not requires_grad)",
             where="__init__: self.base.requires_grad_(False)")
    shapes = {"lora_A": (r, fan_in), "lora_B": (fan_out, r)}
    for name, shape in shapes.items():
        value = record["A" if name == "lora_A" else "B"]
        if not isinstance(value, torch.Tensor) or tuple(value.shape) != shape or name not in trainable:
            fail("wrong-adapter",
                 observed=f"{name} is " + (f"{value} (no tensor)" if not isinstance(value, torch.Tensor) else
                                           f"of shape {tuple(value.shape)}" if tuple(value.shape) != shape else
                                           "not a trainable parameter of the layer"),
                 expected=f"{name} an nn.Parameter of shape {shape} that requires grad",
                 cause="the attribute is missing or named otherwise" if not isinstance(value, torch.Tensor) else
                 "in and out swapped, or r misplaced" if tuple(value.shape) != shape else
                 "a plain tensor was assigned (not wrapped in nn.Parameter), so the module does not register it "
                 "and optimizers never see it" if name not in names else "it was frozen",
                 where=f"__init__: self.{name} = nn.Parameter(...)")
    if "out_start" not in record or "out" not in record:
        raise WireError("malformed observation: outputs missing")


def _forward_cause(got: torch.Tensor, base: nn.Linear, x: torch.Tensor, inputs: dict[str, torch.Tensor],
                   alpha: float, r: int) -> str:
    for scale, cause in ((alpha, "the scaling is alpha, not alpha / r"), (1.0, "the scaling alpha / r is missing"),
                         (r / alpha, "the scaling is r / alpha, upside down"),
                         (0.0, "the low-rank term is not added (or not scaled by a number)")):
        if _close(got, _expected(base, x, inputs["A"], inputs["B"], scale)):
            return cause
    return "another formula: the order of A and B, a transpose, or a term computed from other tensors"


def _merge_cause(merged: torch.Tensor, base: nn.Linear, x: torch.Tensor, inputs: dict[str, torch.Tensor],
                 alpha: float, r: int) -> str:
    with torch.no_grad():
        no_bias = x @ base.weight.T + (alpha / r) * (x @ inputs["A"].T @ inputs["B"].T)
    if base.bias is not None and _close(merged, no_bias):
        return "the base layer's bias was not copied into the merged layer"
    for scale, cause in ((1.0, "the scaling alpha / r is missing from the merged weight"),
                         (alpha, "the merged weight is scaled by alpha, not alpha / r"),
                         (0.0, "the merged weight is the base weight alone")):
        if _close(merged, _expected(base, x, inputs["A"], inputs["B"], scale)):
            return cause
    return "another merged weight: it must be W + (alpha / r) * B @ A (shape out x in)"
