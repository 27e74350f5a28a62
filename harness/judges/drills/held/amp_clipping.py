"""The held answers of the amp_clipping drills: the solutions and planted wrong answers of amp-train-step and
clipping-under-amp (their answer passes 11-amp-step).

Their judges are in `harness.judges.drills.amp_clipping`; a graded student tree does not ship this module.
"""

from __future__ import annotations

import harness.judges.drills.amp_clipping  # noqa: F401  (joins the judges first)
from harness.drills.bank.held.amp_clipping import CLIP_BEFORE_UNSCALE
from harness.drills.core import Answers
from harness.drills.support import edited
from harness.judges.drills.amp_clipping.amp import _judge_clip_under_amp
from harness.judges.drills.amp_clipping.common import CLIP
from harness.judges.drills.held.whys import add_answers

_AMP_SOLUTION = '''import torch


def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    x, y = batch
    model.train()
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()
'''


_UNSCALE = "    scaler.unscale_(optimizer)\n"


add_answers(
    Answers(
        drill_id="amp-train-step",
        solution=_AMP_SOLUTION,
        wrong_answers=(
            (edited(_AMP_SOLUTION, ("    scaler.update()\n", "")), "missing-update"),
            (edited(_AMP_SOLUTION, ("    optimizer.zero_grad(set_to_none=True)\n", "")), "stale-gradients"),
            (edited(_AMP_SOLUTION,
                    ("        loss = loss_fn(model(x), y)\n    scaler.scale(loss).backward()\n",
                     "        loss = loss_fn(model(x), y)\n        scaler.scale(loss).backward()\n")),
             "backward-inside-autocast"),
            (edited(_AMP_SOLUTION, (_UNSCALE, "")), "missing-unscale"),
            (CLIP_BEFORE_UNSCALE, "clip-before-unscale"),
            (edited(_AMP_SOLUTION, (CLIP, "")), "not-clipped"),
            (edited(_AMP_SOLUTION, ("    scaler.step(optimizer)\n", "    optimizer.step()\n")),
             "optimizer-step-direct"),
            (edited(_AMP_SOLUTION,
                    ('    with torch.autocast("cpu", dtype=torch.bfloat16):\n'
                     "        loss = loss_fn(model(x), y)\n",
                     "    loss = loss_fn(model(x), y)\n")),
             "no-autocast"),
            (edited(_AMP_SOLUTION, ("    model.train()\n", "")), "not-train-mode"),
        ),
    )
)


add_answers(
    Answers(
        drill_id="clipping-under-amp",
        solution=_AMP_SOLUTION,
        wrong_answers=(
            (edited(_AMP_SOLUTION, (CLIP, "")), "not-clipped"),
            (edited(_AMP_SOLUTION,
                    ("clip_grad_norm_(model.parameters(), max_norm)",
                     "clip_grad_value_(model.parameters(), max_norm)")), "clipped-by-value"),
            (edited(_AMP_SOLUTION, (_UNSCALE, "")), "clip-before-unscale"),
        ),
        judge=_judge_clip_under_amp,
    )
)
