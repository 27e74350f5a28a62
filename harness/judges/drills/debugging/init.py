"""The output-bias initialisation drill: a bias set from the class prior."""

from __future__ import annotations

import math

import torch

from harness.contract.case import Case
from harness.contract.compare import close_values, same_values
from harness.contract.failure import fail
from harness.contract.wire import describe
from harness.drills.bank.debugging import (
    prior_inputs,
)
from harness.drills.core import Answers
from harness.drills.support import edited
from harness.judges.drills.whys import add_answers


def _judge_prior(seen: dict, *, case: Case) -> str:
    layer, labels, classes = prior_inputs(case)
    prior = torch.bincount(labels, minlength=classes).double() / len(labels)
    bias = seen.get("bias")
    if not isinstance(bias, torch.Tensor) or bias.shape != (classes,) or not bias.is_floating_point():
        fail("wrong-shape", observed=f"the bias is {describe(bias)}", expected=f"a float tensor of shape ({classes},)",
             cause="the bias replaced by something else", where="init_output_bias_")
    if not torch.isfinite(bias).all() or not close_values(torch.softmax(bias.double(), 0), prior, atol=1e-5,
                                                              dtype=False):
        shown = [round(v, 3) for v in torch.softmax(bias.double(), 0).tolist()]
        fail("wrong-prior", observed=f"softmax(bias) = {shown}",
             expected=f"the class frequencies {[round(v, 3) for v in prior.tolist()]}: bias = log(frequency) (plus "
             "any constant)", cause="the frequencies themselves as the bias (softmax needs their log), or counts of "
             "the wrong classes", where="bias = log(bincount(labels, minlength=classes) / len(labels))")
    if seen.get("same_bias") is not True or seen.get("requires_grad") is not True:
        fail("replaced-parameter", observed="layer.bias is a new tensor, or no longer requires grad",
             expected="the same Parameter, filled in place", cause="assigning a new nn.Parameter: an optimizer built "
             "before the call still updates the old tensor, which the model no longer uses",
             where="with torch.no_grad(): layer.bias.copy_(...)")
    weight = seen.get("weight")
    if not isinstance(weight, torch.Tensor) or weight.shape != layer.weight.shape or not same_values(
            weight, layer.weight.detach(), dtype=False):
        fail("weights-changed", observed="the layer's weight changed", expected="the weight left as it was",
             cause="the weight was re-initialised along with the bias", where="touch only layer.bias")
    entropy = float(-(prior * prior.log()).sum())
    return (f"softmax(bias) equals the class frequencies: the loss at init is about their entropy {entropy:.3f}, "
            f"not ln({classes}) = {math.log(classes):.3f}")


_PRIOR_SOLUTION = '''import torch


def init_output_bias_(layer, labels, classes):
    frequency = torch.bincount(labels, minlength=classes).float() / len(labels)
    with torch.no_grad():  # an in-place change of a parameter, outside autograd
        layer.bias.copy_(frequency.log())  # softmax(log p) = p
'''


add_answers(
    Answers(
        drill_id="debugging-init-output-bias",
        solution=_PRIOR_SOLUTION,
        wrong_answers=(
            (edited(_PRIOR_SOLUTION,
                    ("layer.bias.copy_(frequency.log())", "layer.bias.copy_(frequency)")),
             "wrong-prior"),
            (edited(_PRIOR_SOLUTION,
                    ("    with torch.no_grad():  # an in-place change of a parameter, outside "
                     "autograd\n        layer.bias.copy_(frequency.log())",
                     "    layer.bias = torch.nn.Parameter(frequency.log())")), "replaced-parameter"),
            (edited(_PRIOR_SOLUTION,
                    ("    with torch.no_grad():  # an in-place change of a parameter, outside "
                     "autograd\n        layer.bias",
                     "    layer.bias")), "raised"),
            (edited(_PRIOR_SOLUTION,
                    ("torch.bincount(labels, minlength=classes).float()",
                     "torch.bincount(labels, minlength=classes).float().flip(0)")), "wrong-prior"),
        ),
        judge=_judge_prior,
    )
)
