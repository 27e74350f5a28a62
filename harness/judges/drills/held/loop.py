"""The held answers of the loop drills: the solutions and planted wrong answers of loop-train-step (its answer
passes 11-train-step).

Their judges are in `harness.judges.drills.loop`; a graded student tree does not ship this module.
"""

from __future__ import annotations

import harness.judges.drills.loop  # noqa: F401  (joins the judges first)
from harness.drills.core import Answers
from harness.drills.support import edited
from harness.judges.drills.held.whys import add_answers

_TRAIN_STEP_WRONG_BODY = ("def train_step(model, batch, loss_fn, optimizer):\n    x, y = batch\n    model.train()\n"
                          "    optimizer.zero_grad(set_to_none=True)\n    loss = loss_fn(model(x), y)\n"
                          "    loss.backward()\n    optimizer.step()\n")


add_answers(
    Answers(
        drill_id="loop-train-step",
        solution=(
            "import torch\n\n\ndef train_step(model, batch, loss_fn, optimizer):\n"
            "    x, y = batch\n    model.train()\n    optimizer.zero_grad(set_to_none=True)\n"
            "    loss = loss_fn(model(x), y)\n    loss.backward()\n    optimizer.step()\n    return loss.detach()\n"
        ),
        wrong_answers=(
            ("def train_step(model, batch, loss_fn, optimizer):\n    x, y = batch\n    model.train()\n"
             "    loss = loss_fn(model(x), y)\n    loss.backward()\n    optimizer.step()\n    return loss.detach()\n",
             "missing-zero-grad"),
            ("def train_step(model, batch, loss_fn, optimizer):\n    x, y = batch\n    optimizer.zero_grad()\n"
             "    optimizer.step()\n    loss = loss_fn(model(x), y)\n    loss.backward()\n    return loss.detach()\n",
             "step-before-backward"),
            (_TRAIN_STEP_WRONG_BODY + "    return loss.item()\n",
             "host-sync"),
            (_TRAIN_STEP_WRONG_BODY + "    return loss\n",
             "loss-not-detached"),
            (edited(_TRAIN_STEP_WRONG_BODY, ("    model.train()\n", "")) + "    return loss.detach()\n",
             "not-train-mode"),
        ),
    )
)
