"""Drills on nn.Module: registration, buffers, parameter groups, train/eval."""

from __future__ import annotations

import torch
from torch import nn

from harness.checks.core import fail
from harness.drills.core import Drill, add
from harness.drills.support import multiple_choice

_LIST_STARTER = '''import torch
from torch import nn


class MLP(nn.Module):
    """Symptom: only the output layer's weights ever change during training."""

    def __init__(self, sizes):
        super().__init__()
        self.hidden = [nn.Linear(a, b) for a, b in zip(sizes[:-2], sizes[1:-1])]
        self.out = nn.Linear(sizes[-2], sizes[-1])

    def forward(self, x):
        for layer in self.hidden:
            x = torch.relu(layer(x))
        return self.out(x)
'''


def _check_mlp(ns: dict) -> str:
    MLP = ns["MLP"]
    for sizes in ((4, 8, 8, 2), (3, 5, 1), (6, 7, 7, 7, 3)):
        model = MLP(list(sizes))
        expected = sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:], strict=True))
        got = sum(p.numel() for p in model.parameters())
        if got != expected:
            fail("unregistered-layers", observed=f"model.parameters() holds {got} numbers for sizes {sizes}",
                 expected=f"{expected}", cause="layers kept in a plain Python list are invisible to nn.Module: "
                 "the optimizer never sees them and .to(device) never moves them", where="use nn.ModuleList")
        out = model(torch.randn(2, sizes[0]))
        if out.shape != (2, sizes[-1]):
            fail("wrong-shape", observed=f"output shape {tuple(out.shape)}", expected=f"(2, {sizes[-1]})",
                 cause="the layers are not chained", where="forward")
    return "every layer registered and reachable by the optimizer"


add(
    Drill(
        id="modules-plain-list",
        title="Bug hunt: only the last layer trains",
        kind="bughunt",
        topics=("modules",),
        difficulty=1,
        prompt="This MLP trains, but only its output layer's weights ever change, and model.to('cuda') leaves "
        "the hidden layers on the CPU. Fix the class.",
        entry="MLP",
        starter=_LIST_STARTER,
        solution=_LIST_STARTER.replace("self.hidden = [", "self.hidden = nn.ModuleList([").replace(
            "sizes[1:-1])]", "sizes[1:-1])])"),
        hints=("How does nn.Module find its parameters?", "A plain list is not registered: wrap it in nn.ModuleList."),
        check=_check_mlp,
        wrong_answers=(_LIST_STARTER.replace("self.hidden = [", "self.hidden = nn.Sequential(*[").replace(
            "sizes[1:-1])]", "sizes[1:-1])][:1])"),),
    )
)


def _check_param_groups(ns: dict) -> str:
    param_groups = ns["param_groups"]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.ReLU(), nn.Linear(8, 8), nn.BatchNorm1d(8),
                          nn.Linear(8, 2))
    groups = param_groups(model, weight_decay=0.1)
    ids = {id(p) for g in groups for p in g["params"]}
    all_params = list(model.parameters())
    if len(ids) != len(all_params) or sum(len(g["params"]) for g in groups) != len(all_params):
        fail("params-missing-or-duplicated", observed=f"{sum(len(g['params']) for g in groups)} entries for "
             f"{len(all_params)} parameters", expected="each parameter in exactly one group",
             cause="a parameter skipped or listed twice", where="the loop over named_parameters")
    decayed = {id(p) for g in groups if g.get("weight_decay", 0) > 0 for p in g["params"]}
    should = {id(m.weight) for m in model if isinstance(m, nn.Linear)}
    if decayed != should:
        fail("wrong-decay-set", observed=f"{len(decayed)} tensors decayed", expected="decay on the Linear weights "
             "only: not on biases, not on LayerNorm/BatchNorm weights", cause="weight decay pulls norm scales and "
             "biases towards 0, which hurts; select by module type or by p.ndim < 2", where="the decay condition")
    torch.optim.AdamW(groups, lr=1e-3)  # the groups must be accepted by an optimizer
    return "decay on matrix weights only; norms and biases in a no-decay group"


add(
    Drill(
        id="modules-param-groups",
        title="Parameter groups: no weight decay on biases and norms",
        kind="write",
        topics=("modules",),
        difficulty=2,
        prompt="Write param_groups(model, weight_decay) returning optimizer parameter groups in which the weights "
        "of Linear/Conv layers get weight_decay and biases and normalisation parameters get 0.",
        entry="param_groups",
        starter="import torch\n\n\ndef param_groups(model, weight_decay):\n    raise NotImplementedError\n",
        solution=(
            "import torch\n\n\ndef param_groups(model, weight_decay):\n    decay, no_decay = [], []\n"
            "    for p in model.parameters():\n        if not p.requires_grad:\n            continue\n"
            "        (decay if p.ndim >= 2 else no_decay).append(p)\n"
            "    return [{'params': decay, 'weight_decay': weight_decay}, {'params': no_decay, 'weight_decay': 0.0}]\n"
        ),
        hints=("Biases and norm scales are 1-D tensors; weight matrices and kernels are not.",
               "Split model.parameters() on p.ndim >= 2 into two dicts with their own weight_decay."),
        check=_check_param_groups,
        wrong_answers=(
            "def param_groups(model, weight_decay):\n"
            "    return [{'params': list(model.parameters()), 'weight_decay': weight_decay}]\n",
            "def param_groups(model, weight_decay):\n    d, n = [], []\n    for name, p in model.named_parameters():\n"
            "        (n if 'bias' in name else d).append(p)\n"
            "    return [{'params': d, 'weight_decay': weight_decay}, {'params': n, 'weight_decay': 0.0}]\n",
        ),
    )
)


def _check_running_mean(ns: dict) -> str:
    RunningMean = ns["RunningMean"]
    module = RunningMean(3, momentum=0.5)
    if any(True for _ in module.parameters()):
        fail("stat-is-parameter", observed="the running statistic is an nn.Parameter", expected="a buffer",
             cause="a Parameter would be trained by the optimizer", where="use self.register_buffer")
    if "mean" not in module.state_dict():
        fail("stat-not-saved", observed=f"state_dict keys: {list(module.state_dict())}", expected="a 'mean' entry",
             cause="a plain tensor attribute is neither saved nor moved by .to()", where="register_buffer('mean', ...)")
    x = torch.ones(4, 3)
    module.train()
    module(x)
    if not torch.allclose(module.mean, torch.full((3,), 0.5)):
        fail("wrong-update", observed=f"mean after one batch of ones: {module.mean.tolist()}",
             expected="[0.5, 0.5, 0.5]", cause="mean = (1 - momentum) * mean + momentum * batch_mean",
             where="forward, in training mode")
    module.eval()
    module(torch.full((4, 3), 9.0))
    if not torch.allclose(module.mean, torch.full((3,), 0.5)):
        fail("updates-in-eval", observed="the statistic changed in eval mode", expected="frozen in eval mode",
             cause="no `if self.training` guard", where="forward")
    return "a buffer: saved, not trained, updated only in training mode"


add(
    Drill(
        id="modules-buffer",
        title="A running statistic as a buffer",
        kind="write",
        topics=("modules",),
        difficulty=2,
        prompt="Write RunningMean(features, momentum): forward(x) returns x - mean, and in training mode first "
        "updates mean = (1 - momentum) * mean + momentum * x.mean(0). mean starts at 0, is saved in the state_dict, "
        "moves with .to(), and is never trained.",
        entry="RunningMean",
        starter="import torch\nfrom torch import nn\n\n\nclass RunningMean(nn.Module):\n"
        "    def __init__(self, features, momentum=0.1):\n"
        "        super().__init__()\n        raise NotImplementedError\n\n"
        "    def forward(self, x):\n        raise NotImplementedError\n",
        solution=(
            "import torch\nfrom torch import nn\n\n\nclass RunningMean(nn.Module):\n"
            "    def __init__(self, features, momentum=0.1):\n"
            "        super().__init__()\n        self.momentum = momentum\n"
            "        self.register_buffer('mean', torch.zeros(features))\n\n"
            "    def forward(self, x):\n        if self.training:\n            with torch.no_grad():\n"
            "                self.mean.mul_(1 - self.momentum).add_(self.momentum * x.mean(0))\n"
            "        return x - self.mean\n"
        ),
        hints=("Parameters are trained; buffers are state that is saved and moved but not trained.",
               "self.register_buffer('mean', torch.zeros(features)); update it under `if self.training`."),
        check=_check_running_mean,
        wrong_answers=(
            "import torch\nfrom torch import nn\n\nclass RunningMean(nn.Module):\n"
            "    def __init__(self, features, momentum=0.1):\n"
            "        super().__init__()\n        self.momentum = momentum\n"
            "        self.mean = nn.Parameter(torch.zeros(features))\n"
            "    def forward(self, x):\n        return x - self.mean\n",
            "import torch\nfrom torch import nn\n\nclass RunningMean(nn.Module):\n"
            "    def __init__(self, features, momentum=0.1):\n"
            "        super().__init__()\n        self.momentum = momentum\n"
            "        self.register_buffer('mean', torch.zeros(features))\n"
            "    def forward(self, x):\n        with torch.no_grad():\n"
            "            self.mean.mul_(1 - self.momentum).add_(self.momentum * x.mean(0))\n"
            "        return x - self.mean\n",
        ),
    )
)


def _why_eval_experiment() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.Dropout(0.5), nn.BatchNorm1d(16))
    x = torch.randn(8, 4)
    model.train()
    a, b = model(x), model(x)
    print(f"train mode: two forwards differ by {(a - b).abs().max():.3f} (dropout), and BatchNorm used batch stats")
    model.eval()
    a, b = model(x), model(x)
    print(f"eval mode:  two forwards differ by {(a - b).abs().max():.3f}; BatchNorm uses its running statistics")


add(
    multiple_choice(
        id="modules-why-eval",
        title="Why model.eval()?",
        topics=("modules", "loop"),
        difficulty=1,
        prompt="What does model.eval() change?\n  a) it turns off gradient tracking\n"
        "  b) it switches dropout off and makes batch norm use its running statistics\n"
        "  c) it freezes the parameters\n  d) nothing unless the model is on a GPU\n",
        correct="b",
        explanation="eval() changes dropout and batch norm behaviour, not autograd",
        hints=("It sets module.training = False on every submodule. Which modules read that flag?",
               "Gradient tracking is torch.no_grad/inference_mode, a separate switch."),
        wrong=("a", "c"),
        experiment=_why_eval_experiment,
    )
)
