"""The held answers of the autograd drills: the solutions and planted wrong answers of autograd-custom-function (its
answer passes 01-silu-function).

Their judges are in `harness.judges.drills.autograd`; a graded student tree does not ship this module.
"""

from __future__ import annotations

import harness.drills.bank.held.autograd  # noqa: F401  (registers the held drills first)
import harness.judges.drills.autograd  # noqa: F401  (joins the judges first)
from harness.drills.core import Answers
from harness.drills.support import edited
from harness.judges.drills.autograd import _judge_silu
from harness.judges.drills.held.whys import add_answers

_SILU_SOLUTION = '''import torch


class SiLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad_output * s * (1 + x * (1 - s))
'''


add_answers(
    Answers(
        drill_id="autograd-custom-function",
        solution=_SILU_SOLUTION,
        wrong_answers=(
            (edited(_SILU_SOLUTION, ("grad_output * s * (1 + x * (1 - s))", "s * (1 + x * (1 - s))")),
             "wrong-backward"),
            (edited(_SILU_SOLUTION, ("grad_output * s * (1 + x * (1 - s))", "grad_output * s")), "wrong-backward"),
            (edited(_SILU_SOLUTION,
                    ("grad_output * s * (1 + x * (1 - s))", "grad_output * s * (1 - s)")),
             "wrong-backward"),
            ("import torch\n\nclass SiLU(torch.autograd.Function):\n"
             "    apply = staticmethod(torch.nn.functional.silu)\n", "not-custom-backward"),
        ),
        judge=_judge_silu,
    )
)
