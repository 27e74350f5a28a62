"""The LoRA linear layer drill."""

from __future__ import annotations

import torch

from harness.contract import expect
from harness.contract.case import Case
from harness.contract.compare import close_values, is_tensor_like, malformed
from harness.contract.failure import fail
from harness.contract.wire import describe
from harness.drills.bank.finetuning import (
    lora_setup,
)
from harness.drills.core import Answers
from harness.drills.support import edited
from harness.judges.drills.whys import add_answers


def _judge_lora(seen: dict, *, case: Case) -> str:
    where = "LoRALinear"
    s = lora_setup(case)
    base, x, r, alpha = s["base"], s["x"], s["r"], s["alpha"]
    a0, b0 = seen.get("a0"), seen.get("b0")
    for label, got, shape in (("lora_A", a0, (r, s["d_in"])), ("lora_B", b0, (s["d_out"], r))):
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != shape:
            fail("wrong-shape", observed=f"{label} is {describe(got)}", expected=f"a tensor of shape {shape}",
                 cause="A maps in_features to r, B maps r to out_features: delta W = B @ A has the base's shape",
                 where=where)
    trainable = seen.get("trainable")
    if not isinstance(trainable, list):
        malformed("trainable names missing")
    if not {"lora_A", "lora_B"} <= set(trainable):
        fail("adapter-not-trainable", observed=f"trainable parameters: {trainable}",
             expected="['lora_A', 'lora_B']", cause="lora_A and lora_B must be nn.Parameter attributes (a plain "
             "tensor is invisible to model.parameters(), so no optimizer would train it)", where=where)
    if trainable != ["lora_A", "lora_B"]:
        fail("base-not-frozen", observed=f"trainable parameters: {trainable}", expected="['lora_A', 'lora_B'] only",
             cause="the base layer must be frozen (base.requires_grad_(False)): LoRA trains only the two small "
             "matrices", where=where)
    if b0.abs().sum() != 0:
        fail("b-not-zero", observed="lora_B is not all zeros after __init__", expected="lora_B initialised to zeros",
             cause="with B = 0 the adapted layer starts exactly as the pretrained one (delta W = B @ A = 0)",
             where="nn.init.zeros_ / torch.zeros for lora_B")
    if a0.abs().sum() == 0:
        fail("dead-adapter", observed="lora_A and lora_B are both all zeros after __init__",
             expected="lora_A random (e.g. kaiming_uniform_), lora_B zeros",
             cause="with both zero, the gradient of each is a product with the other: both stay zero forever",
             where="the initialisation of lora_A")
    with torch.no_grad():
        plain = base(x)
        want = plain + (alpha / r) * (x @ s["a"].T @ s["b"].T)
        unscaled = plain + alpha * (x @ s["a"].T @ s["b"].T)
    expect.close("the output at initialisation", seen.get("out0"), plain, atol=1e-5, rtol=1e-5, where=where,
                 cause="the adapted layer must start equal to the base layer")
    out1 = seen.get("out1")
    if close_values(out1, unscaled, atol=1e-4, dtype=False) and not close_values(out1, want, atol=1e-4, dtype=False):
        fail("wrong-scale", observed="the update is scaled by alpha", expected=f"scaled by alpha / r = {alpha / r:g}",
             cause="LoRA scales B @ A by alpha / r so that changing r does not change the update's size",
             where="self.scale = alpha / r")
    expect.close("the output with A and B set", out1, want, atol=1e-4, rtol=1e-4, where=where,
                 cause="forward is base(x) + (alpha / r) * x @ A.T @ B.T")
    if seen.get("merged_type") != "Linear":
        fail("merge-not-linear", observed=f"merge() returned a {seen.get('merged_type')}", expected="an nn.Linear",
             cause="merging folds the adapter into one plain Linear for inference", where="merge")
    expect.close("the merged layer's output", seen.get("out_merged"), want, atol=1e-4, rtol=1e-4, where="merge",
                 cause="the merged weight is W + (alpha / r) * B @ A, with the base's bias")
    after = seen.get("out_after_merge")
    if is_tensor_like(after, want, dtype=False) and not close_values(after, want, atol=1e-4, dtype=False):
        fail("merge-mutated-base", observed="after merge(), the LoRA layer's own output changed",
             expected="merge() leaves the adapted layer as it was",
             cause="the merge wrote W + scale * B @ A into the base's weight in place, so the adapter now counts "
             "twice", where="build a new nn.Linear in merge (or clone the weight)")
    return "frozen base, B = 0 at start, alpha / r scaling, and a merged Linear equal to the adapted layer"


_LORA_SOLUTION = '''import math

import torch
from torch import nn


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, r: int, alpha: float):
        super().__init__()
        self.base = base
        self.base.requires_grad_(False)
        self.lora_A = nn.Parameter(torch.empty(r, base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.scale = alpha / r

    def forward(self, x):
        return self.base(x) + (x @ self.lora_A.T @ self.lora_B.T) * self.scale

    @torch.no_grad()
    def merge(self) -> nn.Linear:
        merged = nn.Linear(self.base.in_features, self.base.out_features)
        merged.weight.copy_(self.base.weight + self.scale * self.lora_B @ self.lora_A)
        merged.bias.copy_(self.base.bias)
        return merged
'''


add_answers(
    Answers(
        drill_id="finetuning-lora-linear",
        solution=_LORA_SOLUTION,
        wrong_answers=(
            (edited(_LORA_SOLUTION, ("self.scale = alpha / r", "self.scale = alpha")), "wrong-scale"),
            (edited(_LORA_SOLUTION, ("        self.base.requires_grad_(False)\n", "")), "base-not-frozen"),
            (edited(_LORA_SOLUTION,
                    ("        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))\n",
                     "        nn.init.zeros_(self.lora_A)\n")), "dead-adapter"),
            (edited(_LORA_SOLUTION,
                    ("torch.zeros(base.out_features, r)", "torch.randn(base.out_features, r)")),
             "b-not-zero"),
            (edited(_LORA_SOLUTION,
                    ("self.base.weight + self.scale * self.lora_B @ self.lora_A",
                     "self.base.weight + self.lora_B @ self.lora_A")), "wrong-value"),
            (edited(_LORA_SOLUTION,
                    ("        merged = nn.Linear(self.base.in_features, self.base.out_features)\n"
                     "        merged.weight.copy_(self.base.weight + self.scale * self.lora_B @ self.lora_A)\n"
                     "        merged.bias.copy_(self.base.bias)\n        return merged\n",
                     "        self.base.weight += self.scale * self.lora_B @ self.lora_A\n        return self.base\n")),
             "merge-mutated-base"),
        ),
        judge=_judge_lora,
    )
)
