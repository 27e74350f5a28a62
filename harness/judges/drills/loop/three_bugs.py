"""The training loop drill with three bugs."""

from __future__ import annotations

import torch
from torch import nn

from harness.contract import expect
from harness.contract.case import Case
from harness.contract.compare import close_tensors, malformed
from harness.contract.failure import fail
from harness.contract.wire import describe
from harness.drills.bank.loop import (
    THREE_BUGS_STARTER,
    THREE_EPOCHS,
    three_setup,
)
from harness.drills.core import Answers
from harness.drills.support import with_fixes
from harness.judges.drills.loop.common import NOT_A_LOSS, check_step_gradient, checked_tensors, validated_steps
from harness.judges.drills.whys import add_answers

_FIX_ZERO_GRAD = ("            loss = loss_fn(model(x), y)\n",
                  "            optimizer.zero_grad(set_to_none=True)\n            loss = loss_fn(model(x), y)\n")


_FIX_DETACH = ("train_total += loss\n", "train_total += loss.detach()\n")


_FIX_MODE = ("    model.train()\n    for epoch in range(epochs):\n",
             "    for epoch in range(epochs):\n        model.train()\n")


def _three_bugs_fixed(*fixes: tuple[str, str]) -> str:
    return with_fixes(THREE_BUGS_STARTER, *fixes)


def _judge_three_bugs(seen: dict, *, case: Case) -> str:
    model, optimizer, train_batches, val_batches = three_setup(case)
    loss_fn, n = nn.MSELoss(), len(list(model.parameters()))
    steps = validated_steps(seen, n)
    forwards = seen.get("forwards")
    history = seen.get("history")
    if not isinstance(forwards, list) or not all(isinstance(f, dict) for f in forwards):
        malformed("forwards missing")
    if not isinstance(history, (list, tuple)):
        fail("not-a-list", observed=f"fit returned {describe(history)}", expected="a list of (train, val) pairs",
             cause="the return line was lost", where="return history")
    training_forwards = [f for f in forwards if f.get("grad_enabled")]
    expected_steps = THREE_EPOCHS * len(train_batches)
    if len(steps) != expected_steps or len(training_forwards) != expected_steps:
        fail("step-count", observed=f"{len(steps)} optimizer steps and {len(training_forwards)} forwards with "
             "gradients enabled", expected=f"{expected_steps} of each", cause="a batch skipped or trained twice, "
             "or validation run with gradients enabled", where="the training loop and the validation loop")
    k = 0
    for epoch in range(1, THREE_EPOCHS + 1):
        model.train()
        train_total = torch.zeros(())
        for x, y in train_batches:
            if training_forwards[k].get("training") is not True:
                fail("eval-mode-training", observed=f"epoch {epoch}'s training forwards ran with model.training = "
                     "False", expected="training mode for every training batch",
                     cause="validation's model.eval() is still in force when the next epoch trains: from epoch 2 "
                     "on BatchNorm normalises with its running statistics (and dropout would be off)",
                     where="the start of each epoch's training loop")
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            k += 1
            check_step_gradient(k, steps[k - 1]["grads"], [p.grad for p in model.parameters()],
                                 where="the training loop: what happens to .grad between steps")
            optimizer.step()
            train_total += loss.detach()
        model.eval()
        with torch.no_grad():
            val = sum(loss_fn(model(x), y) for x, y in val_batches) / len(val_batches)
        if len(history) < epoch or not isinstance(history[epoch - 1], (list, tuple)) or len(history[epoch - 1]) != 2:
            fail("wrong-history", observed=f"history entry {epoch} is missing or not a (train, val) pair",
                 expected="one (mean training loss, mean validation loss) pair per epoch",
                 cause="the append moved out of the epoch loop", where="history.append(...)")
        train_got, val_got = history[epoch - 1]
        if isinstance(train_got, torch.Tensor) and train_got.requires_grad:
            fail("loss-keeps-graph", observed=f"epoch {epoch}'s mean training loss still requires grad",
                 expected="a detached number", cause="train_total += loss keeps every step's autograd graph "
                 "alive (the sum is part of the graph): memory grows with every batch",
                 where="the line that adds to train_total")
        for name, got, want in (("training", train_got, train_total / len(train_batches)), ("validation", val_got,
                                                                                           val)):
            value = expect.finite_number(f"epoch {epoch}'s mean {name} loss", got, where="history.append(...)",
                                         cause=NOT_A_LOSS)
            if not abs(value - float(want)) <= 1e-4 * max(1.0, abs(float(want))):
                fail("wrong-history", observed=f"epoch {epoch}'s mean {name} loss is {value:.5f}",
                     expected=f"{float(want):.5f}", cause="a sum not divided by the number of batches, or the "
                     "loss of another batch", where="history.append(...)")
    if len(history) != THREE_EPOCHS:
        fail("wrong-history", observed=f"{len(history)} history entries", expected=f"{THREE_EPOCHS}",
             cause="an entry per batch, or the append outside the loop", where="history.append(...)")
    final = checked_tensors(seen.get("final"), len(model.state_dict()), "final state")
    if not close_tensors(final, [t.detach() for t in model.state_dict().values()], atol=1e-4, rtol=1e-4, dtype=False):
        fail("wrong-weights", observed="the weights or BatchNorm statistics after training differ from the "
             "reference loop's", expected="the same state", cause="an extra update, or statistics updated "
             "during validation", where="the training and validation loops")
    return "fresh gradients at every step, training mode in every epoch, and losses kept without their graph"


add_answers(
    Answers(
        drill_id="loop-three-bugs",
        solution=_three_bugs_fixed(_FIX_ZERO_GRAD, _FIX_DETACH, _FIX_MODE),
        wrong_answers=(
            (_three_bugs_fixed(_FIX_ZERO_GRAD), "loss-keeps-graph"),
            (_three_bugs_fixed(_FIX_ZERO_GRAD, _FIX_DETACH), "eval-mode-training"),
            (_three_bugs_fixed(_FIX_ZERO_GRAD, _FIX_MODE), "loss-keeps-graph"),
            (_three_bugs_fixed(_FIX_DETACH, _FIX_MODE), "missing-zero-grad"),
        ),
        judge=_judge_three_bugs,
    )
)
