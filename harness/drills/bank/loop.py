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
from harness.contract.instruments import ForwardRecorder, HostSyncCounter, StepRecorder
from harness.drills.core import Drill, add
from harness.drills.support import explain


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


def _recorded_steps(steps: StepRecorder, limit: int | None = None) -> list[dict]:
    records = steps.records if limit is None else steps.records[:limit]
    return [{"grads": r.grads, "params": r.params} for r in records]


# --- loop-train-step ---------------------------------------------------------------------------------------


def train_step_setup(case: Case) -> tuple[nn.Module, torch.optim.Optimizer, list]:
    """A seeded model with batch norm, its SGD optimizer and the batches of a binary task."""
    # Batch norm makes the mode show in values: in eval mode it normalises with its running statistics, so the
    # gradients and the losses differ from the reference's, whatever the probe's mode records say
    model = _seeded(case.seeded(0), lambda: nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.ReLU(),
                                                          nn.Linear(8, 1)))
    x, y = _binary_task(case.seeded(1), 96)
    return model, torch.optim.SGD(model.parameters(), lr=0.1), _split_batches(x, y)


def _probe_train_step(answer: dict, *, case: Case) -> dict:
    model, optimizer, batches = train_step_setup(case)
    model.eval()  # as an evaluation between epochs leaves it: the step must switch training mode back on
    returned = []
    with StepRecorder(optimizer) as steps, HostSyncCounter() as syncs, ForwardRecorder(model) as forwards:
        for batch in batches:
            returned.append(answer["train_step"](model, batch, nn.BCEWithLogitsLoss(), optimizer))
    return {"returned": returned, "steps": _recorded_steps(steps), "final": [p.detach() for p in model.parameters()],
            "syncs": syncs.calls, "training": [r.training for r in forwards.records]}


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
        hints=("Four calls in a fixed order, around the forward pass, with the model in training mode.",
               "model.train() -> zero_grad(set_to_none=True) -> loss = loss_fn(model(x), y) -> loss.backward() -> "
               "optimizer.step()"),
        probe=_probe_train_step,
    )
)

# --- loop-loss-stalls --------------------------------------------------------------------------------------

STALLS_STARTER = '''import torch


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

STALLS_EPOCHS = 5


def stalls_setup(case: Case) -> tuple[nn.Module, torch.optim.Optimizer, list]:
    """A seeded ReLU MLP, its SGD optimizer and the batches of a binary task (loop-loss-stalls)."""
    model = _seeded(case.seeded(0), lambda: nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)))
    x, y = _binary_task(case.seeded(3))
    return model, torch.optim.SGD(model.parameters(), lr=0.2), _split_batches(x, y)


def _probe_stalls(answer: dict, *, case: Case) -> dict:
    model, optimizer, batches = stalls_setup(case)
    with StepRecorder(optimizer) as steps:
        answer["train"](model, batches, optimizer, nn.BCEWithLogitsLoss(), STALLS_EPOCHS)
    return {"count": len(steps.records), "steps": _recorded_steps(steps, 3),
            "final": [p.detach() for p in model.parameters()]}


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
        starter=STALLS_STARTER,
        hints=("0.69 is ln 2: the model never moved. What did optimizer.step() have to work with?",
               "zero_grad between backward() and step() erases the gradient; zero before the forward pass."),
        probe=_probe_stalls,
    )
)

# --- loop-eval-changes -------------------------------------------------------------------------------------

EVAL_STARTER = '''import torch


def evaluate(model, batches):
    """Symptom: two evaluations of the same model on the same data give different accuracies."""
    correct = 0
    total = 0
    for x, y in batches:
        correct += (model(x).argmax(1) == y).sum()
        total += len(y)
    return correct / total
'''


def eval_changes_setup(case: Case) -> tuple[nn.Module, list]:
    """A seeded MLP with dropout and the batches of a three-class task (loop-eval-changes)."""
    model = _seeded(case.seeded(0), lambda: nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.5),
                                                         nn.Linear(32, 3)))
    gen = torch.Generator().manual_seed(case.seeded(1))
    x, y = torch.randn(128, 8, generator=gen), torch.randint(0, 3, (128,), generator=gen)
    return model, _split_batches(x, y)


def _probe_eval(answer: dict, *, case: Case) -> dict:
    model, batches = eval_changes_setup(case)
    model.train()
    with ForwardRecorder(model) as forwards:
        results = [answer["evaluate"](model, batches), answer["evaluate"](model, batches)]
    return {"results": results,
            "forwards": [{"training": r.training, "grad_enabled": r.grad_enabled} for r in forwards.records]}


add(
    Drill(
        id="loop-eval-changes",
        self_check=True,
        title="Bug hunt: validation accuracy changes between two identical evaluations",
        kind="bughunt",
        topics=("loop", "modules"),
        difficulty=1,
        prompt="Two calls of evaluate() on the same model and data give different accuracies, and memory grows "
        "during evaluation. Fix evaluate().",
        entry="evaluate",
        starter=EVAL_STARTER,
        hints=("What does dropout do in training mode? And what does autograd record while you evaluate?",
               "model.eval() at the start, and run the loop under torch.inference_mode()."),
        probe=_probe_eval,
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
    explain(
        id="loop-forget-zero-grad",
        title="What happens if you forget zero_grad?",
        topics=("loop", "autograd"),
        difficulty=1,
        question="w = torch.ones(1, requires_grad=True). Twice in a row you build loss = (3 * w).sum() and call "
        "loss.backward(), with no zero_grad in between (a new loss, and so a new graph, each time). What is w.grad "
        "after the second call?",
        hints=("Each backward() adds into .grad.",
               "The graph (3 * w) is rebuilt each time here, so no error: 3 + 3."),
        experiment=_zero_grad_experiment,
    )
)


# --- loop-early-stopping (write, difficulty 3) ---------------------------------------------------------------

_ES_SCENARIOS = ("stops", "runs_out")


def es_plan(case: Case, scenario: str) -> tuple[int, int, list[float], int]:
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


def es_setup(case: Case, scenario: str) -> tuple[nn.Module, torch.Tensor, list[torch.Tensor], list[float]]:
    """A model, a target, the weights after each epoch (each at its own point, a tie's included) and the losses."""
    _, _, values, _ = es_plan(case, scenario)
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
        patience, max_epochs, _, _ = es_plan(case, scenario)
        model, target, trajectory, values = es_setup(case, scenario)
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
        hints=("Keep three things across epochs: the best loss, the weights of that epoch, and how many epochs "
               "in a row have not beaten it. What does model.state_dict() return: copies, or the live tensors?",
               "On a new best: reset the counter, best = copy.deepcopy(model.state_dict()). Otherwise count, and "
               "break when the count reaches patience. After the loop, model.load_state_dict(best)."),
        probe=_probe_early_stopping,
    )
)


# --- loop-three-bugs (bughunt, difficulty 3) -----------------------------------------------------------------

THREE_BUGS_STARTER = '''import torch


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


THREE_EPOCHS = 3


def three_setup(case: Case) -> tuple[nn.Module, torch.optim.Optimizer, list, list]:
    """The three-bugs script's seeded model with batch norm, its SGD optimizer, and its train and validation batches."""
    model = _seeded(case.seeded(0), lambda: nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(),
                                                         nn.Linear(16, 1)))
    gen = torch.Generator().manual_seed(case.seeded(1))
    x = torch.randn(96, 6, generator=gen)
    y = x[:, :3].sum(1, keepdim=True) + 0.1 * torch.randn(96, 1, generator=gen)
    batches = _split_batches(x, y, 16)
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), batches[:4], batches[4:]


def _probe_three_bugs(answer: dict, *, case: Case) -> dict:
    model, optimizer, train_batches, val_batches = three_setup(case)
    with StepRecorder(optimizer) as steps, ForwardRecorder(model) as forwards:
        history = answer["fit"](model, train_batches, val_batches, optimizer, nn.MSELoss(), THREE_EPOCHS)
    return {"history": history, "steps": _recorded_steps(steps),
            "forwards": [{"training": r.training, "grad_enabled": r.grad_enabled} for r in forwards.records],
            "final": [t.detach() for t in model.state_dict().values()]}


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
        starter=THREE_BUGS_STARTER,
        hints=("One bug per symptom: what makes gradients of earlier batches leak into a step? What keeps a "
               "graph alive after the step? What undoes model.eval()?",
               "optimizer.zero_grad(set_to_none=True) before each forward; train_total += loss.detach(); "
               "model.train() at the start of every epoch, not once before the loop."),
        probe=_probe_three_bugs,
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
    explain(
        id="loop-optimizer-before-to",
        title="Move the model before creating the optimizer",
        topics=("loop", "modules"),
        difficulty=2,
        question="A script builds model = Net(), then optimizer = torch.optim.AdamW(model.parameters()), then calls "
        "model.to('cuda'). Why do the PyTorch docs ask you to move the model before creating the optimizer?",
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
    explain(
        id="loop-overfitting-remedy",
        title="Training loss falls, validation loss rises",
        topics=("loop", "modules"),
        difficulty=1,
        question="Training loss keeps falling (0.05 at epoch 30), while validation loss was lowest at epoch 8 "
        "(0.41) and has risen to 0.70 since. Which change addresses this most directly?",
        hints=("Which quantity is getting worse, and on which data?",
               "A falling training loss with a rising validation loss is overfitting: what limits a model's "
               "ability to memorise?"),
        experiment=_overfitting_experiment,
    )
)


# --- loop-eval-restores-mode (bughunt) ----------------------------------------------------------------------

RESTORE_STARTER = '''import torch


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


def restore_setup(case: Case) -> tuple[nn.Module, list]:
    """A seeded MLP with dropout and the batches of a binary task (loop-eval-restores-mode)."""
    model = _seeded(case.seeded(0), lambda: nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.3),
                                                         nn.Linear(32, 1)))
    x, y = _binary_task(case.seeded(1), 80)
    return model, _split_batches(x, y, 24)


def _probe_restore(answer: dict, *, case: Case) -> dict:
    model, batches = restore_setup(case)
    seen: dict[str, Any] = {"results": [], "modes_after": [], "forwards": []}
    for start_in_training in (True, False):
        model.train(start_in_training)
        with ForwardRecorder(model) as forwards:
            seen["results"].append(answer["evaluate"](model, batches, nn.BCEWithLogitsLoss()))
        seen["forwards"] += [{"training": r.training, "grad_enabled": r.grad_enabled} for r in forwards.records]
        seen["modes_after"].append({"model": model.training, "dropout": model[2].training})
    return seen


add(
    Drill(
        id="loop-eval-restores-mode",
        self_check=True,
        title="Bug hunt: validation switches dropout off for the rest of training",
        kind="bughunt",
        topics=("loop", "modules"),
        difficulty=2,
        prompt="evaluate() is called after every training epoch. From the second epoch on, the training loss falls "
        "far faster than in a run without validation, as if dropout had stopped. Fix evaluate() so that it leaves "
        "the model in the mode it found it (training or eval), whatever the caller does next.",
        entry="evaluate",
        starter=RESTORE_STARTER,
        hints=("Which mode is the model in when evaluate() returns, and who switches it back?",
               "was_training = model.training before model.eval(); model.train(was_training) before returning."),
        probe=_probe_restore,
    )
)
