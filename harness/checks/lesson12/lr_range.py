"""12-lr-range, the probe.

Run the student's sweep on each case; record every optimizer step, what it returned, and the state after.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from harness.checks.lesson12.common import Batch
from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
from harness.contract.instruments import StepRecorder, collect, snapshot
from harness.contract.registry import register

BASE_LR, MOMENTUM = 0.05, 0.9


def sweeps(case: Case) -> list[dict[str, Any]]:
    """(seed, batches, start_lr, end_lr, num_steps, diverge, poisoned) of each sweep: one that diverges, one that
    does not, and one whose batch `poisoned` holds an inf (as a division by a zero std leaves one): the loss of
    that step is NaN while every loss before it is far below diverge times the best, so only a test for
    non-finite losses stops there (NaN > anything is False)."""
    if case.hidden:
        plan = [(3, 1e-3, 40.0, 28, 4.0, None), (3, 1e-4, 3e-3, 6, 3.0, None), (4, 1e-4, 1e-2, 12, 4.0, 3)]
    else:
        plan = [(4, 1e-3, 30.0, 30, 4.0, None), (3, 1e-4, 1e-2, 8, 4.0, None), (3, 1e-4, 1e-2, 8, 4.0, 2)]
    return [{"seed": case.seeded((1250 if case.hidden else 1240) + i), "batches": b, "start_lr": s, "end_lr": e,
             "num_steps": n, "diverge": d, "poisoned": p} for i, (b, s, e, n, d, p) in enumerate(plan)]


def sweep_setup(item: dict[str, Any]) -> tuple[nn.Module, torch.optim.Optimizer, list[Batch]]:
    """The model after one warm-up step (so momentum buffers exist), its optimizer (two groups), the batches."""
    seed = item["seed"]
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 6))
    generator = torch.Generator().manual_seed(seed + 1)
    centres = torch.randn(6, 12, generator=generator) * 0.6  # overlapping classes: the loss flattens above 0
    batches = []
    for _ in range(item["batches"]):
        targets = torch.randint(0, 6, (32,), generator=generator)
        batches.append((centres[targets] + torch.randn(32, 12, generator=generator), targets))
    weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
    biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
    optimizer = torch.optim.SGD([{"params": weights}, {"params": biases}], lr=BASE_LR, momentum=MOMENTUM)
    warm_x = torch.randn(32, 12, generator=generator)
    warm_y = torch.randint(0, 6, (32,), generator=generator)
    optimizer.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(model(warm_x), warm_y).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if item["poisoned"] is not None:
        batches[item["poisoned"]][0][0, 0] = math.inf
    return model, optimizer, batches


def momentum_buffers(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[torch.Tensor | None]:
    """Each parameter's SGD momentum buffer (None where the optimizer holds none)."""
    return [optimizer.state.get(p, {}).get("momentum_buffer") for p in model.parameters()]


@register(
    "12-lr-range",
    # the poisoned sweep's NaN loss, and the NaN gradients and weights of the steps from there on (a sweep that
    # does not stop, or does not restore): the judge compares them with its own replay, NaN where it has NaN
    nonfinite=("calls/*/returned/1/*", "calls/*/steps/*", "calls/*/params_after/*", "calls/*/buffers_after/*"),
    hints=Hints(
        nudge="Save deep copies of model.state_dict() and optimizer.state_dict() first; then for each step set "
        "the learning rate of every param group, train one step on the next batch, record lr and loss, and stop "
        "on divergence; restore both states at the end.",
        concept="An LR range test raises the learning rate exponentially, step by step, and watches the loss: it "
        "falls, flattens, then explodes. It is a diagnostic: the model and the optimizer (momentum, learning "
        "rates) must come back exactly as they were. state_dict() returns the live tensors, so copy.deepcopy it.",
        solution="lr = start_lr * (end_lr / start_lr) ** (i / (num_steps - 1)); for g in optimizer.param_groups: "
        "g['lr'] = lr\n... losses.append(loss.item()); best = min(best, losses[-1])\nif not math.isfinite(losses[-1]) "
        "or losses[-1] > diverge * best: break\nfinally: model.load_state_dict(saved_model); "
        "optimizer.load_state_dict(saved_optimizer)",
        section="4. Reading curves, and the LR range test",
    ),
    requires={
        "wrong-lrs": Requirement(
            "step i uses start_lr * (end_lr / start_lr) ** (i / (num_steps - 1)) in every param group",
            hint="Print the learning rate of each param group at each step: does the first equal start_lr, the "
            "last end_lr, and do they grow by a constant factor? Are all groups set?"),
        "missing-zero-grad": Requirement(
            "each step's gradient is that step's own (cleared before backward)",
            hint="What is in .grad when the second step's backward runs?"),
        "wrong-batch": Requirement(
            "step i trains on batches[i % len(batches)] with loss_fn",
            hint="Which batch does step i use? Print the index you read at each step."),
        "batches-not-cycled": Requirement(
            "runs up to num_steps steps, cycling through the batches",
            hint="What happens to your loop when num_steps is larger than len(batches)?"),
        "wrong-losses": Requirement(
            "returns (lrs, losses): one learning rate and one loss (that step's batch loss, before the update, "
            "as a float) per step taken",
            hint="Is each recorded loss the raw loss of that step's batch, computed before optimizer.step()?"),
        "no-divergence-stop": Requirement(
            "stops after the first step whose loss is not finite or exceeds diverge times the lowest loss so far",
            hint="Where does your loop compare the loss with diverge * the best loss so far, and break?"),
        "wrong-stop": Requirement(
            "stops exactly after that step (it is recorded), and not before",
            hint="Replay your stop rule by hand on the losses you returned: compared with which loss, and is the "
            "diverging step itself recorded?"),
        "model-not-restored": Requirement(
            "restores the model's parameters to what they were before the call",
            hint="After your function, are the weights those from before? model.state_dict() returns the live "
            "tensors: what does your saved copy hold after training?"),
        "optimizer-not-restored": Requirement(
            "restores the optimizer's state (momentum buffers and learning rates) to what it was before the call",
            hint="Compare optimizer.state_dict() before and after your call: the momentum buffers and each group's "
            "lr."),
    },
)
def probe_lr_range(lr_range_test: Callable[..., Any], *, case: Case) -> dict:
    """Run the student's sweep on each case; record every optimizer step, what it returned, and the state after."""
    def record(item: dict[str, Any]) -> dict:
        model, optimizer, batches = sweep_setup(item)
        with StepRecorder(optimizer) as steps:
            got = lr_range_test(model, optimizer, nn.functional.cross_entropy, batches, item["start_lr"],
                                item["end_lr"], item["num_steps"], item["diverge"])
        got = tuple(got) if isinstance(got, (tuple, list)) else got
        if isinstance(got, tuple):
            got = tuple(list(v) if isinstance(v, (list, tuple)) else v for v in got)
        flat = [p for group in optimizer.param_groups for p in group["params"]]
        order = [next(i for i, q in enumerate(flat) if q is p) for p in model.parameters()]  # groups -> model order
        return {"returned": got,
                "steps": [{"params": [r.params[i] for i in order], "grads": [r.grads[i] for i in order],
                           "lrs": r.lrs} for r in steps.records],
                "params_after": snapshot(model), "buffers_after": momentum_buffers(model, optimizer),
                "lrs_after": [float(g["lr"]) for g in optimizer.param_groups]}

    return {"calls": collect(sweeps(case), record)}
