"""The judge side of the loop drills (`harness.drills.bank.loop`): judges and the references they recompute,
reference solutions, planted wrong answers, explain drills' options and keys. A graded kernel never mounts this
package (`harness.judges`).

Here the drills on one step and on evaluation (the train step, a loss that stalls, evaluation that changes the
model, evaluation that restores the mode); early stopping, the loop with three bugs and the explain drills have a
module each; `common` holds what several of them share.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from harness.contract import expect
from harness.contract.case import Case
from harness.contract.compare import close_tensors, malformed
from harness.contract.failure import fail
from harness.contract.wire import describe
from harness.drills.bank.loop import (
    EVAL_STARTER,
    RESTORE_STARTER,
    STALLS_EPOCHS,
    STALLS_STARTER,
    eval_changes_setup,
    restore_setup,
    stalls_setup,
    train_step_setup,
)
from harness.drills.core import Answers, add_judge
from harness.drills.support import edited
from harness.judges.drills.loop import explain, stopping, three_bugs  # noqa: F401  (adds the answers)
from harness.judges.drills.loop.common import NOT_A_LOSS, check_step_gradient, checked_tensors, validated_steps
from harness.judges.drills.whys import add_answers


def _check_train_mode(k: int, model: nn.Module, batch: tuple, got: list) -> None:
    """Fail [not-train-mode] when the gradient of step k (1-based) is the one a forward in eval mode gives: the
    model's batch norm then used its running statistics (values, whatever the recorded modes say)."""
    if any(g is None for g in got):
        return
    evaluated = copy.deepcopy(model).eval()
    x, y = batch
    nn.BCEWithLogitsLoss()(evaluated(x), y).backward()
    if close_tensors(got, [p.grad for p in evaluated.parameters()], atol=1e-6, rtol=1e-4, dtype=False):
        fail("not-train-mode", observed=f"the gradient of optimizer step {k} is the one a forward in eval mode gives "
             "(batch norm normalised with its running statistics)", expected="model.train() before the forward",
             cause="train_step relies on the mode the model happens to be in: after an evaluation, dropout stays "
             "off and batch norm uses its running statistics", where="the first line of train_step")


def _judge_train_step(seen: dict, *, case: Case) -> str:
    model, optimizer, batches = train_step_setup(case)
    n = len(list(model.parameters()))
    steps = validated_steps(seen, n)
    if len(steps) != len(batches):
        fail("step-count", observed=f"{len(steps)} optimizer steps for {len(batches)} calls",
             expected="one step per call", cause="no optimizer.step() in train_step" if not steps else
             "optimizer.step() runs more than once per call" if len(steps) > len(batches) else
             "optimizer.step() is skipped in some calls", where="the end of train_step")
    loss_fn, losses, after_step = nn.BCEWithLogitsLoss(), [], []
    where = "call optimizer.zero_grad(set_to_none=True) before loss.backward(), then optimizer.step()"
    for k, ((x, y), step) in enumerate(zip(batches, steps, strict=True), start=1):
        if not close_tensors(step["params"], [p.detach() for p in model.parameters()], atol=1e-6, rtol=1e-4,
                             dtype=False):
            fail("update-outside-step", observed=f"the weights at optimizer step {k} are not the ones "
                 + ("the model started with" if k == 1 else f"optimizer step {k - 1} left"),
                 expected="weights that change only through optimizer.step()",
                 cause="the weights were re-initialised or updated by hand inside train_step", where="train_step")
        _check_train_mode(k, model, (x, y), step["grads"])
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        check_step_gradient(k, step["grads"], [p.grad for p in model.parameters()], where)
        optimizer.step()
        losses.append(loss.detach())
        with torch.no_grad():
            after_step.append(loss_fn(model(x), y))
    final = checked_tensors(seen.get("final"), n, "final weights")
    if not close_tensors(final, [p.detach() for p in model.parameters()], atol=1e-5, rtol=1e-4, dtype=False):
        fail("wrong-update", observed="the weights after the steps differ from plain SGD's",
             expected="exactly one optimizer.step() per call, with the batch's gradient",
             cause="an extra update, or the weights changed outside the optimizer", where="train_step")
    syncs = seen.get("syncs")
    if not isinstance(syncs, list):
        malformed("syncs missing")
    if syncs:
        fail("host-sync", observed=f"train_step called .{syncs[0]}() ({len(syncs)} host syncs in "
             f"{len(batches)} steps)", expected="no device-to-host copy in a training step",
             cause="loss.item() (or float(loss)) waits for the GPU at every step", where="return loss.detach()")
    returned = seen.get("returned")
    if not isinstance(returned, list) or len(returned) != len(batches):
        malformed("returned losses missing")
    for k, (got, want, after) in enumerate(zip(returned, losses, after_step, strict=True), start=1):
        if not isinstance(got, torch.Tensor) or got.numel() != 1:
            fail("not-a-tensor", observed=f"call {k} returned {describe(got)}", expected="the loss as a "
                 "one-element tensor", cause="no return statement (None), or the model's output",
                 where="the return line")
        if got.requires_grad:
            fail("loss-not-detached", observed=f"call {k} returned a loss that still requires grad",
                 expected="loss.detach()", cause="whoever keeps the returned loss (a running sum, a list) keeps "
                 "the whole step's graph alive: memory grows step after step", where="return loss.detach()")
        if not abs(float(got) - float(want)) <= 1e-5:  # a nan is never close
            fail("wrong-loss", observed=f"call {k} returned {float(got):.6f}", expected=f"{float(want):.6f}, the "
                 "loss of that batch at the weights the step started from",
                 cause="the loss recomputed after optimizer.step(), at the updated weights"
                 if abs(float(got) - float(after)) <= 1e-5 else "another value than the loss the step trained on "
                 "(another batch's, or another computation)", where="the return line")
    training = seen.get("training")
    if not isinstance(training, list) or len(training) < len(batches):
        malformed("forward modes missing")
    if not all(mode is True for mode in training):
        fail("not-train-mode", observed="the forward ran in eval mode (the model was handed over after an "
             "evaluation)", expected="model.train() before the forward", cause="train_step relies on the mode the "
             "model happens to be in: after an evaluation, dropout stays off and batch norm uses its running "
             "statistics", where="the first line of train_step")
    return "one step per batch with that batch's gradient; the loss comes back detached, with no host sync"


def _judge_stalls(seen: dict, *, case: Case) -> str:
    model, optimizer, batches = stalls_setup(case)
    n = len(list(model.parameters()))
    steps, loss_fn = validated_steps(seen, n), nn.BCEWithLogitsLoss()
    where = "the order of the calls in the batch loop"
    for k, step in enumerate(steps, start=1):
        if all(g is None for g in step["grads"]):
            fail("grads-cleared-before-step", observed=f"optimizer.step() number {k} saw .grad = None everywhere",
                 expected="the gradient of the batch at each step",
                 cause="zero_grad runs between backward() and step(), erasing the gradient: the model never moves "
                 "and the loss stays at ln 2", where="the lines between loss.backward() and optimizer.step()")
        x, y = batches[(k - 1) % len(batches)]
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        check_step_gradient(k, step["grads"], [p.grad for p in model.parameters()], where)
        optimizer.step()
    expected_steps = STALLS_EPOCHS * len(batches)
    if seen.get("count") != expected_steps:
        fail("step-count", observed=f"{describe(seen.get('count'))} optimizer steps", expected=f"{expected_steps} "
             f"({STALLS_EPOCHS} epochs of {len(batches)} batches)", cause="step() missing, or called twice per "
             "batch", where="the optimizer.step() calls in the batch loop")
    model, optimizer, batches = stalls_setup(case)
    for _ in range(STALLS_EPOCHS):
        for x, y in batches:
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            optimizer.step()
    final = checked_tensors(seen.get("final"), n, "final weights")
    if not close_tensors(final, [p.detach() for p in model.parameters()], atol=1e-4, rtol=1e-4, dtype=False):
        fail("still-stalls", observed="the weights after training differ from the reference loop's",
             expected="the weights of zero_grad -> forward -> backward -> step on every batch",
             cause="the loop still skips or repeats an update", where="the batch loop")
    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    with torch.no_grad():
        loss = loss_fn(torch.func.functional_call(model, dict(zip([k for k, _ in model.named_parameters()], final,
                                                                  strict=True)), (x,)), y).item()
    return f"the loop learns (final loss {loss:.3f}, the reference loop's weights)"


def _judge_eval(seen: dict, *, case: Case) -> str:
    forwards = seen.get("forwards")
    if not isinstance(forwards, list) or not all(isinstance(f, dict) for f in forwards):
        malformed("forwards missing")
    if any(f.get("training") is not False for f in forwards):
        fail("train-mode-eval", observed="forward passes ran with model.training = True (dropout active)",
             expected="evaluation in eval mode", cause="the model stays in training mode, so dropout drops different "
             "units in each evaluation", where="evaluate, before the loop")
    if any(f.get("grad_enabled") is not False for f in forwards):
        fail("eval-builds-graph", observed="forward passes ran with gradients enabled",
             expected="no autograd graph during evaluation (memory and time)",
             cause="autograd records every evaluation forward: the graphs keep the activations alive",
             where="evaluate: the loop over batches")
    model, batches = eval_changes_setup(case)
    model.eval()
    with torch.inference_mode():
        x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
        want = (model(x).argmax(1) == y).double().mean().item()
    results = seen.get("results")
    if not isinstance(results, list) or len(results) != 2:
        malformed("results missing")
    for got in results:
        value = expect.finite_number("evaluate's result", got, where="evaluate's result", cause=NOT_A_LOSS)
        if not abs(value - want) <= 1e-6:  # a nan is never close
            fail("wrong-accuracy", observed=f"evaluate returned {value:.4f}", expected=f"{want:.4f}, the fraction "
                 "of samples whose argmax is the label", cause="dividing by the number of batches instead of the "
                 "number of samples, or an integer division", where="the return line")
    return "eval mode, no graph, the right accuracy on repeated evaluation"


def _judge_restore(seen: dict, *, case: Case) -> str:
    model, batches = restore_setup(case)
    forwards, modes = seen.get("forwards"), seen.get("modes_after")
    if not isinstance(forwards, list) or not all(isinstance(f, dict) for f in forwards) \
            or not isinstance(modes, list) or len(modes) != 2 or not all(isinstance(m, dict) for m in modes):
        malformed("modes missing")
    if any(f.get("training") is not False or f.get("grad_enabled") is not False for f in forwards):
        fail("not-eval-mode", observed="a forward ran in training mode or with gradients enabled",
             expected="every evaluation forward in eval mode, without autograd", cause="model.eval() or the "
             "no_grad/inference_mode guard was dropped while fixing the mode", where="the start of evaluate")
    if modes[0].get("model") is not True or modes[0].get("dropout") is not True:
        fail("left-in-eval-mode", observed="a model in training mode comes back from evaluate in eval mode",
             expected="the mode it had before the call", cause="model.eval() is never undone: the training "
             "epochs after the first validation run without dropout (and BatchNorm would stop updating)",
             where="evaluate: the model's mode on the way out")
    if modes[1].get("model") is not False or modes[1].get("dropout") is not False:
        fail("forced-train-mode", observed="a model in eval mode comes back from evaluate in training mode",
             expected="the mode it had before the call", cause="evaluate hands back a training-mode model whatever "
             "mode the caller's model was in (a model evaluated for inference comes back training)",
             where="evaluate: the model's mode on the way out")
    model.eval()
    with torch.no_grad():
        want = sum(nn.BCEWithLogitsLoss()(model(x), y) * len(y) for x, y in batches) / sum(len(y) for _, y in batches)
    results = seen.get("results")
    if not isinstance(results, list) or len(results) != 2:
        malformed("results missing")
    for got in results:
        value = expect.finite_number("evaluate's result", got, where="evaluate's result", cause=NOT_A_LOSS)
        if not abs(value - float(want)) <= 1e-5:
            fail("wrong-loss", observed=f"evaluate returned {value:.5f}", expected=f"{float(want):.5f}",
                 cause="a mean of batch means (the last batch is smaller), or another reduction",
                 where="the sum and the count")
    return "evaluates in eval mode without a graph, and hands the model back in the mode it found it"


add_judge("loop-train-step", _judge_train_step)


add_answers(
    Answers(
        drill_id="loop-loss-stalls",
        solution=edited(STALLS_STARTER,
                        ("            loss = loss_fn(model(x), y)\n            loss.backward()\n"
                         "            optimizer.zero_grad(set_to_none=True)\n",
                         "            optimizer.zero_grad(set_to_none=True)\n            loss = loss_fn(model(x), y)\n"
                         "            loss.backward()\n")),
        wrong_answers=(
            (edited(STALLS_STARTER, ("            optimizer.zero_grad(set_to_none=True)\n", "")), "missing-zero-grad"),
            (edited(STALLS_STARTER,
                    ("            optimizer.step()\n", ""),
                    ("            loss = loss_fn",
                     "            optimizer.step()\n            loss = loss_fn")),
             "grads-cleared-before-step"),
            (edited(STALLS_STARTER,
                    ("            optimizer.zero_grad(set_to_none=True)\n", ""),
                    ("    model.train()\n",
                     "    model.train()\n    optimizer.zero_grad(set_to_none=True)\n")),
             "missing-zero-grad"),
        ),
        judge=_judge_stalls,
    )
)


add_answers(
    Answers(
        drill_id="loop-eval-changes",
        solution=edited(EVAL_STARTER,
                        ("    correct = 0\n", "    model.eval()\n    correct = 0\n"),
                        ("    for x, y in batches:\n        correct",
                         "    with torch.inference_mode():\n"
                         "        for x, y in batches:\n            correct"),
                        ("        total += len(y)", "            total += len(y)")),
        wrong_answers=(
            (edited(EVAL_STARTER, ("    correct = 0\n", "    model.eval()\n    correct = 0\n")), "eval-builds-graph"),
            (edited(EVAL_STARTER,
                    ("    for x, y in batches:\n        correct",
                     "    with torch.no_grad():\n"
                     "      for x, y in batches:\n        correct"),
                    ("        total += len(y)", "        total += len(y)")), "train-mode-eval"),
            (edited(EVAL_STARTER,
                    ("    correct = 0\n", "    model.eval()\n    correct = 0\n"),
                    ("    for x, y in batches:\n        correct",
                     "    with torch.no_grad():\n"
                     "      for x, y in batches:\n        correct"),
                    ("    return correct / total", "    return correct / len(batches)")), "wrong-accuracy"),
        ),
        judge=_judge_eval,
    )
)


add_answers(
    Answers(
        drill_id="loop-eval-restores-mode",
        solution=edited(RESTORE_STARTER,
                        ("    model.eval()\n", "    was_training = model.training\n    model.eval()\n"),
                        ("    return total / count\n",
                         "    model.train(was_training)\n    return total / count\n")),
        wrong_answers=(
            (edited(RESTORE_STARTER,
                    ("    return total / count\n", "    model.train()\n    return total / count\n")),
             "forced-train-mode"),
            (edited(RESTORE_STARTER,
                    ("    model.eval()\n", "    was_training = model.training\n"),
                    ("    return total / count\n",
                     "    model.train(was_training)\n    return total / count\n")),
             "not-eval-mode"),
            (edited(RESTORE_STARTER,
                    ("    model.eval()\n", "    was_training = model.training\n    model.eval()\n"),
                    ("        total += loss_fn(model(x), y) * len(y)\n        count += len(y)\n",
                     "        total += loss_fn(model(x), y)\n        count += 1\n"),
                    ("    return total / count\n",
                     "    model.train(was_training)\n    return total / count\n")),
             "wrong-loss"),
        ),
        judge=_judge_restore,
    )
)
