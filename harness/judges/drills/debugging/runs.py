"""Debugging drills on a run that goes wrong: a model that cannot overfit, a loss that explodes late, a training
script with three bugs."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from harness.contract.case import Case
from harness.contract.compare import close_tensors, malformed
from harness.contract.failure import fail
from harness.contract.wire import describe
from harness.drills.bank.debugging import (
    EXPLODE_LR,
    OVERFIT_STARTER,
    SCRIPT_BATCH,
    SCRIPT_EPOCHS,
    SCRIPT_LR,
    SCRIPT_STARTER,
    TRAIN_STARTER,
    explode_inputs,
    one_batch,
    script_inputs,
)
from harness.drills.core import Answers
from harness.drills.support import edited, with_fixes
from harness.judges.drills.whys import add_answers

# How close recorded weights and gradients must be to the reference step's (in float64)
_CLOSE = {"atol": 1e-5, "rtol": 1e-4, "dtype": False}


def _tensors_like(value: Any, like: list[torch.Tensor], what: str) -> list[torch.Tensor]:
    """`value` as a list of tensors shaped like `like` (None entries kept); malformed otherwise."""
    if not isinstance(value, list) or len(value) != len(like):
        malformed(f"{what}: not a list of {len(like)} tensors")
    for got, want in zip(value, like, strict=True):
        if got is not None and (not isinstance(got, torch.Tensor) or got.shape != want.shape):
            malformed(f"{what}: a tensor of the wrong shape")
    return value


def _judge_sgd_steps(seen: dict, model: nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]], lr: float, *,
                     mismatch: tuple[str, str], where: str,
                     mistakes: tuple[tuple[str, str, list[tuple[torch.Tensor, torch.Tensor]]], ...] = ()) -> int:
    """Replay plain SGD on `model` (the judge's own copy) batch by batch and compare with the recorded steps.

    Fails with: wrong-step-count, wrong-updates (the weights before a step are not where SGD puts them),
    no-gradient, nan-loss, stale-grads (the gradient is the sum of this step's and the earlier ones'), the code
    of a `mistakes` entry (code, cause, the batches that mistake trains on) whose batch gives the recorded
    gradient, and `mismatch` = (code, cause) for any other gradient. Returns the number of steps.
    """
    records = seen.get("steps")
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        malformed("step records")
    if len(records) != len(batches):
        fail("wrong-step-count", observed=f"{len(records)} optimizer steps for {len(batches)} mini-batches",
             expected="one optimizer.step() per mini-batch", cause="a step outside the batch loop, or a loss summed "
             "over the batches and stepped once", where=where)
    params = list(model.parameters())
    history: list[list[torch.Tensor]] = []
    for step, (record, (x, y)) in enumerate(zip(records, batches, strict=True)):
        if isinstance(record.get("params"), list) and len(record["params"]) != len(params):
            fail("wrong-updates", observed=f"the optimizer updates {len(record['params'])} tensors",
                 expected=f"all {len(params)} parameters of the model", cause="the optimizer was built on a part of "
                 "the model (or on something else than model.parameters())", where=where)
        got_params = _tensors_like(record.get("params"), params, "params")
        got_grads = _tensors_like(record.get("grads"), params, "grads")
        if any(p is None for p in got_params) or not close_tensors(got_params, [p.detach() for p in params], **_CLOSE):
            fail("wrong-updates", observed=f"before step {step} the weights differ from plain SGD's",
                 expected=f"w <- w - {lr} * grad at every step, from the weights the model came with",
                 cause="the weights were changed by something else than one SGD step per batch (another learning "
                 "rate, a re-initialisation, a second step)", where=where)
        if any(g is None for g in got_grads):
            fail("no-gradient", observed=f"optimizer.step() number {step} was called with no gradient",
                 expected="the gradient of this batch's loss in every parameter's .grad",
                 cause="the gradients are cleared between backward() and step(), so step() has nothing to apply",
                 where=f"{where}: zero_grad() before the forward, step() right after backward()")
        if not all(bool(torch.isfinite(g).all()) for g in got_grads):
            fail("nan-loss", observed=f"non-finite gradients at step {step}",
                 expected="finite gradients", cause="a nan or inf in the forward: a division by zero (a standard "
                 "deviation of 0 in a constant feature), a log of 0", where=f"{where}: look at the inputs first")
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        fresh = [p.grad.detach().clone() for p in params]
        if not close_tensors(got_grads, fresh, **_CLOSE):
            summed = [sum(g[i] for g in history + [fresh]) for i in range(len(params))]
            if history and close_tensors(got_grads, summed, **_CLOSE):
                fail("stale-grads", observed=f"at step {step} .grad holds the sum of the gradients of steps 0 to "
                     f"{step}", expected="the gradient of this mini-batch alone",
                     cause="backward() adds into .grad and nothing clears it between steps: the steps grow until "
                     "the loss explodes", where=f"{where}: optimizer.zero_grad(set_to_none=True) at every step")
            for code, cause, wrong_batches in mistakes:
                model.zero_grad(set_to_none=True)
                F.cross_entropy(model(wrong_batches[step][0]), wrong_batches[step][1]).backward()
                if close_tensors(got_grads, [p.grad.detach() for p in params], **_CLOSE):
                    fail(code, observed=f"the gradient at step {step} is that of another mini-batch, the one "
                         "this mistake makes", expected=f"the gradient of F.cross_entropy on mini-batch {step}",
                         cause=cause, where=where)
            fail(mismatch[0], observed=f"the gradient at step {step} is not that of the expected mini-batch",
                 expected=f"the gradient of F.cross_entropy on mini-batch {step}", cause=mismatch[1], where=where)
        history.append(fresh)
        with torch.no_grad():
            for p, g in zip(params, fresh, strict=True):
                p -= lr * g
    final = _tensors_like(seen.get("final"), params, "final")
    if any(p is None for p in final) or not close_tensors(final, [p.detach() for p in params], **_CLOSE):
        fail("wrong-updates", observed="the weights after training differ from plain SGD's",
             expected=f"w <- w - {lr} * grad after the last step", cause="the last step is missing or altered",
             where=where)
    return len(records)


def _judge_overfit(seen: dict, *, case: Case) -> str:
    _, y = one_batch(case)
    first, last = seen.get("first"), seen.get("last")
    for out in (first, last):
        if not isinstance(out, torch.Tensor) or out.shape != (32, 5) or not out.is_floating_point():
            fail("wrong-shape", observed=f"the model returned {describe(out)}", expected="(32, 5): one logit per class",
                 cause="the layers do not map 20 features to 5 classes", where="make_model")
    if bool((first >= 0).all() and (first <= 1).all()):
        fail("probabilities", observed=f"every output in [0, 1] (first row {[round(v, 3) for v in first[0].tolist()]})",
             expected="raw logits (any real numbers): F.cross_entropy applies log_softmax itself",
             cause="a Softmax or Sigmoid layer at the end of the model", where="the last layer of make_model")
    final = float(F.cross_entropy(last.float(), y))
    if not final < 0.05:
        fail("cannot-overfit", observed=f"loss {final:.3f} after 150 Adam steps on one batch of 32",
             expected="below 0.05: a healthy model memorises one batch",
             cause="something bounds the logits or cuts the gradient (a squashing last layer, a detach)",
             where="the layers of make_model and its forward")
    return f"the model overfits one batch to loss {final:.2e}: it outputs logits"


def _judge_train(seen: dict, *, case: Case) -> str:
    model, batches = explode_inputs(case)
    _judge_sgd_steps(seen, model, batches, EXPLODE_LR, where="where optimizer.zero_grad() sits",
                     mismatch=("wrong-gradient", "the loss is not F.cross_entropy of this batch"))
    return "six SGD steps, each on its own batch's gradient"


def _script_batches(case: Case, *, per_feature: bool = True,
                    two_perms: bool = False) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The mini-batches the fixed script trains on: features standardised per feature, one permutation per
    epoch; or those of two mistakes: one mean and std over the whole tensor, x and y shuffled by two
    permutations."""
    _, x, y = script_inputs(case)
    x = (x - x.mean(0)) / x.std(0).clamp_min(1e-6) if per_feature else (x - x.mean()) / x.std()
    generator = torch.Generator().manual_seed(case.seeded(62))
    batches = []
    for _ in range(SCRIPT_EPOCHS):
        perm = torch.randperm(len(x), generator=generator)
        xs, ys = x[perm], y[torch.randperm(len(y), generator=generator) if two_perms else perm]
        batches += [(xs[i:i + SCRIPT_BATCH], ys[i:i + SCRIPT_BATCH]) for i in range(0, len(x), SCRIPT_BATCH)]
    return batches


def _judge_training_script(seen: dict, *, case: Case) -> str:
    model, _, _ = script_inputs(case)
    if seen.get("steps") == []:
        fail("no-steps", observed="train returned without a single optimizer step",
             expected=f"{len(_script_batches(case))} SGD steps, one per mini-batch",
             cause="the batch loop never ran: if the nan was 'fixed' by dropping the rows that hold one, every row "
             "holds one (a constant feature has std 0, and (x - mean) / std is 0 / 0 in that column of every row), so "
             "no row is left; otherwise the optimizer.step() call is missing", where="the normalization of x and "
             "the rows it keeps")
    steps = _judge_sgd_steps(
        seen, model, _script_batches(case), SCRIPT_LR, where="the training script",
        mismatch=("wrong-batch", "the script trains on other inputs or labels than the standardised, shuffled "
                  "data: print the first mini-batch and compare"),
        mistakes=(("misaligned-labels", "the labels no longer belong to their inputs: x and y are shuffled with two "
                   "different permutations", _script_batches(case, two_perms=True)),
                  ("global-standardisation", "the features are standardised with one mean and one std over the whole "
                   "tensor: x.mean() and x.std() instead of x.mean(0) and x.std(0), so features on different "
                   "scales stay on different scales", _script_batches(case, per_feature=False))))
    return f"{steps} clean SGD steps: finite, on aligned (x, y) pairs, each on its own mini-batch's gradient"


_SCRIPT_SOLUTION = '''import torch
import torch.nn.functional as F


def train(model, x, y, epochs, batch_size, lr, generator):
    mean, std = x.mean(0), x.std(0).clamp_min(1e-6)  # a constant column has std 0: 0 / 0 is nan
    x = (x - mean) / std
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    model.train()
    for epoch in range(epochs):
        perm = torch.randperm(len(x), generator=generator)  # one permutation for inputs and labels
        xs, ys = x[perm], y[perm]
        for start in range(0, len(x), batch_size):
            xb, yb = xs[start:start + batch_size], ys[start:start + batch_size]
            optimizer.zero_grad(set_to_none=True)  # every step starts from clean gradients
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            optimizer.step()
    return model
'''


_SCRIPT_NAN_FIX = ("mean, std = x.mean(0), x.std(0)\n", "mean, std = x.mean(0), x.std(0) + 1e-8\n")


_SCRIPT_PERM_FIX = ("        xs = x[torch.randperm(len(x), generator=generator)]\n"
                    "        ys = y[torch.randperm(len(y), generator=generator)]\n",
                    "        perm = torch.randperm(len(x), generator=generator)\n        xs, ys = x[perm], y[perm]\n")


_SCRIPT_GRAD_FIX = ("    optimizer.zero_grad(set_to_none=True)\n    for epoch", "    for epoch",
                    "            loss = F.cross_entropy", "            optimizer.zero_grad(set_to_none=True)\n"
                    "            loss = F.cross_entropy")


def _script_fixed(*fixes: tuple[str, ...]) -> str:
    return with_fixes(SCRIPT_STARTER, *fixes)


add_answers(
    Answers(
        drill_id="debugging-cannot-overfit",
        solution='''from torch import nn


def make_model(features, classes):
    # F.cross_entropy takes raw logits: no Softmax at the end
    return nn.Sequential(nn.Linear(features, 64), nn.ReLU(), nn.Linear(64, classes))
''',
        wrong_answers=(
            (edited(OVERFIT_STARTER, ("nn.Softmax(dim=1)", "nn.Sigmoid()")), "probabilities"),
            (edited(OVERFIT_STARTER, ("nn.Softmax(dim=1)", "nn.Tanh()")), "cannot-overfit"),
            (edited(OVERFIT_STARTER, ("nn.Softmax(dim=1)", "nn.Softmax(dim=0)")), "probabilities"),
        ),
        judge=_judge_overfit,
    )
)


add_answers(
    Answers(
        drill_id="debugging-exploding-late",
        solution='''import torch
import torch.nn.functional as F


def train(model, batches, lr):
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    model.train()
    for x, y in batches:
        optimizer.zero_grad(set_to_none=True)  # each step's gradient is its own
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
''',
        wrong_answers=(
            (edited(TRAIN_STARTER,
                    ("        F.cross_entropy(model(x), y).backward()\n",
                     "        F.cross_entropy(model(x), y).backward()\n        optimizer.zero_grad()\n")),
             "no-gradient"),
            (edited(TRAIN_STARTER,
                    ("    for x, y in batches:\n        F.cross_entropy(model(x), y).backward()\n"
                     "        optimizer.step()\n",
                     "    sum(F.cross_entropy(model(x), y) for x, y in batches).backward()\n"
                     "    optimizer.step()\n")), "wrong-step-count"),
        ),
        judge=_judge_train,
    )
)


add_answers(
    Answers(
        drill_id="debugging-train-script",
        solution=_SCRIPT_SOLUTION,
        wrong_answers=(
            (_script_fixed(_SCRIPT_PERM_FIX, _SCRIPT_GRAD_FIX), "nan-loss"),
            (_script_fixed(_SCRIPT_NAN_FIX, _SCRIPT_GRAD_FIX), "misaligned-labels"),
            (_script_fixed(_SCRIPT_NAN_FIX, _SCRIPT_PERM_FIX), "stale-grads"),
            (edited(_SCRIPT_SOLUTION, ("x.mean(0), x.std(0).clamp_min(1e-6)", "x.mean(), x.std()")),
             "global-standardisation"),
            # the nan "fixed" by dropping the rows that hold one: no row is left, nothing trains
            (edited(_script_fixed(_SCRIPT_PERM_FIX, _SCRIPT_GRAD_FIX),
                    ("    x = (x - mean) / std\n",
                     "    x = (x - mean) / std\n    keep = ~x.isnan().any(1)\n"
                     "    x, y = x[keep], y[keep]\n")), "no-steps"),
        ),
        judge=_judge_training_script,
    )
)
