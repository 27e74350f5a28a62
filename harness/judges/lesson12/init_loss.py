"""12-init-loss, the judge: (mean cross-entropy in eval mode without a graph, ln C); the model's mode left as it was."""

from __future__ import annotations

import math

import torch
from torch import nn

from harness.checks.lesson12.init_loss import init_cases, init_inputs
from harness.contract.case import Case
from harness.contract.compare import isclose_number, judged, malformed, type_name
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.judges.lesson12.common import _scalar


@judges(
    "12-init-loss",
    hints=Hints(
        nudge="At initialisation the logits are small, so the softmax is close to uniform: every class gets about "
        "1/C, and the cross-entropy of any target is -ln(1/C).",
        concept="Measure the loss as the model would be evaluated (model.eval(), no dropout) and without building a "
        "graph (torch.no_grad()), then put the model back in the mode it was in; compare with ln(C).",
        solution="was_training = model.training; model.eval()\nwith torch.no_grad(): loss = "
        "F.cross_entropy(model(inputs), targets)\nmodel.train(was_training); return loss, math.log(num_classes)",
        section="1. Sanity checks before training",
    ),
    requires={
        "wrong-expected": Requirement(
            "returns the expected loss ln(num_classes) as the second value, a float",
            hint="Which logarithm does cross-entropy use? Compute -log(1/C) for C = 10 with math.log and compare."),
        "wrong-loss": Requirement(
            "returns the mean cross-entropy of the model's logits against the targets as the first value",
            hint="F.cross_entropy takes raw logits and averages over the batch: does anything of yours change "
            "the logits first, or sum instead of averaging?"),
        "train-mode": Requirement(
            "measures the loss in eval mode (dropout off)",
            hint="The model has dropout: which mode is it in while your forward runs?"),
        "graph-built": Requirement(
            "runs the forward pass without building an autograd graph",
            hint="Does your forward pass record a graph? Which context manager turns that off?"),
        "mode-not-restored": Requirement(
            "leaves the model in the mode it was in before the call (training or eval)",
            hint="Call your function on a model in train mode, then print model.training: was it put back?"),
    },
)
def judge_init_loss(seen: dict, *, case: Case) -> str:
    """(mean cross-entropy in eval mode without a graph, ln C); the model's mode left as it was."""
    for item, call in judged(init_cases(case), seen["calls"]):
        model, inputs, targets = init_inputs(item)
        classes = item["classes"]
        got = call["returned"]
        if not (isinstance(got, tuple) and len(got) == 2):
            fail("wrong-loss", observed=f"loss_at_init returned {type_name(got)}",
                 expected="a pair (measured loss, expected loss)",
                 cause="the return statement does not return two values", where="the return statement")
        measured, expected = _scalar(got[0]), _scalar(got[1])
        want = math.log(classes)
        if isinstance(got[1], torch.Tensor):
            fail("wrong-expected", observed="the second value is a " + (
                 f"tensor of shape {tuple(got[1].shape)}" if got[1].dim() else "0-dim tensor") + f" for C = {classes}",
                 expected=f"a float, ln({classes}) = {want:.5f} (a number known before any forward pass)",
                 cause="the expected loss was computed with torch (torch.log(torch.tensor(C)) or similar) "
                 "instead of math.log(C)", where="the second value of your return statement",
                 hint="The expected loss depends only on num_classes: which function of the math module gives "
                 "ln(C) as a float?")
        if expected is None or not isclose_number(expected, want, rel_tol=1e-6, abs_tol=1e-6):
            alternatives = {"log10(C)": math.log10(classes), "log2(C)": math.log2(classes), "1/C": 1 / classes,
                            "ln(C - 1)": math.log(classes - 1) if classes > 1 else math.nan, "C": float(classes)}
            named = [name for name, value in alternatives.items()
                     if isclose_number(expected, value, rel_tol=1e-4, abs_tol=1e-6)]
            fail("wrong-expected", observed=f"expected loss {expected!r} for C = {classes}" if expected is not None
                 else f"the second value is {type_name(got[1])}",
                 expected=f"ln({classes}) = {want:.5f}",
                 cause=f"your value equals {named[0]}: cross-entropy uses the natural log of 1/C" if named
                 else "a different formula: the loss of a uniform prediction is -ln(1/C) = ln(C)",
                 where="the second value of your return statement",
                 hint="1/C is the probability a uniform prediction gives the target: what does cross-entropy do "
                 "with that probability?" if named and named[0] in ("1/C", "C") else None)
        forwards = call["forwards"]
        if not isinstance(forwards, list) or not all(isinstance(f, tuple) and len(f) == 2 for f in forwards):
            malformed("forwards")
        if not forwards:
            fail("wrong-loss", observed="the model was never called as model(inputs) (its forward hooks never ran)",
                 expected="the loss of model(inputs), measured through the module call",
                 cause="model.forward(inputs) called directly (it skips the module's hooks), or no forward pass",
                 where="the forward pass of loss_at_init",
                 hint="How do you call the model: model(inputs), or model.forward(inputs)? What does the second "
                 "skip?")
        with torch.no_grad():
            model.eval()
            logits = model(inputs)
            reference = float(nn.functional.cross_entropy(logits, targets))
        if any(training for training, _ in forwards):
            fail("train-mode", observed=f"the model's forward ran in training mode (C = {classes})",
                 expected="model.eval() before the forward: dropout makes a training-mode loss random",
                 cause="no model.eval() before the forward: the model was measured in the train mode it was handed "
                 "over in (or model.train() was called before the forward)" if item["training"] else
                 "model.train() before the forward: the model was handed over in eval mode",
                 where="before the forward pass of loss_at_init")
        if measured is None or not isclose_number(measured, reference, rel_tol=1e-4, abs_tol=1e-6):
            candidates = {
                "the per-example losses were summed (reduction='sum')": reference * len(targets),
                "softmax was applied before F.cross_entropy, which applies log_softmax itself":
                    float(nn.functional.cross_entropy(logits.softmax(-1), targets)),
                "F.nll_loss on raw logits (it expects log-probabilities)":
                    float(nn.functional.nll_loss(logits, targets)),
            }
            named = [cause for cause, value in candidates.items()
                     if isclose_number(measured, value, rel_tol=1e-4, abs_tol=1e-6)]
            fail("wrong-loss", observed=f"measured loss {measured!r}" if measured is not None
                 else f"the first value is {type_name(got[0])}",
                 expected=f"the mean cross-entropy of the logits, {reference:.5f} (ln C = {want:.4f})",
                 cause=named[0] if named else "a different loss: the mean of F.cross_entropy(logits, targets) is "
                 "wanted (candidates: another reduction, a transformed input, other targets)",
                 where="the line that computes the loss",
                 hint="What does F.nll_loss expect as its input: logits, probabilities or log-probabilities?"
                 if named and named[0].startswith("F.nll_loss") else None)
        if isinstance(got[0], torch.Tensor) and got[0].requires_grad or any(grad for _, grad in forwards):
            fail("graph-built", observed="the forward pass ran with gradients enabled (it built a graph)",
                 expected="a measurement only: the forward inside torch.no_grad() (or torch.inference_mode())",
                 cause="no torch.no_grad() around the forward pass", where="the forward pass of loss_at_init")
        if not isinstance(call["training_after"], bool):
            malformed("training_after")
        if call["training_after"] != item["training"]:
            before, after = ("train", "eval") if item["training"] else ("eval", "train")
            fail("mode-not-restored", observed=f"a model handed over in {before} mode came back in {after} mode",
                 expected="the mode it was in (remember model.training, restore it with model.train(was_training))",
                 cause="model.eval() without putting the previous mode back" if item["training"]
                 else "model.train() at the end, whatever the mode was before",
                 where="the end of loss_at_init")
    return "the eval-mode cross-entropy without a graph, ln(C), and the model's mode left as it was"
