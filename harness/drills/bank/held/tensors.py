"""The bank side of held drills of tensors whose answer passes a graded exercise and which lesson 11's notebook does not
hold: tensors-logsumexp.

Their prompts, starters and hints answer that exercise too nearly, so a graded student tree ships neither this module
nor their index entries (`harness.grading.held_drills`); their probes stay in the topic's module.
"""

from __future__ import annotations

from harness.drills.bank.tensors import _probe_logsumexp
from harness.drills.core import Drill, add

add(
    Drill(
        id="tensors-logsumexp", nonfinite=('outputs/*',),
        title="A numerically stable logsumexp",
        kind="write",
        topics=("tensors",),
        difficulty=2,
        prompt="Write logsumexp(x, dim) = log(sum(exp(x), dim)) without overflow for inputs like 1000, and "
        "correct for rows of -inf. Do not call torch.logsumexp (nor torch.special.logsumexp or log_softmax, which "
        "compute it for you), and stay in torch. (A self-check: the calls are "
        "recorded inside your answer's own process, so its pass does not count in a mock interview.)",
        entry="logsumexp",
        starter="import torch\n\n\ndef logsumexp(x: torch.Tensor, dim: int) -> torch.Tensor:\n"
        "    raise NotImplementedError\n",
        hints=("exp overflows for x > 88 in float32. What can you subtract from every element first?",
               "Subtract m = max along dim, compute log(sum(exp(x - m))) and add m back; guard m = -inf."),
        probe=_probe_logsumexp,
        self_check=True,
    )
)

