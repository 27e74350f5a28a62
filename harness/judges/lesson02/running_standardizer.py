"""02-running-standardizer, the judge.

Buffers in state_dict and moved by .to(), updated only in train mode, outside autograd; BatchNorm's numbers.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from harness.checks.lesson02.running_standardizer import eval_batch, standardizer_setting, training_batch
from harness.contract.case import Case
from harness.contract.compare import close_scaled, same_values, tensor
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.judges.lesson02.common import _no_exception


def _judge_standardizer_structure(seen: dict[str, Any], features: int) -> None:
    """No parameters; running_mean and running_var registered, in the state_dict, zeros and ones at first."""
    if seen["parameters"]:
        fail("buffer-is-parameter", observed=f"parameters: {seen['parameters']}",
             expected="no parameters: running statistics are not trained by the optimizer",
             cause="the statistics made nn.Parameter (even with requires_grad=False), or learnable parameters added "
                   "(this module has no scale or shift)",
             where="self.register_buffer('running_mean', torch.zeros(num_features)), likewise running_var")
    if not {"running_mean", "running_var"} <= set(seen["buffers"]):
        fail("not-registered", observed=f"buffers: {sorted(seen['buffers'])}",
             expected="running_mean and running_var buffers",
             cause="plain tensor attributes (state_dict() does not save them and .to(device) does not move them), "
                   "or buffers registered under other names",
             where="self.register_buffer('running_mean', tensor), likewise running_var")
    if not {"running_mean", "running_var"} <= set(seen["state_dict"]):
        fail("not-in-state-dict", observed=f"state_dict keys: {sorted(seen['state_dict'])}",
             expected="running_mean and running_var in the state_dict",
             cause="the buffers were registered with persistent=False (the only buffers state_dict leaves out)",
             where="register_buffer(name, tensor) with the default persistent=True")
    mean, var = (tensor(t, "an initial statistic", detach=True) for t in seen["initial"])
    if not (same_values(mean, torch.zeros(features), dtype=False)
            and same_values(var, torch.ones(features), dtype=False)):
        fail("wrong-initial-values", observed=f"running_mean {mean.tolist()}, running_var {var.tolist()}",
             expected="zeros and ones", cause="other initial values (or shapes) in __init__",
             where="register_buffer in __init__: torch.zeros(num_features) and torch.ones(num_features)")


def _judge_training_output(out: torch.Tensor, x: torch.Tensor, eps: float, step: int) -> None:
    """Train-mode outputs normalise with the batch's statistics and eps; fail naming the formula they fit."""
    mean, var = x.mean(0), x.var(0, unbiased=False)
    if close_scaled(out, (x - mean) / torch.sqrt(var + eps), tol=2e-3, dtype=False):
        return
    eps_causes = [
        (not bool(torch.isfinite(out).all()), "no eps: the constant feature has variance 0, and 0 / 0 is nan"),
        (close_scaled(out, (x - mean) / (torch.sqrt(var) + eps), tol=2e-3, dtype=False),
         "eps added to the standard deviation, sqrt(var) + eps, instead of to the variance"),
        (close_scaled(out, (x - mean) / torch.sqrt(var + 1e-5), tol=2e-3, dtype=False),
         "eps fixed at 1e-5 (the default) instead of the eps argument"),
    ]
    for found, cause in eps_causes:
        if found:
            fail("wrong-eps", observed=f"train-mode outputs after batch {step + 1} "
                 + ("contain nan" if not bool(torch.isfinite(out).all()) else
                    "differ where a feature's variance is small or zero"),
                 expected=f"(x - mean) / sqrt(var + eps) with eps={eps}", cause=cause,
                 where="forward: torch.sqrt(var + self.eps)")
    fail("wrong-output", observed=f"train-mode outputs after batch {step + 1} differ from (x - batch mean) / "
         "sqrt(batch var + eps)", expected="normalisation with the batch's own statistics in train mode",
         cause="the running statistics used in train mode, or another formula", where="forward, train branch")


def _judge_standardizer_training(seen: dict[str, Any], case: Case, reference: nn.BatchNorm1d) -> None:
    """Train mode: buffers outside autograd, updated like BatchNorm's, outputs from the batch's statistics."""
    features, momentum, batches, eps = standardizer_setting(case)
    for step, record in zip(range(batches), seen["steps"], strict=True):
        x = training_batch(case, step, features)
        reference(x)
        running_mean, running_var = record["running_mean"], tensor(record["running_var"], "running_var", detach=True)
        if tensor(running_mean, "running_mean", detach=True) is not None and running_mean.requires_grad:
            fail("tracks-gradient", observed="running_mean requires grad after a training forward",
                 expected="buffers outside autograd", cause="the update was recorded by autograd; the graph of every "
                 "batch would then stay alive through the buffer", where="update the buffers under torch.no_grad()")
        running_mean = running_mean.detach()
        if not (close_scaled(running_mean, reference.running_mean, tol=2e-3, dtype=False)
                and close_scaled(running_var, reference.running_var, tol=2e-3, dtype=False)):
            # From the zero initial mean, one batch gives m * batch mean: m tells which momentum was used.
            first = step == 0
            if first and close_scaled(running_mean, (1 - momentum) * x.mean(0), tol=2e-3, dtype=False):
                cause = "momentum and 1 - momentum are swapped"
            elif first and close_scaled(running_mean, 0.1 * x.mean(0), tol=2e-3, dtype=False):
                cause = "momentum fixed at 0.1 (BatchNorm's default) instead of the momentum argument"
            else:
                cause = "the update rule: running = (1 - momentum) * running + momentum * batch_statistic, for both"
            fail("wrong-update", observed=f"after {step + 1} batch(es) with momentum={momentum}, running_mean = "
                 f"{[round(v, 4) for v in running_mean.tolist()]}, running_var = "
                 f"{[round(v, 4) for v in running_var.tolist()]}",
                 expected=f"{[round(v, 4) for v in reference.running_mean.tolist()]} and "
                 f"{[round(v, 4) for v in reference.running_var.tolist()]}", cause=cause,
                 where="the buffer update in forward (train mode)")
        _judge_training_output(tensor(record["out"], "an output", detach=True), x, eps, step)


@judges(
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
def judge_running_standardizer(seen: dict, *, case: Case) -> str:
    """Buffers in state_dict and moved by .to(), updated only in train mode, outside autograd; BatchNorm's numbers."""
    features, momentum, _, eps = standardizer_setting(case)
    _judge_standardizer_structure(seen, features)
    _no_exception(seen, "running the module")
    reference = nn.BatchNorm1d(features, momentum=momentum, eps=eps, affine=False)
    with torch.no_grad():
        _judge_standardizer_training(seen, case, reference.train())
        x = eval_batch(case, features)
        before, after = (tensor(seen["eval"][key], "running_mean", detach=True) for key in ("before", "after"))
        if not same_values(after, before, dtype=False):
            fail("updates-in-eval", observed="running_mean changed during an eval-mode forward",
                 expected="the statistics frozen in eval mode", cause="the update does not depend on self.training",
                 where="update the buffers only when self.training is True")
        out = tensor(seen["eval"]["out"], "the eval output", detach=True)
        if not close_scaled(out, reference.eval()(x), tol=2e-3, dtype=False):
            batch_stats = close_scaled(out, (x - x.mean(0)) / torch.sqrt(x.var(0, unbiased=False) + eps), tol=2e-3,
                                       dtype=False)
            fail("batch-stats-in-eval" if batch_stats else "wrong-output",
                 observed="eval-mode outputs "
                 + ("use the batch's statistics" if batch_stats else "differ from (x - running_mean) / "
                    "sqrt(running_var + eps)"),
                 expected="(x - running_mean) / sqrt(running_var + eps) in eval mode",
                 cause="the branch on self.training" if batch_stats else "another formula in eval mode",
                 where="forward, eval branch")
    if not same_values(tensor(seen["reloaded"], "the reloaded output", detach=True), out, dtype=False):
        fail("state-dict-round-trip", observed="a fresh module loaded with the state_dict gives other outputs",
             expected="identical outputs", cause="forward uses state that state_dict does not hold (a plain "
             "attribute set during training, for example)", where="keep every statistic in a registered buffer")
    doubled = seen["doubled"]
    buffer_dtype = tensor(doubled["running_mean"], "running_mean", detach=True).dtype
    out_dtype = tensor(doubled["out"], "the output", detach=True).dtype
    if buffer_dtype != torch.float64 or out_dtype != torch.float64:
        fail("does-not-move", observed=f"after .double(): running_mean is {buffer_dtype}, the output {out_dtype}",
             expected="both float64: buffers follow .to()/.double()",
             cause="a dtype fixed in forward (.float(), a tensor created with dtype=torch.float32), or statistics "
                   "kept outside registered buffers, which .double() does not convert",
             where="create new tensors like existing ones (torch.zeros_like, x.new_zeros); no fixed dtype")
    return "buffers in state_dict and moved by .to(), updated only in train mode, outside autograd"
