"""Checks of lesson 02, nn.Module: registration, buffers, counting and freezing, initialisation, param groups.

Each check builds small modules with fixed seeds, runs the student's class or function on them and
observes parameters, buffers, state_dict, optimizer groups and outputs; the hidden variant uses other
sizes, nestings and edge cases (frozen parameters, a head frozen beforehand).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

import torch
from torch import nn

from harness.checks.core import fail, register
from harness.checks.param_groups import check_weight_decay, group_of_each_parameter


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _isolated_rng(run: Callable[..., str]) -> Callable[..., str]:
    """Run a check that seeds torch's global generator without changing the student's random stream."""

    @functools.wraps(run)
    def wrapper(*args: Any, **kwargs: Any) -> str:
        with torch.random.fork_rng(devices=[]):
            return run(*args, **kwargs)

    return wrapper


def _close(a: torch.Tensor, b: torch.Tensor, tolerance: float = 1e-5) -> bool:
    return a.shape == b.shape and bool(((a - b).abs() <= tolerance * (1 + b.abs())).all())


# -------------------------------------------------------------------------------------------------- 02-mlp
def _build(factory: Callable[..., nn.Module], *args: Any, **kwargs: Any) -> nn.Module:
    try:
        return factory(*args, **kwargs)
    except AttributeError as error:
        if "__init__" in str(error):
            fail("missing-super-init", observed=f"constructing the module raised AttributeError: {error}",
                 expected="the module builds", cause="nn.Module's own __init__ never ran, so the registries for "
                 "parameters and submodules do not exist yet",
                 where="call super().__init__() first in __init__")
        raise


def _linears(model: nn.Module) -> list[nn.Linear]:
    return [m for m in model.modules() if isinstance(m, nn.Linear)]


def _reference_mlp(linears: list[nn.Linear], x: torch.Tensor, *, final_relu: bool = False, relu: bool = True) -> torch.Tensor:
    for index, linear in enumerate(linears):
        x = linear(x)
        if relu and (index < len(linears) - 1 or final_relu):
            x = torch.relu(x)
    return x


@register("02-mlp", hints=(
    "Layers kept in a Python list are invisible to model.parameters(): nn.Module only registers attributes that "
    "are modules, parameters, or containers such as nn.ModuleList.",
    "self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:])); in forward apply each, "
    "with torch.relu and self.dropout (an nn.Dropout) after every layer but the last.",
))
@_isolated_rng
def check_mlp(mlp_class: type, *, hidden: bool) -> str:
    configurations = [([6, 16, 16, 3], 0.5)] if not hidden else [([3, 5], 0.3), ([8, 32, 32, 32, 2], 0.2), ([4, 7, 1], 0.6)]
    for sizes, p in configurations:
        torch.manual_seed(0)
        model = _build(mlp_class, sizes)
        expected_count = sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))
        linears = _linears(model)
        registered = sum(param.numel() for param in model.parameters())
        if registered < expected_count and len(linears) < len(sizes) - 1:
            fail("unregistered-layers",
                 observed=f"model.parameters() holds {registered} numbers; MLP({sizes}) has {expected_count}",
                 expected="every layer's weight and bias registered, so the optimizer and state_dict see them",
                 cause="the layers are stored in a plain Python list (or dict), which nn.Module does not look into",
                 where="store them in nn.ModuleList (or nn.ModuleDict)")
        shapes = [(m.in_features, m.out_features) for m in linears]
        if shapes != list(zip(sizes[:-1], sizes[1:])) or registered != expected_count:
            fail("wrong-layers", observed=f"Linear layers {shapes} ({registered} parameters)",
                 expected=f"{list(zip(sizes[:-1], sizes[1:]))} with biases ({expected_count} parameters)",
                 cause="one layer per consecutive pair of sizes, in order", where="the loop that builds the layers")
        x = _randn(64, sizes[0], seed=len(sizes))
        model.eval()
        with torch.no_grad():
            out = model(x)
            reference = _reference_mlp(linears, x)
            if not _close(out, reference):
                if _close(out, _reference_mlp(linears, x, final_relu=True)):
                    fail("relu-after-last", observed="the outputs are never negative: a ReLU follows the last layer",
                         expected="raw scores (logits) from the last Linear", cause="the activation is applied after "
                         "every layer", where="skip the activation after the last layer")
                if _close(out, _reference_mlp(linears, x, relu=False)):
                    fail("missing-activation", observed="the model is one big linear map (no ReLU between layers)",
                         expected="ReLU after every layer but the last", cause="the activation is missing",
                         where="apply torch.relu between layers in forward")
                fail("wrong-forward", observed="eval-mode outputs differ from Linear -> ReLU -> ... -> Linear",
                     expected="the layers applied in order, ReLU between them", cause="order of layers or activations",
                     where="forward")
        dropout_model = _build(mlp_class, sizes, dropout=p)
        dropout_model.eval()
        with torch.no_grad():
            first, second = dropout_model(x), dropout_model(x)
            if not (torch.equal(first, second) and _close(first, _reference_mlp(_linears(dropout_model), x))):
                fail("dropout-in-eval", observed="in eval mode, outputs are random or differ from the layers without dropout",
                     expected="dropout does nothing after model.eval()",
                     cause="torch.nn.functional.dropout(x, p) defaults to training=True: it ignores the module's mode",
                     where="use an nn.Dropout module (it follows train()/eval()), or pass training=self.training")
            if len(sizes) > 2:
                dropout_model.train()
                if torch.equal(dropout_model(x), dropout_model(x)):
                    fail("dropout-missing", observed=f"MLP({sizes}, dropout={p}) gives identical outputs twice in train mode",
                         expected="random units zeroed in train mode", cause="the dropout argument is not used",
                         where="apply dropout after each hidden activation")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        before = [m.weight.detach().clone() for m in linears]
        model.train()
        model(x).square().mean().backward()
        optimizer.step()
        if any(torch.equal(b, m.weight) for b, m in zip(before, linears)):
            fail("unregistered-layers", observed="an SGD step on model.parameters() left a layer unchanged",
                 expected="every layer updated", cause="a layer not registered", where="nn.ModuleList")
    return "every layer registered and trained, ReLU between layers, dropout only in train mode"


# --------------------------------------------------------------------------------------- 02-count-trainable
class _CountModel(nn.Module):
    def __init__(self, frozen: bool) -> None:
        super().__init__()
        self.embed = nn.Linear(10, 12)
        self.norm = nn.BatchNorm1d(12)
        self.body = nn.Linear(12, 12)
        self.out = nn.Linear(12, 10, bias=False)
        self.tied = self.body  # the same layer reachable twice: its parameters must be counted once
        if frozen:
            self.embed.requires_grad_(False)


@register("02-count-trainable", hints=(
    "Count numbers (numel), not tensors, and only parameters with requires_grad; buffers are not parameters.",
    "sum(p.numel() for p in model.parameters() if p.requires_grad): parameters() already lists a shared "
    "parameter once, and state_dict() would add buffers such as BatchNorm's running statistics.",
))
@_isolated_rng
def check_count_trainable(count_trainable: Callable[[nn.Module], int], *, hidden: bool) -> str:
    models = [_CountModel(frozen=False), _CountModel(frozen=True)]
    if hidden:
        frozen_head = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(4, 2))
        frozen_head[3].requires_grad_(False)
        models += [frozen_head, nn.Sequential(nn.LayerNorm(5)), nn.ReLU()]
    for model in models:
        result = count_trainable(model)
        expected = sum(p.numel() for p in model.parameters() if p.requires_grad)
        if isinstance(result, torch.Tensor) or not isinstance(result, int):
            fail("not-an-int", observed=f"returned {type(result).__name__}", expected="a Python int",
                 cause="a tensor sum instead of a Python sum of p.numel()", where="the return value")
        if result == expected:
            continue
        every_parameter = sum(p.numel() for p in model.parameters())
        with_buffers = sum(t.numel() for t in model.state_dict().values())
        tensors = sum(1 for p in model.parameters() if p.requires_grad)
        shared_twice = sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False) if p.requires_grad)
        causes = [
            (tensors, "counts-tensors", "the number of parameter tensors, not of numbers", "sum p.numel()"),
            (shared_twice, "counts-shared-twice", "a layer reachable twice is counted twice",
             "iterate model.parameters(), which lists each parameter once"),
            (with_buffers, "counts-buffers", "state_dict() also holds buffers (BatchNorm running statistics), "
             "which are not trained", "iterate model.parameters(), not state_dict()"),
            (every_parameter, "counts-frozen", "frozen parameters (requires_grad=False) are counted",
             "keep only parameters with p.requires_grad"),
        ]
        for value, code, cause, where in causes:
            if result == value:
                fail(code, observed=f"{result} for a model with {expected} trainable numbers", expected=str(expected),
                     cause=cause, where=where)
        fail("wrong-count", observed=str(result), expected=str(expected),
             cause="not the number of trainable scalars", where="sum(p.numel() for trainable parameters)")
    return "counts trainable scalars: buffers, frozen and shared parameters handled"


# ------------------------------------------------------------------------------------ 02-running-standardizer
@register("02-running-standardizer", hints=(
    "Running statistics are state, not learnable weights: register them with self.register_buffer so that they "
    "are saved in state_dict, move with .to(), and stay out of model.parameters().",
    "In train mode: mean, var = x.mean(0), x.var(0, unbiased=False); under torch.no_grad() update "
    "running = (1 - momentum) * running + momentum * batch (in place); normalise with the batch statistics. In "
    "eval mode normalise with the running ones. Both: (x - mean) / torch.sqrt(var + eps).",
))
@_isolated_rng
def check_running_standardizer(standardizer_class: type, *, hidden: bool) -> str:
    features, momentum, batches = (4, 0.1, 2) if not hidden else (7, 0.3, 3)
    module = _build(standardizer_class, features, momentum=momentum)
    reference = nn.BatchNorm1d(features, momentum=momentum, affine=False)
    if list(module.parameters()):
        fail("buffer-is-parameter", observed=f"parameters: {[n for n, _ in module.named_parameters()]}",
             expected="no parameters: running statistics are not trained by the optimizer",
             cause="nn.Parameter(...) for the statistics", where="self.register_buffer('running_mean', torch.zeros(features))")
    buffers = dict(module.named_buffers())
    if not {"running_mean", "running_var"} <= buffers.keys():
        fail("not-registered", observed=f"buffers: {sorted(buffers)}", expected="running_mean and running_var buffers",
             cause="plain tensor attributes: state_dict() does not save them and .to(device) does not move them",
             where="self.register_buffer(name, tensor)")
    if not {"running_mean", "running_var"} <= module.state_dict().keys():
        fail("not-in-state-dict", observed=f"state_dict keys: {sorted(module.state_dict())}",
             expected="running_mean and running_var in the state_dict", cause="persistent=False",
             where="register_buffer(..., persistent=True), the default")
    if not (torch.equal(module.running_mean, torch.zeros(features)) and torch.equal(module.running_var, torch.ones(features))):
        fail("wrong-initial-values", observed=f"running_mean {module.running_mean}, running_var {module.running_var}",
             expected="zeros and ones", cause="other initial values", where="register_buffer in __init__")
    module.train()
    for step in range(batches):
        x = (_randn(600, features, seed=step + (10 if hidden else 0)) * (step + 2) + 3).requires_grad_()
        out, expected = module(x), reference(x.detach())
        if module.running_mean.requires_grad or module.running_mean.grad_fn is not None:
            fail("tracks-gradient", observed="running_mean requires grad after a training forward",
                 expected="buffers outside autograd", cause="the update was recorded by autograd; the graph of every "
                 "batch would then stay alive through the buffer", where="update the buffers under torch.no_grad()")
        if not (_close(module.running_mean, reference.running_mean, 2e-3) and _close(module.running_var, reference.running_var, 2e-3)):
            # From the zero initial mean, the swapped rule gives (1 - momentum) * batch mean after one batch.
            swapped = step == 0 and _close(module.running_mean, (1 - momentum) * x.detach().mean(0), 2e-3)
            fail("wrong-update", observed=f"after {step + 1} batch(es) running_mean = {module.running_mean.tolist()}",
                 expected=f"{reference.running_mean.tolist()}",
                 cause="momentum and 1 - momentum are swapped" if swapped else
                 "the update rule: running = (1 - momentum) * running + momentum * batch_statistic",
                 where="the buffer update in forward (train mode)")
        if not _close(out, expected, 2e-3):
            fail("wrong-output", observed="train-mode outputs differ from (x - batch mean) / sqrt(batch var + eps)",
                 expected="normalisation with the batch's own statistics in train mode",
                 cause="the running statistics (or another formula) used in train mode", where="forward, train branch")
    saved = {k: v.clone() for k, v in module.state_dict().items()}
    module.eval()
    reference.eval()
    x = _randn(5, features, seed=99) * 4
    with torch.no_grad():
        out = module(x)
    if not torch.equal(module.running_mean, saved["running_mean"]):
        fail("updates-in-eval", observed="running_mean changed during an eval-mode forward",
             expected="the statistics frozen in eval mode", cause="the update does not check self.training",
             where="update the buffers only when self.training is True")
    if not _close(out, reference(x), 2e-3):
        batch_stats = _close(out, (x - x.mean(0)) / torch.sqrt(x.var(0, unbiased=False) + 1e-5), 2e-3)
        fail("batch-stats-in-eval" if batch_stats else "wrong-output",
             observed="eval-mode outputs " + ("use the batch's statistics" if batch_stats else "differ from the reference"),
             expected="(x - running_mean) / sqrt(running_var + eps) in eval mode",
             cause="the branch on self.training" if batch_stats else "the formula", where="forward, eval branch")
    fresh = _build(standardizer_class, features, momentum=momentum)
    fresh.load_state_dict(saved)
    fresh.eval()
    with torch.no_grad():
        if not torch.equal(fresh(x), out):
            fail("state-dict-round-trip", observed="a fresh module loaded with the state_dict gives other outputs",
                 expected="identical outputs", cause="state that is not in a buffer", where="register_buffer")
    fresh.double()
    if fresh.running_mean.dtype != torch.float64 or fresh(x.double()).dtype != torch.float64:
        fail("does-not-move", observed="after .double() the buffers or outputs are not float64",
             expected="buffers follow .to()/.double()", cause="tensors created in forward with a fixed dtype",
             where="create new tensors like existing ones (torch.zeros_like, x.new_zeros)")
    return "buffers in state_dict and moved by .to(), updated only in train mode, outside autograd"


# ------------------------------------------------------------------------------------------ 02-freeze-backbone
class _BackboneModel(nn.Module):
    def __init__(self, seed: int, width: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.backbone = nn.Sequential(nn.Linear(6, width), nn.BatchNorm1d(width), nn.ReLU(), nn.Linear(width, width))
        self.head = nn.Linear(width, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.backbone(x)))


@register("02-freeze-backbone", hints=(
    "Freezing means the parameter's requires_grad flag is False, so backward computes no gradient for it. "
    "Setting an attribute on the module itself does nothing.",
    "model.backbone.requires_grad_(False); model.head.requires_grad_(True)  (note the trailing underscore: a "
    "method that sets the flag on every parameter).",
))
@_isolated_rng
def check_freeze_backbone(freeze_backbone: Callable[[nn.Module], Any], *, hidden: bool) -> str:
    settings = [(0, 8, False)] if not hidden else [(1, 16, False), (2, 4, True)]
    for seed, width, head_frozen_before in settings:
        model = _BackboneModel(seed, width)
        if head_frozen_before:
            model.head.requires_grad_(False)
        freeze_backbone(model)
        trainable_backbone = [n for n, p in model.backbone.named_parameters() if p.requires_grad]
        if trainable_backbone:
            fail("backbone-trainable", observed=f"backbone parameters still require grad: {trainable_backbone}",
                 expected="requires_grad False on every backbone parameter",
                 cause="module.requires_grad = False only sets a plain attribute on the module, and torch.no_grad() "
                       "or detach() do not change the parameters",
                 where="model.backbone.requires_grad_(False), or p.requires_grad_(False) for each parameter")
        frozen_head = [n for n, p in model.head.named_parameters() if not p.requires_grad]
        if frozen_head:
            fail("head-frozen", observed=f"head parameters do not require grad: {frozen_head}",
                 expected="the head trainable" + (" (it was frozen before your function ran)" if head_frozen_before else ""),
                 cause="the whole model was frozen, or the head's flag was never set", where="model.head.requires_grad_(True)")
        backbone_before = [p.detach().clone() for p in model.backbone.parameters()]
        head_before = [p.detach().clone() for p in model.head.parameters()]
        optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
        model.train()
        model(_randn(16, 6, seed=seed)).square().mean().backward()
        optimizer.step()
        if any(p.grad is not None for p in model.backbone.parameters()):
            fail("backbone-trainable", observed="backward() still computed backbone gradients",
                 expected="no gradients for frozen parameters", cause="requires_grad still True", where="requires_grad_(False)")
        if not all(torch.equal(b, p) for b, p in zip(backbone_before, model.backbone.parameters())):
            fail("backbone-trainable", observed="an optimizer step changed the backbone", expected="backbone unchanged",
                 cause="frozen flags not set", where="requires_grad_(False)")
        if all(torch.equal(b, p) for b, p in zip(head_before, model.head.parameters())):
            fail("head-frozen", observed="an optimizer step left the head unchanged", expected="the head trains",
                 cause="the head is frozen", where="model.head.requires_grad_(True)")
    return "backbone frozen (no gradients, unchanged by a step), head trainable"


# ---------------------------------------------------------------------------------------------- 02-init-weights
@register("02-init-weights", hints=(
    "Visit every nn.Linear however deeply it is nested (model.modules() walks the whole tree) and initialise "
    "its weight for ReLU networks (Kaiming/He) and its bias to zero; leave normalisation layers alone.",
    "for m in model.modules(): if isinstance(m, nn.Linear): nn.init.kaiming_normal_(m.weight, nonlinearity='relu') "
    "(fan_in mode: std = sqrt(2 / in_features)); nn.init.zeros_(m.bias) when m.bias is not None.",
))
@_isolated_rng
def check_init_weights(init_weights_: Callable[[nn.Module], Any], *, hidden: bool) -> str:
    torch.manual_seed(0 if not hidden else 1)
    if not hidden:
        model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Sequential(nn.Linear(1024, 512), nn.ReLU()),
                              nn.Linear(512, 10), nn.LayerNorm(10))
    else:
        model = nn.ModuleDict({"blocks": nn.ModuleList([nn.Sequential(nn.Linear(100, 800), nn.LayerNorm(800)),
                                                        nn.Linear(800, 300, bias=False)]),
                               "out": nn.Linear(300, 40)})
    linears = _linears(model)
    before = [m.weight.detach().clone() for m in linears]
    norms_before = {n: p.detach().clone() for n, p in model.named_parameters() if any(
        isinstance(m, nn.LayerNorm) and p is q for m in model.modules() for q in m.parameters())}
    torch.manual_seed(123)
    init_weights_(model)
    unchanged = [i for i, (b, m) in enumerate(zip(before, linears)) if torch.equal(b, m.weight)]
    if len(unchanged) == len(linears):
        fail("not-initialised", observed="no Linear weight changed", expected="every Linear re-initialised",
             cause="the function never reached the layers (or initialised copies of them)",
             where="loop over model.modules() and initialise in place (nn.init.*_ functions)")
    if unchanged:
        fail("missed-nested-layers", observed=f"Linear layers {unchanged} (in model.modules() order) kept their weights",
             expected="every Linear, however deeply nested, re-initialised",
             cause="model.children() only yields the direct children", where="use model.modules()")
    for index, m in enumerate(linears):
        fan_in, fan_out = m.in_features, m.out_features
        weight = m.weight.detach()
        std, mean = float(weight.std()), float(weight.mean())
        target = math.sqrt(2 / fan_in)
        if abs(std - target) > 0.05 * target:
            guess = " (that is sqrt(2 / fan_out): mode='fan_out')" if abs(std - math.sqrt(2 / fan_out)) < 0.05 * math.sqrt(2 / fan_out) else ""
            fail("wrong-std", observed=f"Linear {index} ({fan_in} -> {fan_out}) weight std {std:.4f}{guess}",
                 expected=f"sqrt(2 / fan_in) = {target:.4f} (Kaiming for ReLU, which keeps activation variance across layers)",
                 cause="another initialiser, gain or fan mode", where="nn.init.kaiming_normal_(w, mode='fan_in', nonlinearity='relu')")
        if abs(mean) > 0.1 * target:
            fail("wrong-mean", observed=f"Linear {index} weight mean {mean:.4f}", expected="mean 0",
                 cause="a shifted distribution", where="the initialiser")
        if m.bias is not None and not torch.equal(m.bias, torch.zeros_like(m.bias)):
            fail("bias-not-zero", observed=f"Linear {index} bias has values up to {float(m.bias.detach().abs().max()):.3g}",
                 expected="zeros", cause="the bias was left at its default (uniform) init", where="nn.init.zeros_(m.bias)")
    for name, value in norms_before.items():
        if not torch.equal(dict(model.named_parameters())[name], value):
            fail("norm-changed", observed=f"LayerNorm parameter {name} changed",
                 expected="normalisation weights stay 1 and biases 0",
                 cause="every parameter was initialised regardless of its layer (a LayerNorm weight set to 0 "
                       "zeroes the layer's output)", where="select nn.Linear modules with isinstance")
    return "every Linear Kaiming-initialised (std sqrt(2/fan_in), mean 0), biases zero, norms untouched"


# ---------------------------------------------------------------------------------------------- 02-param-groups
class _GroupModel(nn.Module):
    def __init__(self, freeze_first: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.backbone = nn.Sequential(nn.Embedding(20, 8), nn.Linear(8, 8), nn.LayerNorm(8), nn.Linear(8, 8, bias=False))
        self.head = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Linear(8, 3))
        if freeze_first:
            self.backbone[0].requires_grad_(False)


@register("02-param-groups", hints=(
    "Sort each trainable parameter into a group by two questions: is it in the backbone (lower lr)? Is it a "
    "matrix (p.ndim >= 2: weight decay) or a bias or normalisation weight (ndim < 2: no decay)?",
    "for name, p in model.named_parameters(): skip if not p.requires_grad; backbone = name.startswith('backbone.'); "
    "decay = p.ndim >= 2; append p to one of four lists; return [{'params': ..., 'lr': ..., 'weight_decay': ...}, ...] "
    "for the non-empty lists.",
))
@_isolated_rng
def check_param_groups(make_param_groups: Callable[..., list[dict[str, Any]]], *, hidden: bool) -> str:
    settings = [(False, 1e-3, 0.1, 1e-4)] if not hidden else [(True, 3e-3, 0.05, 3e-5), (False, 0.1, 0.2, 0.01)]
    for freeze_first, lr, weight_decay, backbone_lr in settings:
        model = _GroupModel(freeze_first)
        groups = make_param_groups(model, lr=lr, weight_decay=weight_decay, backbone_lr=backbone_lr)
        # Options a group leaves out take the optimizer's defaults: make those visibly wrong.
        try:
            optimizer = torch.optim.AdamW(groups, lr=12345.0, weight_decay=0.777)
        except ValueError as error:
            if "more than one" not in str(error):
                raise
            fail("duplicate-params", observed=f"torch.optim.AdamW(groups) raised: {error}",
                 expected="each parameter in exactly one group",
                 cause="overlapping selections, for example a group of all parameters plus a group of biases",
                 where="make the selections disjoint: one test per parameter decides its single group")
        for name, group in group_of_each_parameter(model, optimizer.param_groups).items():
            check_weight_decay(model, name, group, weight_decay)
            wanted_lr = backbone_lr if name.startswith("backbone.") else lr
            if not math.isclose(group["lr"], wanted_lr):
                fail("wrong-lr", observed=f"{name} has lr {group['lr']}", expected=f"{wanted_lr} "
                     f"({'backbone' if name.startswith('backbone.') else 'head'})",
                     cause="the backbone test or the lr of a group", where="lr set in every group")
    return "every trainable parameter in exactly one group, decay only on matrices, backbone at its own lr"
