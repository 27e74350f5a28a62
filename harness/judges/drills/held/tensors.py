"""The held answers of the tensors drills: the solutions and planted wrong answers of tensors-logsumexp (its answer
passes 01-logsumexp).

Their judges are in `harness.judges.drills.tensors`; a graded student tree does not ship this module.
"""

from __future__ import annotations

import harness.drills.bank.held.tensors  # noqa: F401  (registers the held drills first)
import harness.judges.drills.tensors  # noqa: F401  (joins the judges first)
from harness.drills.core import Answers
from harness.judges.drills.held.whys import add_answers
from harness.judges.drills.tensors import _judge_logsumexp

add_answers(
    Answers(
        drill_id="tensors-logsumexp",
        solution=(
            "import torch\n\n\ndef logsumexp(x: torch.Tensor, dim: int) -> torch.Tensor:\n"
            "    m = x.amax(dim=dim, keepdim=True)\n"
            "    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))\n"
            "    return (x - m).exp().sum(dim=dim).log() + m.squeeze(dim)\n"
        ),
        wrong_answers=(
            ("import torch\n\ndef logsumexp(x, dim):\n    return x.exp().sum(dim).log()\n", "not-finite"),
            ("import torch\n\ndef logsumexp(x, dim):\n    m = x.amax(dim, keepdim=True)\n"
             "    return (x - m).exp().sum(dim).log() + m.squeeze(dim)\n", "all-inf-row"),
            ("import torch\n\ndef logsumexp(x, dim):\n    return torch.logsumexp(x, dim)\n", "forbidden-call"),
            ("import torch\n\ndef logsumexp(x, dim):\n    return torch.special.logsumexp(x, dim)\n", "forbidden-call"),
            ("import numpy as np\nimport torch\n\ndef logsumexp(x, dim):\n    a = x.numpy()\n"
             "    m = np.max(a, axis=dim, keepdims=True)\n    m = np.where(np.isfinite(m), m, 0)\n"
             "    return torch.from_numpy(np.asarray(np.log(np.exp(a - m).sum(axis=dim)) + m.squeeze(dim)))\n",
             "forbidden-call"),
        ),
        judge=_judge_logsumexp,
    )
)
