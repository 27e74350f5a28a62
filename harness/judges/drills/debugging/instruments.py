"""Debugging drills that build an instrument: hooks that clean up, anomaly detection, the first non-finite value,
dead ReLUs, gradient norms."""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn

from harness.contract.case import Case
from harness.contract.compare import isclose_number, malformed
from harness.contract.failure import fail
from harness.contract.wire import describe
from harness.drills.bank.debugging import (
    MEANS_STARTER,
    dead_inputs,
    means_inputs,
    nan_inputs,
    norms_inputs,
    tower_inputs,
)
from harness.drills.core import Answers
from harness.drills.support import edited
from harness.judges.drills.whys import add_answers


def _judge_relu_means(seen: dict, *, case: Case) -> str:
    model, x = means_inputs(case)
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
    inputs = nan_inputs(case)
    if not isinstance(names, list) or len(names) != len(inputs) or not isinstance(left_on, list):
        malformed("the observation is not one the probe writes")
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
    model, inputs = tower_inputs(case)
    names = seen.get("names")
    if not isinstance(names, list) or len(names) != len(inputs):
        malformed("the observation is not one the probe writes")
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
    model, x = dead_inputs(case)
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


def _judge_grad_norms(seen: dict, *, case: Case) -> str:
    model, x, y = norms_inputs(case)
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


add_answers(
    Answers(
        drill_id="debugging-hooks-cleanup",
        solution=_MEANS_SOLUTION,
        wrong_answers=(
            (edited(MEANS_STARTER, ("    for handle in handles:\n        handle.remove()\n", "")), "hooks-left"),
            (edited(_MEANS_SOLUTION,
                    ("name, m in model.named_modules()", "name, m in model.named_children()")),
             "wrong-means"),
            (edited(_MEANS_SOLUTION,
                    ("    finally:  # runs on the way out of an exception too\n",
                     "    except RuntimeError:\n        pass\n    finally:\n")), "swallowed-error"),
        ),
        judge=_judge_relu_means,
    )
)


add_answers(
    Answers(
        drill_id="debugging-detect-anomaly",
        solution=_NAN_SOLUTION,
        wrong_answers=(
            (edited(_NAN_SOLUTION,
                    ("with torch.autograd.detect_anomaly():  # restores the mode on exit, even on an "
                     "error\n                F.cross_entropy",
                     "torch.autograd.set_detect_anomaly(True)\n            if True:\n"
                     "                F.cross_entropy")), "anomaly-left-on"),
            (edited(_NAN_SOLUTION, ("return found.group(1)", "return str(error)")), "wrong-op"),
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
            (edited(_NONFINITE_SOLUTION,
                    ("return bad[0] if bad else None", "return bad[-1] if bad else None")),
             "wrong-module"),
            (edited(_NONFINITE_SOLUTION,
                    ("if not torch.isfinite(out).all():", "if torch.isnan(out).any():")),
             "wrong-module"),
            (edited(_NONFINITE_SOLUTION,
                    ("return bad[0] if bad else None",
                     "names = [n for n, _ in model.named_modules()]\n"
                     "    return min(bad, key=names.index) if bad else None")), "wrong-module"),
            (edited(_NONFINITE_SOLUTION,
                    ("    try:\n        with torch.no_grad():\n            model(x)\n"
                     "    finally:\n        for handle in handles:\n            handle.remove()\n",
                     "    with torch.no_grad():\n        model(x)\n")), "hooks-left"),
            (edited(_NONFINITE_SOLUTION,
                    ("    try:\n        with torch.no_grad():\n            model(x)\n"
                     "    finally:\n        for handle in handles:\n            handle.remove()\n",
                     "    with torch.no_grad():\n        model(x)\n"
                     "    for handle in handles:\n        handle.remove()\n")),
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
            (edited(_DEAD_SOLUTION,
                    ("(out == 0).all(dim=0).float().mean()", "(out == 0).float().mean()")),
             "wrong-value"),
            (edited(_DEAD_SOLUTION, ("(out == 0).all(dim=0)", "(out == 0).any(dim=0)")), "wrong-value"),
            (edited(_DEAD_SOLUTION, ("fractions[name] =", "fractions[f'relu{len(fractions)}'] =")), "wrong-keys"),
        ),
        judge=_judge_dead,
    )
)


add_answers(
    Answers(
        drill_id="debugging-grad-norms",
        solution=_NORMS_SOLUTION,
        wrong_answers=(
            (edited(_NORMS_SOLUTION,
                    ("torch.linalg.vector_norm(g) for", "torch.linalg.vector_norm(g) ** 2 for")),
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
            (edited(_NORMS_SOLUTION, ("(name, p.grad) for", "(name, p.detach()) for")), "weight-norm"),
            (edited(_NORMS_SOLUTION, ("norms.tolist()", "norms.unbind()")), "not-a-float"),
        ),
        judge=_judge_grad_norms,
    )
)
