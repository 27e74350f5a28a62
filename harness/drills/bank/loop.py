"""Drills on the training loop: writing a step, and hunting the classic bugs by their symptoms.

Every probe here runs the candidate's loop on a model and data built from the case, and sends what the optimizer
saw at each step (`StepRecorder`), the modes forwards ran in (`ForwardRecorder`) and the weights at the end.
Every judge rebuilds the same model and data and replays a reference loop itself, step by step, so that the
first step where the candidate's loop departs from it is the one reported.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from harness.contract.case import Case
from harness.contract.failure import fail
from harness.contract.instruments import ForwardRecorder, HostSyncCounter, StepRecorder
from harness.contract.wire import WireError, describe
from harness.drills.core import Drill, add
from harness.drills.support import multiple_choice, with_fixes


def _binary_task(seed: int, n: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=gen)
    y = (x[:, :2].sum(1, keepdim=True) > 0).float()
    return x, y


def _split_batches(x: torch.Tensor, y: torch.Tensor, size: int = 32) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return list(zip(x.split(size), y.split(size), strict=True))


def _seeded(seed: int, build: Any) -> nn.Module:
    """`build()` with torch's global RNG seeded first: the probe and the judge get the same initial weights."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


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


def _recorded_steps(steps: StepRecorder, limit: int | None = None) -> list[dict]:
    records = steps.records if limit is None else steps.records[:limit]
    return [{"grads": r.grads, "params": r.params} for r in records]


def _same_tensors(got: list, want: list, atol: float = 1e-5) -> bool:
    return all(g.shape == w.shape and torch.allclose(g.double(), w.double(), atol=atol, rtol=1e-4)
               for g, w in zip(got, want, strict=True))


def _float_or_wire_error(value: Any, what: str) -> float:
    """A loss reported as a Python number or a one-element tensor."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.detach().double())
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    fail("not-a-number", observed=f"{what} is {describe(value)}", expected="a one-element tensor (or a number)",
         cause="returning the loss of the wrong object, or a whole batch of values", where=what)


def _check_step_gradient(k: int, got: list, want: list, where: str) -> None:
    """The gradient the optimizer saw at step k (1-based) against the reference gradient of batch k."""
    if all(g is None for g in got):
        fail("step-before-backward", observed=f"at optimizer step {k} every parameter's .grad was None",
             expected=f"the gradient of batch {k}",
             cause="optimizer.step() ran before loss.backward() (or zero_grad ran between backward and step): "
             "the step had no gradient to use", where=where)
    if any(g is None for g in got) or not _same_tensors(got, want, atol=1e-6):
        fail("missing-zero-grad", observed=f"the gradient the optimizer used at step {k} is not the gradient of "
             f"batch {k} alone", expected=f"only batch {k}'s gradient at step {k}",
             cause=f"gradients accumulate in .grad: without zero_grad once per batch, step {k} uses the sum of "
             "the earlier batches' gradients too", where=where)


# --- loop-train-step ---------------------------------------------------------------------------------------


def _train_step_setup(case: Case) -> tuple[nn.Module, torch.optim.Optimizer, list]:
    model = _seeded(case.seeded(0), lambda: nn.Linear(8, 1))
    x, y = _binary_task(case.seeded(1), 96)
    return model, torch.optim.SGD(model.parameters(), lr=0.1), _split_batches(x, y)


def _probe_train_step(answer: dict, *, case: Case) -> dict:
    model, optimizer, batches = _train_step_setup(case)
    model.eval()  # as an evaluation between epochs leaves it: the step must switch training mode back on
    returned = []
    with StepRecorder(optimizer) as steps, HostSyncCounter() as syncs, ForwardRecorder(model) as forwards:
        for batch in batches:
            returned.append(answer["train_step"](model, batch, nn.BCEWithLogitsLoss(), optimizer))
    return {"returned": returned, "steps": _recorded_steps(steps), "final": [p.detach() for p in model.parameters()],
            "syncs": syncs.calls, "training": [r.training for r in forwards.records]}


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
        if not _same_tensors(step["params"], [p.detach() for p in model.parameters()], atol=1e-6):
            fail("update-outside-step", observed=f"the weights at optimizer step {k} are not the ones "
                 + ("the model started with" if k == 1 else f"optimizer step {k - 1} left"),
                 expected="weights that change only through optimizer.step()",
                 cause="the weights were re-initialised or updated by hand inside train_step", where="train_step")
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        _check_step_gradient(k, step["grads"], [p.grad for p in model.parameters()], where)
        optimizer.step()
        losses.append(loss.detach())
        with torch.no_grad():
            after_step.append(loss_fn(model(x), y))
    final = _checked_tensors(seen.get("final"), n, "final weights")
    if not _same_tensors(final, [p.detach() for p in model.parameters()]):
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


_TRAIN_STEP_WRONG_BODY = ("def train_step(model, batch, loss_fn, optimizer):\n    x, y = batch\n"
                          "    optimizer.zero_grad(set_to_none=True)\n    loss = loss_fn(model(x), y)\n"
                          "    loss.backward()\n    optimizer.step()\n")

add(
    Drill(
        id="loop-train-step",
        title="Write a training step",
        kind="write",
        topics=("loop",),
        difficulty=1,
        prompt="Write train_step(model, batch, loss_fn, optimizer) that trains on one (x, y) batch and returns "
        "the loss as a detached tensor (no .item(): that would sync the host every step). The model may arrive in "
        "eval mode (after an evaluation): the step runs in training mode.",
        entry="train_step",
        starter="import torch\n\n\ndef train_step(model, batch, loss_fn, optimizer):\n    raise NotImplementedError\n",
        solution=(
            "import torch\n\n\ndef train_step(model, batch, loss_fn, optimizer):\n"
            "    x, y = batch\n    model.train()\n    optimizer.zero_grad(set_to_none=True)\n"
            "    loss = loss_fn(model(x), y)\n    loss.backward()\n    optimizer.step()\n    return loss.detach()\n"
        ),
        hints=("Four calls in a fixed order, around the forward pass, with the model in training mode.",
               "model.train() -> zero_grad(set_to_none=True) -> loss = loss_fn(model(x), y) -> loss.backward() -> "
               "optimizer.step()"),
        probe=_probe_train_step,
        judge=_judge_train_step,
        wrong_answers=(
            ("def train_step(model, batch, loss_fn, optimizer):\n    x, y = batch\n"
             "    loss = loss_fn(model(x), y)\n    loss.backward()\n    optimizer.step()\n    return loss.detach()\n",
             "missing-zero-grad"),
            ("def train_step(model, batch, loss_fn, optimizer):\n    x, y = batch\n    optimizer.zero_grad()\n"
             "    optimizer.step()\n    loss = loss_fn(model(x), y)\n    loss.backward()\n    return loss.detach()\n",
             "step-before-backward"),
            (_TRAIN_STEP_WRONG_BODY + "    return loss.item()\n",
             "host-sync"),
            (_TRAIN_STEP_WRONG_BODY + "    return loss\n",
             "loss-not-detached"),
            (_TRAIN_STEP_WRONG_BODY + "    return loss.detach()\n",
             "not-train-mode"),
        ),
    )
)

# --- loop-loss-stalls --------------------------------------------------------------------------------------

_STALLS_STARTER = '''import torch


def train(model, batches, optimizer, loss_fn, epochs):
    """Symptom: on a balanced binary task the loss sits at 0.69 (= ln 2) from the first epoch to the last."""
    model.train()
    for _ in range(epochs):
        for x, y in batches:
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.zero_grad(set_to_none=True)
            optimizer.step()
'''

_STALLS_EPOCHS = 5


def _stalls_setup(case: Case) -> tuple[nn.Module, torch.optim.Optimizer, list]:
    model = _seeded(case.seeded(0), lambda: nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)))
    x, y = _binary_task(case.seeded(3))
    return model, torch.optim.SGD(model.parameters(), lr=0.2), _split_batches(x, y)


def _probe_stalls(answer: dict, *, case: Case) -> dict:
    model, optimizer, batches = _stalls_setup(case)
    with StepRecorder(optimizer) as steps:
        answer["train"](model, batches, optimizer, nn.BCEWithLogitsLoss(), _STALLS_EPOCHS)
    return {"count": len(steps.records), "steps": _recorded_steps(steps, 3),
            "final": [p.detach() for p in model.parameters()]}


def _judge_stalls(seen: dict, *, case: Case) -> str:
    model, optimizer, batches = _stalls_setup(case)
    n = len(list(model.parameters()))
    steps, loss_fn = _validated_steps(seen, n), nn.BCEWithLogitsLoss()
    where = "zero_grad(set_to_none=True) once per batch, before the forward pass; step() after backward()"
    for k, step in enumerate(steps, start=1):
        if all(g is None for g in step["grads"]):
            fail("grads-cleared-before-step", observed=f"optimizer.step() number {k} saw .grad = None everywhere",
                 expected="the gradient of the batch at each step",
                 cause="zero_grad runs between backward() and step(), erasing the gradient: the model never moves "
                 "and the loss stays at ln 2", where="move zero_grad before the forward pass")
        x, y = batches[(k - 1) % len(batches)]
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        _check_step_gradient(k, step["grads"], [p.grad for p in model.parameters()], where)
        optimizer.step()
    expected_steps = _STALLS_EPOCHS * len(batches)
    if seen.get("count") != expected_steps:
        fail("step-count", observed=f"{describe(seen.get('count'))} optimizer steps", expected=f"{expected_steps} "
             f"({_STALLS_EPOCHS} epochs of {len(batches)} batches)", cause="step() missing, or called twice per "
             "batch", where="one optimizer.step() per batch")
    model, optimizer, batches = _stalls_setup(case)
    for _ in range(_STALLS_EPOCHS):
        for x, y in batches:
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            optimizer.step()
    final = _checked_tensors(seen.get("final"), n, "final weights")
    if not _same_tensors(final, [p.detach() for p in model.parameters()], atol=1e-4):
        fail("still-stalls", observed="the weights after training differ from the reference loop's",
             expected="the weights of zero_grad -> forward -> backward -> step on every batch",
             cause="the loop still skips or repeats an update", where="the order zero_grad -> forward -> backward "
             "-> step")
    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    with torch.no_grad():
        loss = loss_fn(torch.func.functional_call(model, dict(zip([k for k, _ in model.named_parameters()], final,
                                                                  strict=True)), (x,)), y).item()
    return f"the loop learns (final loss {loss:.3f}, the reference loop's weights)"


add(
    Drill(
        id="loop-loss-stalls",
        title="Bug hunt: the loss stalls at 0.69",
        kind="bughunt",
        topics=("loop",),
        difficulty=1,
        prompt="This loop trains a binary classifier, but the loss sits at 0.69 (= ln 2: the model predicts 0.5 "
        "for everything) from the first epoch to the last. Fix train() so that it learns.",
        entry="train",
        starter=_STALLS_STARTER,
        solution=_STALLS_STARTER.replace(
            "            loss = loss_fn(model(x), y)\n            loss.backward()\n"
            "            optimizer.zero_grad(set_to_none=True)\n",
            "            optimizer.zero_grad(set_to_none=True)\n            loss = loss_fn(model(x), y)\n"
            "            loss.backward()\n",
        ),
        hints=("0.69 is ln 2: the model never moved. What did optimizer.step() have to work with?",
               "zero_grad between backward() and step() erases the gradient; zero before the forward pass."),
        probe=_probe_stalls,
        judge=_judge_stalls,
        wrong_answers=(
            (_STALLS_STARTER.replace("            optimizer.zero_grad(set_to_none=True)\n", ""), "missing-zero-grad"),
            (_STALLS_STARTER.replace("            optimizer.step()\n", "").replace(
                "            loss = loss_fn", "            optimizer.step()\n            loss = loss_fn"),
             "grads-cleared-before-step"),
            (_STALLS_STARTER.replace("            optimizer.zero_grad(set_to_none=True)\n", "").replace(
                "    model.train()\n", "    model.train()\n    optimizer.zero_grad(set_to_none=True)\n"),
             "missing-zero-grad"),
        ),
    )
)

# --- loop-eval-changes -------------------------------------------------------------------------------------

_EVAL_STARTER = '''import torch


def evaluate(model, batches):
    """Symptom: two evaluations of the same model on the same data give different accuracies."""
    correct = 0
    total = 0
    for x, y in batches:
        correct += (model(x).argmax(1) == y).sum()
        total += len(y)
    return correct / total
'''


def _eval_changes_setup(case: Case) -> tuple[nn.Module, list]:
    model = _seeded(case.seeded(0), lambda: nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.5),
                                                         nn.Linear(32, 3)))
    gen = torch.Generator().manual_seed(case.seeded(1))
    x, y = torch.randn(128, 8, generator=gen), torch.randint(0, 3, (128,), generator=gen)
    return model, _split_batches(x, y)


def _probe_eval(answer: dict, *, case: Case) -> dict:
    model, batches = _eval_changes_setup(case)
    model.train()
    with ForwardRecorder(model) as forwards:
        results = [answer["evaluate"](model, batches), answer["evaluate"](model, batches)]
    return {"results": results,
            "forwards": [{"training": r.training, "grad_enabled": r.grad_enabled} for r in forwards.records]}


def _judge_eval(seen: dict, *, case: Case) -> str:
    forwards = seen.get("forwards")
    if not isinstance(forwards, list) or not all(isinstance(f, dict) for f in forwards):
        raise WireError("forwards missing")
    if any(f.get("training") is not False for f in forwards):
        fail("train-mode-eval", observed="forward passes ran with model.training = True (dropout active)",
             expected="evaluation in eval mode", cause="model.eval() is never called",
             where="call model.eval() at the start of evaluate")
    if any(f.get("grad_enabled") is not False for f in forwards):
        fail("eval-builds-graph", observed="forward passes ran with gradients enabled",
             expected="no autograd graph during evaluation (memory and time)",
             cause="no torch.no_grad()/torch.inference_mode() around evaluation",
             where="wrap the loop in `with torch.inference_mode():`")
    model, batches = _eval_changes_setup(case)
    model.eval()
    with torch.inference_mode():
        x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
        want = (model(x).argmax(1) == y).double().mean().item()
    results = seen.get("results")
    if not isinstance(results, list) or len(results) != 2:
        raise WireError("results missing")
    for got in results:
        value = _float_or_wire_error(got, "evaluate's result")
        if not abs(value - want) <= 1e-6:  # a nan is never close
            fail("wrong-accuracy", observed=f"evaluate returned {value:.4f}", expected=f"{want:.4f}, the fraction "
                 "of samples whose argmax is the label", cause="dividing by the number of batches instead of the "
                 "number of samples, or an integer division", where="the return line")
    return "eval mode, no graph, the right accuracy on repeated evaluation"


add(
    Drill(
        id="loop-eval-changes",
        title="Bug hunt: validation accuracy changes between two identical evaluations",
        kind="bughunt",
        topics=("loop", "modules"),
        difficulty=1,
        prompt="Two calls of evaluate() on the same model and data give different accuracies, and memory grows "
        "during evaluation. Fix evaluate().",
        entry="evaluate",
        starter=_EVAL_STARTER,
        solution=_EVAL_STARTER.replace(
            "    correct = 0\n", "    model.eval()\n    correct = 0\n"
        ).replace("    for x, y in batches:\n        correct", "    with torch.inference_mode():\n"
                  "        for x, y in batches:\n            correct").replace(
            "        total += len(y)", "            total += len(y)"),
        hints=("What does dropout do in training mode? And what does autograd record while you evaluate?",
               "model.eval() at the start, and run the loop under torch.inference_mode()."),
        probe=_probe_eval,
        judge=_judge_eval,
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
    )
)


# --- loop-forget-zero-grad (explain) -----------------------------------------------------------------------


def _zero_grad_experiment() -> None:
    w = torch.ones(1, requires_grad=True)
    for step in (1, 2):
        (3 * w).sum().backward()
        print(f"after backward {step}: w.grad = {w.grad.item()}")
    print("Gradients accumulate: without zero_grad, step 2 uses the sum of both gradients.")


add(
    multiple_choice(
        id="loop-forget-zero-grad",
        title="What happens if you forget zero_grad?",
        topics=("loop", "autograd"),
        difficulty=1,
        question="w = torch.ones(1, requires_grad=True). Twice in a row you build loss = (3 * w).sum() and call "
        "loss.backward(), with no zero_grad in between (a new loss, and so a new graph, each time). What is w.grad "
        "after the second call?",
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
        hints=("Each backward() adds into .grad.",
               "The graph (3 * w) is rebuilt each time here, so no error: 3 + 3."),
        experiment=_zero_grad_experiment,
    )
)


# --- loop-early-stopping (write, difficulty 3) ---------------------------------------------------------------

_ES_SCENARIOS = ("stops", "runs_out")


def _es_plan(case: Case, scenario: str) -> tuple[int, int, list[float], int]:
    """(patience, max_epochs, the validation loss each epoch reaches, the epoch of the tie or 0).

    Both scenarios descend, then spend patience - 1 epochs without a new best, then reach one more best (the
    counter must start again). "stops" then has a worse epoch and a tie with the best (not strictly lower: it
    counts as an epoch without improvement), and runs until patience stops it; "runs_out" ends at max_epochs,
    patience - 1 epochs after its best, without stopping."""
    gen = torch.Generator().manual_seed(case.seeded(0 if scenario == "stops" else 3))
    u = torch.rand(64, generator=gen, dtype=torch.float64).tolist()
    patience = 2 + int(u[0] * 3)  # 2, 3 or 4
    descent = 3 + int(u[1] * 3)
    values, best = [], 1.0 + u[2]
    for i in range(descent):
        best *= 0.7 + 0.2 * u[3 + i]
        values.append(best)
    for i in range(patience - 1):
        values.append(best * (1.02 + 0.2 * u[10 + i]))
    best *= 0.9 + 0.08 * u[20]
    values.append(best)
    if scenario == "runs_out":
        values += [best * (1.02 + 0.3 * u[21 + i]) for i in range(patience - 1)]
        return patience, len(values), values, 0
    values += [best * (1.02 + 0.3 * u[21]), best]
    tie = len(values)
    max_epochs = len(values) + patience + 4
    while len(values) < max_epochs:
        values.append(best * (1.02 + 0.3 * u[21 + len(values) % 40]))
    return patience, max_epochs, values, tie


def _es_setup(case: Case, scenario: str) -> tuple[nn.Module, torch.Tensor, list[torch.Tensor], list[float]]:
    """A model, a target, the weights after each epoch (each at its own point, a tie's included) and the losses."""
    _, _, values, _ = _es_plan(case, scenario)
    model = _seeded(case.seeded(1), lambda: nn.Linear(4, 3))
    flat = _es_flat(model)
    gen = torch.Generator().manual_seed(case.seeded(2 if scenario == "stops" else 4))
    target = flat + torch.randn(flat.shape, generator=gen)
    trajectory = []
    for value in values:
        direction = torch.randn(flat.shape, generator=gen)
        trajectory.append(target + math.sqrt(value) * direction / direction.norm())
    return model, target, trajectory, values


def _es_flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _es_load(model: nn.Module, flat: torch.Tensor) -> None:
    with torch.no_grad():
        offset = 0
        for p in model.parameters():
            p.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()


def _probe_early_stopping(answer: dict, *, case: Case) -> dict:
    seen = {}
    for scenario in _ES_SCENARIOS:
        patience, max_epochs, _, _ = _es_plan(case, scenario)
        model, target, trajectory, values = _es_setup(case, scenario)
        calls = {"train": 0, "validate": 0}

        def train_one_epoch(m: nn.Module, trajectory=trajectory, calls=calls) -> None:  # in place, as a step does
            calls["train"] += 1
            _es_load(m, trajectory[min(calls["train"], len(trajectory)) - 1])

        def validate(m: nn.Module, target=target, trajectory=trajectory, values=values, calls=calls) -> float:
            calls["validate"] += 1  # the planned loss of the epoch whose weights the model holds (ties exact)
            flat = _es_flat(m)
            return next((v for v, w in zip(values, trajectory, strict=True) if torch.equal(flat, w)),
                        float(((flat - target) ** 2).sum()))

        history = answer["fit"](model, train_one_epoch, validate, max_epochs, patience)
        seen[scenario] = {"history": history, "trained": calls["train"], "validated": calls["validate"],
                          "final": _es_flat(model)}
    return seen


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
    got = [_float_or_wire_error(v, "an entry of the returned history") for v in got]
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
    if not torch.equal(final, trajectory[best_epoch - 1]):
        restored_last = torch.equal(final, trajectory[runs - 1])
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

add(
    Drill(
        id="loop-early-stopping",
        title="Early stopping with patience and the best weights restored",
        kind="write",
        topics=("loop", "checkpointing"),
        difficulty=3,
        prompt="Write fit(model, train_one_epoch, validate, max_epochs, patience). Each epoch calls "
        "train_one_epoch(model) (it updates the weights in place), then validate(model), which returns the "
        "validation loss as a float. Stop after `patience` consecutive epochs without a new best (strictly lower) "
        "validation loss, or after max_epochs. Before returning, put the weights of the best epoch back into the "
        "model. Return the list of validation losses, one per epoch run.",
        entry="fit",
        starter="import torch\n\n\ndef fit(model, train_one_epoch, validate, max_epochs, patience):\n"
        "    raise NotImplementedError\n",
        solution=_ES_SOLUTION,
        hints=("Keep three things across epochs: the best loss, the weights of that epoch, and how many epochs "
               "in a row have not beaten it. What does model.state_dict() return: copies, or the live tensors?",
               "On a new best: reset the counter, best = copy.deepcopy(model.state_dict()). Otherwise count, and "
               "break when the count reaches patience. After the loop, model.load_state_dict(best)."),
        probe=_probe_early_stopping,
        judge=_judge_early_stopping,
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
    )
)


# --- loop-three-bugs (bughunt, difficulty 3) -----------------------------------------------------------------

_THREE_BUGS_STARTER = '''import torch


def fit(model, train_batches, val_batches, optimizer, loss_fn, epochs):
    """Returns one (mean training loss, mean validation loss) pair per epoch.

    Symptoms: the training loss is erratic and far from the reference run's, memory grows with every
    epoch, and from the second epoch on BatchNorm trains with its running statistics. Three bugs.
    """
    history = []
    model.train()
    for epoch in range(epochs):
        train_total = 0.0
        for x, y in train_batches:
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            train_total += loss
        model.eval()
        val_total = 0.0
        with torch.no_grad():
            for x, y in val_batches:
                val_total += loss_fn(model(x), y)
        history.append((train_total / len(train_batches), val_total / len(val_batches)))
    return history
'''

_FIX_ZERO_GRAD = ("            loss = loss_fn(model(x), y)\n",
                  "            optimizer.zero_grad(set_to_none=True)\n            loss = loss_fn(model(x), y)\n")
_FIX_DETACH = ("train_total += loss\n", "train_total += loss.detach()\n")
_FIX_MODE = ("    model.train()\n    for epoch in range(epochs):\n",
             "    for epoch in range(epochs):\n        model.train()\n")


def _three_bugs_fixed(*fixes: tuple[str, str]) -> str:
    return with_fixes(_THREE_BUGS_STARTER, *fixes)


_THREE_EPOCHS = 3


def _three_setup(case: Case) -> tuple[nn.Module, torch.optim.Optimizer, list, list]:
    model = _seeded(case.seeded(0), lambda: nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(),
                                                         nn.Linear(16, 1)))
    gen = torch.Generator().manual_seed(case.seeded(1))
    x = torch.randn(96, 6, generator=gen)
    y = x[:, :3].sum(1, keepdim=True) + 0.1 * torch.randn(96, 1, generator=gen)
    batches = _split_batches(x, y, 16)
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), batches[:4], batches[4:]


def _probe_three_bugs(answer: dict, *, case: Case) -> dict:
    model, optimizer, train_batches, val_batches = _three_setup(case)
    with StepRecorder(optimizer) as steps, ForwardRecorder(model) as forwards:
        history = answer["fit"](model, train_batches, val_batches, optimizer, nn.MSELoss(), _THREE_EPOCHS)
    return {"history": history, "steps": _recorded_steps(steps),
            "forwards": [{"training": r.training, "grad_enabled": r.grad_enabled} for r in forwards.records],
            "final": [t.detach() for t in model.state_dict().values()]}


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
             "or validation run with gradients enabled", where="the training loop, and torch.no_grad() around "
             "validation")
    k = 0
    for epoch in range(1, _THREE_EPOCHS + 1):
        model.train()
        train_total = torch.zeros(())
        for x, y in train_batches:
            if training_forwards[k].get("training") is not True:
                fail("eval-mode-training", observed=f"epoch {epoch}'s training forwards ran with model.training = "
                     "False", expected="training mode for every training batch",
                     cause="model.eval() for validation is never undone: model.train() runs once, before the "
                     "epoch loop, so from epoch 2 on BatchNorm normalises with its running statistics (and dropout "
                     "would be off)", where="call model.train() at the start of every epoch")
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            k += 1
            _check_step_gradient(k, steps[k - 1]["grads"], [p.grad for p in model.parameters()],
                                 where="optimizer.zero_grad(set_to_none=True) before each forward pass")
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
                 where="train_total += loss.detach()")
        for name, got, want in (("training", train_got, train_total / len(train_batches)), ("validation", val_got,
                                                                                           val)):
            value = _float_or_wire_error(got, f"epoch {epoch}'s mean {name} loss")
            if not abs(value - float(want)) <= 1e-4 * max(1.0, abs(float(want))):
                fail("wrong-history", observed=f"epoch {epoch}'s mean {name} loss is {value:.5f}",
                     expected=f"{float(want):.5f}", cause="a sum not divided by the number of batches, or the "
                     "loss of another batch", where="history.append(...)")
    if len(history) != _THREE_EPOCHS:
        fail("wrong-history", observed=f"{len(history)} history entries", expected=f"{_THREE_EPOCHS}",
             cause="an entry per batch, or the append outside the loop", where="history.append(...)")
    final = _checked_tensors(seen.get("final"), len(model.state_dict()), "final state")
    if not _same_tensors(final, [t.detach() for t in model.state_dict().values()], atol=1e-4):
        fail("wrong-weights", observed="the weights or BatchNorm statistics after training differ from the "
             "reference loop's", expected="the same state", cause="an extra update, or statistics updated "
             "during validation", where="the training and validation loops")
    return "fresh gradients at every step, training mode in every epoch, and losses kept without their graph"


add(
    Drill(
        id="loop-three-bugs", unjudged=('steps/*/params/*',),
        title="Bug hunt: a training loop with three bugs",
        kind="bughunt",
        topics=("loop", "memory", "modules"),
        difficulty=3,
        prompt="fit() trains a small regression network with BatchNorm and returns one (mean training loss, mean "
        "validation loss) pair per epoch. Its training loss is erratic and far from a reference run's, memory "
        "grows with every epoch, and from the second epoch on BatchNorm trains with its running statistics. It "
        "has three bugs: fix all three (the check reports the first one it observes).",
        entry="fit",
        starter=_THREE_BUGS_STARTER,
        solution=_three_bugs_fixed(_FIX_ZERO_GRAD, _FIX_DETACH, _FIX_MODE),
        hints=("One bug per symptom: what makes gradients of earlier batches leak into a step? What keeps a "
               "graph alive after the step? What undoes model.eval()?",
               "optimizer.zero_grad(set_to_none=True) before each forward; train_total += loss.detach(); "
               "model.train() at the start of every epoch, not once before the loop."),
        probe=_probe_three_bugs,
        judge=_judge_three_bugs,
        wrong_answers=(
            (_three_bugs_fixed(_FIX_ZERO_GRAD), "loss-keeps-graph"),
            (_three_bugs_fixed(_FIX_ZERO_GRAD, _FIX_DETACH), "eval-mode-training"),
            (_three_bugs_fixed(_FIX_ZERO_GRAD, _FIX_MODE), "loss-keeps-graph"),
            (_three_bugs_fixed(_FIX_DETACH, _FIX_MODE), "missing-zero-grad"),
        ),
    )
)


# --- loop-optimizer-before-to (explain) ----------------------------------------------------------------------


def _optimizer_before_to_experiment() -> None:
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.to(torch.float64)  # a move, as .to("cuda") is
    print(f"default .to(): the optimizer still holds the model's parameters: "
          f"{optimizer.param_groups[0]['params'][0] is model.weight}")
    previous = torch.__future__.get_overwrite_module_params_on_conversion()
    torch.__future__.set_overwrite_module_params_on_conversion(True)
    try:
        model = nn.Linear(3, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model.to(torch.float64)  # this conversion makes new Parameter objects
        before = model.weight.detach().clone()
        model(torch.ones(2, 3, dtype=torch.float64)).sum().backward()
        optimizer.step()
        print(f"when the move makes new Parameters: the optimizer holds the model's? "
              f"{optimizer.param_groups[0]['params'][0] is model.weight}; "
              f"did step() change the model? {not torch.equal(before, model.weight.detach())}")
    finally:
        torch.__future__.set_overwrite_module_params_on_conversion(previous)
    print("Adam's state is created lazily at the first step(), on each parameter's device: nothing else depends "
          "on the order.")


add(
    multiple_choice(
        id="loop-optimizer-before-to",
        title="Move the model before creating the optimizer",
        topics=("loop", "modules"),
        difficulty=2,
        question="A script builds model = Net(), then optimizer = torch.optim.AdamW(model.parameters()), then calls "
        "model.to('cuda'). Why do the PyTorch docs ask you to move the model before creating the optimizer?",
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
        hints=("What does the optimizer hold: the module, or the tensors model.parameters() returned?",
               "Compare optimizer.param_groups[0]['params'][0] with model.weight after a move that creates new "
               "Parameters (torch.__future__.set_overwrite_module_params_on_conversion(True))."),
        experiment=_optimizer_before_to_experiment,
    )
)


# --- loop-overfitting-remedy (explain) ----------------------------------------------------------------------


def _overfitting_experiment() -> None:
    gen = torch.Generator().manual_seed(0)
    x_train, x_val = torch.rand(12, 1, generator=gen, dtype=torch.float64), torch.linspace(0, 1, 50,
                                                                                      dtype=torch.float64)[:, None]
    truth = lambda x: torch.sin(6 * x)  # noqa: E731
    y_train = truth(x_train) + 0.3 * torch.randn(12, 1, generator=gen, dtype=torch.float64)
    features = lambda x: torch.cat([x ** k for k in range(10)], 1)  # noqa: E731
    for decay in (0.0, 1e-3):
        a = features(x_train)
        w = torch.linalg.solve(a.T @ a + (decay + 1e-10) * torch.eye(10, dtype=torch.float64), a.T @ y_train)
        train = ((a @ w - y_train) ** 2).mean().item()
        val = ((features(x_val) @ w - truth(x_val)) ** 2).mean().item()
        print(f"degree-9 fit on 12 noisy points, weight decay {decay:g}: train MSE {train:.4f}, val MSE {val:.4f}")
    print("Regularisation gives up a little training loss for a much lower validation loss.")


add(
    multiple_choice(
        id="loop-overfitting-remedy",
        title="Training loss falls, validation loss rises",
        topics=("loop", "modules"),
        difficulty=1,
        question="Training loss keeps falling (0.05 at epoch 30), while validation loss was lowest at epoch 8 "
        "(0.41) and has risen to 0.70 since. Which change addresses this most directly?",
        options=(
            ("raise the learning rate so the model escapes the sharp minimum",
             "a larger step makes training noisier; it does not stop the model fitting the noise of its training "
             "set, which is what the widening gap shows"),
            ("train for more epochs: validation loss catches up later on",
             "the gap has widened for 22 epochs: more epochs fit the training noise further"),
            ("regularise (weight decay, dropout, augmentation); keep the best-val weights",
             "the model is overfitting: regularisation limits how well it can fit noise, and early stopping "
             "keeps the epoch-8 weights instead of the last ones"),
            ("make the network wider and deeper, so it has the capacity to fit the validation set too",
             "more capacity fits the training set's noise even better: the gap grows"),
        ),
        key="c",
        hints=("Which quantity is getting worse, and on which data?",
               "A falling training loss with a rising validation loss is overfitting: what limits a model's "
               "ability to memorise?"),
        experiment=_overfitting_experiment,
    )
)


# --- loop-eval-restores-mode (bughunt) ----------------------------------------------------------------------

_RESTORE_STARTER = '''import torch


@torch.no_grad()
def evaluate(model, batches, loss_fn):
    """Mean loss over the batches.

    Symptom: called after every epoch of training, and from the second epoch on the training loss drops far
    faster than in the run without validation, while dropout seems to have no effect."""
    model.eval()
    total, count = 0.0, 0
    for x, y in batches:
        total += loss_fn(model(x), y) * len(y)
        count += len(y)
    return total / count
'''


def _restore_setup(case: Case) -> tuple[nn.Module, list]:
    model = _seeded(case.seeded(0), lambda: nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.3),
                                                         nn.Linear(32, 1)))
    x, y = _binary_task(case.seeded(1), 80)
    return model, _split_batches(x, y, 24)


def _probe_restore(answer: dict, *, case: Case) -> dict:
    model, batches = _restore_setup(case)
    seen: dict[str, Any] = {"results": [], "modes_after": [], "forwards": []}
    for start_in_training in (True, False):
        model.train(start_in_training)
        with ForwardRecorder(model) as forwards:
            seen["results"].append(answer["evaluate"](model, batches, nn.BCEWithLogitsLoss()))
        seen["forwards"] += [{"training": r.training, "grad_enabled": r.grad_enabled} for r in forwards.records]
        seen["modes_after"].append({"model": model.training, "dropout": model[2].training})
    return seen


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
             where="remember was_training = model.training; restore it with model.train(was_training)")
    if modes[1].get("model") is not False or modes[1].get("dropout") is not False:
        fail("forced-train-mode", observed="a model in eval mode comes back from evaluate in training mode",
             expected="the mode it had before the call", cause="model.train() at the end forces training mode "
             "even when the caller was in eval mode (evaluating a model for inference)",
             where="model.train(was_training), not model.train()")
    model.eval()
    with torch.no_grad():
        want = sum(nn.BCEWithLogitsLoss()(model(x), y) * len(y) for x, y in batches) / sum(len(y) for _, y in batches)
    results = seen.get("results")
    if not isinstance(results, list) or len(results) != 2:
        raise WireError("results missing")
    for got in results:
        value = _float_or_wire_error(got, "evaluate's result")
        if not abs(value - float(want)) <= 1e-5:
            fail("wrong-loss", observed=f"evaluate returned {value:.5f}", expected=f"{float(want):.5f}",
                 cause="a mean of batch means (the last batch is smaller), or another reduction",
                 where="the sum and the count")
    return "evaluates in eval mode without a graph, and hands the model back in the mode it found it"


add(
    Drill(
        id="loop-eval-restores-mode",
        title="Bug hunt: validation switches dropout off for the rest of training",
        kind="bughunt",
        topics=("loop", "modules"),
        difficulty=2,
        prompt="evaluate() is called after every training epoch. From the second epoch on, the training loss falls "
        "far faster than in a run without validation, as if dropout had stopped. Fix evaluate() so that it leaves "
        "the model in the mode it found it (training or eval), whatever the caller does next.",
        entry="evaluate",
        starter=_RESTORE_STARTER,
        solution=_RESTORE_STARTER.replace(
            "    model.eval()\n", "    was_training = model.training\n    model.eval()\n").replace(
            "    return total / count\n", "    model.train(was_training)\n    return total / count\n"),
        hints=("Which mode is the model in when evaluate() returns, and who switches it back?",
               "was_training = model.training before model.eval(); model.train(was_training) before returning."),
        probe=_probe_restore,
        judge=_judge_restore,
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
    )
)
