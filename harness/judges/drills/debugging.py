"""The judge side of the debugging drills (`harness.drills.bank.debugging`): judges and the references
they recompute, reference solutions, planted wrong answers, explain drills' options and keys.

A graded kernel never mounts this package (`harness.judges`).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from harness.contract.case import Case
from harness.contract.compare import close_tensors, close_values, isclose_number, same_values
from harness.contract.failure import fail
from harness.contract.wire import WireError, describe
from harness.drills.bank.debugging import (
    _EXPLODE_LR,
    _MEANS_STARTER,
    _OVERFIT_STARTER,
    _SCRIPT_BATCH,
    _SCRIPT_EPOCHS,
    _SCRIPT_LR,
    _SCRIPT_STARTER,
    _TRAIN_STARTER,
    _dead_inputs,
    _explode_inputs,
    _means_inputs,
    _nan_inputs,
    _norms_inputs,
    _one_batch,
    _prior_inputs,
    _script_inputs,
    _tower_inputs,
)
from harness.drills.core import Answers, choice_answers
from harness.drills.support import with_fixes
from harness.judges.drills.whys import add_answers

# How close recorded weights and gradients must be to the reference step's (in float64)
_CLOSE = {"atol": 1e-5, "rtol": 1e-4, "dtype": False}


def _tensors_like(value: Any, like: list[torch.Tensor], what: str) -> list[torch.Tensor]:
    """`value` as a list of tensors shaped like `like` (None entries kept); WireError otherwise."""
    if not isinstance(value, list) or len(value) != len(like):
        raise WireError(f"{what}: not a list of {len(like)} tensors")
    for got, want in zip(value, like, strict=True):
        if got is not None and (not isinstance(got, torch.Tensor) or got.shape != want.shape):
            raise WireError(f"{what}: a tensor of the wrong shape")
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
        raise WireError("malformed step records")
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
    _, y = _one_batch(case)
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


def _judge_relu_means(seen: dict, *, case: Case) -> str:
    model, x = _means_inputs(case)
    with torch.no_grad():
        first = model[1](model[0](x))
        second = model[2](first)
    want = {"1": float(first.mean()), "2.1": float(second.mean())}
    got = seen.get("means")
    values_ok = isinstance(got, dict) and set(got) == set(want) and all(
        (isinstance(got[k], (int, float)) or isinstance(got[k], torch.Tensor) and got[k].numel() == 1)
        and isclose_number(float(got[k]), v, rel_tol=1e-5, abs_tol=1e-6)
        for k, v in want.items())
    if not values_ok:
        fail("wrong-means", observed=f"{describe(got)}", expected=f"{want}",
             cause="not the mean output of each ReLU, keyed by its name in named_modules() (nested ones included)",
             where="what your hook stores")
    if seen.get("hooks") != 0:
        fail("hooks-left", observed=f"{seen.get('hooks')} hooks left on the model", expected="none",
             cause="the handles of register_forward_hook were not removed", where="after the forward pass")
    if seen.get("propagated") is not True:
        fail("swallowed-error", observed="relu_means returned normally although the model's forward raised",
             expected="the RuntimeError reaches the caller", cause="an except clause swallows the error: the caller "
             "never learns that the forward failed", where="what removes the handles when the forward raises")
    if seen.get("hooks_on_error") != 0:
        fail("hooks-left-on-error", observed=f"{seen.get('hooks_on_error')} hooks left after the forward raised",
             expected="none: remove them in a finally block", cause="the removal is skipped by the exception",
             where="what happens to the handles when the forward raises")
    return ("the mean of each ReLU's output; hooks removed also when the forward raises (self-checked: counted "
            "inside your answer's own process)")


_MEANS_SOLUTION = '''import torch
from torch import nn


def relu_means(model, x):
    means = {}
    handles = [m.register_forward_hook(lambda mod, args, out, name=name: means.__setitem__(name, out.mean().item()))
               for name, m in model.named_modules() if isinstance(m, nn.ReLU)]
    try:
        with torch.no_grad():
            model(x)
    finally:  # runs on the way out of an exception too
        for handle in handles:
            handle.remove()
    return means
'''


def _judge_train(seen: dict, *, case: Case) -> str:
    model, batches = _explode_inputs(case)
    _judge_sgd_steps(seen, model, batches, _EXPLODE_LR, where="where optimizer.zero_grad() sits",
                     mismatch=("wrong-gradient", "the loss is not F.cross_entropy of this batch"))
    return "six SGD steps, each on its own batch's gradient"


def _reference_nan_op(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> str | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with torch.autograd.detect_anomaly():
                F.cross_entropy(model(x), y).backward()
        except RuntimeError as error:
            text = str(error)
            return text.split("'")[1] if text.startswith("Function '") else None
    return None


def _judge_nan_op(seen: dict, *, case: Case) -> str:
    names, left_on = seen.get("names"), seen.get("left_on")
    inputs = _nan_inputs(case)
    if not isinstance(names, list) or len(names) != len(inputs) or not isinstance(left_on, list):
        raise WireError("malformed observation")
    wanted = []
    for (model, x, y), got in zip(inputs, names, strict=True):
        want = _reference_nan_op(model, x, y)
        wanted.append(want)
        if not isinstance(got, (str, type(None))) or got != want:
            fail("wrong-op", observed=f"nan_backward_op returned {describe(got)}",
                 expected=f"{want!r}: the name of the backward function that anomaly mode reports",
                 cause="the loss's own grad_fn, the whole error message, or a search without anomaly mode (a plain "
                 "backward does not stop at the op that made the nan)",
                 where="catch the RuntimeError that detect_anomaly raises; its message names the Function")
    if any(left_on):
        fail("anomaly-left-on", observed="anomaly detection is still enabled after nan_backward_op returned",
             expected="anomaly mode only inside your function",
             cause="torch.autograd.set_detect_anomaly(True) with no matching False: every later backward of the "
             "process runs slowly, recording tracebacks", where="use the context manager torch.autograd."
             "detect_anomaly(), which restores the mode when it exits")
    return f"anomaly mode found {', '.join(map(str, wanted))}, and was off again afterwards"


_NAN_SOLUTION = '''import re
import warnings

import torch
import torch.nn.functional as F


def nan_backward_op(model, x, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # anomaly mode warns that it is on and prints the forward's traceback
        try:
            with torch.autograd.detect_anomaly():  # restores the mode on exit, even on an error
                F.cross_entropy(model(x), y).backward()
        except RuntimeError as error:
            found = re.search(r"Function '(\\w+)' returned nan", str(error))
            if found:
                return found.group(1)
            raise
    return None
'''


def _reference_first_nonfinite(model: nn.Module, x: torch.Tensor) -> str | None:
    order: list[str] = []
    handles = [m.register_forward_hook(lambda mod, args, out, name=name: order.append(name)
                                       if not bool(torch.isfinite(out).all()) else None)
               for name, m in model.named_modules() if not list(m.children())]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for handle in handles:
            handle.remove()
    return order[0] if order else None


def _judge_first_nonfinite(seen: dict, *, case: Case) -> str:
    model, inputs = _tower_inputs(case)
    names = seen.get("names")
    if not isinstance(names, list) or len(names) != len(inputs):
        raise WireError("malformed observation")
    labels = ("small inputs", "inputs of 1e4", "an input holding one inf")
    for label, x, got in zip(labels, inputs, names, strict=True):
        want = _reference_first_nonfinite(model, x)
        if not isinstance(got, (str, type(None))) or got != want:
            fail("wrong-module", observed=f"on {label} first_nonfinite returned {describe(got)}",
                 expected=f"{want!r}: the first module, in the order the forward runs them, whose output holds an "
                 "inf or a nan", cause="the last non-finite module instead of the first, nan looked for without inf "
                 "(exp overflows to inf; the nan comes one layer later), or named_modules() order taken for run "
                 "order", where="record names in the hook as the forward calls it; test torch.isfinite")
    if seen.get("hooks") != 0:
        fail("hooks-left", observed=f"{seen.get('hooks')} hooks left on the model", expected="none",
             cause="the handles of register_forward_hook were not removed", where="a finally block after the forward")
    if seen.get("hooks_on_error") != 0:
        fail("hooks-left-on-error", observed=f"{seen.get('hooks_on_error')} hooks left after the forward raised",
             expected="none: remove them in a finally block", cause="the removal is skipped by the exception, and "
             "a model that just produced a nan is the one most likely to raise next", where="try: model(x) finally: "
             "remove every handle")
    return ("the first non-finite activation in run order, None when all are finite; no hook left behind "
            "(self-checked: counted inside your answer's own process)")


_NONFINITE_SOLUTION = '''import torch


def first_nonfinite(model, x):
    bad = []

    def hook(name):
        def record(module, args, out):
            if not torch.isfinite(out).all():
                bad.append(name)
        return record

    handles = [m.register_forward_hook(hook(name)) for name, m in model.named_modules() if not list(m.children())]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for handle in handles:
            handle.remove()
    return bad[0] if bad else None
'''


def _judge_dead(seen: dict, *, case: Case) -> str:
    model, x = _dead_inputs(case)
    with torch.no_grad():
        first = model[0](x)
        second = model[1](first)
    want = {"0.1": float((first == 0).all(0).double().mean()), "1.1": float((second == 0).all(0).double().mean())}
    got = seen.get("fractions")
    if not isinstance(got, dict) or set(got) != set(want):
        fail("wrong-keys", observed=f"keys {sorted(got) if isinstance(got, dict) else describe(got)}",
             expected=f"the ReLUs' names in named_modules(): {sorted(want)}",
             cause="keys made up (class names, positions) or nested ReLUs missed", where="the keys of your dict")
    for name, value in want.items():
        number = got[name]
        ok = isinstance(number, (int, float, torch.Tensor)) and not isinstance(number, bool) and (
            not isinstance(number, torch.Tensor) or number.numel() == 1)
        if not ok or not abs(float(number) - value) <= 1e-6:
            fail("wrong-value", observed=f"{name}: {describe(number)}",
                 expected=f"{value:.4f}: the share of the layer's units that output 0 for every example of the batch",
                 cause="the share of zero entries (a live unit is 0 on about half of the examples), or units zero on "
                 "any example rather than on all", where="(out == 0).all(dim=0).float().mean()")
    if seen.get("hooks") != 0:
        fail("hooks-left", observed=f"{seen.get('hooks')} hooks left on the model", expected="none",
             cause="the handles of register_forward_hook were not removed", where="a finally block after the forward")
    return "the share of dead units of every ReLU: " + ", ".join(f"{k} {v:.2f}" for k, v in want.items())


_DEAD_SOLUTION = '''import torch
from torch import nn


def dead_relu_fraction(model, x):
    fractions = {}

    def hook(name):
        def record(module, args, out):
            fractions[name] = (out == 0).all(dim=0).float().mean().item()  # a unit silent on the whole batch
        return record

    handles = [m.register_forward_hook(hook(name)) for name, m in model.named_modules() if isinstance(m, nn.ReLU)]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for handle in handles:
            handle.remove()
    return fractions
'''


def _script_batches(case: Case, *, per_feature: bool = True,
                    two_perms: bool = False) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The mini-batches the fixed script trains on: features standardised per feature, one permutation per
    epoch; or those of two mistakes: one mean and std over the whole tensor, x and y shuffled by two
    permutations."""
    _, x, y = _script_inputs(case)
    x = (x - x.mean(0)) / x.std(0).clamp_min(1e-6) if per_feature else (x - x.mean()) / x.std()
    generator = torch.Generator().manual_seed(case.seeded(62))
    batches = []
    for _ in range(_SCRIPT_EPOCHS):
        perm = torch.randperm(len(x), generator=generator)
        xs, ys = x[perm], y[torch.randperm(len(y), generator=generator) if two_perms else perm]
        batches += [(xs[i:i + _SCRIPT_BATCH], ys[i:i + _SCRIPT_BATCH]) for i in range(0, len(x), _SCRIPT_BATCH)]
    return batches


def _judge_training_script(seen: dict, *, case: Case) -> str:
    model, _, _ = _script_inputs(case)
    if seen.get("steps") == []:
        fail("no-steps", observed="train returned without a single optimizer step",
             expected=f"{len(_script_batches(case))} SGD steps, one per mini-batch",
             cause="the batch loop never ran: if the nan was 'fixed' by dropping the rows that hold one, every row "
             "holds one (a constant feature has std 0, and (x - mean) / std is 0 / 0 in that column of every row), so "
             "no row is left; otherwise the optimizer.step() call is missing", where="the normalization of x and "
             "the rows it keeps")
    steps = _judge_sgd_steps(
        seen, model, _script_batches(case), _SCRIPT_LR, where="the training script",
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
    return with_fixes(_SCRIPT_STARTER, *fixes)


def _judge_grad_norms(seen: dict, *, case: Case) -> str:
    model, x, y = _norms_inputs(case)
    F.cross_entropy(model(x), y).backward()
    want = {name: float(torch.linalg.vector_norm(p.grad)) for name, p in model.named_parameters()
            if p.grad is not None}
    got = seen.get("norms")
    if not isinstance(got, dict) or set(got) != set(want):
        fail("wrong-keys", observed=f"keys {sorted(got) if isinstance(got, dict) else describe(got)}",
             expected=f"the names of the parameters that have a gradient: {sorted(want)}",
             cause="frozen parameters (grad None) reported, or names made up", where="model.named_parameters(), "
             "skipping p.grad is None")
    weights = {name: float(torch.linalg.vector_norm(p.detach())) for name, p in model.named_parameters()}
    for name, value in want.items():
        number = got[name]
        if not isinstance(number, (int, float)) or isinstance(number, bool):
            fail("not-a-float", observed=f"{name}: {describe(number)}",
                 expected=f"{value:.6g}, the L2 norm of its .grad, as a Python float",
                 cause="the norm left as a tensor (or another type): the caller logs plain numbers",
                 where="torch.stack(norms).tolist()")
        if isclose_number(number, value, rel_tol=1e-4, abs_tol=1e-9):
            continue
        if isclose_number(number, value ** 2, rel_tol=1e-4, abs_tol=1e-12):
            code, cause = "squared-norm", f"{number:.6g} is the square of the norm: the L2 norm is the square root"
        elif isclose_number(number, weights[name], rel_tol=1e-4, abs_tol=1e-9):
            code, cause = "weight-norm", f"{number:.6g} is the norm of the parameter itself, not of its .grad"
        else:
            code, cause = "wrong-value", "not the L2 norm of the parameter's .grad"
        fail(code, observed=f"{name}: {describe(number)}",
             expected=f"{value:.6g}, the L2 norm of its .grad, as a Python float", cause=cause,
             where="torch.linalg.vector_norm(p.grad)")
    if seen.get("syncs") != 1:
        fail("sync-per-param", observed=f"{seen.get('syncs')} host syncs for {len(want)} norms",
             expected="exactly 1: stack the norms on the device, bring them to Python once",
             cause="float() or .item() on each norm waits for the device once per parameter (at every logged step)",
             where="torch.stack(norms).tolist()")
    first, last = want["0.weight"], want[f"{len(model) - 1}.weight"]
    return f"per-parameter gradient norms in one sync (first layer {first:.2e}, last {last:.2e}: vanishing)"


_NORMS_SOLUTION = '''import torch


def grad_norms(model):
    named = [(name, p.grad) for name, p in model.named_parameters() if p.grad is not None]
    norms = torch.stack([torch.linalg.vector_norm(g) for _, g in named])  # still on the device
    return dict(zip([name for name, _ in named], norms.tolist()))  # one host sync
'''


def _judge_prior(seen: dict, *, case: Case) -> str:
    layer, labels, classes = _prior_inputs(case)
    prior = torch.bincount(labels, minlength=classes).double() / len(labels)
    bias = seen.get("bias")
    if not isinstance(bias, torch.Tensor) or bias.shape != (classes,) or not bias.is_floating_point():
        fail("wrong-shape", observed=f"the bias is {describe(bias)}", expected=f"a float tensor of shape ({classes},)",
             cause="the bias replaced by something else", where="init_output_bias_")
    if not torch.isfinite(bias).all() or not close_values(torch.softmax(bias.double(), 0), prior, atol=1e-5,
                                                              dtype=False):
        shown = [round(v, 3) for v in torch.softmax(bias.double(), 0).tolist()]
        fail("wrong-prior", observed=f"softmax(bias) = {shown}",
             expected=f"the class frequencies {[round(v, 3) for v in prior.tolist()]}: bias = log(frequency) (plus "
             "any constant)", cause="the frequencies themselves as the bias (softmax needs their log), or counts of "
             "the wrong classes", where="bias = log(bincount(labels, minlength=classes) / len(labels))")
    if seen.get("same_bias") is not True or seen.get("requires_grad") is not True:
        fail("replaced-parameter", observed="layer.bias is a new tensor, or no longer requires grad",
             expected="the same Parameter, filled in place", cause="assigning a new nn.Parameter: an optimizer built "
             "before the call still updates the old tensor, which the model no longer uses",
             where="with torch.no_grad(): layer.bias.copy_(...)")
    weight = seen.get("weight")
    if not isinstance(weight, torch.Tensor) or weight.shape != layer.weight.shape or not same_values(
            weight, layer.weight.detach(), dtype=False):
        fail("weights-changed", observed="the layer's weight changed", expected="the weight left as it was",
             cause="the weight was re-initialised along with the bias", where="touch only layer.bias")
    entropy = float(-(prior * prior.log()).sum())
    return (f"softmax(bias) equals the class frequencies: the loss at init is about their entropy {entropy:.3f}, "
            f"not ln({classes}) = {math.log(classes):.3f}")


_PRIOR_SOLUTION = '''import torch


def init_output_bias_(layer, labels, classes):
    frequency = torch.bincount(labels, minlength=classes).float() / len(labels)
    with torch.no_grad():  # an in-place change of a parameter, outside autograd
        layer.bias.copy_(frequency.log())  # softmax(log p) = p
'''


add_answers(
    Answers(
        drill_id="debugging-cannot-overfit",
        solution='''from torch import nn


def make_model(features, classes):
    # F.cross_entropy takes raw logits: no Softmax at the end
    return nn.Sequential(nn.Linear(features, 64), nn.ReLU(), nn.Linear(64, classes))
''',
        wrong_answers=(
            (_OVERFIT_STARTER.replace("nn.Softmax(dim=1)", "nn.Sigmoid()"), "probabilities"),
            (_OVERFIT_STARTER.replace("nn.Softmax(dim=1)", "nn.Tanh()"), "cannot-overfit"),
            (_OVERFIT_STARTER.replace("nn.Softmax(dim=1)", "nn.Softmax(dim=0)"), "probabilities"),
        ),
        judge=_judge_overfit,
    )
)


add_answers(
    Answers(
        drill_id="debugging-hooks-cleanup",
        solution=_MEANS_SOLUTION,
        wrong_answers=(
            (_MEANS_STARTER.replace("    for handle in handles:\n        handle.remove()\n", ""), "hooks-left"),
            (_MEANS_SOLUTION.replace("name, m in model.named_modules()", "name, m in model.named_children()"),
             "wrong-means"),
            (_MEANS_SOLUTION.replace("    finally:  # runs on the way out of an exception too\n",
                                     "    except RuntimeError:\n        pass\n    finally:\n"), "swallowed-error"),
        ),
        judge=_judge_relu_means,
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
            (_TRAIN_STARTER.replace("        F.cross_entropy(model(x), y).backward()\n",
                                    "        F.cross_entropy(model(x), y).backward()\n        optimizer.zero_grad()\n"),
             "no-gradient"),
            (_TRAIN_STARTER.replace("    for x, y in batches:\n        F.cross_entropy(model(x), y).backward()\n"
                                    "        optimizer.step()\n",
                                    "    sum(F.cross_entropy(model(x), y) for x, y in batches).backward()\n"
                                    "    optimizer.step()\n"), "wrong-step-count"),
        ),
        judge=_judge_train,
    )
)


add_answers(
    choice_answers(
        "debugging-init-loss",
        options=(
            ("normal: every loss always starts out high", "an untrained model should be unsure: about ln(10) = 2.3 "
             "over 10 classes, not ten times that"),
            ("logits far too large: confidently wrong", "a near-uniform softmax costs ln(10) = 2.3; 23 means large "
             "logits at init (a badly scaled last layer, unnormalised inputs)"),
            ("the learning rate is set too low for this model",
             "no step has been taken at step 0: the learning rate cannot change the first loss"),
            ("the dataset is too small for the model to learn",
             "the size of the data does not change the loss of an untrained model on one batch"),
        ),
        key="b",
    )
)


add_answers(
    Answers(
        drill_id="debugging-detect-anomaly",
        solution=_NAN_SOLUTION,
        wrong_answers=(
            (_NAN_SOLUTION.replace("with torch.autograd.detect_anomaly():  # restores the mode on exit, even on an "
                                   "error\n                F.cross_entropy",
                                   "torch.autograd.set_detect_anomaly(True)\n            if True:\n"
                                   "                F.cross_entropy"), "anomaly-left-on"),
            (_NAN_SOLUTION.replace("return found.group(1)", "return str(error)"), "wrong-op"),
            ('''import torch
import torch.nn.functional as F


def nan_backward_op(model, x, y):
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    if any(not torch.isfinite(p.grad).all() for p in model.parameters()):
        return type(loss.grad_fn).__name__
    return None
''', "wrong-op"),
        ),
        judge=_judge_nan_op,
    )
)


add_answers(
    Answers(
        drill_id="debugging-first-nonfinite",
        solution=_NONFINITE_SOLUTION,
        wrong_answers=(
            (_NONFINITE_SOLUTION.replace("return bad[0] if bad else None", "return bad[-1] if bad else None"),
             "wrong-module"),
            (_NONFINITE_SOLUTION.replace("if not torch.isfinite(out).all():", "if torch.isnan(out).any():"),
             "wrong-module"),
            (_NONFINITE_SOLUTION.replace("return bad[0] if bad else None",
                                         "names = [n for n, _ in model.named_modules()]\n"
                                         "    return min(bad, key=names.index) if bad else None"), "wrong-module"),
            (_NONFINITE_SOLUTION.replace("    try:\n        with torch.no_grad():\n            model(x)\n"
                                         "    finally:\n        for handle in handles:\n            handle.remove()\n",
                                         "    with torch.no_grad():\n        model(x)\n"), "hooks-left"),
            (_NONFINITE_SOLUTION.replace("    try:\n        with torch.no_grad():\n            model(x)\n"
                                         "    finally:\n        for handle in handles:\n            handle.remove()\n",
                                         "    with torch.no_grad():\n        model(x)\n"
                                         "    for handle in handles:\n        handle.remove()\n"),
             "hooks-left-on-error"),
        ),
        judge=_judge_first_nonfinite,
    )
)


add_answers(
    Answers(
        drill_id="debugging-dead-relus",
        solution=_DEAD_SOLUTION,
        wrong_answers=(
            (_DEAD_SOLUTION.replace("(out == 0).all(dim=0).float().mean()", "(out == 0).float().mean()"),
             "wrong-value"),
            (_DEAD_SOLUTION.replace("(out == 0).all(dim=0)", "(out == 0).any(dim=0)"), "wrong-value"),
            (_DEAD_SOLUTION.replace("fractions[name] =", "fractions[f'relu{len(fractions)}'] ="), "wrong-keys"),
        ),
        judge=_judge_dead,
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
            (_SCRIPT_SOLUTION.replace("x.mean(0), x.std(0).clamp_min(1e-6)", "x.mean(), x.std()"),
             "global-standardisation"),
            # the nan "fixed" by dropping the rows that hold one: no row is left, nothing trains
            (_script_fixed(_SCRIPT_PERM_FIX, _SCRIPT_GRAD_FIX).replace(
                "    x = (x - mean) / std\n", "    x = (x - mean) / std\n    keep = ~x.isnan().any(1)\n"
                "    x, y = x[keep], y[keep]\n"), "no-steps"),
        ),
        judge=_judge_training_script,
    )
)


add_answers(
    Answers(
        drill_id="debugging-grad-norms",
        solution=_NORMS_SOLUTION,
        wrong_answers=(
            (_NORMS_SOLUTION.replace("torch.linalg.vector_norm(g) for", "torch.linalg.vector_norm(g) ** 2 for"),
             "squared-norm"),
            ('''import torch


def grad_norms(model):
    return {name: p.grad.norm().item() for name, p in model.named_parameters() if p.grad is not None}
''', "sync-per-param"),
            ('''import torch


def grad_norms(model):
    norms = {name: (p.grad.norm() if p.grad is not None else torch.zeros(())) for name, p in model.named_parameters()}
    values = torch.stack(list(norms.values())).tolist()
    return dict(zip(norms, values))
''', "wrong-keys"),
            (_NORMS_SOLUTION.replace("(name, p.grad) for", "(name, p.detach()) for"), "weight-norm"),
            (_NORMS_SOLUTION.replace("norms.tolist()", "norms.unbind()"), "not-a-float"),
        ),
        judge=_judge_grad_norms,
    )
)


add_answers(
    choice_answers(
        "debugging-overfit-one-batch",
        options=(
            ("a bug in the model, loss or loop", "any reasonable model can memorise 16 examples: a loss stuck far "
             "above 0 means something bounds the logits, cuts the gradient or misfeeds the loss"),
            ("the batch is too small to learn from", "a small batch is the easiest thing to memorise: that is why the "
             "test uses one"),
            ("the run needs the whole dataset first", "more data makes fitting harder, not easier; the test isolates "
             "the model and the loop from the data"),
            ("nothing yet: 200 steps is far too few", "on one batch of 16 a healthy model reaches about 0 in far fewer "
             "steps, as the experiment shows"),
        ),
        key="a",
    )
)


add_answers(
    Answers(
        drill_id="debugging-init-output-bias",
        solution=_PRIOR_SOLUTION,
        wrong_answers=(
            (_PRIOR_SOLUTION.replace("layer.bias.copy_(frequency.log())", "layer.bias.copy_(frequency)"),
             "wrong-prior"),
            (_PRIOR_SOLUTION.replace("    with torch.no_grad():  # an in-place change of a parameter, outside "
                                     "autograd\n        layer.bias.copy_(frequency.log())",
                                     "    layer.bias = torch.nn.Parameter(frequency.log())"), "replaced-parameter"),
            (_PRIOR_SOLUTION.replace("    with torch.no_grad():  # an in-place change of a parameter, outside "
                                     "autograd\n        layer.bias", "    layer.bias"), "raised"),
            (_PRIOR_SOLUTION.replace("torch.bincount(labels, minlength=classes).float()",
                                     "torch.bincount(labels, minlength=classes).float().flip(0)"), "wrong-prior"),
        ),
        judge=_judge_prior,
    )
)
