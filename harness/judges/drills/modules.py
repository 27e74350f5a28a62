"""The judge side of the modules drills (`harness.drills.bank.modules`): judges and the references
they recompute, reference solutions, planted wrong answers, explain drills' options and keys.

A graded kernel never mounts this package (`harness.judges`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from harness.contract import expect
from harness.contract.case import Case
from harness.contract.compare import close_values, malformed
from harness.contract.failure import fail
from harness.contract.wire import describe
from harness.drills.bank.modules import (
    buffer_case,
    freeze_setup,
    groups_decay,
    groups_model,
    mlp_cases,
)
from harness.drills.core import Answers, add_judge, choice_answers
from harness.drills.support import edited
from harness.judges.drills.whys import add_answers


def _str_list(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        malformed(f"{what}: expected a list of names")
    return value


def _reference_plain_list_mlp(params: list[torch.Tensor], sizes: list[int], x: torch.Tensor) -> torch.Tensor | None:
    """The MLP's output computed from its parameters: layers found by shape, in registration order."""
    weights = [p for p in params if p.dim() == 2]
    biases = [p for p in params if p.dim() == 1]
    h = x
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        w = next((w for w in weights if w.shape == (b, a)), None)
        bias = next((v for v in biases if v.shape == (b,)), None)
        if w is None or bias is None:
            return None
        weights.remove(w)
        biases.remove(bias)
        h = h @ w.T + bias
        if i < len(sizes) - 2:
            h = torch.relu(h)
    return h


def _judge_mlp(seen: dict, *, case: Case) -> str:
    results = seen.get("results")
    cases = mlp_cases(case)
    if not isinstance(results, list) or len(results) != len(cases) or not all(isinstance(r, dict) for r in results):
        malformed("results missing")
    for (sizes, x), result in zip(cases, results, strict=True):
        params = result.get("params")
        if not isinstance(params, list) or not all(isinstance(p, torch.Tensor) for p in params):
            malformed("parameters missing")
        expected = sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:], strict=True))
        got = sum(p.numel() for p in params)
        if got != expected:
            fail("unregistered-layers", observed=f"model.parameters() holds {got} numbers for sizes {sizes}",
                 expected=f"{expected}", cause=f"{(expected - got) if got < expected else 'extra'} numbers "
                 + ("missing: layers never created, or kept in a plain Python list, tuple or dict, which "
                    "nn.Module cannot see (the optimizer never sees them, .to(device) never moves them)"
                    if got < expected else
                    "registered: a layer registered twice, or one the forward does not use"),
                 where="__init__: how the hidden layers are kept")
        want = _reference_plain_list_mlp(params, sizes, x)
        if want is None:
            fail("unregistered-layers", observed=f"the parameters' shapes {[tuple(p.shape) for p in params]}",
                 expected=f"one Linear per pair of consecutive sizes in {sizes}", cause="layers missing or "
                 "duplicated", where="__init__")
        expect.close("model(x)", result.get("out"), want, atol=1e-5, rtol=1e-5, where="forward",
                     cause="the layers are not chained as Linear -> ReLU -> ... -> Linear (a ReLU lost, or one "
                     "after the output layer)")
    return "every layer registered and reachable by the optimizer; the forward is unchanged"


def _judge_module_param_groups(seen: dict, *, case: Case) -> str:
    model = groups_model(case)
    groups = seen.get("groups")
    if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
        malformed("groups missing")
    listed = [name for g in groups for name in _str_list(g.get("names"), "a group's parameters")]
    every = [name for name, _ in model.named_parameters()]
    if sorted(listed) != sorted(every):
        fail("params-missing-or-duplicated", observed=f"{len(listed)} entries for {len(every)} parameters "
             f"({len(set(every) - set(listed))} missing, {len(listed) - len(set(listed))} repeated)",
             expected="each parameter in exactly one group",
             cause="a parameter skipped or listed twice (an optimizer refuses a parameter in two groups)",
             where="the loop over named_parameters")
    for g in groups:
        if g["names"] and not isinstance(g.get("weight_decay"), (int, float)):
            fail("decay-left-to-default", observed=f"a group of {len(g['names'])} parameters has no 'weight_decay'",
                 expected="an explicit weight_decay in every group (0.0 for no decay)", cause="a group without the "
                 "key gets the optimizer's default, and AdamW's default is 0.01, not 0",
                 where="{'params': no_decay, 'weight_decay': 0.0}")
    decayed = {name for g in groups if g["weight_decay"] > 0 for name in g["names"]}
    should = {f"{index}.weight" for index, m in enumerate(model) if isinstance(m, (nn.Linear, nn.Conv1d))}
    if decayed != should:
        wrong = sorted(decayed ^ should)
        fail("wrong-decay-set", observed=f"{len(decayed)} tensors decayed; wrongly placed: {wrong[:4]}",
             expected="decay on the Linear/Conv weights only: not on biases, not on LayerNorm/BatchNorm weights",
             cause="weight decay pulls norm scales and biases towards 0, which hurts; select by module type or "
             "by p.ndim < 2 (a name test for 'bias' misses the norms' weights)", where="the decay condition")
    decay = groups_decay(case)
    for g in groups:
        if g["names"] and g["weight_decay"] > 0 and abs(g["weight_decay"] - decay) > 1e-12:
            fail("wrong-decay-value", observed=f"weight_decay {g['weight_decay']}", expected=f"the weight_decay "
                 f"passed in ({decay} here)", cause="a hard-coded value", where="the decayed group")
    return "decay on matrix and kernel weights only; norms and biases in a group with weight_decay 0"


_GROUPS_SOLUTION = (
    "import torch\n\n\ndef param_groups(model, weight_decay):\n    decay, no_decay = [], []\n"
    "    for p in model.parameters():\n        if not p.requires_grad:\n            continue\n"
    "        (decay if p.ndim >= 2 else no_decay).append(p)\n"
    "    return [{'params': decay, 'weight_decay': weight_decay}, {'params': no_decay, 'weight_decay': 0.0}]\n"
)


def _short(value: Any) -> str:
    return str([round(v, 4) for v in value.double().tolist()]) if isinstance(value, torch.Tensor) and \
        value.dim() == 1 else describe(value)


def _judge_buffer(seen: dict, *, case: Case) -> str:
    features, momentum, train, evaluation = buffer_case(case)
    if _str_list(seen.get("parameters"), "parameters"):
        fail("stat-is-parameter", observed=f"the module has parameters {seen['parameters']}", expected="none: the "
             "statistic is a buffer", cause="a Parameter would be trained by the optimizer",
             where="use self.register_buffer")
    keys = _str_list(seen.get("state_keys"), "state_dict keys")
    if "mean" not in keys:
        fail("stat-not-saved", observed=f"state_dict keys: {keys}", expected="a 'mean' entry",
             cause="a plain tensor attribute is neither saved nor moved by .to()", where="register_buffer('mean', ...)")
    means, outputs = seen.get("means"), seen.get("outputs")
    if not isinstance(means, list) or not isinstance(outputs, list) or len(means) != 3 or len(outputs) != 3:
        malformed("means or outputs missing")
    mean = torch.zeros(features)
    for k, x in enumerate(train):
        mean = (1 - momentum) * mean + momentum * x.mean(0)
        if not close_values(means[k], mean, atol=1e-5, rtol=1e-5, dtype=False):
            fail("wrong-update", observed=f"mean after training batch {k + 1}: {_short(means[k])}",
                 expected=f"{_short(mean)}", cause="mean = (1 - momentum) * mean + momentum * x.mean(0): momentum "
                 "weighs the new batch (swapping the two weights, or forgetting the update, gives another value)",
                 where="forward, in training mode")
        expect.close(f"the output of training batch {k + 1}", outputs[k], x - mean, atol=1e-5, rtol=1e-5,
                     where="forward", cause="the output is x - mean, with the mean just updated")
        if k == 0:
            x_grad = seen.get("x_grad")
            if not isinstance(x_grad, torch.Tensor) or x_grad.shape != x.shape or not close_values(
                    x_grad, torch.ones_like(x), atol=1e-6, dtype=False):
                fail("stat-has-graph", observed="the gradient of the output reaches x through the statistic",
                     expected="the statistic is state, not part of the graph: d(out)/dx = 1",
                     cause="the update ran with autograd recording (no torch.no_grad()): the buffer now carries "
                     "a graph, and the next backward through it fails", where="wrap the update in torch.no_grad()")
    if not close_values(means[2], mean, atol=1e-5, rtol=1e-5, dtype=False):
        fail("updates-in-eval", observed=f"after an eval-mode batch the mean is {_short(means[2])}",
             expected=f"unchanged: {_short(mean)}", cause="the statistic is updated in eval mode too: no "
             "`if self.training` guard, so evaluation data leaks into the model's state", where="forward")
    expect.close("the output in eval mode", outputs[2], evaluation - mean, atol=1e-5, rtol=1e-5, where="forward",
                 cause="in eval mode the output is x minus the stored mean")
    if seen.get("dtype_after_to") != torch.float64:
        fail("stat-not-moved", observed=f"after module.to(torch.float64) the mean is {seen.get('dtype_after_to')}",
             expected="float64", cause="the statistic is not a registered buffer", where="register_buffer")
    return "a buffer: saved, moved, not trained, updated without a graph and only in training mode"


_BUFFER_SOLUTION = (
    "import torch\nfrom torch import nn\n\n\nclass RunningMean(nn.Module):\n"
    "    def __init__(self, features, momentum=0.1):\n"
    "        super().__init__()\n        self.momentum = momentum\n"
    "        self.register_buffer('mean', torch.zeros(features))\n\n"
    "    def forward(self, x):\n        if self.training:\n            with torch.no_grad():\n"
    "                self.mean.mul_(1 - self.momentum).add_(self.momentum * x.mean(0))\n"
    "        return x - self.mean\n"
)


def _judge_freeze(seen: dict, *, case: Case) -> str:
    model, x, y = freeze_setup(case)
    flags, grads = seen.get("requires_grad"), seen.get("grads")
    names = [name for name, _ in model.named_parameters()]
    if not isinstance(flags, dict) or not isinstance(grads, dict) or sorted(flags) != sorted(names) \
            or sorted(grads) != sorted(names):
        malformed("parameter flags missing")
    trained = [n for n in names if n.startswith("backbone.") and (flags[n] is not False or grads[n] is not None)]
    if trained:
        observed = f"after loss.backward(), {trained[0]} " + ("still requires grad" if flags[trained[0]]
                                                              else "received a gradient")
        where = ("for p in model.backbone.parameters(): p.requires_grad = False (or "
                 "model.backbone.requires_grad_(False))")
        expected = "no gradient computed for any backbone parameter"
        if seen.get("module_attribute") is True:
            fail("module-attribute-set", observed=f"{observed}, and a backbone module now has an attribute "
                 "`requires_grad`", expected=expected, cause="`module.requires_grad = False` sets a new plain "
                 "attribute on the nn.Module object: a module has no such flag, and its parameters keep "
                 "requires_grad=True", where=where)
        if seen.get("backbone_training") is False:
            fail("eval-does-not-freeze", observed=f"{observed}; the backbone is in eval mode", expected=expected,
                 cause="model.eval() changes how dropout and batch norm behave, not whether gradients are "
                 "computed", where=where)
        fail("backbone-trainable", observed=observed, expected=expected, cause="nothing set requires_grad to "
             "False on the backbone's parameters: `p.requires_grad == False` compares instead of assigning, and "
             "torch.no_grad() inside the function ends with it", where=where)
    frozen_head = [n for n in names if n.startswith("head.") and flags[n] is not True]
    if frozen_head:
        fail("head-frozen", observed=f"{frozen_head[0]} does not require grad", expected="the head still trains",
             cause="model.requires_grad_(False) freezes everything", where="freeze model.backbone only")
    model.backbone.requires_grad_(False)
    nn.functional.cross_entropy(model(x), y).backward()
    for name, p in model.head.named_parameters():
        expect.close(f"head.{name}.grad", grads[f"head.{name}"], p.grad, atol=1e-6, rtol=1e-5, where="the forward",
                     cause="the head's gradient changed: the model's computation was altered")
    returned = seen.get("returned")
    head = sorted(n for n in names if n.startswith("head."))
    if not isinstance(returned, list) or sorted(_str_list(returned, "returned parameters")) != head:
        fail("wrong-param-list", observed=f"freeze_backbone returned {describe(returned)}",
             expected=f"the trainable parameters only: {head}", cause="returning model.parameters() (frozen ones "
             "included: the optimizer still holds them, and AdamW's state and weight decay see them), or a "
             "generator", where="return [p for p in model.parameters() if p.requires_grad]")
    return "backbone frozen (no gradient computed), head trainable, and the head's parameters returned"


_FREEZE_SOLUTION = '''import torch


def freeze_backbone(model):
    for p in model.backbone.parameters():
        p.requires_grad = False
    return [p for p in model.parameters() if p.requires_grad]
'''


add_judge("modules-plain-list", _judge_mlp)


add_answers(
    Answers(
        drill_id="modules-param-groups",
        solution=_GROUPS_SOLUTION,
        wrong_answers=(
            ("def param_groups(model, weight_decay):\n"
             "    return [{'params': list(model.parameters()), 'weight_decay': weight_decay}]\n", "wrong-decay-set"),
            ("def param_groups(model, weight_decay):\n    d, n = [], []\n    for name, p in model.named_parameters():\n"
             "        (n if 'bias' in name else d).append(p)\n"
             "    return [{'params': d, 'weight_decay': weight_decay}, {'params': n, 'weight_decay': 0.0}]\n",
             "wrong-decay-set"),
            (edited(_GROUPS_SOLUTION,
                    ("{'params': no_decay, 'weight_decay': 0.0}", "{'params': no_decay}")),
             "decay-left-to-default"),
            (edited(_GROUPS_SOLUTION,
                    ("{'params': decay, 'weight_decay': weight_decay}",
                     "{'params': list(model.parameters()), 'weight_decay': weight_decay}")),
             "params-missing-or-duplicated"),
            (edited(_GROUPS_SOLUTION, ("'weight_decay': weight_decay}", "'weight_decay': 0.1}")), "wrong-decay-value"),
        ),
        judge=_judge_module_param_groups,
    )
)


add_answers(
    Answers(
        drill_id="modules-buffer",
        solution=_BUFFER_SOLUTION,
        wrong_answers=(
            ("import torch\nfrom torch import nn\n\nclass RunningMean(nn.Module):\n"
             "    def __init__(self, features, momentum=0.1):\n"
             "        super().__init__()\n        self.momentum = momentum\n"
             "        self.mean = nn.Parameter(torch.zeros(features))\n"
             "    def forward(self, x):\n        return x - self.mean\n", "stat-is-parameter"),
            (edited(_BUFFER_SOLUTION,
                    ("        if self.training:\n            with torch.no_grad():\n"
                     "                self.mean",
                     "        with torch.no_grad():\n"
                     "            self.mean")), "updates-in-eval"),
            (edited(_BUFFER_SOLUTION,
                    ("self.register_buffer('mean', torch.zeros(features))",
                     "self.mean = torch.zeros(features)")), "stat-not-saved"),
            (edited(_BUFFER_SOLUTION,
                    ("            with torch.no_grad():\n"
                     "                self.mean.mul_(1 - self.momentum).add_(self.momentum * "
                     "x.mean(0))\n",
                     "            self.mean = (1 - self.momentum) * self.mean + self.momentum * "
                     "x.mean(0)\n")), "stat-has-graph"),
            (edited(_BUFFER_SOLUTION,
                    ("mul_(1 - self.momentum).add_(self.momentum * x.mean(0))",
                     "mul_(self.momentum).add_((1 - self.momentum) * x.mean(0))")), "wrong-update"),
        ),
        judge=_judge_buffer,
    )
)


add_answers(
    choice_answers(
        "modules-why-eval",
        options=(
            ("it turns off gradient tracking for the forward pass",
             "autograd still records in eval mode: that is torch.no_grad() or torch.inference_mode(), a separate "
             "switch"),
            ("dropout stops dropping; batch norm uses its running statistics",
             "eval() sets module.training = False on every submodule, and dropout and batch norm are the modules "
             "that read it"),
            ("it freezes the parameters, so that optimizer.step() skips every one of them",
             "requires_grad is untouched: a step after eval() still updates every parameter"),
            ("nothing on a CPU: the mode only changes which GPU kernels run",
             "the mode flag works the same on every device"),
        ),
        key="b",
    )
)


add_answers(
    Answers(
        drill_id="modules-freeze-backbone",
        solution=_FREEZE_SOLUTION,
        wrong_answers=(
            ("import torch\n\ndef freeze_backbone(model):\n    model.backbone.eval()\n"
             "    return list(model.head.parameters())\n", "eval-does-not-freeze"),
            ("import torch\n\ndef freeze_backbone(model):\n    model.backbone.requires_grad = False\n"
             "    return list(model.head.parameters())\n", "module-attribute-set"),
            (edited(_FREEZE_SOLUTION, ("p.requires_grad = False", "p.requires_grad == False  # noqa")),
             "backbone-trainable"),
            ("import torch\n\ndef freeze_backbone(model):\n    model.requires_grad_(False)\n"
             "    return list(model.head.parameters())\n", "head-frozen"),
            (edited(_FREEZE_SOLUTION,
                    ("[p for p in model.parameters() if p.requires_grad]", "list(model.parameters())")),
             "wrong-param-list"),
        ),
        judge=_judge_freeze,
    )
)
