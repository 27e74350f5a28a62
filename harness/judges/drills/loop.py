"""The judge side of the loop drills (`harness.drills.bank.loop`): judges and the references
they recompute, reference solutions, planted wrong answers, explain drills' options and keys.

A graded kernel never mounts this package (`harness.judges`).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from harness.contract import expect
from harness.contract.case import Case
from harness.contract.compare import close_tensors, same_values
from harness.contract.failure import fail
from harness.contract.wire import WireError, describe
from harness.drills.bank.loop import (
    _EVAL_STARTER,
    _RESTORE_STARTER,
    _STALLS_EPOCHS,
    _STALLS_STARTER,
    _THREE_BUGS_STARTER,
    _THREE_EPOCHS,
    _es_plan,
    _es_setup,
    _eval_changes_setup,
    _restore_setup,
    _stalls_setup,
    _three_setup,
    _train_step_setup,
)
from harness.drills.core import Answers, choice_answers
from harness.drills.support import with_fixes
from harness.judges.drills.whys import add_answers

# --- Shared validation of observations (data only: a wrong type is a WireError, never a crash) -------------


def _checked_tensors(value: Any, n: int, what: str, *, none_ok: bool = False) -> list:
    if not isinstance(value, list) or len(value) != n:
        raise WireError(f"{what}: expected a list of {n} tensors")
    for item in value:
        if not (isinstance(item, torch.Tensor) or (none_ok and item is None)):
            raise WireError(f"{what}: expected tensors, got {describe(item)}")
    return value


def _validated_steps(seen: dict, n_params: int) -> list[dict]:
    steps = seen.get("steps")
    if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
        raise WireError("steps missing")
    for step in steps:
        _checked_tensors(step.get("grads"), n_params, "a step's gradients", none_ok=True)
        _checked_tensors(step.get("params"), n_params, "a step's parameters")
    return steps


# Why a loss came back as something other than one number, when it does.
_NOT_A_LOSS = "returning the loss of the wrong object, or a whole batch of values"


def _check_step_gradient(k: int, got: list, want: list, where: str) -> None:
    """The gradient the optimizer saw at step k (1-based) against the reference gradient of batch k."""
    if all(g is None for g in got):
        fail("step-before-backward", observed=f"at optimizer step {k} every parameter's .grad was None",
             expected=f"the gradient of batch {k}",
             cause="optimizer.step() ran before loss.backward() (or zero_grad ran between backward and step): "
             "the step had no gradient to use", where=where)
    if any(g is None for g in got) or not close_tensors(got, want, atol=1e-6, rtol=1e-4, dtype=False):
        fail("missing-zero-grad", observed=f"the gradient the optimizer used at step {k} is not the gradient of "
             f"batch {k} alone", expected=f"only batch {k}'s gradient at step {k}",
             cause=f"gradients accumulate in .grad: without zero_grad once per batch, step {k} uses the sum of "
             "the earlier batches' gradients too", where=where)


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
    model, optimizer, batches = _train_step_setup(case)
    n = len(list(model.parameters()))
    steps = _validated_steps(seen, n)
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
        _check_step_gradient(k, step["grads"], [p.grad for p in model.parameters()], where)
        optimizer.step()
        losses.append(loss.detach())
        with torch.no_grad():
            after_step.append(loss_fn(model(x), y))
    final = _checked_tensors(seen.get("final"), n, "final weights")
    if not close_tensors(final, [p.detach() for p in model.parameters()], atol=1e-5, rtol=1e-4, dtype=False):
        fail("wrong-update", observed="the weights after the steps differ from plain SGD's",
             expected="exactly one optimizer.step() per call, with the batch's gradient",
             cause="an extra update, or the weights changed outside the optimizer", where="train_step")
    syncs = seen.get("syncs")
    if not isinstance(syncs, list):
        raise WireError("syncs missing")
    if syncs:
        fail("host-sync", observed=f"train_step called .{syncs[0]}() ({len(syncs)} host syncs in "
             f"{len(batches)} steps)", expected="no device-to-host copy in a training step",
             cause="loss.item() (or float(loss)) waits for the GPU at every step", where="return loss.detach()")
    returned = seen.get("returned")
    if not isinstance(returned, list) or len(returned) != len(batches):
        raise WireError("returned losses missing")
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
        raise WireError("forward modes missing")
    if not all(mode is True for mode in training):
        fail("not-train-mode", observed="the forward ran in eval mode (the model was handed over after an "
             "evaluation)", expected="model.train() before the forward", cause="train_step relies on the mode the "
             "model happens to be in: after an evaluation, dropout stays off and batch norm uses its running "
             "statistics", where="the first line of train_step")
    return "one step per batch with that batch's gradient; the loss comes back detached, with no host sync"


_TRAIN_STEP_WRONG_BODY = ("def train_step(model, batch, loss_fn, optimizer):\n    x, y = batch\n    model.train()\n"
                          "    optimizer.zero_grad(set_to_none=True)\n    loss = loss_fn(model(x), y)\n"
                          "    loss.backward()\n    optimizer.step()\n")


def _judge_stalls(seen: dict, *, case: Case) -> str:
    model, optimizer, batches = _stalls_setup(case)
    n = len(list(model.parameters()))
    steps, loss_fn = _validated_steps(seen, n), nn.BCEWithLogitsLoss()
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
        _check_step_gradient(k, step["grads"], [p.grad for p in model.parameters()], where)
        optimizer.step()
    expected_steps = _STALLS_EPOCHS * len(batches)
    if seen.get("count") != expected_steps:
        fail("step-count", observed=f"{describe(seen.get('count'))} optimizer steps", expected=f"{expected_steps} "
             f"({_STALLS_EPOCHS} epochs of {len(batches)} batches)", cause="step() missing, or called twice per "
             "batch", where="the optimizer.step() calls in the batch loop")
    model, optimizer, batches = _stalls_setup(case)
    for _ in range(_STALLS_EPOCHS):
        for x, y in batches:
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            optimizer.step()
    final = _checked_tensors(seen.get("final"), n, "final weights")
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
        raise WireError("forwards missing")
    if any(f.get("training") is not False for f in forwards):
        fail("train-mode-eval", observed="forward passes ran with model.training = True (dropout active)",
             expected="evaluation in eval mode", cause="the model stays in training mode, so dropout drops different "
             "units in each evaluation", where="evaluate, before the loop")
    if any(f.get("grad_enabled") is not False for f in forwards):
        fail("eval-builds-graph", observed="forward passes ran with gradients enabled",
             expected="no autograd graph during evaluation (memory and time)",
             cause="autograd records every evaluation forward: the graphs keep the activations alive",
             where="evaluate: the loop over batches")
    model, batches = _eval_changes_setup(case)
    model.eval()
    with torch.inference_mode():
        x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
        want = (model(x).argmax(1) == y).double().mean().item()
    results = seen.get("results")
    if not isinstance(results, list) or len(results) != 2:
        raise WireError("results missing")
    for got in results:
        value = expect.finite_number("evaluate's result", got, where="evaluate's result", cause=_NOT_A_LOSS)
        if not abs(value - want) <= 1e-6:  # a nan is never close
            fail("wrong-accuracy", observed=f"evaluate returned {value:.4f}", expected=f"{want:.4f}, the fraction "
                 "of samples whose argmax is the label", cause="dividing by the number of batches instead of the "
                 "number of samples, or an integer division", where="the return line")
    return "eval mode, no graph, the right accuracy on repeated evaluation"


def _es_replay(values: list[float], patience: int, *, ties_improve: bool = False,
               stop_after: int = 0) -> tuple[int, int]:
    """(epochs run, best epoch) of early stopping on `values`; the keywords replay two mistakes: a tie counted
    as a new best (`<=`), and a stop one epoch late (`stop_after=patience + 1`, the test `> patience`)."""
    best, best_epoch, bad = float("inf"), 0, 0
    for epoch, value in enumerate(values, start=1):
        if value < best or (ties_improve and value == best):
            best, best_epoch, bad = value, epoch, 0
        else:
            bad += 1
            if bad >= (stop_after or patience):
                return epoch, best_epoch
    return len(values), best_epoch


def _es_judge_run(seen: Any, case: Case, scenario: str) -> tuple[int, int]:
    """Judge one run of fit; (epochs it must run, its best epoch). "runs_out" is judged after "stops" passed."""
    patience, max_epochs, values, tie = _es_plan(case, scenario)
    _, _, trajectory, _ = _es_setup(case, scenario)
    runs, best_epoch = _es_replay(values, patience)
    if not isinstance(seen, dict):
        raise WireError("malformed run")
    got = seen.get("history")
    if not isinstance(got, (list, tuple)):
        fail("not-a-list", observed=f"fit returned {describe(got)}", expected="the list of validation losses, "
             "one per epoch run", cause="returning the best loss only, or nothing", where="the return line")
    got = [expect.finite_number("an entry of the returned history", v, where="the return line", cause=_NOT_A_LOSS)
           for v in got]
    if seen.get("trained") != len(got) or seen.get("validated") != len(got):
        fail("epoch-count", observed=f"{describe(seen.get('trained'))} calls of train_one_epoch and "
             f"{describe(seen.get('validated'))} of validate for {len(got)} history entries",
             expected="one training epoch and one validation per entry", cause="validating twice per epoch, or "
             "an entry appended without training", where="the body of the epoch loop")
    want = (f"stop after epoch {runs}: the best epoch was {best_epoch} and patience is {patience}" if runs < max_epochs
            else f"all {max_epochs} epochs (max_epochs): never {patience} in a row without a new best")
    if len(got) < runs:
        fail("stopped-early", observed=f"training stopped after {len(got)} epochs", expected=want,
             cause="the count of epochs without improvement is not reset when a new best arrives",
             where="reset the counter to 0 on every new best")
    if len(got) > runs:
        if tie and len(got) == _es_replay(values, patience, ties_improve=True)[0]:
            fail("tie-counted-as-best", observed=f"training ran {len(got)} epochs: epoch {tie}'s validation loss "
                 f"equals the best ({values[tie - 1]:.6g}, epoch {best_epoch}) and restarted the count", expected=want,
                 cause="`val_loss <= best_loss` counts a tie as an improvement; only a strictly lower loss is a "
                 "new best", where="the comparison: val_loss < best_loss")
        if len(got) == _es_replay(values, patience, stop_after=patience + 1)[0]:
            fail("stopped-late", observed=f"training ran {len(got)} epochs, one more than patience allows",
                 expected=want, cause="an off-by-one in the patience test (`> patience` instead of `>= patience`)",
                 where="the stopping condition")
        fail("stopped-late", observed=f"training ran {len(got)} epochs", expected=want,
             cause="epochs without a new best are not counted, or the count is not tested each epoch",
             where="the stopping condition")
    if not all(abs(g - w) <= 1e-6 * max(1.0, abs(w)) for g, w in zip(got, values[:runs], strict=True)):
        fail("wrong-history", observed=f"validation losses {[round(g, 4) for g in got]}",
             expected=f"{[round(w, 4) for w in values[:runs]]}", cause="validate called before train_one_epoch, or "
             "another value recorded", where="train, then validate, then append")
    final = seen.get("final")
    if not isinstance(final, torch.Tensor) or final.shape != trajectory[0].shape:
        raise WireError("final weights missing")
    if not same_values(final, trajectory[best_epoch - 1], dtype=False):
        restored_last = same_values(final, trajectory[runs - 1], dtype=False)
        if scenario == "runs_out" and restored_last:
            fail("not-restored-at-max-epochs", observed=f"a run that reached max_epochs={max_epochs} ends with the "
                 "weights of its last epoch (a run stopped by patience got its best weights back)",
                 expected=f"the weights of epoch {best_epoch}, the best validation loss", cause="the best weights "
                 "are loaded back only on the early-stopping branch, before `break`; a run that ends at max_epochs "
                 "never reaches it", where="model.load_state_dict(best) after the loop, on every path")
        fail("best-not-restored", observed="the model ends with the weights of the last epoch" if restored_last
             else "the model ends with weights of no epoch's best", expected=f"the weights of epoch {best_epoch}, "
             "the best validation loss", cause="model.state_dict() returns references to the live tensors: "
             "kept without copy.deepcopy (or a clone of each tensor), the 'best' weights are overwritten by every "
             "later epoch; or they were never loaded back", where="best = copy.deepcopy(model.state_dict()); "
             "model.load_state_dict(best) before returning")
    return runs, best_epoch


def _judge_early_stopping(seen: dict, *, case: Case) -> str:
    runs, best_epoch = _es_judge_run(seen.get("stops"), case, "stops")
    _es_judge_run(seen.get("runs_out"), case, "runs_out")
    return (f"stopped after epoch {runs} (best epoch {best_epoch}, a tie not counted as a new best) with its "
            "weights; a run that reached max_epochs also got its best weights back")


_ES_SOLUTION = '''import copy

import torch


def fit(model, train_one_epoch, validate, max_epochs, patience):
    history = []
    best_loss, best_state, bad_epochs = float("inf"), None, 0
    for _ in range(max_epochs):
        train_one_epoch(model)
        val_loss = validate(model)
        history.append(val_loss)
        if val_loss < best_loss:
            best_loss, bad_epochs = val_loss, 0
            best_state = copy.deepcopy(model.state_dict())
        else:
            bad_epochs += 1
            if bad_epochs >= patience:
                break
    if best_state is not None:
        model.load_state_dict(best_state)
    return history
'''


_FIX_ZERO_GRAD = ("            loss = loss_fn(model(x), y)\n",
                  "            optimizer.zero_grad(set_to_none=True)\n            loss = loss_fn(model(x), y)\n")
_FIX_DETACH = ("train_total += loss\n", "train_total += loss.detach()\n")
_FIX_MODE = ("    model.train()\n    for epoch in range(epochs):\n",
             "    for epoch in range(epochs):\n        model.train()\n")


def _three_bugs_fixed(*fixes: tuple[str, str]) -> str:
    return with_fixes(_THREE_BUGS_STARTER, *fixes)


def _judge_three_bugs(seen: dict, *, case: Case) -> str:
    model, optimizer, train_batches, val_batches = _three_setup(case)
    loss_fn, n = nn.MSELoss(), len(list(model.parameters()))
    steps = _validated_steps(seen, n)
    forwards = seen.get("forwards")
    history = seen.get("history")
    if not isinstance(forwards, list) or not all(isinstance(f, dict) for f in forwards):
        raise WireError("forwards missing")
    if not isinstance(history, (list, tuple)):
        fail("not-a-list", observed=f"fit returned {describe(history)}", expected="a list of (train, val) pairs",
             cause="the return line was lost", where="return history")
    training_forwards = [f for f in forwards if f.get("grad_enabled")]
    expected_steps = _THREE_EPOCHS * len(train_batches)
    if len(steps) != expected_steps or len(training_forwards) != expected_steps:
        fail("step-count", observed=f"{len(steps)} optimizer steps and {len(training_forwards)} forwards with "
             "gradients enabled", expected=f"{expected_steps} of each", cause="a batch skipped or trained twice, "
             "or validation run with gradients enabled", where="the training loop and the validation loop")
    k = 0
    for epoch in range(1, _THREE_EPOCHS + 1):
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
            _check_step_gradient(k, steps[k - 1]["grads"], [p.grad for p in model.parameters()],
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
                                         cause=_NOT_A_LOSS)
            if not abs(value - float(want)) <= 1e-4 * max(1.0, abs(float(want))):
                fail("wrong-history", observed=f"epoch {epoch}'s mean {name} loss is {value:.5f}",
                     expected=f"{float(want):.5f}", cause="a sum not divided by the number of batches, or the "
                     "loss of another batch", where="history.append(...)")
    if len(history) != _THREE_EPOCHS:
        fail("wrong-history", observed=f"{len(history)} history entries", expected=f"{_THREE_EPOCHS}",
             cause="an entry per batch, or the append outside the loop", where="history.append(...)")
    final = _checked_tensors(seen.get("final"), len(model.state_dict()), "final state")
    if not close_tensors(final, [t.detach() for t in model.state_dict().values()], atol=1e-4, rtol=1e-4, dtype=False):
        fail("wrong-weights", observed="the weights or BatchNorm statistics after training differ from the "
             "reference loop's", expected="the same state", cause="an extra update, or statistics updated "
             "during validation", where="the training and validation loops")
    return "fresh gradients at every step, training mode in every epoch, and losses kept without their graph"


def _judge_restore(seen: dict, *, case: Case) -> str:
    model, batches = _restore_setup(case)
    forwards, modes = seen.get("forwards"), seen.get("modes_after")
    if not isinstance(forwards, list) or not all(isinstance(f, dict) for f in forwards) \
            or not isinstance(modes, list) or len(modes) != 2 or not all(isinstance(m, dict) for m in modes):
        raise WireError("modes missing")
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
        raise WireError("results missing")
    for got in results:
        value = expect.finite_number("evaluate's result", got, where="evaluate's result", cause=_NOT_A_LOSS)
        if not abs(value - float(want)) <= 1e-5:
            fail("wrong-loss", observed=f"evaluate returned {value:.5f}", expected=f"{float(want):.5f}",
                 cause="a mean of batch means (the last batch is smaller), or another reduction",
                 where="the sum and the count")
    return "evaluates in eval mode without a graph, and hands the model back in the mode it found it"


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
            (_TRAIN_STEP_WRONG_BODY.replace("    model.train()\n", "") + "    return loss.detach()\n",
             "not-train-mode"),
        ),
        judge=_judge_train_step,
    )
)


add_answers(
    Answers(
        drill_id="loop-loss-stalls",
        solution=_STALLS_STARTER.replace(
            "            loss = loss_fn(model(x), y)\n            loss.backward()\n"
            "            optimizer.zero_grad(set_to_none=True)\n",
            "            optimizer.zero_grad(set_to_none=True)\n            loss = loss_fn(model(x), y)\n"
            "            loss.backward()\n",
        ),
        wrong_answers=(
            (_STALLS_STARTER.replace("            optimizer.zero_grad(set_to_none=True)\n", ""), "missing-zero-grad"),
            (_STALLS_STARTER.replace("            optimizer.step()\n", "").replace(
                "            loss = loss_fn", "            optimizer.step()\n            loss = loss_fn"),
             "grads-cleared-before-step"),
            (_STALLS_STARTER.replace("            optimizer.zero_grad(set_to_none=True)\n", "").replace(
                "    model.train()\n", "    model.train()\n    optimizer.zero_grad(set_to_none=True)\n"),
             "missing-zero-grad"),
        ),
        judge=_judge_stalls,
    )
)


add_answers(
    Answers(
        drill_id="loop-eval-changes",
        solution=_EVAL_STARTER.replace(
            "    correct = 0\n", "    model.eval()\n    correct = 0\n"
        ).replace("    for x, y in batches:\n        correct", "    with torch.inference_mode():\n"
                  "        for x, y in batches:\n            correct").replace(
            "        total += len(y)", "            total += len(y)"),
        wrong_answers=(
            (_EVAL_STARTER.replace("    correct = 0\n", "    model.eval()\n    correct = 0\n"), "eval-builds-graph"),
            (_EVAL_STARTER.replace("    for x, y in batches:\n        correct", "    with torch.no_grad():\n"
                                   "      for x, y in batches:\n        correct").replace(
                "        total += len(y)", "        total += len(y)"), "train-mode-eval"),
            (_EVAL_STARTER.replace("    correct = 0\n", "    model.eval()\n    correct = 0\n").replace(
                "    for x, y in batches:\n        correct", "    with torch.no_grad():\n"
                "      for x, y in batches:\n        correct").replace(
                "    return correct / total", "    return correct / len(batches)"), "wrong-accuracy"),
        ),
        judge=_judge_eval,
    )
)


add_answers(
    choice_answers(
        "loop-forget-zero-grad",
        options=(
            ("3.0: the second backward overwrites .grad", "backward() never overwrites: it adds into .grad, "
             "which is why training loops call zero_grad once per batch"),
            ("0.0: the second gradient cancels the first", "both calls produce +3; nothing subtracts"),
            ("6.0: each backward adds into .grad", "backward() accumulates: 3 + 3 = 6. Without zero_grad, an "
             "optimizer step would use the sum of every earlier batch's gradient"),
            ("an error: the graph was freed by the first call", "each call builds a new loss and a new graph, so "
             "nothing is reused; the error comes only when one graph is backwarded twice"),
        ),
        key="c",
    )
)


add_answers(
    Answers(
        drill_id="loop-early-stopping",
        solution=_ES_SOLUTION,
        wrong_answers=(
            (_ES_SOLUTION.replace("    if best_state is not None:\n        model.load_state_dict(best_state)\n", ""),
             "best-not-restored"),
            (_ES_SOLUTION.replace("copy.deepcopy(model.state_dict())", "model.state_dict()"), "best-not-restored"),
            (_ES_SOLUTION.replace("best_loss, bad_epochs = val_loss, 0", "best_loss = val_loss"), "stopped-early"),
            (_ES_SOLUTION.replace("bad_epochs >= patience", "bad_epochs > patience"), "stopped-late"),
            (_ES_SOLUTION.replace("val_loss < best_loss", "val_loss <= best_loss"), "tie-counted-as-best"),
            (_ES_SOLUTION.replace("    if best_state is not None:\n        model.load_state_dict(best_state)\n", "")
             .replace("                break\n",
                      "                model.load_state_dict(best_state)\n                break\n"),
             "not-restored-at-max-epochs"),
        ),
        judge=_judge_early_stopping,
    )
)


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


add_answers(
    choice_answers(
        "loop-optimizer-before-to",
        options=(
            ("AdamW allocates its moment buffers when it is constructed, on the CPU, and they stay there",
             "optimizer state is created lazily at the first step(), on each parameter's device: the order of "
             "construction does not place it"),
            ("it holds the tensors it was given: a move making new ones leaves it stepping stale copies",
             "module.to() usually swaps each Parameter's data in place, so the same objects survive; but "
             "a conversion that creates new Parameters leaves the optimizer updating orphans, silently. Moving "
             "first rules it out"),
            ("optimizer.step() raises a device-mismatch error at the first step",
             "usually it works (to() keeps the same Parameter objects); when it breaks, it breaks silently: the "
             "model simply stops changing"),
            ("moving the model afterwards silently resets the learning rate and momentum to their defaults",
             "the learning rate lives in optimizer.param_groups; moving the model never touches it"),
        ),
        key="b",
    )
)


add_answers(
    choice_answers(
        "loop-overfitting-remedy",
        options=(
            ("raise the learning rate, so that the model escapes the sharp minimum it sits in",
             "a larger step makes training noisier; it does not stop the model fitting the noise of its training "
             "set, which is what the widening gap shows"),
            ("train for more epochs: validation loss catches up with training loss later",
             "the gap has widened for 22 epochs: more epochs fit the training noise further"),
            ("regularise (weight decay, dropout, augmentation); keep the best-val weights",
             "the model is overfitting: regularisation limits how well it can fit noise, and early stopping "
             "keeps the epoch-8 weights instead of the last ones"),
            ("make the network wider and deeper, so it has the capacity to fit the validation set too",
             "more capacity fits the training set's noise even better: the gap grows"),
        ),
        key="c",
    )
)


add_answers(
    Answers(
        drill_id="loop-eval-restores-mode",
        solution=_RESTORE_STARTER.replace(
            "    model.eval()\n", "    was_training = model.training\n    model.eval()\n").replace(
            "    return total / count\n", "    model.train(was_training)\n    return total / count\n"),
        wrong_answers=(
            (_RESTORE_STARTER.replace("    return total / count\n", "    model.train()\n    return total / count\n"),
             "forced-train-mode"),
            (_RESTORE_STARTER.replace("    model.eval()\n", "    was_training = model.training\n").replace(
                "    return total / count\n", "    model.train(was_training)\n    return total / count\n"),
             "not-eval-mode"),
            (_RESTORE_STARTER.replace(
                "    model.eval()\n", "    was_training = model.training\n    model.eval()\n").replace(
                "        total += loss_fn(model(x), y) * len(y)\n        count += len(y)\n",
                "        total += loss_fn(model(x), y)\n        count += 1\n").replace(
                "    return total / count\n", "    model.train(was_training)\n    return total / count\n"),
             "wrong-loss"),
        ),
        judge=_judge_restore,
    )
)
