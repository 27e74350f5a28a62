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


@register("02-running-standardizer")
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
