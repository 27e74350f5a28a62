"""Drills on debugging a training run (lesson 12): bugs found by their symptoms, hooks that clean up after
themselves, anomaly mode, dead units, non-finite activations, and the loss at initialisation."""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

from harness.contract.case import Case
from harness.contract.failure import fail
from harness.contract.instruments import HostSyncCounter
from harness.contract.wire import WireError, describe
from harness.drills.core import Drill, add
from harness.drills.support import multiple_choice, no_harness_shortcut, seeded_init, with_fixes


# ------------------------------------------------------------------------------------------------ shared helpers
def _hooks(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def _tensors_like(value: Any, like: list[torch.Tensor], what: str) -> list[torch.Tensor]:
    """`value` as a list of tensors shaped like `like` (None entries kept); WireError otherwise."""
    if not isinstance(value, list) or len(value) != len(like):
        raise WireError(f"{what}: not a list of {len(like)} tensors")
    for got, want in zip(value, like, strict=True):
        if got is not None and (not isinstance(got, torch.Tensor) or got.shape != want.shape):
            raise WireError(f"{what}: a tensor of the wrong shape")
    return value


class _AllSteps:
    """Records every optimizer.step() of any optimizer (the answer creates its own): the parameters and their
    gradients just before the step, in the optimizer's order."""

    def __enter__(self) -> _AllSteps:
        self.records: list[dict] = []
        self._handle = register_optimizer_step_pre_hook(self._record)
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.remove()

    def _record(self, optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        self.records.append({"params": [p.detach().clone() for p in params],
                             "grads": [None if p.grad is None else p.grad.detach().clone() for p in params]})


def _close_steps(got: list[torch.Tensor], want: list[torch.Tensor]) -> bool:
    return all(torch.allclose(g.double(), w.double(), atol=1e-5, rtol=1e-4) for g, w in zip(got, want, strict=True))


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
        if any(p is None for p in got_params) or not _close_steps(got_params, [p.detach() for p in params]):
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
        if not _close_steps(got_grads, fresh):
            summed = [sum(g[i] for g in history + [fresh]) for i in range(len(params))]
            if history and _close_steps(got_grads, summed):
                fail("stale-grads", observed=f"at step {step} .grad holds the sum of the gradients of steps 0 to "
                     f"{step}", expected="the gradient of this mini-batch alone",
                     cause="backward() adds into .grad and nothing clears it between steps: the steps grow until "
                     "the loss explodes", where=f"{where}: optimizer.zero_grad(set_to_none=True) at every step")
            for code, cause, wrong_batches in mistakes:
                model.zero_grad(set_to_none=True)
                F.cross_entropy(model(wrong_batches[step][0]), wrong_batches[step][1]).backward()
                if _close_steps(got_grads, [p.grad.detach() for p in params]):
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
    if any(p is None for p in final) or not _close_steps(final, [p.detach() for p in params]):
        fail("wrong-updates", observed="the weights after training differ from plain SGD's",
             expected=f"w <- w - {lr} * grad after the last step", cause="the last step is missing or altered",
             where=where)
    return len(records)


# ---------------------------------------------------------------- a model that cannot overfit one batch
def _one_batch(case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(case.seeded(12))
    return torch.randn(32, 20, generator=generator), torch.randint(0, 5, (32,), generator=generator)


def _probe_overfit(answer: dict, *, case: Case) -> dict:
    torch.manual_seed(case.seeded(0))
    model = answer["make_model"](20, 5)
    x, y = _one_batch(case)
    with torch.no_grad():
        first = model(x)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model.train()
    for _ in range(150):  # the sanity check itself, on the candidate's model (the judge only reads the logits)
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        last = model(x)
    return {"first": first, "last": last}


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


_OVERFIT_STARTER = '''from torch import nn


def make_model(features, classes):
    """Symptom: trained on a single batch of 32 examples, the loss stops near 1.0 and never goes lower."""
    return nn.Sequential(nn.Linear(features, 64), nn.ReLU(), nn.Linear(64, classes), nn.Softmax(dim=1))
'''

add(
    Drill(
        id="debugging-cannot-overfit",
        title="Bug hunt: a model that cannot overfit one batch",
        kind="bughunt",
        topics=("debugging", "loop", "modules"),
        difficulty=1,
        prompt="make_model's output goes to F.cross_entropy. The sanity check 'overfit one batch' fails: on 32 "
        "examples the loss floors far above zero. Fix make_model so the model can memorise the batch.",
        entry="make_model",
        starter=_OVERFIT_STARTER,
        solution='''from torch import nn


def make_model(features, classes):
    # F.cross_entropy takes raw logits: no Softmax at the end
    return nn.Sequential(nn.Linear(features, 64), nn.ReLU(), nn.Linear(64, classes))
''',
        hints=("What does F.cross_entropy expect as its input, and what does the last layer give it?",
               "cross_entropy applies log_softmax itself: a Softmax before it squashes the logits into [0, 1]."),
        probe=_probe_overfit,
        judge=_judge_overfit,
        wrong_answers=(
            (_OVERFIT_STARTER.replace("nn.Softmax(dim=1)", "nn.Sigmoid()"), "probabilities"),
            (_OVERFIT_STARTER.replace("nn.Softmax(dim=1)", "nn.Tanh()"), "cannot-overfit"),
            (_OVERFIT_STARTER.replace("nn.Softmax(dim=1)", "nn.Softmax(dim=0)"), "probabilities"),
        ),
    )
)


# ---------------------------------------------------------------- hooks removed even on error
class _Boom(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("a bug further down the model")


def _means_inputs(case: Case) -> tuple[nn.Module, torch.Tensor]:
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 8), nn.ReLU()), nn.Linear(8, 2))
    generator = torch.Generator().manual_seed(case.seeded(1))
    return seeded_init(model, case.seeded(0)), torch.randn(10, 6, generator=generator)


def _probe_relu_means(answer: dict, *, case: Case) -> dict:
    model, x = _means_inputs(case)
    got = answer["relu_means"](model, x)
    broken = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), _Boom())
    propagated = False
    try:
        answer["relu_means"](broken, x)
    except RuntimeError:
        propagated = True
    return {"means": got, "hooks": _hooks(model), "hooks_on_error": _hooks(broken), "propagated": propagated}


def _judge_relu_means(seen: dict, *, case: Case) -> str:
    model, x = _means_inputs(case)
    with torch.no_grad():
        first = model[1](model[0](x))
        second = model[2](first)
    want = {"1": float(first.mean()), "2.1": float(second.mean())}
    got = seen.get("means")
    values_ok = isinstance(got, dict) and set(got) == set(want) and all(
        (isinstance(got[k], (int, float)) or isinstance(got[k], torch.Tensor) and got[k].numel() == 1)
        and math.isclose(float(got[k]), v, rel_tol=1e-5, abs_tol=1e-6)
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
             "never learns that the forward failed", where="use try/finally, not try/except")
    if seen.get("hooks_on_error") != 0:
        fail("hooks-left-on-error", observed=f"{seen.get('hooks_on_error')} hooks left after the forward raised",
             expected="none: remove them in a finally block", cause="the removal is skipped by the exception",
             where="try: model(x) finally: remove every handle")
    return "the mean of each ReLU's output, hooks removed also when the forward raises"


_MEANS_STARTER = '''import torch
from torch import nn


def relu_means(model, x):
    """{name: mean output} of every nn.ReLU in model on one forward pass. Symptom: after calling it on a model
    whose forward raised, every later forward of that model is slower and the dict keeps growing."""
    means = {}
    handles = [m.register_forward_hook(lambda mod, args, out, name=name: means.__setitem__(name, out.mean().item()))
               for name, m in model.named_modules() if isinstance(m, nn.ReLU)]
    with torch.no_grad():
        model(x)
    for handle in handles:
        handle.remove()
    return means
'''

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

add(
    Drill(
        id="debugging-hooks-cleanup",
        title="Bug hunt: hooks that outlive an exception",
        kind="bughunt",
        topics=("debugging", "autograd", "modules"),
        difficulty=2,
        prompt="relu_means collects the mean output of every ReLU with forward hooks. It works, until the "
        "model's forward raises: then its hooks stay on the model for good. Make it remove its hooks "
        "whatever happens (and let the exception propagate).",
        entry="relu_means",
        starter=_MEANS_STARTER,
        solution=_MEANS_SOLUTION,
        hints=("Which statements run when model(x) raises?",
               "Put the forward in try: and the removal loop in finally:."),
        probe=_probe_relu_means,
        judge=_judge_relu_means,
        wrong_answers=(
            (_MEANS_STARTER.replace("    for handle in handles:\n        handle.remove()\n", ""), "hooks-left"),
            (_MEANS_SOLUTION.replace("name, m in model.named_modules()", "name, m in model.named_children()"),
             "wrong-means"),
            (_MEANS_SOLUTION.replace("    finally:  # runs on the way out of an exception too\n",
                                     "    except RuntimeError:\n        pass\n    finally:\n"), "swallowed-error"),
        ),
    )
)


# ---------------------------------------------------------------- a loss that explodes after a while
_EXPLODE_LR = 0.1


def _explode_inputs(case: Case) -> tuple[nn.Module, list[tuple[torch.Tensor, torch.Tensor]]]:
    model = seeded_init(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3)), case.seeded(0))
    generator = torch.Generator().manual_seed(case.seeded(3))
    return model, [(torch.randn(16, 8, generator=generator), torch.randint(0, 3, (16,), generator=generator))
                   for _ in range(6)]


def _probe_train(answer: dict, *, case: Case) -> dict:
    model, batches = _explode_inputs(case)
    with _AllSteps() as steps:
        answer["train"](model, batches, _EXPLODE_LR)
    return {"steps": steps.records, "final": [p.detach() for p in model.parameters()]}


def _judge_train(seen: dict, *, case: Case) -> str:
    model, batches = _explode_inputs(case)
    _judge_sgd_steps(seen, model, batches, _EXPLODE_LR, where="where optimizer.zero_grad() sits",
                     mismatch=("wrong-gradient", "the loss is not F.cross_entropy of this batch"))
    return "six SGD steps, each on its own batch's gradient"


_TRAIN_STARTER = '''import torch
import torch.nn.functional as F


def train(model, batches, lr):
    """Symptom: the loss falls for a few hundred steps, then climbs and explodes."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    optimizer.zero_grad()
    for x, y in batches:
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
'''

add(
    Drill(
        id="debugging-exploding-late",
        title="Bug hunt: a loss that explodes after a while",
        kind="bughunt",
        topics=("debugging", "loop"),
        difficulty=1,
        prompt="This loop trains well at first, then the loss climbs and explodes, whatever the learning rate. "
        "Find the bug by its symptom and fix it.",
        entry="train",
        starter=_TRAIN_STARTER,
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
        hints=("What is in .grad at the tenth backward?",
               "backward adds into .grad: clear it at every step, before backward."),
        probe=_probe_train,
        judge=_judge_train,
        wrong_answers=(
            (_TRAIN_STARTER.replace("        F.cross_entropy(model(x), y).backward()\n",
                                    "        F.cross_entropy(model(x), y).backward()\n        optimizer.zero_grad()\n"),
             "no-gradient"),
            (_TRAIN_STARTER.replace("    for x, y in batches:\n        F.cross_entropy(model(x), y).backward()\n"
                                    "        optimizer.step()\n",
                                    "    sum(F.cross_entropy(model(x), y) for x, y in batches).backward()\n"
                                    "    optimizer.step()\n"), "wrong-step-count"),
        ),
    )
)


# ---------------------------------------------------------------- the loss at initialisation
def _init_loss_experiment() -> None:
    torch.manual_seed(0)
    x, y = torch.randn(512, 20), torch.randint(0, 10, (512,))
    for scale in (1.0, 30.0):
        model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10))
        with torch.no_grad():
            model[2].weight.mul_(scale)
            loss = F.cross_entropy(model(x), y)
        print(f"last layer x{scale:g}: loss at init {float(loss):.2f} (ln 10 = {math.log(10):.2f})")


add(
    multiple_choice(
        id="debugging-init-loss",
        title="A loss of 23 at step 0",
        topics=("debugging", "loop"),
        difficulty=1,
        question="A 10-class classifier reports a cross-entropy of 23.0 at its very first step. What is the most "
        "likely explanation?",
        options=(
            ("normal: every loss always starts out high", "an untrained model should be unsure: about ln(10) = 2.3 "
             "over 10 classes, not ten times that"),
            ("logits far too large: confidently wrong", "a near-uniform softmax costs ln(10) = 2.3; 23 means large "
             "logits at init (a badly scaled last layer, unnormalised inputs)"),
            ("the learning rate is set too low", "no step has been taken at step 0: the learning rate cannot "
             "change the first loss"),
            ("the dataset is too small to learn", "the size of the data does not change the loss of an untrained "
             "model on one batch"),
        ),
        key="b",
        hints=("What does a nearly uniform softmax give as cross-entropy?",
               "-ln(1/C) = ln(C): anything far above it means large, confident, wrong logits."),
        experiment=_init_loss_experiment,
    )
)


# ---------------------------------------------------------------- anomaly mode names the op that made a nan
class _NanNet(nn.Module):
    """Linear -> an op whose backward makes a nan from finite values -> Linear."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind, self.inner, self.outer = kind, nn.Linear(4, 6), nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inner(x)
        mask = torch.ones(len(x), 1)
        mask[len(x) // 2] = 0.0
        h = h * mask  # one row of exact zeros
        zeros = torch.zeros_like(h)
        if self.kind == "pow":
            h = torch.sqrt(h ** 2)  # sqrt'(0) = inf, times 2h = 0: nan in the backward of ** 2
        elif self.kind == "sqrt":
            h = torch.where(h > 0, torch.sqrt(h), zeros)  # the masked branch still gets 0 / nan
        elif self.kind == "log":
            h = torch.where(h != 0, torch.log(h.abs()), zeros)
        else:
            h = torch.where(h.abs() < 1, torch.acos(h), zeros)
        return self.outer(h)


_NAN_KINDS = ("pow", "sqrt", "log", "acos")


def _nan_inputs(case: Case) -> list[tuple[nn.Module, torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(case.seeded(30))
    first = int(torch.randint(0, len(_NAN_KINDS), (), generator=generator))
    second = (first + 1 + int(torch.randint(0, len(_NAN_KINDS) - 1, (), generator=generator))) % len(_NAN_KINDS)
    inputs = []
    for index, kind in enumerate((_NAN_KINDS[first], _NAN_KINDS[second])):
        model = seeded_init(_NanNet(kind), case.seeded(31 + index), scale=3.0)
        inputs.append((model, torch.randn(12, 4, generator=generator) * 2,
                       torch.randint(0, 3, (12,), generator=generator)))
    return inputs


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


def _probe_nan_op(answer: dict, *, case: Case) -> dict:
    no_harness_shortcut(answer)
    names, left_on = [], []
    for model, x, y in _nan_inputs(case):
        names.append(answer["nan_backward_op"](model, x, y))
        left_on.append(torch.is_anomaly_enabled())
        torch.autograd.set_detect_anomaly(False)
    return {"names": names, "left_on": left_on}


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


_NAN_STARTER = '''import torch
import torch.nn.functional as F


def nan_backward_op(model, x, y):
    """The name of the backward function (for example 'MulBackward0') that first returned a nan while
    backpropagating F.cross_entropy(model(x), y). Symptom: the loss is finite, the gradients are nan."""
    raise NotImplementedError
'''

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

add(
    Drill(
        id="debugging-detect-anomaly",
        title="Find the op whose backward made a nan",
        kind="write",
        topics=("debugging", "autograd"),
        difficulty=2,
        prompt="The loss of a model is finite but its gradients are nan. Write nan_backward_op(model, x, y): run "
        "the backward of F.cross_entropy(model(x), y) under torch.autograd anomaly detection and return the name of "
        "the backward function that first returned nan (e.g. 'MulBackward0'), None if none did. Leave anomaly "
        "detection as you found it (off).",
        entry="nan_backward_op",
        starter=_NAN_STARTER,
        solution=_NAN_SOLUTION,
        hints=("Under torch.autograd.detect_anomaly(), a backward function that returns nan raises a RuntimeError. "
               "What does its message say?",
               "Catch it: the message reads \"Function 'SqrtBackward0' returned nan values in its 0th output.\"; "
               "use the context manager so the mode is switched off again."),
        probe=_probe_nan_op,
        judge=_judge_nan_op,
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
    )
)


# ---------------------------------------------------------------- the first non-finite activation
class _Exp(nn.Module):
    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return torch.exp(h)


class _Tower(nn.Module):
    """Modules defined in another order than the forward runs them: named_modules() order is not run order."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(8, 3)
        self.body = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8))
        self.sharpen = _Exp()
        self.norm = nn.LayerNorm(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.sharpen(self.body(x))))


def _tower_inputs(case: Case) -> tuple[nn.Module, list[torch.Tensor]]:
    model = seeded_init(_Tower(), case.seeded(40))
    generator = torch.Generator().manual_seed(case.seeded(41))
    x = torch.randn(6, 4, generator=generator)
    with_inf = x.clone()
    with_inf[int(torch.randint(0, 6, (), generator=generator)), int(torch.randint(0, 4, (), generator=generator))] = (
        float("inf"))
    return model, [x * 0.1, x * 1e4, with_inf]


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


def _probe_first_nonfinite(answer: dict, *, case: Case) -> dict:
    no_harness_shortcut(answer)
    model, inputs = _tower_inputs(case)
    names = [answer["first_nonfinite"](model, x) for x in inputs]
    broken = nn.Sequential(nn.Linear(4, 8), _Boom())
    try:
        answer["first_nonfinite"](broken, inputs[0])
    except RuntimeError:
        pass
    return {"names": names, "hooks": _hooks(model), "hooks_on_error": _hooks(broken)}


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
    return "the first non-finite activation in run order, None when all are finite, no hook left behind"


_NONFINITE_STARTER = '''import torch


def first_nonfinite(model, x):
    """The name (as in model.named_modules()) of the first leaf module, in the order the forward runs them,
    whose output holds an inf or a nan on model(x); None when every output is finite."""
    raise NotImplementedError
'''

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

add(
    Drill(
        id="debugging-first-nonfinite",
        title="Find the first layer whose output is not finite",
        kind="write",
        topics=("debugging", "modules"),
        difficulty=2,
        prompt="The loss is nan. Write first_nonfinite(model, x): with forward hooks on every leaf module, run "
        "model(x) once and return the name (as in model.named_modules()) of the first module, in the order the "
        "forward runs them, whose output holds an inf or a nan; None when all are finite. Remove your hooks "
        "before returning, even if the forward raises.",
        entry="first_nonfinite",
        starter=_NONFINITE_STARTER,
        solution=_NONFINITE_SOLUTION,
        hints=("A forward hook runs right after its module's forward, so the hooks fire in run order.",
               "In each hook append the name when not torch.isfinite(out).all(); return the first; remove the "
               "handles in finally:."),
        probe=_probe_first_nonfinite,
        judge=_judge_first_nonfinite,
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
    )
)


# ---------------------------------------------------------------- dead ReLUs
def _dead_inputs(case: Case) -> tuple[nn.Module, torch.Tensor]:
    model = nn.Sequential(nn.Sequential(nn.Linear(6, 16), nn.ReLU()), nn.Sequential(nn.Linear(16, 12), nn.ReLU()),
                          nn.Linear(12, 3))
    seeded_init(model, case.seeded(50))
    generator = torch.Generator().manual_seed(case.seeded(51))
    with torch.no_grad():  # a too-large learning rate pushed some biases far below zero: those units never fire
        for block in (model[0], model[1]):
            dead = torch.rand(block[0].out_features, generator=generator) < 0.3
            block[0].bias[dead] = -20.0
    return model, torch.randn(24, 6, generator=generator)


def _probe_dead(answer: dict, *, case: Case) -> dict:
    no_harness_shortcut(answer)
    model, x = _dead_inputs(case)
    return {"fractions": answer["dead_relu_fraction"](model, x), "hooks": _hooks(model)}


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


_DEAD_STARTER = '''import torch
from torch import nn


def dead_relu_fraction(model, x):
    """{name in model.named_modules(): share of the ReLU's units whose output is 0 for every example of x}."""
    raise NotImplementedError
'''

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

add(
    Drill(
        id="debugging-dead-relus",
        title="Count the dead ReLU units",
        kind="write",
        topics=("debugging", "modules"),
        difficulty=2,
        prompt="After a few steps at a too-large learning rate the loss stalls. Write dead_relu_fraction(model, x): "
        "for every nn.ReLU of the model (keyed by its name in named_modules()), the share of its units whose "
        "output is 0 for every example of the batch x (dead units: no gradient reaches them). Use forward hooks "
        "and remove them.",
        entry="dead_relu_fraction",
        starter=_DEAD_STARTER,
        solution=_DEAD_SOLUTION,
        hints=("A unit is one column of the ReLU's (batch, units) output. When is it dead on this batch?",
               "(out == 0).all(dim=0) marks the dead units; .float().mean() is their share."),
        probe=_probe_dead,
        judge=_judge_dead,
        wrong_answers=(
            (_DEAD_SOLUTION.replace("(out == 0).all(dim=0).float().mean()", "(out == 0).float().mean()"),
             "wrong-value"),
            (_DEAD_SOLUTION.replace("(out == 0).all(dim=0)", "(out == 0).any(dim=0)"), "wrong-value"),
            (_DEAD_SOLUTION.replace("fractions[name] =", "fractions[f'relu{len(fractions)}'] ="), "wrong-keys"),
        ),
    )
)


# ---------------------------------------------------------------- a training script with three bugs
_SCRIPT_LR, _SCRIPT_EPOCHS, _SCRIPT_BATCH = 0.1, 2, 8


def _script_inputs(case: Case) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(case.seeded(60))
    n = int(torch.randint(20, 31, (), generator=generator))
    x = torch.randn(n, 5, generator=generator) * 3 + 10
    x[:, 2] = 1.0  # a constant feature (a column of ones the export added): its standard deviation is 0
    y = (x[:, [0, 1, 3]] - 10).argmax(1)  # labels the features do predict
    model = seeded_init(nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 3)), case.seeded(61))
    return model, x, y


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


def _probe_training_script(answer: dict, *, case: Case) -> dict:
    model, x, y = _script_inputs(case)
    generator = torch.Generator().manual_seed(case.seeded(62))
    with _AllSteps() as steps:
        answer["train"](model, x, y, _SCRIPT_EPOCHS, _SCRIPT_BATCH, _SCRIPT_LR, generator)
    return {"steps": steps.records, "final": [p.detach() for p in model.parameters()]}


def _judge_training_script(seen: dict, *, case: Case) -> str:
    model, _, _ = _script_inputs(case)
    if seen.get("steps") == []:
        fail("no-steps", observed="train returned without a single optimizer step",
             expected=f"{len(_script_batches(case))} SGD steps, one per mini-batch",
             cause="the batch loop never ran: if the nan was 'fixed' by dropping the rows that hold one, every row "
             "holds one (a constant feature has std 0, and (x - mean) / std is 0 / 0 in that column of every row), so "
             "no row is left; otherwise the optimizer.step() call is missing", where="x.std(0): keep every row and "
             "clamp the std away from 0")
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


_SCRIPT_STARTER = '''import torch
import torch.nn.functional as F


def train(model, x, y, epochs, batch_size, lr, generator):
    """Standardise the features, then train with SGD on shuffled mini-batches.

    Symptoms: the loss is nan from the first step. A colleague who "fixed" that reports that the loss then
    decreases a little but the accuracy stays at chance, and a third says the loss blows up after a while.
    """
    mean, std = x.mean(0), x.std(0)
    x = (x - mean) / std
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    model.train()
    optimizer.zero_grad(set_to_none=True)
    for epoch in range(epochs):
        xs = x[torch.randperm(len(x), generator=generator)]
        ys = y[torch.randperm(len(y), generator=generator)]
        for start in range(0, len(x), batch_size):
            xb, yb = xs[start:start + batch_size], ys[start:start + batch_size]
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            optimizer.step()
    return model
'''

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


add(
    Drill(
        id="debugging-train-script", nonfinite=('steps/*', 'final/*'),
        title="Bug hunt: a training script with three bugs",
        kind="bughunt",
        topics=("debugging", "loop", "data"),
        difficulty=3,
        prompt="This training script has three bugs, each with its own symptom (see the docstring): a nan, a silent "
        "data bug, and a loss that grows. Fix all three; keep the standardisation, one torch.randperm(len(x), "
        "generator=generator) per epoch, SGD and the mini-batch order. The check reports the first bug it observes.",
        entry="train",
        starter=_SCRIPT_STARTER,
        solution=_SCRIPT_SOLUTION,
        hints=("Print x.std(0) once. Then ask: after shuffling, is ys[i] still the label of xs[i]? Then: what is in "
               ".grad at the second step?",
               "Clamp the standard deviation (x.std(0).clamp_min(1e-6)); index x and y with the same permutation; "
               "call optimizer.zero_grad(set_to_none=True) inside the batch loop."),
        probe=_probe_training_script,
        judge=_judge_training_script,
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
    )
)


# ---------------------------------------------------------------- gradient norm per layer, one sync
def _norms_inputs(case: Case) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    layers: list[nn.Module] = []
    for _ in range(5):
        layers += [nn.Linear(12, 12), nn.Sigmoid()]  # a deep sigmoid stack: the first layers' gradients vanish
    model = nn.Sequential(*layers, nn.Linear(12, 4))
    seeded_init(model, case.seeded(70), scale=2.0)
    model[2].requires_grad_(False)  # a frozen layer: no gradient at all
    generator = torch.Generator().manual_seed(case.seeded(71))
    return model, torch.randn(16, 12, generator=generator), torch.randint(0, 4, (16,), generator=generator)


def _probe_grad_norms(answer: dict, *, case: Case) -> dict:
    no_harness_shortcut(answer)
    model, x, y = _norms_inputs(case)
    F.cross_entropy(model(x), y).backward()
    with HostSyncCounter() as syncs:
        norms = answer["grad_norms"](model)
    return {"norms": norms, "syncs": syncs.count}


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
        if math.isclose(number, value, rel_tol=1e-4, abs_tol=1e-9):
            continue
        if math.isclose(number, value ** 2, rel_tol=1e-4, abs_tol=1e-12):
            code, cause = "squared-norm", f"{number:.6g} is the square of the norm: the L2 norm is the square root"
        elif math.isclose(number, weights[name], rel_tol=1e-4, abs_tol=1e-9):
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


_NORMS_STARTER = '''import torch


def grad_norms(model):
    """{parameter name: L2 norm of its .grad as a float} for every parameter that has a gradient, after backward.
    Logged at every step: bring the values to the host in one sync."""
    raise NotImplementedError
'''

_NORMS_SOLUTION = '''import torch


def grad_norms(model):
    named = [(name, p.grad) for name, p in model.named_parameters() if p.grad is not None]
    norms = torch.stack([torch.linalg.vector_norm(g) for _, g in named])  # still on the device
    return dict(zip([name for name, _ in named], norms.tolist()))  # one host sync
'''

add(
    Drill(
        id="debugging-grad-norms",
        title="Gradient norm per layer, in one sync",
        kind="write",
        topics=("debugging", "autograd", "performance"),
        difficulty=2,
        prompt="A deep network barely learns; you suspect vanishing gradients. Write grad_norms(model), called after "
        "backward: {parameter name: L2 norm of its .grad, as a Python float} for every parameter that has a "
        "gradient (leave out those whose .grad is None). It is logged at every step: make exactly one host sync. "
        "The sync count is a self-check: it is measured inside your answer's own process, so it can fail the "
        "drill, and a pass does not count in a mock interview.",
        self_check=True,
        entry="grad_norms",
        starter=_NORMS_STARTER,
        solution=_NORMS_SOLUTION,
        hints=("torch.linalg.vector_norm(p.grad) is a 0-d tensor on the device. How do you bring many of them to "
               "Python at once?",
               "Stack the norms into one tensor and call .tolist() once; skip p.grad is None."),
        probe=_probe_grad_norms,
        judge=_judge_grad_norms,
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
    )
)


# ---------------------------------------------------------------- what the overfit-one-batch test says
def _overfit_experiment() -> None:
    generator = torch.Generator().manual_seed(0)
    x, y = torch.randn(16, 10, generator=generator), torch.randint(0, 5, (16,), generator=generator)
    for label, last in (("healthy (logits out)", nn.Identity()), ("bug: Softmax before cross_entropy", nn.Softmax(1))):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 5), last)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        for _ in range(200):
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
        print(f"{label}: loss {float(loss.detach()):.4f} after 200 steps on one batch of 16 (ln 5 = {math.log(5):.2f})")
    print("a healthy model and loop drive the loss of one batch to about 0; one that cannot has a bug to find first.")


add(
    multiple_choice(
        id="debugging-overfit-one-batch",
        title="The overfit-one-batch test fails",
        topics=("debugging", "loop"),
        difficulty=1,
        question="Before a long run you train a 5-class classifier for 200 steps on one fixed batch of 16 examples. "
        "The loss stops at 1.2 and stays there. What does this tell you?",
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
        hints=("How hard is it to memorise 16 examples with a few thousand parameters?",
               "A healthy model and loop drive one batch's loss to about 0; if not, debug before the long run."),
        experiment=_overfit_experiment,
    )
)


# ---------------------------------------------------------------- initialise the output bias to the class priors
def _prior_inputs(case: Case) -> tuple[nn.Linear, torch.Tensor, int]:
    generator = torch.Generator().manual_seed(case.seeded(80))
    classes = int(torch.randint(3, 7, (), generator=generator))
    weights = torch.rand(classes, generator=generator) ** 3 + 0.02  # imbalanced: some classes are rare
    labels = torch.multinomial(weights / weights.sum(), 200, replacement=True, generator=generator)
    labels[:classes] = torch.arange(classes)  # every class appears at least once
    return seeded_init(nn.Linear(8, classes), case.seeded(81)), labels, classes


def _probe_prior(answer: dict, *, case: Case) -> dict:
    no_harness_shortcut(answer)
    layer, labels, classes = _prior_inputs(case)
    bias = layer.bias
    answer["init_output_bias_"](layer, labels, classes)
    return {"bias": layer.bias, "weight": layer.weight, "same_bias": layer.bias is bias,
            "requires_grad": bool(getattr(layer.bias, "requires_grad", False))}


def _judge_prior(seen: dict, *, case: Case) -> str:
    layer, labels, classes = _prior_inputs(case)
    prior = torch.bincount(labels, minlength=classes).double() / len(labels)
    bias = seen.get("bias")
    if not isinstance(bias, torch.Tensor) or bias.shape != (classes,) or not bias.is_floating_point():
        fail("wrong-shape", observed=f"the bias is {describe(bias)}", expected=f"a float tensor of shape ({classes},)",
             cause="the bias replaced by something else", where="init_output_bias_")
    if not torch.isfinite(bias).all() or not torch.allclose(torch.softmax(bias.double(), 0), prior, atol=1e-5):
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
    if not isinstance(weight, torch.Tensor) or weight.shape != layer.weight.shape or not torch.equal(
            weight, layer.weight.detach()):
        fail("weights-changed", observed="the layer's weight changed", expected="the weight left as it was",
             cause="the weight was re-initialised along with the bias", where="touch only layer.bias")
    entropy = float(-(prior * prior.log()).sum())
    return (f"softmax(bias) equals the class frequencies: the loss at init is about their entropy {entropy:.3f}, "
            f"not ln({classes}) = {math.log(classes):.3f}")


_PRIOR_STARTER = '''import torch


def init_output_bias_(layer, labels, classes):
    """Set the output layer's bias so that, with small weights, the model predicts the class frequencies of
    `labels` at init. Symptom: on an imbalanced dataset the first hundred steps only learn the class balance
    (a 'hockey stick' loss curve)."""
    raise NotImplementedError
'''

_PRIOR_SOLUTION = '''import torch


def init_output_bias_(layer, labels, classes):
    frequency = torch.bincount(labels, minlength=classes).float() / len(labels)
    with torch.no_grad():  # an in-place change of a parameter, outside autograd
        layer.bias.copy_(frequency.log())  # softmax(log p) = p
'''

add(
    Drill(
        id="debugging-init-output-bias",
        title="Start the loss at the entropy of the labels",
        kind="write",
        topics=("debugging", "modules"),
        difficulty=2,
        prompt="On an imbalanced dataset the loss starts high and the first steps only learn the class balance. "
        "Write init_output_bias_(layer, labels, classes): set the bias of the output nn.Linear in place so that "
        "softmax(bias) equals the frequency of each class in labels (every class appears); keep the same Parameter "
        "(an optimizer may already hold it) and leave the weight alone.",
        entry="init_output_bias_",
        starter=_PRIOR_STARTER,
        solution=_PRIOR_SOLUTION,
        hints=("Which bias b gives softmax(b) = p? And how do you change a parameter in place without autograd "
               "complaining?",
               "b = log(p), p = bincount(labels, minlength=classes) / len(labels); inside torch.no_grad(), "
               "layer.bias.copy_(b)."),
        probe=_probe_prior,
        judge=_judge_prior,
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
    )
)
