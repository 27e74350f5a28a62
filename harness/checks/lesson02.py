"""Checks of lesson 02, nn.Module: registration, buffers, counting and freezing, initialisation, param groups.

Each probe builds small modules from the case's seeds, runs the student's class or function on them and
records parameters, buffers, state_dict keys, optimizer groups and outputs as data; each judge rebuilds the
inputs (and the modules it can build itself), recomputes the reference outputs and decides. The hidden
variant uses other sizes, nestings and edge cases (frozen parameters, a head frozen beforehand).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from harness.checks.core import Case, CheckFailed, fail, judges, register
from harness.checks.param_groups import check_weight_decay, describe_groups, group_lr, group_of_each_parameter
from harness.checks.wire import Opaque, type_name


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _isolated_rng(probe: Callable[..., dict]) -> Callable[..., dict]:
    """Run a probe that seeds torch's global generator without changing the student's random stream."""

    @functools.wraps(probe)
    def wrapper(*args: Any, **kwargs: Any) -> dict:
        with torch.random.fork_rng(devices=[]):
            return probe(*args, **kwargs)

    return wrapper


def _seeded(seed: int, build: Callable[[], nn.Module]) -> nn.Module:
    """`build()` after torch.manual_seed(seed), leaving the global random stream as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


def _close(a: torch.Tensor, b: torch.Tensor, tolerance: float = 1e-5) -> bool:
    return a.shape == b.shape and bool(((a - b).abs() <= tolerance * (1 + b.abs())).all())


def _snapshot(value: Any) -> Any:
    """A copy of a tensor as it is now (keeping requires_grad, which the wire carries); other values as they are."""
    if not isinstance(value, torch.Tensor):
        return value
    copy = value.detach().clone()
    return copy.requires_grad_(True) if value.requires_grad and copy.is_floating_point() else copy


def _tensor(value: Any, what: str) -> torch.Tensor:
    """`value` if it is a tensor; ValueError otherwise (an observation that is not the probe's)."""
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{what} is {type(value).__name__}, not a tensor")
    return value.detach()


def _attempt(record: dict[str, Any], run: Callable[[], None]) -> None:
    """Run the behavioural part of a probe; an exception of the student's code is recorded, not raised, so
    that the judge can first report what the recorded structure already shows."""
    try:
        run()
    except CheckFailed:
        raise
    except Exception as error:  # the student's code raised
        record["raised"] = f"{type(error).__name__}: {error}"[:2000]


def _no_exception(record: dict[str, Any], what: str) -> None:
    """Fail if the probe recorded an exception of the student's code while running `what`."""
    if record.get("raised") is not None:
        fail("raised", observed=f"your code raised {record['raised']} while {what}",
             expected="it runs on the check's inputs without an exception",
             cause="the exception named here, raised inside your code", where="the code you passed to check()")




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


def _layers(model: nn.Module) -> list[dict[str, Any]]:
    """Every nn.Linear of `model` (in model.modules() order) as data: its weight and bias."""
    return [{"weight": _snapshot(m.weight), "bias": _snapshot(m.bias)} for m in _linears(model)]


def _as_layers(records: Any) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    """The (weight, bias) pairs `_layers` recorded, validated."""
    if not isinstance(records, list):
        raise ValueError("the layers are not a list")
    layers = []
    for record in records:
        weight = _tensor(record["weight"], "a weight")
        bias = None if record["bias"] is None else _tensor(record["bias"], "a bias")
        if weight.ndim != 2 or (bias is not None and bias.shape != weight.shape[:1]):
            raise ValueError("a Linear layer with malformed weight or bias")
        layers.append((weight, bias))
    return layers


def _reference_mlp(layers: list[tuple[torch.Tensor, torch.Tensor | None]], x: torch.Tensor, *,
                   final_relu: bool = False, relu: bool = True) -> torch.Tensor:
    for index, (weight, bias) in enumerate(layers):
        x = F.linear(x, weight, bias)
        if relu and (index < len(layers) - 1 or final_relu):
            x = torch.relu(x)
    return x


def _mlp_configurations(case: Case) -> list[tuple[list[int], float]]:
    if not case.hidden:
        return [([6, 16, 16, 3], 0.5)]
    return [([3, 5], 0.3), ([8, 32, 32, 32, 2], 0.2), ([4, 7, 1], 0.6)]


def _mlp_input(case: Case, sizes: list[int]) -> torch.Tensor:
    return _randn(64, sizes[0], seed=case.seeded(len(sizes)))


def _run_mlp(mlp_class: type, model: nn.Module, record: dict[str, Any], sizes: list[int], p: float,
             x: torch.Tensor) -> None:
    """Record eval outputs, a dropout model's eval and train outputs, and the weights after one SGD step."""
    model.eval()
    with torch.no_grad():
        record["out"] = model(x)
        dropout_model = _build(mlp_class, sizes, dropout=p)
        dropout_model.eval()
        record["dropout_layers"] = _layers(dropout_model)
        record["dropout_eval"] = [dropout_model(x), dropout_model(x)]
        if len(sizes) > 2:
            dropout_model.train()
            record["dropout_train"] = [dropout_model(x), dropout_model(x)]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.train()
    model(x).square().mean().backward()
    optimizer.step()
    record["stepped"] = [_snapshot(m.weight) for m in _linears(model)]


@register("02-mlp", hints=(
    "Layers kept in a Python list are invisible to model.parameters(): nn.Module only registers attributes that "
    "are modules, parameters, or containers such as nn.ModuleList.",
    "self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:])); in forward apply each, "
    "with torch.relu and self.dropout (an nn.Dropout) after every layer but the last.",
))
@_isolated_rng
def probe_mlp(mlp_class: type, *, case: Case) -> dict:
    """Build the student's MLP for each configuration; record its layers, eval and train outputs, one SGD step."""
    records = []
    for sizes, p in _mlp_configurations(case):
        torch.manual_seed(case.seeded(0))
        model = _build(mlp_class, sizes)
        record: dict[str, Any] = {"registered": sum(param.numel() for param in model.parameters()),
                                  "layers": _layers(model)}
        records.append(record)
        _attempt(record, functools.partial(_run_mlp, mlp_class, model, record, sizes, p, _mlp_input(case, sizes)))
    return {"configurations": records}


def _judge_mlp_forward(record: dict[str, Any], layers: list[tuple[torch.Tensor, torch.Tensor | None]],
                       x: torch.Tensor) -> None:
    """The eval-mode outputs are Linear -> ReLU -> ... -> Linear of the recorded layers."""
    out = _tensor(record["out"], "the output")
    if _close(out, _reference_mlp(layers, x)):
        return
    if _close(out, _reference_mlp(layers, x, final_relu=True)):
        fail("relu-after-last", observed="the outputs are never negative: a ReLU follows the last layer",
             expected="raw scores (logits) from the last Linear", cause="the activation is applied after "
             "every layer", where="skip the activation after the last layer")
    if _close(out, _reference_mlp(layers, x, relu=False)):
        fail("missing-activation", observed="the model is one big linear map (no ReLU between layers)",
             expected="ReLU after every layer but the last", cause="the activation is missing",
             where="apply torch.relu between layers in forward")
    fail("wrong-forward", observed="eval-mode outputs differ from Linear -> ReLU -> ... -> Linear",
         expected="the layers applied in order, ReLU between them", cause="order of layers or activations",
         where="forward")


def _judge_mlp_dropout(record: dict[str, Any], sizes: list[int], p: float, x: torch.Tensor) -> None:
    """Dropout does nothing in eval mode and zeroes units in train mode."""
    first, second = (_tensor(t, "a dropout output") for t in record["dropout_eval"])
    reference = _reference_mlp(_as_layers(record["dropout_layers"]), x)
    if not (torch.equal(first, second) and _close(first, reference)):
        fail("dropout-in-eval", observed="in eval mode, outputs are random or differ from the layers without dropout",
             expected="dropout does nothing after model.eval()",
             cause="torch.nn.functional.dropout(x, p) defaults to training=True: it ignores the module's mode",
             where="use an nn.Dropout module (it follows train()/eval()), or pass training=self.training")
    if len(sizes) > 2:
        first, second = (_tensor(t, "a dropout output") for t in record["dropout_train"])
        if torch.equal(first, second):
            fail("dropout-missing", observed=f"MLP({sizes}, dropout={p}) gives identical outputs twice in train mode",
                 expected="random units zeroed in train mode", cause="the dropout argument is not used",
                 where="apply dropout after each hidden activation")


@judges("02-mlp")
def judge_mlp(seen: dict, *, case: Case) -> str:
    """Every layer registered and trained, ReLU between layers, dropout only in train mode."""
    for (sizes, p), record in zip(_mlp_configurations(case), seen["configurations"], strict=True):
        expected_count = sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))
        registered, layers = record["registered"], _as_layers(record["layers"])
        if isinstance(registered, bool) or not isinstance(registered, int):
            raise ValueError("the registered count is not an int")
        if registered < expected_count and len(layers) < len(sizes) - 1:
            fail("unregistered-layers",
                 observed=f"model.parameters() holds {registered} numbers; MLP({sizes}) has {expected_count}",
                 expected="every layer's weight and bias registered, so the optimizer and state_dict see them",
                 cause="the layers are stored in a plain Python list (or dict), which nn.Module does not look into",
                 where="store them in nn.ModuleList (or nn.ModuleDict)")
        shapes = [(weight.shape[1], weight.shape[0]) for weight, _ in layers]
        if shapes != list(zip(sizes[:-1], sizes[1:])) or registered != expected_count:
            fail("wrong-layers", observed=f"Linear layers {shapes} ({registered} parameters)",
                 expected=f"{list(zip(sizes[:-1], sizes[1:]))} with biases ({expected_count} parameters)",
                 cause="one layer per consecutive pair of sizes, in order", where="the loop that builds the layers")
        _no_exception(record, f"running MLP({sizes})")
        x = _mlp_input(case, sizes)
        _judge_mlp_forward(record, layers, x)
        _judge_mlp_dropout(record, sizes, p, x)
        stepped = [_tensor(t, "a stepped weight") for t in record["stepped"]]
        if any(torch.equal(before, after) for (before, _), after in zip(layers, stepped, strict=True)):
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


def _count_models(case: Case) -> list[nn.Module]:
    """Shared, frozen and buffered parameters; hidden: a frozen head, a lone norm, a module without parameters."""

    def build() -> list[nn.Module]:
        models: list[nn.Module] = [_CountModel(frozen=False), _CountModel(frozen=True)]
        if case.hidden:
            frozen_head = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(4, 2))
            frozen_head[3].requires_grad_(False)
            models += [frozen_head, nn.Sequential(nn.LayerNorm(5)), nn.ReLU()]
        return models

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(case.seeded(0))
        return build()


@register("02-count-trainable", hints=(
    "Count numbers (numel), not tensors, and only parameters with requires_grad; buffers are not parameters.",
    "sum(p.numel() for p in model.parameters() if p.requires_grad): parameters() already lists a shared "
    "parameter once, and state_dict() would add buffers such as BatchNorm's running statistics.",
))
def probe_count_trainable(count_trainable: Callable[[nn.Module], int], *, case: Case) -> dict:
    """Count each of the case's models with the student's function."""
    with torch.random.fork_rng(devices=[]):
        return {"counts": [count_trainable(model) for model in _count_models(case)]}


@judges("02-count-trainable")
def judge_count_trainable(seen: dict, *, case: Case) -> str:
    """`count_trainable(model)` is the number of trainable scalars: buffers, frozen and shared parameters handled."""
    for model, result in zip(_count_models(case), seen["counts"], strict=True):
        expected = sum(p.numel() for p in model.parameters() if p.requires_grad)
        if isinstance(result, (torch.Tensor, Opaque)) or not isinstance(result, int):
            fail("not-an-int", observed=f"returned {type_name(result)}", expected="a Python int",
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
def _standardizer_setting(case: Case) -> tuple[int, float, int]:
    """(features, momentum, training batches)."""
    return (7, 0.3, 3) if case.hidden else (4, 0.1, 2)


def _training_batch(case: Case, step: int, features: int) -> torch.Tensor:
    return _randn(600, features, seed=case.seeded(step + (10 if case.hidden else 0))) * (step + 2) + 3


def _eval_batch(case: Case, features: int) -> torch.Tensor:
    return _randn(5, features, seed=case.seeded(99)) * 4


@register("02-running-standardizer", hints=(
    "Running statistics are state, not learnable weights: register them with self.register_buffer so that they "
    "are saved in state_dict, move with .to(), and stay out of model.parameters().",
    "In train mode: mean, var = x.mean(0), x.var(0, unbiased=False); under torch.no_grad() update "
    "running = (1 - momentum) * running + momentum * batch (in place); normalise with the batch statistics. In "
    "eval mode normalise with the running ones. Both: (x - mean) / torch.sqrt(var + eps).",
))
@_isolated_rng
def probe_running_standardizer(standardizer_class: type, *, case: Case) -> dict:
    """Record the module's parameters, buffers and state_dict keys, then its statistics and outputs in train mode,
    in eval mode, after a state_dict round trip and after .double()."""
    features, momentum, _ = _standardizer_setting(case)
    module = _build(standardizer_class, features, momentum=momentum)
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
    features, momentum, batches = _standardizer_setting(case)
    module.train()
    seen["steps"] = []
    for step in range(batches):
        out = module(_training_batch(case, step, features).requires_grad_())
        seen["steps"].append({"out": out.detach(), "running_mean": _snapshot(module.running_mean),
                              "running_var": _snapshot(module.running_var)})
    saved = {k: v.clone() for k, v in module.state_dict().items()}
    before = _snapshot(module.running_mean)
    module.eval()
    x = _eval_batch(case, features)
    with torch.no_grad():
        seen["eval"] = {"out": module(x), "before": before, "after": _snapshot(module.running_mean)}
    fresh = _build(standardizer_class, features, momentum=momentum)
    fresh.load_state_dict(saved)
    fresh.eval()
    with torch.no_grad():
        seen["reloaded"] = fresh(x)
    fresh.double()
    seen["doubled"] = {"running_mean": _snapshot(fresh.running_mean), "out": fresh(x.double()).detach()}


def _judge_standardizer_structure(seen: dict[str, Any], features: int) -> None:
    """No parameters; running_mean and running_var registered, in the state_dict, zeros and ones at first."""
    if seen["parameters"]:
        fail("buffer-is-parameter", observed=f"parameters: {seen['parameters']}",
             expected="no parameters: running statistics are not trained by the optimizer",
             cause="nn.Parameter(...) for the statistics",
             where="self.register_buffer('running_mean', torch.zeros(features))")
    if not {"running_mean", "running_var"} <= set(seen["buffers"]):
        fail("not-registered", observed=f"buffers: {sorted(seen['buffers'])}",
             expected="running_mean and running_var buffers",
             cause="plain tensor attributes: state_dict() does not save them and .to(device) does not move them",
             where="self.register_buffer(name, tensor)")
    if not {"running_mean", "running_var"} <= set(seen["state_dict"]):
        fail("not-in-state-dict", observed=f"state_dict keys: {sorted(seen['state_dict'])}",
             expected="running_mean and running_var in the state_dict", cause="persistent=False",
             where="register_buffer(..., persistent=True), the default")
    mean, var = (_tensor(t, "an initial statistic") for t in seen["initial"])
    if not (torch.equal(mean, torch.zeros(features)) and torch.equal(var, torch.ones(features))):
        fail("wrong-initial-values", observed=f"running_mean {mean}, running_var {var}",
             expected="zeros and ones", cause="other initial values", where="register_buffer in __init__")


def _judge_standardizer_training(seen: dict[str, Any], case: Case, reference: nn.BatchNorm1d) -> None:
    """Train mode: buffers outside autograd, updated like BatchNorm's, outputs from the batch's statistics."""
    features, momentum, batches = _standardizer_setting(case)
    for step, record in zip(range(batches), seen["steps"], strict=True):
        x = _training_batch(case, step, features)
        expected = reference(x)
        running_mean, running_var = record["running_mean"], _tensor(record["running_var"], "running_var")
        if _tensor(running_mean, "running_mean") is not None and running_mean.requires_grad:
            fail("tracks-gradient", observed="running_mean requires grad after a training forward",
                 expected="buffers outside autograd", cause="the update was recorded by autograd; the graph of every "
                 "batch would then stay alive through the buffer", where="update the buffers under torch.no_grad()")
        running_mean = running_mean.detach()
        if not (_close(running_mean, reference.running_mean, 2e-3)
                and _close(running_var, reference.running_var, 2e-3)):
            # From the zero initial mean, the swapped rule gives (1 - momentum) * batch mean after one batch.
            swapped = step == 0 and _close(running_mean, (1 - momentum) * x.mean(0), 2e-3)
            fail("wrong-update", observed=f"after {step + 1} batch(es) running_mean = {running_mean.tolist()}",
                 expected=f"{reference.running_mean.tolist()}",
                 cause="momentum and 1 - momentum are swapped" if swapped else
                 "the update rule: running = (1 - momentum) * running + momentum * batch_statistic",
                 where="the buffer update in forward (train mode)")
        if not _close(_tensor(record["out"], "an output"), expected, 2e-3):
            fail("wrong-output", observed="train-mode outputs differ from (x - batch mean) / sqrt(batch var + eps)",
                 expected="normalisation with the batch's own statistics in train mode",
                 cause="the running statistics (or another formula) used in train mode", where="forward, train branch")


@judges("02-running-standardizer")
def judge_running_standardizer(seen: dict, *, case: Case) -> str:
    """Buffers in state_dict and moved by .to(), updated only in train mode, outside autograd; BatchNorm's numbers."""
    features, momentum, _ = _standardizer_setting(case)
    _judge_standardizer_structure(seen, features)
    _no_exception(seen, "running the module")
    reference = nn.BatchNorm1d(features, momentum=momentum, affine=False)
    with torch.no_grad():
        _judge_standardizer_training(seen, case, reference.train())
        x = _eval_batch(case, features)
        before, after = (_tensor(seen["eval"][key], "running_mean") for key in ("before", "after"))
        if not torch.equal(after, before):
            fail("updates-in-eval", observed="running_mean changed during an eval-mode forward",
                 expected="the statistics frozen in eval mode", cause="the update does not check self.training",
                 where="update the buffers only when self.training is True")
        out = _tensor(seen["eval"]["out"], "the eval output")
        if not _close(out, reference.eval()(x), 2e-3):
            batch_stats = _close(out, (x - x.mean(0)) / torch.sqrt(x.var(0, unbiased=False) + 1e-5), 2e-3)
            fail("batch-stats-in-eval" if batch_stats else "wrong-output",
                 observed="eval-mode outputs "
                 + ("use the batch's statistics" if batch_stats else "differ from the reference"),
                 expected="(x - running_mean) / sqrt(running_var + eps) in eval mode",
                 cause="the branch on self.training" if batch_stats else "the formula", where="forward, eval branch")
    if not torch.equal(_tensor(seen["reloaded"], "the reloaded output"), out):
        fail("state-dict-round-trip", observed="a fresh module loaded with the state_dict gives other outputs",
             expected="identical outputs", cause="state that is not in a buffer", where="register_buffer")
    doubled = seen["doubled"]
    if (_tensor(doubled["running_mean"], "running_mean").dtype != torch.float64
            or _tensor(doubled["out"], "the output").dtype != torch.float64):
        fail("does-not-move", observed="after .double() the buffers or outputs are not float64",
             expected="buffers follow .to()/.double()", cause="tensors created in forward with a fixed dtype",
             where="create new tensors like existing ones (torch.zeros_like, x.new_zeros)")
    return "buffers in state_dict and moved by .to(), updated only in train mode, outside autograd"


# ------------------------------------------------------------------------------------------ 02-freeze-backbone
class _BackboneModel(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(6, width), nn.BatchNorm1d(width), nn.ReLU(), nn.Linear(width, width))
        self.head = nn.Linear(width, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.backbone(x)))


def _backbone_settings(case: Case) -> list[tuple[int, int, bool]]:
    """(seed, width, head frozen before the student's function runs)."""
    settings = [(0, 8, False)] if not case.hidden else [(1, 16, False), (2, 4, True)]
    return [(case.seeded(seed), width, frozen) for seed, width, frozen in settings]


@register("02-freeze-backbone", hints=(
    "Freezing means the parameter's requires_grad flag is False, so backward computes no gradient for it. "
    "Setting an attribute on the module itself does nothing.",
    "model.backbone.requires_grad_(False); model.head.requires_grad_(True)  (note the trailing underscore: a "
    "method that sets the flag on every parameter).",
))
@_isolated_rng
def probe_freeze_backbone(freeze_backbone: Callable[[nn.Module], Any], *, case: Case) -> dict:
    """Freeze each model with the student's function; record the flags, then the gradients and the parameters
    after one SGD step on the parameters that require grad."""
    records = []
    for seed, width, head_frozen_before in _backbone_settings(case):
        model = _seeded(seed, functools.partial(_BackboneModel, width))
        if head_frozen_before:
            model.head.requires_grad_(False)
        freeze_backbone(model)
        record: dict[str, Any] = {"requires_grad": {n: p.requires_grad for n, p in model.named_parameters()}}
        _attempt(record, functools.partial(_step_frozen, model, record, _randn(16, 6, seed=seed)))
        records.append(record)
    return {"models": records}


def _step_frozen(model: nn.Module, record: dict[str, Any], x: torch.Tensor) -> None:
    """One SGD step on the parameters that require grad; record the backbone's gradients and every parameter."""
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    model.train()
    model(x).square().mean().backward()
    optimizer.step()
    record["backbone_grads"] = [p.grad for p in model.backbone.parameters()]
    record["after"] = {n: _snapshot(p) for n, p in model.named_parameters()}


@judges("02-freeze-backbone")
def judge_freeze_backbone(seen: dict, *, case: Case) -> str:
    """Backbone frozen (no gradients, unchanged by a step), head trainable."""
    for (seed, width, head_frozen_before), record in zip(_backbone_settings(case), seen["models"], strict=True):
        model = _seeded(seed, functools.partial(_BackboneModel, width))
        flags, names = record["requires_grad"], [n for n, _ in model.named_parameters()]
        if not (isinstance(flags, dict) and list(flags) == names):
            raise ValueError("the recorded parameters are not the model's")
        trainable_backbone = [n for n in names if n.startswith("backbone.") and flags[n] is not False]
        if trainable_backbone:
            fail("backbone-trainable", observed=f"backbone parameters still require grad: {trainable_backbone}",
                 expected="requires_grad False on every backbone parameter",
                 cause="module.requires_grad = False only sets a plain attribute on the module, and torch.no_grad() "
                       "or detach() do not change the parameters",
                 where="model.backbone.requires_grad_(False), or p.requires_grad_(False) for each parameter")
        frozen_head = [n for n in names if n.startswith("head.") and flags[n] is not True]
        if frozen_head:
            fail("head-frozen", observed=f"head parameters do not require grad: {frozen_head}",
                 expected="the head trainable"
                 + (" (it was frozen before your function ran)" if head_frozen_before else ""),
                 cause="the whole model was frozen, or the head's flag was never set",
                 where="model.head.requires_grad_(True)")
        _no_exception(record, "taking an SGD step on the parameters that require grad")
        after = record["after"]
        if not (isinstance(after, dict) and list(after) == names):
            raise ValueError("the recorded parameters are not the model's")
        if any(grad is not None for grad in record["backbone_grads"]):
            fail("backbone-trainable", observed="backward() still computed backbone gradients",
                 expected="no gradients for frozen parameters", cause="requires_grad still True",
                 where="requires_grad_(False)")
        before = dict(model.named_parameters())
        unchanged = [torch.equal(before[n].detach(), _tensor(after[n], n)) for n in names]
        if not all(same for n, same in zip(names, unchanged) if n.startswith("backbone.")):
            fail("backbone-trainable", observed="an optimizer step changed the backbone", expected="backbone unchanged",
                 cause="frozen flags not set", where="requires_grad_(False)")
        if all(same for n, same in zip(names, unchanged) if n.startswith("head.")):
            fail("head-frozen", observed="an optimizer step left the head unchanged", expected="the head trains",
                 cause="the head is frozen", where="model.head.requires_grad_(True)")
    return "backbone frozen (no gradients, unchanged by a step), head trainable"


# ---------------------------------------------------------------------------------------------- 02-init-weights
# Elements of each weight the probe sends (the first ones, row by row): enough to measure std and mean to
# well under 1%, and a few hundred kB in all where the visible model's weights would take several MB.
_WEIGHT_SAMPLE = 32768


def _init_model(case: Case) -> nn.Module:
    """Nested Linear layers with LayerNorms between them; hidden: a ModuleDict, a layer without bias."""

    def build() -> nn.Module:
        if not case.hidden:
            return nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Sequential(nn.Linear(1024, 512), nn.ReLU()),
                                 nn.Linear(512, 10), nn.LayerNorm(10))
        return nn.ModuleDict({"blocks": nn.ModuleList([nn.Sequential(nn.Linear(100, 800), nn.LayerNorm(800)),
                                                       nn.Linear(800, 300, bias=False)]),
                              "out": nn.Linear(300, 40)})

    return _seeded(case.seeded(1 if case.hidden else 0), build)


def _norm_parameters(model: nn.Module) -> dict[str, torch.Tensor]:
    """The parameters of the model's LayerNorms, by name."""
    return {n: p for n, p in model.named_parameters() if any(
        isinstance(m, nn.LayerNorm) and p is q for m in model.modules() for q in m.parameters())}


@register("02-init-weights", hints=(
    "Visit every nn.Linear however deeply it is nested (model.modules() walks the whole tree) and initialise "
    "its weight for ReLU networks (Kaiming/He) and its bias to zero; leave normalisation layers alone.",
    "for m in model.modules(): if isinstance(m, nn.Linear): nn.init.kaiming_normal_(m.weight, nonlinearity='relu') "
    "(fan_in mode: std = sqrt(2 / in_features)); nn.init.zeros_(m.bias) when m.bias is not None.",
))
@_isolated_rng
def probe_init_weights(init_weights_: Callable[[nn.Module], Any], *, case: Case) -> dict:
    """Initialise the case's model with the student's function; record (a sample of) every Linear's weight, the
    biases and the LayerNorm parameters afterwards."""
    model = _init_model(case)
    torch.manual_seed(case.seeded(123))
    init_weights_(model)
    return {"linears": [{"weight": _snapshot(m.weight.flatten()[:_WEIGHT_SAMPLE]), "bias": _snapshot(m.bias)}
                        for m in _linears(model)],
            "norms": {n: _snapshot(p) for n, p in _norm_parameters(model).items()}}


@judges("02-init-weights")
def judge_init_weights(seen: dict, *, case: Case) -> str:
    """Every Linear Kaiming-initialised (std sqrt(2/fan_in), mean 0), biases zero, norms untouched."""
    model = _init_model(case)
    linears = _linears(model)
    records = seen["linears"]
    if not isinstance(records, list) or len(records) != len(linears):
        raise ValueError("the recorded layers are not the model's")
    weights = [_tensor(r["weight"], "a weight") for r in records]
    unchanged = [i for i, (m, w) in enumerate(zip(linears, weights))
                 if torch.equal(m.weight.detach().flatten()[:_WEIGHT_SAMPLE], w)]
    if len(unchanged) == len(linears):
        fail("not-initialised", observed="no Linear weight changed", expected="every Linear re-initialised",
             cause="the function never reached the layers (or initialised copies of them)",
             where="loop over model.modules() and initialise in place (nn.init.*_ functions)")
    if unchanged:
        fail("missed-nested-layers",
             observed=f"Linear layers {unchanged} (in model.modules() order) kept their weights",
             expected="every Linear, however deeply nested, re-initialised",
             cause="model.children() only yields the direct children", where="use model.modules()")
    for index, (m, weight, record) in enumerate(zip(linears, weights, records)):
        fan_in, fan_out = m.in_features, m.out_features
        if weight.shape != (min(m.weight.numel(), _WEIGHT_SAMPLE),):
            raise ValueError(f"the sample of Linear {index}'s weight has shape {tuple(weight.shape)}")
        std, mean = float(weight.std()), float(weight.mean())
        target = math.sqrt(2 / fan_in)
        if abs(std - target) > 0.05 * target:
            fan_out_std = math.sqrt(2 / fan_out)
            is_fan_out = abs(std - fan_out_std) < 0.05 * fan_out_std
            guess = " (that is sqrt(2 / fan_out): mode='fan_out')" if is_fan_out else ""
            fail("wrong-std", observed=f"Linear {index} ({fan_in} -> {fan_out}) weight std {std:.4f}{guess}",
                 expected=f"sqrt(2 / fan_in) = {target:.4f} (Kaiming for ReLU, which keeps activation variance "
                 "across layers)", cause="another initialiser, gain or fan mode",
                 where="nn.init.kaiming_normal_(w, mode='fan_in', nonlinearity='relu')")
        if abs(mean) > 0.1 * target:
            fail("wrong-mean", observed=f"Linear {index} weight mean {mean:.4f}", expected="mean 0",
                 cause="a shifted distribution", where="the initialiser")
        if m.bias is not None:
            bias = _tensor(record["bias"], "a bias")
            if not torch.equal(bias, torch.zeros_like(m.bias)):
                fail("bias-not-zero", observed=f"Linear {index} bias has values up to {float(bias.abs().max()):.3g}",
                     expected="zeros", cause="the bias was left at its default (uniform) init",
                     where="nn.init.zeros_(m.bias)")
    norms = seen["norms"]
    for name, value in _norm_parameters(model).items():
        if not torch.equal(_tensor(norms[name], name), value.detach()):
            fail("norm-changed", observed=f"LayerNorm parameter {name} changed",
                 expected="normalisation weights stay 1 and biases 0",
                 cause="every parameter was initialised regardless of its layer (a LayerNorm weight set to 0 "
                       "zeroes the layer's output)", where="select nn.Linear modules with isinstance")
    return "every Linear Kaiming-initialised (std sqrt(2/fan_in), mean 0), biases zero, norms untouched"


# ---------------------------------------------------------------------------------------------- 02-param-groups
class _GroupModel(nn.Module):
    def __init__(self, freeze_first: bool) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Embedding(20, 8), nn.Linear(8, 8), nn.LayerNorm(8),
                                      nn.Linear(8, 8, bias=False))
        self.head = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Linear(8, 3))
        if freeze_first:
            self.backbone[0].requires_grad_(False)


def _group_settings(case: Case) -> list[tuple[bool, float, float, float]]:
    """(freeze the embedding, lr, weight_decay, backbone_lr)."""
    return [(False, 1e-3, 0.1, 1e-4)] if not case.hidden else [(True, 3e-3, 0.05, 3e-5), (False, 0.1, 0.2, 0.01)]


def _group_model(case: Case, freeze_first: bool) -> nn.Module:
    return _seeded(case.seeded(0), functools.partial(_GroupModel, freeze_first))


@register("02-param-groups", hints=(
    "Sort each trainable parameter into a group by two questions: is it in the backbone (lower lr)? Is it a "
    "matrix (p.ndim >= 2: weight decay) or a bias or normalisation weight (ndim < 2: no decay)?",
    "for name, p in model.named_parameters(): skip if not p.requires_grad; backbone = name.startswith('backbone.'); "
    "decay = p.ndim >= 2; append p to one of four lists; return [{'params': ..., 'lr': ..., 'weight_decay': ...}, ...] "
    "for the non-empty lists.",
))
@_isolated_rng
def probe_param_groups(make_param_groups: Callable[..., list[dict[str, Any]]], *, case: Case) -> dict:
    """Build an AdamW from the student's groups (with defaults that a forgotten option makes visible); record
    its groups by parameter name."""
    described = []
    for freeze_first, lr, weight_decay, backbone_lr in _group_settings(case):
        model = _group_model(case, freeze_first)
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
        described.append(describe_groups(model, optimizer.param_groups))
    return {"groups": described}


@judges("02-param-groups")
def judge_param_groups(seen: dict, *, case: Case) -> str:
    """Every trainable parameter in exactly one group, decay only on matrices, backbone at its own lr."""
    for setting, groups in zip(_group_settings(case), seen["groups"], strict=True):
        freeze_first, lr, weight_decay, backbone_lr = setting
        model = _group_model(case, freeze_first)
        for name, group in group_of_each_parameter(model, groups).items():
            check_weight_decay(model, name, group, weight_decay)
            wanted_lr = backbone_lr if name.startswith("backbone.") else lr
            if not math.isclose(group_lr(group, name), wanted_lr):
                fail("wrong-lr", observed=f"{name} has lr {group['lr']}", expected=f"{wanted_lr} "
                     f"({'backbone' if name.startswith('backbone.') else 'head'})",
                     cause="the backbone test or the lr of a group", where="lr set in every group")
    return "every trainable parameter in exactly one group, decay only on matrices, backbone at its own lr"
