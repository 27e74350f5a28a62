"""14-lora, the judge.

Base frozen, adapters registered with gradients, the start equal to the base, B zero and A random, the
forward formula, and a merge that equals the layer and leaves it unchanged.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from harness.checks.lesson14.lora import lora_base, lora_cases, lora_inputs
from harness.contract.case import Case
from harness.contract.compare import close_scaled, tensor
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import WireError, type_name
from harness.judges.lesson14.common import ATTRIBUTE_HINT, attribute_cause, attribute_names


def _expected(base: nn.Linear, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, scale: float) -> torch.Tensor:
    with torch.no_grad():
        return base(x) + scale * (x @ a.T @ b.T)


@judges(
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
def judge_lora(seen: dict, *, case: Case) -> str:
    """Base frozen, adapters registered with gradients, the start equal to the base, B zero and A random, the
    forward formula, and a merge that equals the layer and leaves it unchanged."""
    settings, records = lora_cases(case), seen["layers"]
    if not isinstance(records, list) or len(records) != len(settings):
        raise WireError("malformed observation: not one record per layer")
    for index, (setting, record) in enumerate(zip(settings, records, strict=True)):
        fan_in, fan_out, r, alpha, bias, shape = setting
        inputs = lora_inputs(case, index, setting)
        base = lora_base(case, index, fan_in, fan_out, bias)
        what = f"LoRALinear(nn.Linear({fan_in}, {fan_out}, bias={bias}), r={r}, alpha={alpha:g})"
        _judge_lora_parameters(record, what, fan_in, fan_out, r, bias)
        x = inputs["x"]
        _judge_forward_ran(record, tuple(shape), fan_out, what)
        start = tensor(record["out_start"], "the first output", detach=True)
        a0, b0 = tensor(record["A"], "lora_A", detach=True), tensor(record["B"], "lora_B", detach=True)
        with torch.no_grad():
            reference = base(x)
        if not close_scaled(start, reference, tol=1e-4, dtype=False):
            fail("start-differs", observed=f"a new {what} gives outputs that differ from the base layer's "
                                           f"(largest difference {float((start - reference).abs().max()):.3g})",
                 expected="exactly base(x): fine-tuning starts from the pretrained model",
                 cause="lora_B does not start at zero, so the added term B @ A x is not zero" if b0.abs().sum() > 0
                 else "the base layer's weight or bias was changed in __init__, or forward adds something else",
                 where="__init__: nn.Parameter(torch.zeros(out_features, r)) for lora_B; leave base's values alone")
        if not (a0.is_floating_point() and b0.is_floating_point()):
            fail("wrong-init", observed=f"a new {what} has lora_A of dtype {a0.dtype} and lora_B of dtype {b0.dtype}",
                 expected="floating-point adapters, in the base layer's dtype",
                 cause="an adapter was built from integers (torch.zeros(..., dtype=torch.long), randint)",
                 where="__init__: nn.Parameter(torch.zeros(out_features, r)) and a random floating lora_A")
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
        got = tensor(record["out"], "the output", detach=True)
        if not close_scaled(got, want, tol=1e-4, dtype=False):
            fail("wrong-forward", observed=f"with lora_A and lora_B set by the check, {what} on an input of shape "
                                           f"{tuple(shape)} gives other outputs",
                 expected="base(x) + (alpha / r) * x @ lora_A.T @ lora_B.T",
                 cause=_forward_cause(got, base, x, inputs, alpha, r), where="forward, and the scaling set in __init__")
        if record["merged_type"] != "Linear" or record["merged_out"] is None:
            fail("merge-differs", observed=f"merge() returned {record['merged_type']}",
                 expected="an nn.Linear", cause="another module (or nothing) is returned",
                 where="merge: build and return an nn.Linear(in_features, out_features)")
        merged = tensor(record["merged_out"], "the merged output", detach=True)
        if not close_scaled(merged, want, tol=1e-4, dtype=False):
            fail("merge-differs", observed="the merged nn.Linear gives other outputs than the LoRA layer",
                 expected="the same outputs: W + (alpha / r) * B @ A as its weight, and the base's bias",
                 cause=_merge_cause(merged, base, x, inputs, alpha, r),
                 where="merge: the merged weight and bias")
        after = tensor(record["out_after_merge"], "the output after merging", detach=True)
        if not close_scaled(after, want, tol=1e-4, dtype=False):
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
    assigned = [a for a in attribute_names(record["attributes"]) if a in ("", "base")]
    if extra and assigned and set(base) <= set(extra):
        fail("base-trainable", observed=f"{what} has trainable parameters {extra} besides the adapters",
             expected="only lora_A and lora_B trainable: the pretrained weight stays frozen",
             cause=attribute_cause(assigned), where="__init__: self.base.requires_grad_(False)", hint=ATTRIBUTE_HINT)
    if extra:
        fail("base-trainable", observed=f"{what} has trainable parameters {extra} besides the adapters",
             expected="only lora_A and lora_B trainable: the pretrained weight stays frozen",
             cause="only the base weight was frozen: its bias still trains (requires_grad_(False) on the layer "
                   "freezes both)" if extra == ["base.bias"] else
                   "the base layer was not frozen (eval() changes the mode, not requires_grad)",
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


def _judge_forward_ran(record: dict[str, Any], shape: tuple[int, ...], fan_out: int, what: str) -> None:
    """The forward ran on the case's input and gave a tensor of shape (*leading dimensions, out_features)."""
    leading = "an input with leading dimensions " + str(shape[:-1]) if len(shape) > 2 else "a 2-d input"
    if record.get("raised") is not None:
        fail("wrong-forward", observed=f"{what} raised on {leading}, of shape {shape}: {record['raised']}",
             expected=f"an output of shape {(*shape[:-1], fan_out)}",
             cause="an operation that takes 2-d inputs only (torch.mm, torch.addmm, .t(), x.T) where the matrix "
                   "product x @ A.T works for any number of leading dimensions" if len(shape) > 2 else
                   "the exception named here, raised in forward", where="forward")
    got = record.get("out_start")
    if not isinstance(got, torch.Tensor):
        fail("wrong-forward", observed=f"{what}(x) returned {record.get('out_type', type_name(got))}",
             expected=f"a tensor of shape {(*shape[:-1], fan_out)}", cause="forward returns something else than the "
             "output tensor (a missing return, or a tuple)", where="the return statement of forward")
    want = (*shape[:-1], fan_out)
    if tuple(got.shape) != want:
        fail("wrong-forward", observed=f"on {leading}, of shape {shape}, {what} returned shape {tuple(got.shape)}",
             expected=f"shape {want}: the leading dimensions kept, the last one out_features",
             cause="the input was flattened to 2-d (x.view(-1, in_features), x.reshape(-1, ...)) and the output "
                   "not reshaped back, or a transpose that moved the leading dimensions (x.T reverses all of them)"
             if len(shape) > 2 else "a transpose or the adapters' shapes swapped", where="forward")
    if "out" not in record:
        raise WireError("malformed observation: outputs missing")


def _forward_cause(got: torch.Tensor, base: nn.Linear, x: torch.Tensor, inputs: dict[str, torch.Tensor],
                   alpha: float, r: int) -> str:
    for scale, cause in ((alpha // r, "the scaling is alpha // r, a floor division: alpha / r keeps the fraction"),
                         (alpha, "the scaling is alpha, not alpha / r"), (1.0, "the scaling alpha / r is missing"),
                         (r / alpha, "the scaling is r / alpha, upside down"),
                         (0.0, "the low-rank term is not added (or not scaled by a number)")):
        if close_scaled(got, _expected(base, x, inputs["A"], inputs["B"], scale), tol=1e-4, dtype=False):
            return cause
    return "another formula: the order of A and B, a transpose, or a term computed from other tensors"


def _merge_cause(merged: torch.Tensor, base: nn.Linear, x: torch.Tensor, inputs: dict[str, torch.Tensor],
                 alpha: float, r: int) -> str:
    with torch.no_grad():
        no_bias = x @ base.weight.T + (alpha / r) * (x @ inputs["A"].T @ inputs["B"].T)
    if base.bias is not None and close_scaled(merged, no_bias, tol=1e-4, dtype=False):
        return "the base layer's bias was not copied into the merged layer"
    for scale, cause in ((alpha // r, "the merged weight is scaled by alpha // r, a floor division: alpha / r "
                          "keeps the fraction"),
                         (1.0, "the scaling alpha / r is missing from the merged weight"),
                         (alpha, "the merged weight is scaled by alpha, not alpha / r"),
                         (0.0, "the merged weight is the base weight alone")):
        if close_scaled(merged, _expected(base, x, inputs["A"], inputs["B"], scale), tol=1e-4, dtype=False):
            return cause
    return "another merged weight: it must be W + (alpha / r) * B @ A (shape out x in)"
