"""The held answers of the performance drills: the solutions and planted wrong answers of performance-epoch-metrics
(its answer passes 11-epoch-metrics).

Their judges are in `harness.judges.drills.performance`; a graded student tree does not ship this module.
"""

from __future__ import annotations

import harness.judges.drills.performance  # noqa: F401  (joins the judges first)
from harness.drills.bank.performance import METRICS_STARTER
from harness.drills.core import Answers
from harness.drills.support import edited
from harness.judges.drills.held.whys import add_answers

_METRICS_SOLUTION = '''import torch


def epoch_metrics(model, batches, loss_fn):
    total_loss = torch.zeros(())
    correct = torch.zeros((), dtype=torch.long)
    count = 0
    with torch.inference_mode():
        for x, y in batches:
            out = model(x)
            total_loss += loss_fn(out, y) * len(y)  # stays on the device
            correct += (out.argmax(1) == y).sum()
            count += len(y)
    return (total_loss / count).item(), (correct / count).item()  # the epoch's only syncs
'''


add_answers(
    Answers(
        drill_id="performance-epoch-metrics",
        solution=_METRICS_SOLUTION,
        wrong_answers=(
            # the loss fixed, the accuracy still read every batch
            (edited(METRICS_STARTER, (".item() * len(y)", " * len(y)")), "sync-per-step"),
            # float() is .item() under another name
            (edited(_METRICS_SOLUTION, ("loss_fn(out, y) * len(y)", "float(loss_fn(out, y)) * len(y)")),
             "sync-per-step"),
            # a mean of batch means: the short last batch weighs as much as a full one
            (edited(_METRICS_SOLUTION,
                    ("loss_fn(out, y) * len(y)", "loss_fn(out, y)"),
                    ("(total_loss / count).item()", "(total_loss / len(batches)).item()")), "wrong-value"),
        ),
    )
)
