"""Drills on nn.Module: registration, buffers, parameter groups, train/eval, freezing."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from harness.contract.case import Case
from harness.contract.failure import fail
from harness.contract.wire import describe
from harness.drills.bank.loop import _seeded
from harness.drills.core import Drill, add
from harness.drills.support import explain

# --- modules-plain-list --------------------------------------------------------------------------------------

LIST_STARTER = '''import torch
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


def mlp_cases(case: Case) -> list[tuple[list[int], torch.Tensor]]:
    """Layer sizes (2 to 4 layers, widths 4 to 8) and an input batch of 64 rows for each: with the parameters
    `_set_alive` gives the model, every layer is alive on some row, so each parameter moves the output."""
    cases = []
    for base in range(3):
        gen = torch.Generator().manual_seed(case.seeded(base))
        depth = 2 + base
        sizes = [int(s) for s in torch.randint(4, 9, (depth + 1,), generator=gen)]
        cases.append((sizes, torch.randn(64, sizes[0], generator=gen)))
    return cases


def _set_alive(model: nn.Module, gen: torch.Generator) -> None:
    """Overwrite the registered parameters: unit-variance weights and biases in [0.5, 1], so that no layer is
    dead on every row (a dead layer would hide its inputs' weights from the forward check)."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=gen) / p.shape[1] ** 0.5)
            else:
                p.copy_(0.5 + 0.5 * torch.rand(p.shape, generator=gen))


def _probe_mlp(answer: dict, *, case: Case) -> dict:
    results = []
    for base, (sizes, x) in enumerate(mlp_cases(case)):
        model = answer["MLP"](list(sizes))
        _set_alive(model, torch.Generator().manual_seed(case.seeded(10 + base)))
        results.append({"params": [p.detach() for p in model.parameters()], "out": model(x)})
    return {"results": results}


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
        starter=LIST_STARTER,
        hints=("How does nn.Module find its parameters?", "A plain list is not registered: wrap it in nn.ModuleList."),
        probe=_probe_mlp,
    )
)

# --- modules-param-groups ------------------------------------------------------------------------------------


def groups_decay(case: Case) -> float:
    """The case's weight decay, in [0.01, 0.21]."""
    return round(0.01 + 0.2 * float(torch.rand(1, generator=torch.Generator().manual_seed(case.seeded(2)))), 4)


def groups_model(case: Case) -> nn.Module:
    """A seeded model with conv, linear, LayerNorm and BatchNorm layers, to split into decay groups."""
    gen = torch.Generator().manual_seed(case.seeded(0))
    width = 6 + int(torch.randint(0, 6, (1,), generator=gen))
    return _seeded(case.seeded(1), lambda: nn.Sequential(
        nn.Conv1d(2, 4, 3), nn.Flatten(), nn.Linear(24, width), nn.LayerNorm(width), nn.ReLU(),
        nn.Linear(width, width), nn.BatchNorm1d(width), nn.Linear(width, 2, bias=bool(width % 2))))


def _probe_module_param_groups(answer: dict, *, case: Case) -> dict:
    model = groups_model(case)
    names = {id(p): name for name, p in model.named_parameters()}
    groups = answer["param_groups"](model, weight_decay=groups_decay(case))
    if not isinstance(groups, (list, tuple)) or not all(isinstance(g, dict) and "params" in g for g in groups):
        fail("not-groups", observed=f"param_groups returned {describe(groups)}", expected="a list of dicts, each "
             "with 'params' and 'weight_decay'", cause="returning the parameters themselves", where="the return")
    return {"groups": [{"names": [names.get(id(p), "?") for p in g["params"]],
                        "weight_decay": g.get("weight_decay")} for g in groups]}


add(
    Drill(
        id="modules-param-groups",
        self_check=True,
        title="Parameter groups: no weight decay on biases and norms",
        kind="write",
        topics=("modules",),
        difficulty=2,
        prompt="Write param_groups(model, weight_decay) returning optimizer parameter groups in which the weights "
        "of Linear/Conv layers get weight_decay and biases and normalisation parameters get 0.",
        entry="param_groups",
        starter="import torch\n\n\ndef param_groups(model, weight_decay):\n    raise NotImplementedError\n",
        hints=("Biases and norm scales are 1-D tensors; weight matrices and kernels are not.",
               "Split model.parameters() on p.ndim >= 2 into two dicts with their own weight_decay."),
        probe=_probe_module_param_groups,
    )
)

# --- modules-buffer ------------------------------------------------------------------------------------------


def buffer_case(case: Case) -> tuple[int, float, list[torch.Tensor], torch.Tensor]:
    """(features, momentum, training batches, an evaluation batch) for the running-mean buffer drill."""
    gen = torch.Generator().manual_seed(case.seeded(0))
    features = 2 + int(torch.randint(0, 5, (1,), generator=gen))
    momentum = 0.05 + 0.35 * float(torch.rand(1, generator=gen))
    train = [torch.randn(5, features, generator=gen) + 3 for _ in range(2)]
    return features, momentum, train, torch.randn(4, features, generator=gen) * 10


def _copy_of(value: Any) -> Any:
    """A copy of a state_dict entry (the entries are the live buffers: a later update would change them)."""
    return value.clone() if isinstance(value, torch.Tensor) else value


def _probe_buffer(answer: dict, *, case: Case) -> dict:
    features, momentum, train, evaluation = buffer_case(case)
    module = answer["RunningMean"](features, momentum=momentum)
    seen: dict[str, Any] = {"parameters": [name for name, _ in module.named_parameters()],
                            "state_keys": list(module.state_dict().keys()), "outputs": [], "means": []}
    module.train()
    x = train[0].clone().requires_grad_(True)
    out = module(x)
    out.sum().backward()
    seen["x_grad"] = x.grad
    seen["outputs"].append(out)
    seen["means"].append(_copy_of(module.state_dict().get("mean")))
    out = module(train[1])
    seen["outputs"].append(out)
    seen["means"].append(_copy_of(module.state_dict().get("mean")))
    module.eval()
    seen["outputs"].append(module(evaluation))
    seen["means"].append(_copy_of(module.state_dict().get("mean")))
    module.to(torch.float64)
    seen["dtype_after_to"] = module.state_dict().get("mean", torch.empty(0)).dtype
    return seen


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
        hints=("Parameters are trained; buffers are state that is saved and moved but not trained.",
               "self.register_buffer('mean', torch.zeros(features)); update it under `if self.training`."),
        probe=_probe_buffer,
    )
)


# --- modules-why-eval (explain) ------------------------------------------------------------------------------


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
    print(f"eval mode still records a graph: a.requires_grad = {a.requires_grad}; parameters still train: "
          f"{all(p.requires_grad for p in model.parameters())}")


add(
    explain(
        id="modules-why-eval",
        title="Why model.eval()?",
        topics=("modules", "loop"),
        difficulty=1,
        question="What does model.eval() change?",
        hints=("It sets module.training = False on every submodule. Which modules read that flag?",
               "Gradient tracking is torch.no_grad/inference_mode, a separate switch."),
        experiment=_why_eval_experiment,
    )
)


# --- modules-freeze-backbone (write) -------------------------------------------------------------------------


class _BackboneClassifier(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(6, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU())
        self.head = nn.Linear(width, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


def freeze_setup(case: Case) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """A seeded backbone-and-head classifier and one batch of inputs and labels, for the freezing drill."""
    gen = torch.Generator().manual_seed(case.seeded(0))
    width = 4 + int(torch.randint(0, 8, (1,), generator=gen))
    x, y = torch.randn(10, 6, generator=gen), torch.randint(0, 3, (10,), generator=gen)
    return _seeded(case.seeded(1), lambda: _BackboneClassifier(width)), x, y


def _probe_freeze(answer: dict, *, case: Case) -> dict:
    model, x, y = freeze_setup(case)
    names = {id(p): name for name, p in model.named_parameters()}
    returned = answer["freeze_backbone"](model)
    listed = [names.get(id(p), "?") for p in returned] if isinstance(returned, (list, tuple)) else None
    loss = nn.functional.cross_entropy(model(x), y)
    if loss.requires_grad:
        loss.backward()
    return {"returned": listed, "requires_grad": {name: p.requires_grad for name, p in model.named_parameters()},
            "grads": {name: p.grad for name, p in model.named_parameters()},
            # how the backbone was touched: an attribute `requires_grad` set on a module object, eval mode
            "module_attribute": any("requires_grad" in vars(m) for m in model.backbone.modules()),
            "backbone_training": model.backbone.training}


add(
    Drill(
        id="modules-freeze-backbone",
        self_check=True,
        title="Freeze a backbone, train the head",
        kind="write",
        topics=("modules", "finetuning"),
        difficulty=1,
        prompt="model has two children, model.backbone and model.head. Write freeze_backbone(model): after it, "
        "no gradient is computed for any backbone parameter, the head still trains, and it returns the list of "
        "parameters to give the optimizer (the trainable ones only).",
        entry="freeze_backbone",
        starter="import torch\n\n\ndef freeze_backbone(model):\n    raise NotImplementedError\n",
        hints=("Which attribute of a parameter tells autograd whether to compute its gradient?",
               "Set p.requires_grad = False for p in model.backbone.parameters(); return the parameters that "
               "still require grad."),
        probe=_probe_freeze,
    )
)
