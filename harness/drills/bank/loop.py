"""Drills on the training loop: writing a step, and hunting the classic bugs by their symptoms."""

from __future__ import annotations

import torch
from torch import nn

from harness.checks.core import fail
from harness.checks.probes import ForwardRecorder, StepRecorder
from harness.drills.core import Drill, add
from harness.drills.support import multiple_choice


def _binary_task(seed: int, n: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=gen)
    y = (x[:, :2].sum(1, keepdim=True) > 0).float()
    return x, y


def _batches(x: torch.Tensor, y: torch.Tensor, size: int = 32) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return list(zip(x.split(size), y.split(size), strict=True))


def _reference_grads(model: nn.Module, params: list[torch.Tensor], batch: tuple[torch.Tensor, torch.Tensor],
                     loss_fn: nn.Module) -> list[torch.Tensor]:
    """The gradient of `batch`'s loss at `params` (in model.parameters() order), computed independently."""
    named = {name: p.clone().requires_grad_(True)
             for (name, _), p in zip(model.named_parameters(), params, strict=True)}
    x, y = batch
    loss = loss_fn(torch.func.functional_call(model, named, (x,)), y)
    return list(torch.autograd.grad(loss, list(named.values())))


def _check_fresh_gradients(model: nn.Module, records: list, batches: list, loss_fn: nn.Module, where: str) -> None:
    """Fail unless each recorded optimizer step used exactly the gradient of its own batch."""
    for k in range(1, min(len(records), 3)):
        reference = _reference_grads(model, records[k].params, batches[k % len(batches)], loss_fn)
        seen = records[k].grads
        if any(g is None for g in seen) or not all(torch.allclose(g, r, atol=1e-6)
                                                   for g, r in zip(seen, reference, strict=True)):
            fail("missing-zero-grad",
                 observed=f"the gradient the optimizer used at step {k + 1} is not the gradient of batch {k + 1}",
                 expected=f"only batch {k + 1}'s gradient at step {k + 1}",
                 cause=f"gradients accumulate in .grad: without zero_grad, step {k + 1} uses the sum of all earlier "
                 "batches' gradients (or step() ran before backward() and used the previous batch's gradient)",
                 where=where)


def _check_train_step(ns: dict) -> str:
    train_step = ns["train_step"]
    for seed in (0, 1):
        torch.manual_seed(seed)
        model = nn.Linear(8, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = _binary_task(seed, 64)
        batches = _batches(x, y)
        with StepRecorder(optimizer) as steps:
            for batch in batches[:2]:
                train_step(model, batch, nn.BCEWithLogitsLoss(), optimizer)
        if len(steps.records) != 2:
            fail("step-count", observed=f"{len(steps.records)} optimizer steps for 2 calls",
                 expected="one step per call", cause="optimizer.step() missing or called twice",
                 where="the end of train_step")
        _check_fresh_gradients(model, steps.records, batches, nn.BCEWithLogitsLoss(),
                               where="call optimizer.zero_grad(set_to_none=True) before loss.backward(), then step()")
    return "one step per batch with that batch's gradient"


add(
    Drill(
        id="loop-train-step",
        title="Write a training step",
        kind="write",
        topics=("loop",),
        difficulty=1,
        prompt="Write train_step(model, batch, loss_fn, optimizer) that trains on one (x, y) batch and returns "
        "the loss as a detached tensor (no .item(): that would sync the host every step).",
        entry="train_step",
        starter="import torch\n\n\ndef train_step(model, batch, loss_fn, optimizer):\n    raise NotImplementedError\n",
        solution=(
            "import torch\n\n\ndef train_step(model, batch, loss_fn, optimizer):\n"
            "    x, y = batch\n    model.train()\n    optimizer.zero_grad(set_to_none=True)\n"
            "    loss = loss_fn(model(x), y)\n    loss.backward()\n    optimizer.step()\n    return loss.detach()\n"
        ),
        hints=("Four calls in a fixed order, around the forward pass.",
               "zero_grad(set_to_none=True) -> loss = loss_fn(model(x), y) -> loss.backward() -> optimizer.step()"),
        check=_check_train_step,
        wrong_answers=(
            "def train_step(model, batch, loss_fn, optimizer):\n    x, y = batch\n"
            "    loss = loss_fn(model(x), y)\n    loss.backward()\n    optimizer.step()\n    return loss.detach()\n",
            "def train_step(model, batch, loss_fn, optimizer):\n    x, y = batch\n    optimizer.zero_grad()\n"
            "    optimizer.step()\n    loss = loss_fn(model(x), y)\n    loss.backward()\n    return loss.detach()\n",
        ),
    )
)

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


def _check_stalls(ns: dict) -> str:
    train = ns["train"]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    x, y = _binary_task(3)
    with StepRecorder(optimizer) as steps:
        train(model, _batches(x, y), optimizer, nn.BCEWithLogitsLoss(), 5)
    if steps.records and all(g is None for g in steps.records[0].grads):
        fail("grads-cleared-before-step", observed="every optimizer.step() saw .grad = None",
             expected="the gradient of the batch at each step",
             cause="zero_grad runs between backward() and step(), erasing the gradient: the model never moves "
             "and the loss stays at ln 2", where="move zero_grad before the forward pass")
    _check_fresh_gradients(model, steps.records, _batches(x, y), nn.BCEWithLogitsLoss(),
                           where="zero_grad(set_to_none=True) once per batch, before the forward pass")
    with torch.no_grad():
        loss = nn.BCEWithLogitsLoss()(model(x), y).item()
    if loss > 0.4:
        fail("still-stalls", observed=f"final loss {loss:.3f}", expected="below 0.4 after 5 epochs",
             cause="the loop still does not learn", where="the order zero_grad -> forward -> backward -> step")
    return f"the loop learns (final loss {loss:.3f})"


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
        check=_check_stalls,
        wrong_answers=(
            _STALLS_STARTER.replace("            optimizer.zero_grad(set_to_none=True)\n", ""),
            _STALLS_STARTER.replace("            optimizer.step()\n", "").replace(
                "            loss = loss_fn", "            optimizer.step()\n            loss = loss_fn"),
        ),
    )
)

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


def _check_eval(ns: dict) -> str:
    evaluate = ns["evaluate"]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 3))
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(128, 8, generator=gen), torch.randint(0, 3, (128,), generator=gen)
    model.train()
    with ForwardRecorder(model) as forwards:
        first, second = evaluate(model, _batches(x, y)), evaluate(model, _batches(x, y))
    if any(r.training for r in forwards.records):
        fail("train-mode-eval", observed="forward passes ran with model.training = True (dropout active)",
             expected="evaluation in eval mode", cause="model.eval() is never called",
             where="call model.eval() at the start of evaluate")
    if any(r.grad_enabled for r in forwards.records):
        fail("eval-builds-graph", observed="forward passes ran with gradients enabled",
             expected="no autograd graph during evaluation (memory and time)",
             cause="no torch.no_grad()/torch.inference_mode() around evaluation",
             where="wrap the loop in `with torch.inference_mode():`")
    if float(first) != float(second):
        fail("nondeterministic-eval", observed=f"accuracies {float(first):.3f} and {float(second):.3f}",
             expected="identical results", cause="something random still runs during evaluation", where="evaluate")
    return "eval mode, no graph, identical results on repeated evaluation"


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
        check=_check_eval,
        wrong_answers=(_EVAL_STARTER.replace("    correct = 0\n", "    model.eval()\n    correct = 0\n"),),
    )
)


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
        prompt="loss = (3 * w).sum() with w = 1.0. You call loss.backward() twice without zero_grad. What is w.grad?\n"
        "  a) 3.0   b) 6.0   c) 0.0   d) an error: the graph was freed\n",
        correct="b",
        explanation="backward() accumulates into .grad: 3 + 3 = 6",
        hints=("Each backward() adds into .grad.",
               "The graph (3 * w) is rebuilt each time here, so no error: 3 + 3."),
        wrong=("a", "d"),
        experiment=_zero_grad_experiment,
    )
)
