"""02-running-standardizer, the probe.

Record the module's parameters, buffers and state_dict keys, then its statistics and outputs in train mode,
in eval mode, after a state_dict round trip and after .double().
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn

from harness.checks.lesson02.common import _attempt, _build, _isolated_rng, _snapshot
from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
from harness.contract.inputs import randn
from harness.contract.registry import register


def standardizer_setting(case: Case) -> tuple[int, float, int, float]:
    """(features, momentum, training batches, eps): neither momentum nor eps at its default."""
    return (7, 0.3, 3, 1e-3) if case.hidden else (5, 0.2, 2, 1e-2)


def training_batch(case: Case, step: int, features: int) -> torch.Tensor:
    """A batch of 600 rows around 3: feature 1 with a small variance (where eps matters), the last one constant."""
    scale = torch.ones(features)
    scale[1], scale[-1] = 0.05, 0.0
    return randn(600, features, seed=case.seeded(step + (10 if case.hidden else 0))) * (step + 2) * scale + 3


def eval_batch(case: Case, features: int) -> torch.Tensor:
    """The batch the standardizer is called on in eval mode."""
    return randn(5, features, seed=case.seeded(99)) * 4


@register(
    "02-running-standardizer", unjudged=('doubled/*',), nonfinite=('steps/*',),
    hints=Hints(
        nudge="Keep the running statistics as buffers; in train mode normalise with the batch's statistics and "
              "update the buffers, in eval mode normalise with the buffers and change nothing.",
        concept="Running statistics are state, not learnable weights: self.register_buffer saves them in "
                "state_dict, moves them with .to() and .double(), and keeps them out of parameters(). self.training "
                "tells forward which mode the module is in; torch.no_grad() keeps the update out of autograd.",
        solution="train: mean, var = x.mean(0), x.var(0, unbiased=False); with torch.no_grad(): "
                 "self.running_mean.lerp_(mean, self.momentum) (same for var); eval: mean, var = self.running_mean, "
                 "self.running_var; both: return (x - mean) / torch.sqrt(var + self.eps)",
        section="4. `train()` and `eval()`: dropout and batch norm"),
    requires={
        "missing-super-init": Requirement(
            "an nn.Module subclass: nn.Module's __init__ runs before the buffers are registered",
            hint="The error says a buffer was assigned before something ran. What is the first line of __init__?"),
        "buffer-is-parameter": Requirement(
            "running statistics are buffers, not parameters (and the module has no learnable parameters)",
            hint="Would an optimizer over this module's parameters() train your running statistics? Buffers and "
                 "parameters are registered differently."),
        "not-registered": Requirement(
            "buffers named running_mean and running_var",
            hint="Print list(RunningStandardizer(3).named_buffers()). Which method registers a tensor as a buffer?"),
        "not-in-state-dict": Requirement(
            "the buffers are saved in state_dict",
            hint="Your buffers exist but state_dict() leaves them out. Which option of register_buffer does that?"),
        "wrong-initial-values": Requirement(
            "running_mean starts at zeros and running_var at ones",
            hint="Print the buffers of a freshly built module: what should a variance estimate start at?"),
        "tracks-gradient": Requirement(
            "the update is not recorded by autograd",
            hint="After a training forward, does running_mean.requires_grad print True? What keeps a computation "
                 "out of the graph?"),
        "wrong-update": Requirement(
            "running = (1 - momentum) * running + momentum * batch_statistic, with the momentum argument",
            hint="Build RunningStandardizer(3, momentum=0.2) and run one batch: running_mean should be 0.2 times "
                 "the batch mean. Is it?"),
        "wrong-output": Requirement(
            "train mode normalises with the batch's own mean and variance",
            hint="In train mode, which mean and variance does your forward use: the batch's or the running ones?"),
        "wrong-eps": Requirement(
            "normalising is (x - mean) / sqrt(var + eps), with the eps argument",
            hint="Build the module with eps=0.01 and feed a feature with a tiny (or zero) variance. Where does eps "
                 "go, and which eps does your forward use?"),
        "updates-in-eval": Requirement(
            "eval mode changes nothing",
            hint="Compare running_mean before and after an eval-mode forward. What tells forward the mode?"),
        "batch-stats-in-eval": Requirement(
            "eval mode normalises with the running statistics",
            hint="In eval mode, does your forward use the batch's statistics or the running ones?"),
        "state-dict-round-trip": Requirement(
            "the state_dict holds all the state: a fresh module loaded with it gives the same outputs",
            hint="Load your trained module's state_dict into a fresh one: do their eval outputs agree? What state "
                 "does forward use that is not a buffer?"),
        "does-not-move": Requirement(
            "the buffers and outputs follow .to() and .double()",
            hint="Call .double() on your module and feed float64 data: what dtype do the buffers and the output "
                 "have?"),
    },
)
@_isolated_rng
def probe_running_standardizer(standardizer_class: type, *, case: Case) -> dict:
    """Record the module's parameters, buffers and state_dict keys, then its statistics and outputs in train mode,
    in eval mode, after a state_dict round trip and after .double()."""
    features, momentum, _, eps = standardizer_setting(case)
    module = _build(standardizer_class, features, momentum=momentum, eps=eps)
    seen: dict[str, Any] = {
        "parameters": [name for name, _ in module.named_parameters()],
        "buffers": [name for name, _ in module.named_buffers()],
        "state_dict": list(module.state_dict()),
        "initial": [_snapshot(getattr(module, name, None)) for name in ("running_mean", "running_var")],
    }
    _attempt(seen, functools.partial(_run_standardizer, standardizer_class, module, seen, case))
    return seen


def _run_standardizer(standardizer_class: type, module: nn.Module, seen: dict[str, Any], case: Case) -> None:
    """The behavioural part of the standardizer's probe (see probe_running_standardizer)."""
    features, momentum, batches, eps = standardizer_setting(case)
    module.train()
    seen["steps"] = []
    for step in range(batches):
        out = module(training_batch(case, step, features).requires_grad_())
        seen["steps"].append({"out": out.detach(), "running_mean": _snapshot(module.running_mean),
                              "running_var": _snapshot(module.running_var)})
    saved = {k: v.clone() for k, v in module.state_dict().items()}
    before = _snapshot(module.running_mean)
    module.eval()
    x = eval_batch(case, features)
    with torch.no_grad():
        seen["eval"] = {"out": module(x), "before": before, "after": _snapshot(module.running_mean)}
    fresh = _build(standardizer_class, features, momentum=momentum, eps=eps)
    fresh.load_state_dict(saved)
    fresh.eval()
    with torch.no_grad():
        seen["reloaded"] = fresh(x)
    fresh.double()
    seen["doubled"] = {"running_mean": _snapshot(fresh.running_mean), "out": fresh(x.double()).detach()}
