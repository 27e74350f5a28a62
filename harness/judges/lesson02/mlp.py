"""02-mlp, the judge.

Every layer registered and trained, ReLU between layers, dropout of probability p only in train mode.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from harness.checks.lesson02.mlp import mlp_configurations, mlp_input
from harness.contract.case import Case
from harness.contract.compare import close_scaled, isclose_number, same_values, tensor
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.judges.lesson02.common import _no_exception

Layers = list[tuple[torch.Tensor, torch.Tensor | None]]


def _as_layers(records: Any) -> Layers:
    """The (weight, bias) pairs `_layers` recorded, validated."""
    if not isinstance(records, list):
        raise ValueError("the layers are not a list")
    layers = []
    for record in records:
        weight = tensor(record["weight"], "a weight", detach=True)
        bias = None if record["bias"] is None else tensor(record["bias"], "a bias", detach=True)
        if weight.ndim != 2 or (bias is not None and bias.shape != weight.shape[:1]):
            raise ValueError("a Linear layer with malformed weight or bias")
        layers.append((weight, bias))
    return layers


def _reference_mlp(layers: Layers, x: torch.Tensor, *, final_relu: bool = False, relu: bool = True) -> torch.Tensor:
    for index, (weight, bias) in enumerate(layers):
        x = F.linear(x, weight, bias)
        if relu and (index < len(layers) - 1 or final_relu):
            x = torch.relu(x)
    return x


def _judge_mlp_forward(record: dict[str, Any], layers: Layers, x: torch.Tensor) -> None:
    """The eval-mode outputs are Linear -> ReLU -> ... -> Linear of the recorded layers."""
    out = tensor(record["out"], "the output", detach=True)
    if close_scaled(out, _reference_mlp(layers, x), dtype=False):
        return
    if close_scaled(out, _reference_mlp(layers, x, final_relu=True), dtype=False):
        fail("relu-after-last", observed="the outputs are never negative: a ReLU follows the last layer",
             expected="raw scores (logits) from the last Linear", cause="the activation is applied after "
             "every layer, the last one included", where="skip the activation after the last layer")
    if close_scaled(out, _reference_mlp(layers, x, relu=False), dtype=False):
        fail("missing-activation", observed="the model is one big linear map (no ReLU between layers)",
             expected="ReLU after every layer but the last", cause="no activation is applied between the layers",
             where="apply torch.relu between layers in forward")
    fail("wrong-forward", observed="eval-mode outputs differ from Linear -> ReLU -> ... -> Linear of your own layers",
         expected="the layers applied once each, in order, with ReLU between them",
         cause="another activation than ReLU, the layers applied in another order or more than once, or another "
               "operation in forward", where="forward")


def _judge_mlp_dropout_eval(record: dict[str, Any], x: torch.Tensor) -> None:
    """Dropout does nothing in eval mode."""
    first, second = (tensor(t, "a dropout output", detach=True) for t in record["dropout_eval"])
    reference = _reference_mlp(_as_layers(record["dropout_layers"]), x)
    if not (same_values(first, second, dtype=False) and close_scaled(first, reference, dtype=False)):
        fail("dropout-in-eval", observed="in eval mode, outputs are random or differ from the layers without dropout",
             expected="dropout does nothing after model.eval()",
             cause="a dropout that ignores the module's mode: torch.nn.functional.dropout(x, p) defaults to "
                   "training=True, and a mask drawn by hand is drawn in every mode",
             where="use an nn.Dropout module (it follows train()/eval()), or pass training=self.training")


def _dropout_rate(a: torch.Tensor, b: torch.Tensor) -> tuple[int, float, float]:
    """What dropout did between a hidden ReLU's output `a` and the next layer's input `b`: (units zeroed, the
    fraction zeroed of the units that were not zero, the median scale of the survivors)."""
    alive = a > 1e-4
    zeroed, kept = alive & (b == 0), alive & (b != 0)
    scale = float((b[kept] / a[kept]).median()) if bool(kept.any()) else 0.0
    return int(zeroed.sum()), float(zeroed.sum() / alive.sum().clamp(min=1)), scale


def _judge_mlp_dropout_train(record: dict[str, Any], sizes: list[int], p: float, x: torch.Tensor) -> None:
    """In train mode: the input reaches the first layer untouched, the last layer's result is the output, and
    each hidden ReLU's output is dropped with probability p, survivors scaled by 1 / (1 - p)."""
    layers = _as_layers(record["dropout_layers"])
    train = record["dropout_train"]
    inputs = [tensor(t, "a layer's input", detach=True) for t in train["inputs"]]
    if len(inputs) != len(layers):
        fail("wrong-forward", observed=f"in one train-mode forward your {len(layers)} Linear layers ran "
             f"{len(inputs)} times", expected="each layer once", cause="a layer applied twice or skipped in forward",
             where="forward")
    if not close_scaled(inputs[0], x, dtype=False):
        fail("dropout-misplaced", observed="in train mode the first Linear does not receive the input x itself",
             expected="dropout only after hidden ReLUs", cause="dropout (or another operation) applied to the input "
             "before the first layer", where="forward: the first layer takes x")
    if not close_scaled(tensor(train["out"], "the output"), F.linear(inputs[-1], *layers[-1]), dtype=False):
        fail("dropout-misplaced", observed="in train mode the output is not the last Linear's result",
             expected="raw scores from the last Linear, nothing applied after it",
             cause="dropout (or another operation active in train mode) applied after the last layer",
             where="forward: return the last layer's output as it is")
    for k in range(len(layers) - 1):
        a, b = torch.relu(F.linear(inputs[k], *layers[k])), inputs[k + 1]
        if a.shape != b.shape:
            raise ValueError("a layer's recorded input does not fit the previous layer")
        zeroed, fraction, scale = _dropout_rate(a, b)
        if zeroed == 0:
            fail("dropout-missing", observed=f"MLP({sizes}, dropout={p}) in train mode zeroed no unit after hidden "
                 f"layer {k + 1}", expected=f"about {p:.0%} of the units zeroed after every hidden ReLU",
                 cause="no dropout after this layer: the dropout argument is unused, or dropout follows only some "
                       "hidden layers", where="apply dropout after each hidden activation")
        alive = int((a > 1e-4).sum())
        tolerance = 5 * math.sqrt(p * (1 - p) / max(alive, 1)) + 0.02
        if abs(fraction - p) <= tolerance and isclose_number(scale, 1 / (1 - p), rel_tol=1e-3, abs_tol=0.0):
            continue
        if abs(fraction - p) > tolerance and abs(fraction - (1 - p)) <= tolerance:
            cause = ("1 - p passed as the probability: dropout's p is the probability of zeroing a unit, "
                     "not of keeping it")
        elif abs(fraction - p) > tolerance and abs(fraction - 0.5) <= tolerance:
            cause = "a probability fixed at 0.5 (nn.Dropout()'s default) instead of the dropout argument"
        elif abs(fraction - p) > tolerance:
            cause = "another probability than the dropout argument"
        elif isclose_number(scale, 1.0, rel_tol=1e-3, abs_tol=0.0):
            cause = "units zeroed without rescaling the survivors by 1 / (1 - p) (nn.Dropout and F.dropout rescale)"
        else:
            cause = "the survivors rescaled by another factor than 1 / (1 - p)"
        fail("wrong-dropout", observed=f"after hidden layer {k + 1}: {fraction:.0%} of the units zeroed, survivors "
             f"scaled by {scale:.3f}", expected=f"dropout={p}: about {p:.0%} zeroed, survivors scaled by "
             f"1 / (1 - p) = {1 / (1 - p):.3f}", cause=cause,
             where="nn.Dropout(dropout) in __init__, applied after each hidden ReLU")


@judges(
    "02-mlp", unjudged=("configurations/*/stepped/*",),  # compared with the weights before the step only
    hints=Hints(
        nudge="Build one nn.Linear per consecutive pair of sizes, keep them where nn.Module can see them, and in "
              "forward put ReLU and dropout between layers, never after the last.",
        concept="nn.Module registers only attributes that are modules, parameters or module containers "
                "(nn.ModuleList, nn.ModuleDict): a plain list of layers is invisible to parameters(), state_dict() "
                "and train()/eval(). An nn.Dropout module follows the model's mode.",
        solution="self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:])); "
                 "self.dropout = nn.Dropout(dropout); in forward: *hidden, last = self.layers; "
                 "x = self.dropout(torch.relu(layer(x))) for each hidden layer; return last(x)",
        section="1. Subclassing `nn.Module`, and what gets registered"),
    requires={
        "missing-super-init": Requirement(
            "an nn.Module subclass: nn.Module's __init__ runs before layers are assigned",
            hint="The error says the layers were assigned before something ran. What must be the first line of a "
                 "module's __init__?"),
        "unregistered-layers": Requirement(
            "all layers are registered (seen by parameters(), trained by the optimizer)",
            hint="Print len(list(MLP([4, 8, 2]).parameters())). Where are your layers stored, and does nn.Module "
                 "look inside that kind of container?"),
        "wrong-layers": Requirement(
            "one nn.Linear with bias per consecutive pair of sizes, in order",
            hint="Compare your layers' (in, out) shapes with zip(sizes[:-1], sizes[1:]), and check that each has a "
                 "bias."),
        "relu-after-last": Requirement(
            "no activation after the last layer: the output is raw scores",
            hint="Your outputs are never negative. Which layer should not be followed by a ReLU?"),
        "missing-activation": Requirement(
            "ReLU after every layer except the last",
            hint="Without an activation, stacked Linear layers collapse into one linear map. Where does the ReLU go?"),
        "wrong-forward": Requirement(
            "forward is Linear -> ReLU -> ... -> Linear (each layer once, in order)",
            hint="Run your model in eval mode on a small input and compare with applying the layers and torch.relu "
                 "by hand, one at a time."),
        "dropout-in-eval": Requirement(
            "dropout is active in train() mode only",
            hint="Call your model twice in eval mode on the same input: are the outputs equal? What tells a "
                 "dropout call that the model is in eval mode?"),
        "dropout-missing": Requirement(
            "dropout after every hidden ReLU",
            hint="In train mode, count the zeros after each hidden ReLU: is the dropout argument used after every "
                 "hidden layer?"),
        "wrong-dropout": Requirement(
            "dropout with probability `dropout` (survivors rescaled by 1 / (1 - p), as nn.Dropout does)",
            hint="With MLP(sizes, dropout=0.25) in train mode, about a quarter of the hidden units should be zero. "
                 "What probability does your dropout use, and is it the probability of dropping?"),
        "dropout-misplaced": Requirement(
            "dropout only after the hidden ReLUs: not on the input, not on the output scores",
            hint="In train mode, does the first layer see x itself, and is the output the last layer's result?"),
    },
)
def judge_mlp(seen: dict, *, case: Case) -> str:
    """Every layer registered and trained, ReLU between layers, dropout of probability p only in train mode."""
    for (sizes, p), record in zip(mlp_configurations(case), seen["configurations"], strict=True):
        expected_count = sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:], strict=True))
        registered, layers = record["registered"], _as_layers(record["layers"])
        if isinstance(registered, bool) or not isinstance(registered, int):
            raise ValueError("the registered count is not an int")
        if registered < expected_count and len(layers) < len(sizes) - 1:
            fail("unregistered-layers",
                 observed=f"model.parameters() holds {registered} numbers; MLP({sizes}) has {expected_count}",
                 expected="every layer's weight and bias registered, so the optimizer and state_dict see them",
                 cause="the layers are kept where nn.Module does not look: a plain Python list or dict, or layers "
                       "created inside forward",
                 where="store them in __init__, in nn.ModuleList (or nn.ModuleDict)")
        shapes = [(weight.shape[1], weight.shape[0]) for weight, _ in layers]
        biases = all(bias is not None for _, bias in layers)
        if shapes != list(zip(sizes[:-1], sizes[1:], strict=True)) or not biases or registered != expected_count:
            fail("wrong-layers", observed=f"Linear layers (in, out) {shapes}"
                 + ("" if biases else ", some without bias") + f" ({registered} parameters)",
                 expected=f"{list(zip(sizes[:-1], sizes[1:], strict=True))} with biases ({expected_count} parameters)",
                 cause="other sizes, a missing or extra layer, bias=False, or other parameters besides the layers",
                 where="the loop that builds the layers: one nn.Linear(a, b) per pair of zip(sizes[:-1], sizes[1:])")
        _no_exception(record, f"running MLP({sizes})")
        x = mlp_input(case, sizes)
        _judge_mlp_forward(record, layers, x)
        _judge_mlp_dropout_eval(record, x)
        _judge_mlp_dropout_train(record, sizes, p, x)
        stepped = [tensor(t, "a stepped weight", detach=True) for t in record["stepped"]]
        if [t.shape for t in stepped] != [before.shape for before, _ in layers]:
            raise ValueError("the stepped weights are not the layers' shapes")
        got_gradient = record["got_gradient"]
        if not (isinstance(got_gradient, list) and len(got_gradient) == len(layers)):
            raise ValueError("the recorded gradients are not one per layer")
        frozen = [index for index, ((before, _), after) in enumerate(zip(layers, stepped, strict=True))
                  if same_values(before, after, dtype=False)]
        if frozen:
            fail("unregistered-layers", observed=f"an SGD step on model.parameters() left Linear layer(s) {frozen} "
                 "unchanged", expected="every layer updated",
                 cause="these layers received a gradient but are not in model.parameters() (kept outside a "
                       "registered container)" if all(got_gradient[i] is True for i in frozen) else
                       "these layers received no gradient: their parameters do not require grad, or forward cuts "
                       "them off (detach(), or everything after them zeroed)",
                 where="nn.ModuleList in __init__; nothing in forward that stops gradients")
    return "every layer registered and trained, ReLU between layers, dropout of probability p only in train mode"
