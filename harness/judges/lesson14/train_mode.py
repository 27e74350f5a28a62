"""14-train-mode, the judge.

Frozen BatchNorm layers in eval mode, every other layer training: the judge recomputes the forward pass
with those modes and compares the output and the statistics.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from harness.checks.lesson14.common import BATCHNORMS
from harness.checks.lesson14.train_mode import ModeNet, mode_cases, mode_input, mode_model, seeded_forward
from harness.contract.case import Case
from harness.contract.compare import close_scaled, same_values, tensor
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import WireError
from harness.judges.lesson14.common import _no_exception


def _frozen_batchnorm(module: nn.Module) -> bool:
    params = list(module.parameters())
    return isinstance(module, BATCHNORMS) and bool(params) and not any(p.requires_grad for p in params)


@judges(
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
def judge_train_mode(seen: dict, *, case: Case) -> str:
    """Frozen BatchNorm layers in eval mode, every other layer training: the judge recomputes the forward pass
    with those modes and compares the output and the statistics."""
    settings, records = mode_cases(case), seen["models"]
    if not isinstance(records, list) or len(records) != len(settings):
        raise WireError("malformed observation: not one record per model")
    for index, (setting, record) in enumerate(zip(settings, records, strict=True)):
        _no_exception(record, "running your function and a forward pass after it")
        model = mode_model(case, index, *setting)
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
        trainable = [n for n, m in modules.items() if isinstance(m, BATCHNORMS) and n not in frozen]
        still = [n for n in frozen if modes[n] is not False]
        if still:
            fail("frozen-bn-training", observed=f"frozen BatchNorm layers in training mode: {still}",
                 expected="every BatchNorm whose parameters are all frozen in eval mode",
                 cause="model.train() sets every module to training mode, and no BatchNorm was put back in eval after "
                       "it" if len(still) == len(frozen) else
                 _missed_cause(still, [n for n in frozen if n not in still], modules),
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
            partial = [n for n in trainable if any(not p.requires_grad for p in modules[n].parameters())]
            some = set(evaluated) == set(partial)
            fail("trainable-bn-eval", observed=f"BatchNorm layers with trainable parameters in eval mode: {evaluated}"
                 + (" (each has some parameters frozen and some trainable)" if some else ""),
                 expected="those in training mode: they are being fine-tuned, with batch statistics",
                 cause="a BatchNorm went to eval when ANY of its parameters is frozen: the text says when ALL are: "
                       "not any(p.requires_grad for p in m.parameters()) (all frozen), not "
                       "any(not p.requires_grad ...) (some frozen)" if some else
                       "a whole part of the model was put in eval mode (model.backbone.eval(), or every BatchNorm "
                       "layer), not only the frozen BatchNorm layers",
                 where="the test that picks which BatchNorm layers go to eval: all of their parameters frozen",
                 hint="Print [p.requires_grad for p in m.parameters()] for the layers named above: are they all "
                      "False, or only some? Which of any() and all() does your test use?" if some else None)
        _judge_seeded_forward(record, model, case, index, frozen)
    return "frozen BatchNorm layers in eval mode (statistics kept), everything else in training mode, flags untouched"


def _missed_cause(still: list[str], handled: list[str], modules: dict[str, nn.Module]) -> str:
    """Why the frozen BatchNorm layers `still` stayed in training mode while `handled` went to eval: every slip
    that fits what was observed, as candidates when several do."""
    def depth(name: str) -> int:
        return name.count(".") + 1

    fits = []
    if all(isinstance(modules[n], nn.BatchNorm1d) for n in still) and not any(
            isinstance(modules[n], nn.BatchNorm1d) for n in handled):
        fits.append("a test for a single class such as nn.BatchNorm2d (these are BatchNorm1d: test "
                    "nn.modules.batchnorm._BatchNorm, or both classes)")
    if all(not n.startswith("backbone.") for n in still) and all(n.startswith("backbone.") for n in handled):
        fits.append("a search of model.backbone only (these are outside it: walk model.modules())")
    if min(map(depth, still)) > max(map(depth, handled)):
        fits.append(f"a walk over the children that stops at depth {max(map(depth, handled))}, while these sit "
                    f"{min(map(depth, still))} modules deep (model.modules() reaches every depth)")
    if not fits:
        return ("the test that picks the frozen BatchNorm layers misses these: a single class such as "
                "nn.BatchNorm2d, only a part of the model, or only the modules down to some depth")
    return fits[0] if len(fits) == 1 else "one of these, which all fit what was observed: " + "; or ".join(fits)


def _judge_seeded_forward(record: dict[str, Any], model: ModeNet, case: Case, index: int, frozen: list[str]) -> None:
    """The output and the statistics after one forward pass equal the judge's, run with the right modes."""
    model.train()
    for name, module in model.named_modules():
        if name in frozen:
            module.eval()
    want = seeded_forward(model, mode_input(case, index), case.seeded(180 + index))
    buffers = record["buffers"]
    own = dict(model.named_buffers())
    if not (isinstance(buffers, dict) and list(buffers) == list(own)):
        raise WireError("malformed observation: the buffers are not the model's")
    moved = [f"{n}" for n in own
             if n.rpartition(".")[0] in frozen and not same_values(tensor(buffers[n], n), own[n], dtype=False)]
    if moved:
        fail("frozen-bn-training",
             observed=f"after one forward pass, the frozen BatchNorm statistics {moved[:3]} moved",
             expected="the pretrained statistics kept: frozen BatchNorm layers in eval mode",
             cause="these layers still normalise with the batch's statistics and update their running ones (a "
                   "changed momentum or track_running_stats does not put a layer in eval mode)",
             where="m.eval() on each frozen BatchNorm layer, after model.train()")
    if not close_scaled(tensor(record["out"], "the output", detach=True), want, tol=1e-4, dtype=False):
        fail("not-training", observed="the output of a forward pass differs from that of the model with the frozen "
                                      "BatchNorm layers in eval mode and everything else training",
             expected="the same output (the same dropout masks are drawn in both)",
             cause="a layer behaves differently from its mode (a changed momentum, track_running_stats, or dropout "
                   "probability), or a layer's mode differs from what was recorded",
             where="set modes only: model.train(), then .eval() on the frozen BatchNorm layers")
