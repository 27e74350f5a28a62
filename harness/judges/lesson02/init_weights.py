"""02-init-weights, the judge.

Every Linear Kaiming-initialised in place (std sqrt(2/fan_in), mean 0), biases zero, norms untouched.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from harness.checks.lesson02.common import linear_layers
from harness.checks.lesson02.init_weights import WEIGHT_SAMPLE, init_model, norm_parameters
from harness.contract.case import Case
from harness.contract.compare import same_values, tensor
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges


def _judge_init_reached(model: nn.Module, seen: dict, weights: list[torch.Tensor]) -> None:
    """Every Linear re-initialised, in place."""
    linears = linear_layers(model)
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    replaced = seen["replaced"]
    if not (isinstance(replaced, list) and all(isinstance(i, int) for i in replaced)):
        raise ValueError("the replaced layers are not a list of indices")
    if replaced:
        fail("not-in-place", observed=f"the Linear layer(s) {[names[i] for i in replaced if i < len(names)]} hold "
             "new parameter objects (or are new layers) after your function",
             expected="the same parameters, filled in place", cause="a new nn.Parameter (or a new layer) assigned "
             "instead of filling the existing one: an optimizer built before would keep training the old tensors",
             where="nn.init.kaiming_normal_(m.weight, ...) and nn.init.zeros_(m.bias) fill them in place")
    unchanged = [index for index, (m, w) in enumerate(zip(linears, weights, strict=True))
                 if same_values(m.weight.detach().flatten()[:WEIGHT_SAMPLE], w, dtype=False)]
    if len(unchanged) == len(linears):
        fail("not-initialised", observed="no Linear weight changed", expected="every Linear re-initialised",
             cause="the function never reached the layers: it initialised copies (detach(), clone(), deepcopy), "
                   "or its loop found no nn.Linear",
             where="loop over model.modules() and initialise in place (nn.init.*_ functions)")
    if unchanged:
        missed = [names[i] for i in unchanged]
        nested_only = set(missed) == {name for name in names if "." in name}
        fail("missed-nested-layers", observed=f"Linear layer(s) {missed} kept their weights",
             expected="every Linear, however deeply nested, re-initialised",
             cause="only the top level was visited (model.children(), or a loop over the direct attributes): "
                   "layers inside containers were missed" if nested_only else
                   "the loop's test skipped these layers (a test that only some Linear layers pass)",
             where="for m in model.modules(): if isinstance(m, nn.Linear): ...")


@judges(
    "02-init-weights",
    hints=Hints(
        nudge="Visit every nn.Linear, however deeply nested, and initialise its weight and bias in place; leave "
              "every other layer alone.",
        concept="model.modules() walks the whole tree (model.children() only the first level); Kaiming (He) "
                "initialisation for ReLU draws weights with std sqrt(2 / fan_in), and nn.init's functions ending in "
                "_ work in place on the existing parameter.",
        solution="for m in model.modules(): if isinstance(m, nn.Linear): nn.init.kaiming_normal_(m.weight, "
                 "nonlinearity='relu'); if m.bias is not None: nn.init.zeros_(m.bias)",
        section="6. Initialisation"),
    requires={
        "not-in-place": Requirement(
            "works in place: the layers keep their parameter objects (an optimizer built before still sees them)",
            hint="Compare id(layer.weight) before and after your function. Is it the same tensor, filled anew, or a "
                 "new one assigned?"),
        "not-initialised": Requirement(
            "re-initialises the model's own Linear layers",
            hint="Print a Linear weight's std before and after your function: did it change at all?"),
        "missed-nested-layers": Requirement(
            "every nn.Linear, however deeply nested (ModuleDict, ModuleList, Sequential)",
            hint="Which of your model's Linear layers kept their weights? How does your loop reach layers inside "
                 "containers inside containers?"),
        "wrong-std": Requirement(
            "weights drawn with std sqrt(2 / in_features) (Kaiming normal, fan_in, ReLU)",
            hint="Measure your weights' std for an nn.Linear(256, 1024): it should be sqrt(2 / 256) = 0.088. Which "
                 "fan and which gain give that?"),
        "wrong-mean": Requirement(
            "weights centred on 0",
            hint="Print your weights' mean: should an initialisation for ReLU networks favour positive weights?"),
        "bias-not-zero": Requirement(
            "biases set to zero (where a layer has one)",
            hint="Print a Linear's bias after your function: is it all zeros?"),
        "norm-changed": Requirement(
            "every other layer (LayerNorm, BatchNorm) left untouched",
            hint="Print a LayerNorm's weight after your function: it should still be all ones. Which parameters "
                 "does your loop touch?"),
    },
)
def judge_init_weights(seen: dict, *, case: Case) -> str:
    """Every Linear Kaiming-initialised in place (std sqrt(2/fan_in), mean 0), biases zero, norms untouched."""
    model = init_model(case)
    linears = linear_layers(model)
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    records = seen["linears"]
    if not isinstance(records, list) or len(records) != len(linears):
        raise ValueError("the recorded layers are not the model's")
    weights = [tensor(r["weight"], "a weight", detach=True) for r in records]
    _judge_init_reached(model, seen, weights)
    for name, m, weight, record in zip(names, linears, weights, records, strict=True):
        fan_in, fan_out = m.in_features, m.out_features
        if weight.shape != (min(m.weight.numel(), WEIGHT_SAMPLE),):
            raise ValueError(f"the sample of {name}'s weight has shape {tuple(weight.shape)}")
        std, mean = float(weight.std()), float(weight.mean())
        target = math.sqrt(2 / fan_in)
        if abs(std - target) > 0.05 * target:
            fan_out_std = math.sqrt(2 / fan_out)
            is_fan_out = abs(std - fan_out_std) < 0.05 * fan_out_std
            fail("wrong-std", observed=f"Linear {name} ({fan_in} -> {fan_out}): weight std {std:.4f}"
                 + (" = sqrt(2 / fan_out)" if is_fan_out else ""),
                 expected=f"sqrt(2 / fan_in) = {target:.4f} (Kaiming for ReLU, which keeps activation variance "
                 "across layers)",
                 cause="mode='fan_out': the std follows the output size" if is_fan_out else
                 "another initialiser (PyTorch's default, Xavier, kaiming_uniform_ with its default a), another "
                 "gain (nonlinearity), or another fan",
                 where="nn.init.kaiming_normal_(w, mode='fan_in', nonlinearity='relu')")
        if abs(mean) > 0.1 * target:
            fail("wrong-mean", observed=f"Linear {name}: weight mean {mean:.4f}", expected="mean 0",
                 cause="a distribution shifted away from 0 (a mean argument, or an offset added)",
                 where="the initialiser")
        if m.bias is not None:
            bias = tensor(record["bias"], "a bias", detach=True)
            if not same_values(bias, torch.zeros_like(m.bias), dtype=False):
                untouched = same_values(bias, m.bias.detach(), dtype=False)
                fail("bias-not-zero", observed=f"Linear {name}: bias has values up to {float(bias.abs().max()):.3g}",
                     expected="zeros", cause="the bias was left at its default (uniform) init" if untouched else
                     "the bias was set to other values than zero", where="nn.init.zeros_(m.bias)")
    norms = seen["norms"]
    for name, value in norm_parameters(model).items():
        if not same_values(tensor(norms[name], name, detach=True), value.detach(), dtype=False):
            owner = type(model.get_submodule(name.rpartition(".")[0])).__name__
            fail("norm-changed", observed=f"{owner} parameter {name} changed",
                 expected="normalisation weights stay 1 and biases 0",
                 cause="parameters initialised without checking their layer's type (a norm weight set to 0 zeroes "
                       "the layer's output)", where="select nn.Linear modules with isinstance")
    return "every Linear Kaiming-initialised in place (std sqrt(2/fan_in), mean 0), biases zero, norms untouched"
