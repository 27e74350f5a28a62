"""The bank side of held drills of autograd whose answer passes a graded exercise and which lesson 11's notebook does
not hold: autograd-custom-function.

Their prompts, starters and hints answer that exercise too nearly, so a graded student tree ships neither this module
nor their index entries (`harness.grading.held_drills`); their probes stay in the topic's module.
"""

from __future__ import annotations

from harness.drills.bank.autograd import _probe_silu
from harness.drills.core import Drill, add

add(
    Drill(
        id="autograd-custom-function",
        self_check=True,
        title="A custom autograd.Function checked with gradcheck",
        kind="write",
        topics=("autograd",),
        difficulty=2,
        prompt="Implement SiLU (x * sigmoid(x)) as a torch.autograd.Function with a hand-written backward. "
        "It is checked with torch.autograd.gradcheck in float64.",
        entry="SiLU",
        starter="import torch\n\n\nclass SiLU(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, x):\n"
        "        raise NotImplementedError\n\n    @staticmethod\n    def backward(ctx, grad_output):\n"
        "        raise NotImplementedError\n",
        hints=("Save x in forward with ctx.save_for_backward; backward returns grad_output times the derivative.",
               "d/dx x·σ(x) = σ(x) + x·σ(x)(1 − σ(x)) = σ(x)(1 + x(1 − σ(x)))."),
        probe=_probe_silu,
    )
)

