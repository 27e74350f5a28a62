"""Checks of lesson 02, nn.Module: registration, buffers, counting and freezing, initialisation, param groups.

Each probe builds small modules from the case's seeds, runs the student's class or function on them and
records parameters, buffers, state_dict keys, optimizer groups and outputs as data; each judge rebuilds the
inputs (and the modules it can build itself), recomputes the reference outputs and decides. The visible case
already holds every edge case the exercise's text names (frozen parameters, a head frozen beforehand, nested
containers, a Linear without bias, a constant feature, non-default arguments); the hidden variant draws other
sizes, seeds and settings of the same kinds.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from harness.checks.param_groups import check_weight_decay, describe_groups, group_lr, group_of_each_parameter
from harness.contract.case import Case
from harness.contract.errors import explain
from harness.contract.failure import CheckFailed, Hints, Requirement, fail
from harness.contract.registry import judges, register
from harness.contract.wire import Opaque, type_name


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
    """Run the behavioural part of a probe; an exception of the student's code is recorded (explained, with the
    student's line), not raised, so that the judge can first report what the recorded structure already shows."""
    try:
        run()
    except CheckFailed:
        raise
    except Exception as error:  # the student's code raised
        record["raised"] = explain(error)[:2000]


def _no_exception(record: dict[str, Any], what: str) -> None:
    """Fail if the probe recorded an exception of the student's code while running `what`."""
    if record.get("raised") is not None:
        fail("raised", observed=f"while {what}, your code raised {record['raised']}",
             expected="it runs on the check's inputs without an exception",
             cause="the exception named here, raised inside your code", where="the line named above")


# -------------------------------------------------------------------------------------------------- 02-mlp
def _build(factory: Callable[..., nn.Module], *args: Any, **kwargs: Any) -> nn.Module:
    try:
        return factory(*args, **kwargs)
    except AttributeError as error:
        if "Module.__init__() call" in str(error):
            fail("missing-super-init", observed=f"constructing the module raised AttributeError: {error}",
                 expected="the module builds", cause="nn.Module's own __init__ had not run when a layer, parameter "
                 "or buffer was assigned, so the registries for them did not exist yet",
                 where="call super().__init__() first in __init__")
        raise


def _linears(model: nn.Module) -> list[nn.Linear]:
    return [m for m in model.modules() if isinstance(m, nn.Linear)]


def _layers(model: nn.Module) -> list[dict[str, Any]]:
    """Every nn.Linear of `model` (in model.modules() order) as data: its weight and bias."""
    return [{"weight": _snapshot(m.weight), "bias": _snapshot(m.bias)} for m in _linears(model)]


Layers = list[tuple[torch.Tensor, torch.Tensor | None]]


def _as_layers(records: Any) -> Layers:
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


def _reference_mlp(layers: Layers, x: torch.Tensor, *, final_relu: bool = False, relu: bool = True) -> torch.Tensor:
    for index, (weight, bias) in enumerate(layers):
        x = F.linear(x, weight, bias)
        if relu and (index < len(layers) - 1 or final_relu):
            x = torch.relu(x)
    return x


def _mlp_configurations(case: Case) -> list[tuple[list[int], float]]:
    """(sizes, dropout): a dropout other than nn.Dropout's default 0.5, and a single layer (no hidden one)."""
    if not case.hidden:
        return [([6, 16, 16, 3], 0.25), ([3, 5], 0.4)]
    return [([3, 5], 0.3), ([8, 32, 32, 32, 2], 0.2), ([4, 7, 1], 0.6)]


def _mlp_input(case: Case, sizes: list[int]) -> torch.Tensor:
    return _randn(64, sizes[0], seed=case.seeded(len(sizes)))


def _train_forward(model: nn.Module, x: torch.Tensor) -> dict[str, Any]:
    """One train-mode forward, with the input of every nn.Linear recorded (in the order the layers ran)."""
    inputs: list[torch.Tensor] = []
    handles = [m.register_forward_pre_hook(lambda module, args: inputs.append(args[0].detach().clone()))
               for m in _linears(model)]
    try:
        model.train()
        out = model(x)
    finally:
        for handle in handles:
            handle.remove()
    return {"inputs": inputs, "out": out.detach()}


def _run_mlp(mlp_class: type, model: nn.Module, record: dict[str, Any], sizes: list[int], p: float,
             x: torch.Tensor) -> None:
    """Record eval outputs, a dropout model's eval outputs and one train-mode forward, and the weights after one
    SGD step."""
    model.eval()
    with torch.no_grad():
        record["out"] = model(x)
        dropout_model = _build(mlp_class, sizes, dropout=p)
        dropout_model.eval()
        record["dropout_layers"] = _layers(dropout_model)
        record["dropout_eval"] = [dropout_model(x), dropout_model(x)]
        record["dropout_train"] = _train_forward(dropout_model, x)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.train()
    model(x).square().mean().backward()
    optimizer.step()
    record["stepped"] = [_snapshot(m.weight) for m in _linears(model)]
    record["got_gradient"] = [m.weight.grad is not None and bool(m.weight.grad.abs().sum() > 0)
                              for m in _linears(model)]


@register(
    "02-mlp",
    hints=Hints(
        nudge="Build one nn.Linear per consecutive pair of sizes, keep them where nn.Module can see them, and in "
              "forward put ReLU and dropout between layers, never after the last.",
        concept="nn.Module registers only attributes that are modules, parameters or module containers "
                "(nn.ModuleList, nn.ModuleDict): a plain list of layers is invisible to parameters(), state_dict() "
                "and train()/eval(). An nn.Dropout module follows the model's mode.",
        solution="self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:])); "
                 "self.dropout = nn.Dropout(dropout); in forward: *hidden, last = self.layers; "
                 "x = self.dropout(torch.relu(layer(x))) for each hidden layer; return last(x)",
        section="1. Subclassing `nn.Module`, and what gets registered"),
    requires={
        "missing-super-init": Requirement(
            "an nn.Module subclass: nn.Module's __init__ runs before layers are assigned",
            hint="The error says the layers were assigned before something ran. What must be the first line of a "
                 "module's __init__?"),
        "unregistered-layers": Requirement(
            "all layers are registered (seen by parameters(), trained by the optimizer)",
            hint="Print len(list(MLP([4, 8, 2]).parameters())). Where are your layers stored, and does nn.Module "
                 "look inside that kind of container?"),
        "wrong-layers": Requirement(
            "one nn.Linear with bias per consecutive pair of sizes, in order",
            hint="Compare your layers' (in, out) shapes with zip(sizes[:-1], sizes[1:]), and check that each has a "
                 "bias."),
        "relu-after-last": Requirement(
            "no activation after the last layer: the output is raw scores",
            hint="Your outputs are never negative. Which layer should not be followed by a ReLU?"),
        "missing-activation": Requirement(
            "ReLU after every layer except the last",
            hint="Without an activation, stacked Linear layers collapse into one linear map. Where does the ReLU go?"),
        "wrong-forward": Requirement(
            "forward is Linear -> ReLU -> ... -> Linear (each layer once, in order)",
            hint="Run your model in eval mode on a small input and compare with applying the layers and torch.relu "
                 "by hand, one at a time."),
        "dropout-in-eval": Requirement(
            "dropout is active in train() mode only",
            hint="Call your model twice in eval mode on the same input: are the outputs equal? What tells a "
                 "dropout call that the model is in eval mode?"),
        "dropout-missing": Requirement(
            "dropout after every hidden ReLU",
            hint="In train mode, count the zeros after each hidden ReLU: is the dropout argument used after every "
                 "hidden layer?"),
        "wrong-dropout": Requirement(
            "dropout with probability `dropout` (survivors rescaled by 1 / (1 - p), as nn.Dropout does)",
            hint="With MLP(sizes, dropout=0.25) in train mode, about a quarter of the hidden units should be zero. "
                 "What probability does your dropout use, and is it the probability of dropping?"),
        "dropout-misplaced": Requirement(
            "dropout only after the hidden ReLUs: not on the input, not on the output scores",
            hint="In train mode, does the first layer see x itself, and is the output the last layer's result?"),
    },
)
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


def _judge_mlp_forward(record: dict[str, Any], layers: Layers, x: torch.Tensor) -> None:
    """The eval-mode outputs are Linear -> ReLU -> ... -> Linear of the recorded layers."""
    out = _tensor(record["out"], "the output")
    if _close(out, _reference_mlp(layers, x)):
        return
    if _close(out, _reference_mlp(layers, x, final_relu=True)):
        fail("relu-after-last", observed="the outputs are never negative: a ReLU follows the last layer",
             expected="raw scores (logits) from the last Linear", cause="the activation is applied after "
             "every layer, the last one included", where="skip the activation after the last layer")
    if _close(out, _reference_mlp(layers, x, relu=False)):
        fail("missing-activation", observed="the model is one big linear map (no ReLU between layers)",
             expected="ReLU after every layer but the last", cause="no activation is applied between the layers",
             where="apply torch.relu between layers in forward")
    fail("wrong-forward", observed="eval-mode outputs differ from Linear -> ReLU -> ... -> Linear of your own layers",
         expected="the layers applied once each, in order, with ReLU between them",
         cause="another activation than ReLU, the layers applied in another order or more than once, or another "
               "operation in forward", where="forward")


def _judge_mlp_dropout_eval(record: dict[str, Any], x: torch.Tensor) -> None:
    """Dropout does nothing in eval mode."""
    first, second = (_tensor(t, "a dropout output") for t in record["dropout_eval"])
    reference = _reference_mlp(_as_layers(record["dropout_layers"]), x)
    if not (torch.equal(first, second) and _close(first, reference)):
        fail("dropout-in-eval", observed="in eval mode, outputs are random or differ from the layers without dropout",
             expected="dropout does nothing after model.eval()",
             cause="a dropout that ignores the module's mode: torch.nn.functional.dropout(x, p) defaults to "
                   "training=True, and a mask drawn by hand is drawn in every mode",
             where="use an nn.Dropout module (it follows train()/eval()), or pass training=self.training")


def _dropout_rate(a: torch.Tensor, b: torch.Tensor) -> tuple[int, float, float]:
    """What dropout did between a hidden ReLU's output `a` and the next layer's input `b`: (units zeroed, the
    fraction zeroed of the units that were not zero, the median scale of the survivors)."""
    alive = a > 1e-4
    zeroed, kept = alive & (b == 0), alive & (b != 0)
    scale = float((b[kept] / a[kept]).median()) if bool(kept.any()) else 0.0
    return int(zeroed.sum()), float(zeroed.sum() / alive.sum().clamp(min=1)), scale


def _judge_mlp_dropout_train(record: dict[str, Any], sizes: list[int], p: float, x: torch.Tensor) -> None:
    """In train mode: the input reaches the first layer untouched, the last layer's result is the output, and
    each hidden ReLU's output is dropped with probability p, survivors scaled by 1 / (1 - p)."""
    layers = _as_layers(record["dropout_layers"])
    train = record["dropout_train"]
    inputs = [_tensor(t, "a layer's input") for t in train["inputs"]]
    if len(inputs) != len(layers):
        fail("wrong-forward", observed=f"in one train-mode forward your {len(layers)} Linear layers ran "
             f"{len(inputs)} times", expected="each layer once", cause="a layer applied twice or skipped in forward",
             where="forward")
    if not _close(inputs[0], x):
        fail("dropout-misplaced", observed="in train mode the first Linear does not receive the input x itself",
             expected="dropout only after hidden ReLUs", cause="dropout (or another operation) applied to the input "
             "before the first layer", where="forward: the first layer takes x")
    if not _close(_tensor(train["out"], "the output"), F.linear(inputs[-1], *layers[-1])):
        fail("dropout-misplaced", observed="in train mode the output is not the last Linear's result",
             expected="raw scores from the last Linear, nothing applied after it",
             cause="dropout (or another operation active in train mode) applied after the last layer",
             where="forward: return the last layer's output as it is")
    for k in range(len(layers) - 1):
        a, b = torch.relu(F.linear(inputs[k], *layers[k])), inputs[k + 1]
        if a.shape != b.shape:
            raise ValueError("a layer's recorded input does not fit the previous layer")
        zeroed, fraction, scale = _dropout_rate(a, b)
        if zeroed == 0:
            fail("dropout-missing", observed=f"MLP({sizes}, dropout={p}) in train mode zeroed no unit after hidden "
                 f"layer {k + 1}", expected=f"about {p:.0%} of the units zeroed after every hidden ReLU",
                 cause="no dropout after this layer: the dropout argument is unused, or dropout follows only some "
                       "hidden layers", where="apply dropout after each hidden activation")
        alive = int((a > 1e-4).sum())
        tolerance = 5 * math.sqrt(p * (1 - p) / max(alive, 1)) + 0.02
        if abs(fraction - p) <= tolerance and math.isclose(scale, 1 / (1 - p), rel_tol=1e-3):
            continue
        if abs(fraction - p) > tolerance and abs(fraction - (1 - p)) <= tolerance:
            cause = ("1 - p passed as the probability: dropout's p is the probability of zeroing a unit, "
                     "not of keeping it")
        elif abs(fraction - p) > tolerance and abs(fraction - 0.5) <= tolerance:
            cause = "a probability fixed at 0.5 (nn.Dropout()'s default) instead of the dropout argument"
        elif abs(fraction - p) > tolerance:
            cause = "another probability than the dropout argument"
        elif math.isclose(scale, 1.0, rel_tol=1e-3):
            cause = "units zeroed without rescaling the survivors by 1 / (1 - p) (nn.Dropout and F.dropout rescale)"
        else:
            cause = "the survivors rescaled by another factor than 1 / (1 - p)"
        fail("wrong-dropout", observed=f"after hidden layer {k + 1}: {fraction:.0%} of the units zeroed, survivors "
             f"scaled by {scale:.3f}", expected=f"dropout={p}: about {p:.0%} zeroed, survivors scaled by "
             f"1 / (1 - p) = {1 / (1 - p):.3f}", cause=cause,
             where="nn.Dropout(dropout) in __init__, applied after each hidden ReLU")


@judges("02-mlp")
def judge_mlp(seen: dict, *, case: Case) -> str:
    """Every layer registered and trained, ReLU between layers, dropout of probability p only in train mode."""
    for (sizes, p), record in zip(_mlp_configurations(case), seen["configurations"], strict=True):
        expected_count = sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:], strict=True))
        registered, layers = record["registered"], _as_layers(record["layers"])
        if isinstance(registered, bool) or not isinstance(registered, int):
            raise ValueError("the registered count is not an int")
        if registered < expected_count and len(layers) < len(sizes) - 1:
            fail("unregistered-layers",
                 observed=f"model.parameters() holds {registered} numbers; MLP({sizes}) has {expected_count}",
                 expected="every layer's weight and bias registered, so the optimizer and state_dict see them",
                 cause="the layers are kept where nn.Module does not look: a plain Python list or dict, or layers "
                       "created inside forward",
                 where="store them in __init__, in nn.ModuleList (or nn.ModuleDict)")
        shapes = [(weight.shape[1], weight.shape[0]) for weight, _ in layers]
        biases = all(bias is not None for _, bias in layers)
        if shapes != list(zip(sizes[:-1], sizes[1:], strict=True)) or not biases or registered != expected_count:
            fail("wrong-layers", observed=f"Linear layers (in, out) {shapes}"
                 + ("" if biases else ", some without bias") + f" ({registered} parameters)",
                 expected=f"{list(zip(sizes[:-1], sizes[1:], strict=True))} with biases ({expected_count} parameters)",
                 cause="other sizes, a missing or extra layer, bias=False, or other parameters besides the layers",
                 where="the loop that builds the layers: one nn.Linear(a, b) per pair of zip(sizes[:-1], sizes[1:])")
        _no_exception(record, f"running MLP({sizes})")
        x = _mlp_input(case, sizes)
        _judge_mlp_forward(record, layers, x)
        _judge_mlp_dropout_eval(record, x)
        _judge_mlp_dropout_train(record, sizes, p, x)
        stepped = [_tensor(t, "a stepped weight") for t in record["stepped"]]
        if [t.shape for t in stepped] != [before.shape for before, _ in layers]:
            raise ValueError("the stepped weights are not the layers' shapes")
        got_gradient = record["got_gradient"]
        if not (isinstance(got_gradient, list) and len(got_gradient) == len(layers)):
            raise ValueError("the recorded gradients are not one per layer")
        frozen = [index for index, ((before, _), after) in enumerate(zip(layers, stepped, strict=True))
                  if torch.equal(before, after)]
        if frozen:
            fail("unregistered-layers", observed=f"an SGD step on model.parameters() left Linear layer(s) {frozen} "
                 "unchanged", expected="every layer updated",
                 cause="these layers received a gradient but are not in model.parameters() (kept outside a "
                       "registered container)" if all(got_gradient[i] is True for i in frozen) else
                       "these layers received no gradient: their parameters do not require grad, or forward cuts "
                       "them off (detach(), or everything after them zeroed)",
                 where="nn.ModuleList in __init__; nothing in forward that stops gradients")
    return "every layer registered and trained, ReLU between layers, dropout of probability p only in train mode"


# --------------------------------------------------------------------------------------- 02-count-trainable
class _CountModel(nn.Module):
    def __init__(self, width: int, frozen: bool) -> None:
        super().__init__()
        self.embed = nn.Linear(10, width)
        self.norm = nn.BatchNorm1d(width)
        self.body = nn.Linear(width, width)
        self.out = nn.Linear(width, 10, bias=False)
        self.tied = self.body  # the same layer reachable twice: its parameters must be counted once
        if frozen:
            self.embed.requires_grad_(False)


def _count_models(case: Case) -> list[tuple[str, nn.Module]]:
    """(description, model): a shared layer with BatchNorm buffers, the same with a frozen layer, a nested
    convolutional model whose head was frozen, a lone norm, and a module without parameters."""
    width, channels = (9, 6) if case.hidden else (12, 4)

    def build() -> list[tuple[str, nn.Module]]:
        frozen_head = nn.Sequential(nn.Sequential(nn.Conv2d(3, channels, 3), nn.BatchNorm2d(channels)),
                                    nn.Flatten(), nn.Linear(channels, 2))
        frozen_head[2].requires_grad_(False)
        return [
            ("a model with a layer reachable twice and BatchNorm buffers", _CountModel(width, frozen=False)),
            ("the same model with its first layer frozen", _CountModel(width, frozen=True)),
            ("nested Sequential(Sequential(Conv2d, BatchNorm2d), Flatten, Linear) with the Linear frozen", frozen_head),
            (f"Sequential(LayerNorm({width}))", nn.Sequential(nn.LayerNorm(width))),
            ("nn.ReLU(), which has no parameters", nn.ReLU()),
        ]

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(case.seeded(0))
        return build()


@register(
    "02-count-trainable",
    hints=Hints(
        nudge="Count numbers (numel), not tensors, and only the parameters that require grad.",
        concept="model.parameters() lists each parameter once (a shared layer too) and leaves buffers such as "
                "BatchNorm's running statistics out, unlike state_dict(); p.numel() is the number of scalars in "
                "a tensor, and p.requires_grad says whether it trains.",
        solution="return sum(p.numel() for p in model.parameters() if p.requires_grad)",
        section="3. Counting parameters"),
    requires={
        "not-an-int": Requirement(
            "returns a Python int",
            hint="What type does your function return? type(count_trainable(nn.Linear(2, 2))) should be int."),
        "counts-tensors": Requirement(
            "counts scalars, not tensors",
            hint="nn.Linear(10, 12) has 2 parameter tensors but 132 numbers. What gives a tensor's number of "
                 "elements?"),
        "counts-shared-twice": Requirement(
            "a shared parameter counted once",
            hint="A layer assigned to two attributes is one layer. Which iteration over parameters lists it once?"),
        "counts-buffers": Requirement(
            "buffers (BatchNorm's running statistics) excluded",
            hint="Compare list(nn.BatchNorm1d(3).state_dict()) with the names in its named_parameters()."),
        "counts-frozen": Requirement(
            "frozen parameters (requires_grad False) excluded",
            hint="Only parameters that train count. Which attribute of a parameter tells?"),
        "wrong-count": Requirement(
            "the number of trainable scalars, nested modules included",
            hint="Try your function on nn.Sequential(nn.Sequential(nn.Linear(2, 3)), nn.Linear(3, 1)): it should "
                 "give 13. Does it reach nested layers and every kind of parameter?"),
    },
)
def probe_count_trainable(count_trainable: Callable[[nn.Module], int], *, case: Case) -> dict:
    """Count each of the case's models with the student's function."""
    with torch.random.fork_rng(devices=[]):
        return {"counts": [count_trainable(model) for _, model in _count_models(case)]}


def _count_slips(model: nn.Module) -> list[tuple[int, str, str, str]]:
    """What the usual slips give on `model`: (count, failure code, cause, where to look)."""
    return [
        (sum(1 for p in model.parameters() if p.requires_grad), "counts-tensors",
         "the number of parameter tensors, not of numbers", "sum p.numel()"),
        (sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False) if p.requires_grad),
         "counts-shared-twice", "a layer reachable twice is counted twice",
         "iterate model.parameters(), which lists each parameter once"),
        (sum(t.numel() for t in model.state_dict().values()), "counts-buffers",
         "state_dict() also holds buffers (BatchNorm's running statistics), which are not trained",
         "iterate model.parameters(), not state_dict()"),
        (sum(p.numel() for p in model.parameters()), "counts-frozen",
         "frozen parameters (requires_grad=False) are counted", "keep only parameters with p.requires_grad"),
    ]


@judges("02-count-trainable")
def judge_count_trainable(seen: dict, *, case: Case) -> str:
    """`count_trainable(model)` is the number of trainable scalars: buffers, frozen and shared parameters handled."""
    for (description, model), result in zip(_count_models(case), seen["counts"], strict=True):
        if isinstance(result, (torch.Tensor, Opaque)) or not isinstance(result, int) or isinstance(result, bool):
            kind = type_name(result)
            causes = {"Tensor": "a torch reduction (torch.tensor(...).sum(), torch.stack(...).sum()) returns a tensor",
                      "float": "a float: a division (/) or a float term in the sum",
                      "int64": "numpy's sum or prod returns a numpy integer, not a Python int"}
            fail("not-an-int", observed=f"returned {kind} for {description}", expected="a Python int",
                 cause=causes.get(kind, f"the result is {kind}, not int"),
                 where="sum the Python ints p.numel(), or convert the result with int(...)")
        expected = sum(p.numel() for p in model.parameters() if p.requires_grad)
        if result == expected:
            continue
        slips = [slip for slip in _count_slips(model) if slip[0] == result]
        if slips:
            fail(slips[0][1], observed=f"{result} for {description}", expected=f"{expected} trainable numbers",
                 cause=" or ".join(cause for _, _, cause, _ in slips), where="; ".join(w for *_, w in slips))
        fail("wrong-count", observed=f"{result} for {description}", expected=f"{expected} trainable numbers",
             cause="none of the usual slips (tensors counted, a shared layer twice, buffers, frozen parameters) "
                   "gives this number: some parameters are missed (in nested modules, or of some layer types) or "
                   "counted in another way",
             where="sum(p.numel() for p in model.parameters() if p.requires_grad) walks every nested module")
    return "counts trainable scalars: nested modules, buffers, frozen and shared parameters handled"


# ------------------------------------------------------------------------------------ 02-running-standardizer
def _standardizer_setting(case: Case) -> tuple[int, float, int, float]:
    """(features, momentum, training batches, eps): neither momentum nor eps at its default."""
    return (7, 0.3, 3, 1e-3) if case.hidden else (5, 0.2, 2, 1e-2)


def _training_batch(case: Case, step: int, features: int) -> torch.Tensor:
    """A batch of 600 rows around 3: feature 1 with a small variance (where eps matters), the last one constant."""
    scale = torch.ones(features)
    scale[1], scale[-1] = 0.05, 0.0
    return _randn(600, features, seed=case.seeded(step + (10 if case.hidden else 0))) * (step + 2) * scale + 3


def _eval_batch(case: Case, features: int) -> torch.Tensor:
    return _randn(5, features, seed=case.seeded(99)) * 4


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
    features, momentum, _, eps = _standardizer_setting(case)
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
    features, momentum, batches, eps = _standardizer_setting(case)
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
    fresh = _build(standardizer_class, features, momentum=momentum, eps=eps)
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
    mean, var = (_tensor(t, "an initial statistic") for t in seen["initial"])
    if not (torch.equal(mean, torch.zeros(features)) and torch.equal(var, torch.ones(features))):
        fail("wrong-initial-values", observed=f"running_mean {mean.tolist()}, running_var {var.tolist()}",
             expected="zeros and ones", cause="other initial values (or shapes) in __init__",
             where="register_buffer in __init__: torch.zeros(num_features) and torch.ones(num_features)")


def _judge_training_output(out: torch.Tensor, x: torch.Tensor, eps: float, step: int) -> None:
    """Train-mode outputs normalise with the batch's statistics and eps; fail naming the formula they fit."""
    mean, var = x.mean(0), x.var(0, unbiased=False)
    if _close(out, (x - mean) / torch.sqrt(var + eps), 2e-3):
        return
    eps_causes = [
        (not bool(torch.isfinite(out).all()), "no eps: the constant feature has variance 0, and 0 / 0 is nan"),
        (_close(out, (x - mean) / (torch.sqrt(var) + eps), 2e-3),
         "eps added to the standard deviation, sqrt(var) + eps, instead of to the variance"),
        (_close(out, (x - mean) / torch.sqrt(var + 1e-5), 2e-3),
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
    features, momentum, batches, eps = _standardizer_setting(case)
    for step, record in zip(range(batches), seen["steps"], strict=True):
        x = _training_batch(case, step, features)
        reference(x)
        running_mean, running_var = record["running_mean"], _tensor(record["running_var"], "running_var")
        if _tensor(running_mean, "running_mean") is not None and running_mean.requires_grad:
            fail("tracks-gradient", observed="running_mean requires grad after a training forward",
                 expected="buffers outside autograd", cause="the update was recorded by autograd; the graph of every "
                 "batch would then stay alive through the buffer", where="update the buffers under torch.no_grad()")
        running_mean = running_mean.detach()
        if not (_close(running_mean, reference.running_mean, 2e-3)
                and _close(running_var, reference.running_var, 2e-3)):
            # From the zero initial mean, one batch gives m * batch mean: m tells which momentum was used.
            first = step == 0
            if first and _close(running_mean, (1 - momentum) * x.mean(0), 2e-3):
                cause = "momentum and 1 - momentum are swapped"
            elif first and _close(running_mean, 0.1 * x.mean(0), 2e-3):
                cause = "momentum fixed at 0.1 (BatchNorm's default) instead of the momentum argument"
            else:
                cause = "the update rule: running = (1 - momentum) * running + momentum * batch_statistic, for both"
            fail("wrong-update", observed=f"after {step + 1} batch(es) with momentum={momentum}, running_mean = "
                 f"{[round(v, 4) for v in running_mean.tolist()]}, running_var = "
                 f"{[round(v, 4) for v in running_var.tolist()]}",
                 expected=f"{[round(v, 4) for v in reference.running_mean.tolist()]} and "
                 f"{[round(v, 4) for v in reference.running_var.tolist()]}", cause=cause,
                 where="the buffer update in forward (train mode)")
        _judge_training_output(_tensor(record["out"], "an output"), x, eps, step)


@judges("02-running-standardizer")
def judge_running_standardizer(seen: dict, *, case: Case) -> str:
    """Buffers in state_dict and moved by .to(), updated only in train mode, outside autograd; BatchNorm's numbers."""
    features, momentum, _, eps = _standardizer_setting(case)
    _judge_standardizer_structure(seen, features)
    _no_exception(seen, "running the module")
    reference = nn.BatchNorm1d(features, momentum=momentum, eps=eps, affine=False)
    with torch.no_grad():
        _judge_standardizer_training(seen, case, reference.train())
        x = _eval_batch(case, features)
        before, after = (_tensor(seen["eval"][key], "running_mean") for key in ("before", "after"))
        if not torch.equal(after, before):
            fail("updates-in-eval", observed="running_mean changed during an eval-mode forward",
                 expected="the statistics frozen in eval mode", cause="the update does not depend on self.training",
                 where="update the buffers only when self.training is True")
        out = _tensor(seen["eval"]["out"], "the eval output")
        if not _close(out, reference.eval()(x), 2e-3):
            batch_stats = _close(out, (x - x.mean(0)) / torch.sqrt(x.var(0, unbiased=False) + eps), 2e-3)
            fail("batch-stats-in-eval" if batch_stats else "wrong-output",
                 observed="eval-mode outputs "
                 + ("use the batch's statistics" if batch_stats else "differ from (x - running_mean) / "
                    "sqrt(running_var + eps)"),
                 expected="(x - running_mean) / sqrt(running_var + eps) in eval mode",
                 cause="the branch on self.training" if batch_stats else "another formula in eval mode",
                 where="forward, eval branch")
    if not torch.equal(_tensor(seen["reloaded"], "the reloaded output"), out):
        fail("state-dict-round-trip", observed="a fresh module loaded with the state_dict gives other outputs",
             expected="identical outputs", cause="forward uses state that state_dict does not hold (a plain "
             "attribute set during training, for example)", where="keep every statistic in a registered buffer")
    doubled = seen["doubled"]
    buffer_dtype = _tensor(doubled["running_mean"], "running_mean").dtype
    out_dtype = _tensor(doubled["out"], "the output").dtype
    if buffer_dtype != torch.float64 or out_dtype != torch.float64:
        fail("does-not-move", observed=f"after .double(): running_mean is {buffer_dtype}, the output {out_dtype}",
             expected="both float64: buffers follow .to()/.double()",
             cause="a dtype fixed in forward (.float(), a tensor created with dtype=torch.float32), or statistics "
                   "kept outside registered buffers, which .double() does not convert",
             where="create new tensors like existing ones (torch.zeros_like, x.new_zeros); no fixed dtype")
    return "buffers in state_dict and moved by .to(), updated only in train mode, outside autograd"


# ------------------------------------------------------------------------------------------ 02-freeze-backbone
class _BackboneModel(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(6, width), nn.BatchNorm1d(width), nn.ReLU(),
                                      nn.Sequential(nn.Linear(width, width), nn.ReLU()), nn.Linear(width, width))
        self.head = nn.Linear(width, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.backbone(x)))


def _backbone_settings(case: Case) -> list[tuple[int, int, bool]]:
    """(seed, width, head frozen before the student's function runs): both kinds of head, visible and hidden."""
    settings = [(0, 8, False), (3, 5, True)] if not case.hidden else [(1, 16, False), (2, 4, True)]
    return [(case.seeded(seed), width, frozen) for seed, width, frozen in settings]


@register(
    "02-freeze-backbone", unjudged=('models/*/after/head.*',),
    hints=Hints(
        nudge="Freezing is a flag on each parameter, requires_grad. Set it on every backbone parameter, and set it "
              "the other way on every head parameter.",
        concept="module.requires_grad_(flag) (with the trailing underscore: a method) sets requires_grad on every "
                "parameter of the module, nested ones included; `module.requires_grad = False` only sets an unused "
                "attribute, and eval() changes the mode, not the flags.",
        solution="model.backbone.requires_grad_(False); model.head.requires_grad_(True)",
        section="5. Freezing part of a model"),
    requires={
        "backbone-trainable": Requirement(
            "every parameter of the backbone (nested ones included) is frozen",
            hint="Print [n for n, p in model.named_parameters() if p.requires_grad] after your function: which "
                 "backbone parameters are still there, and did your code change their flag at all?"),
        "head-frozen": Requirement(
            "every parameter of the head is trainable, even if it was frozen before",
            hint="Freeze the head by hand first (model.head.requires_grad_(False)), then run your function: is the "
                 "head trainable afterwards?"),
    },
)
@_isolated_rng
def probe_freeze_backbone(freeze_backbone: Callable[[nn.Module], Any], *, case: Case) -> dict:
    """Freeze each model with the student's function; record the flags, which modules got a plain `requires_grad`
    attribute and which are in eval mode (to name the slip), then the gradients and the parameters after one SGD
    step on the parameters that require grad."""
    records = []
    for seed, width, head_frozen_before in _backbone_settings(case):
        model = _seeded(seed, functools.partial(_BackboneModel, width))
        if head_frozen_before:
            model.head.requires_grad_(False)
        freeze_backbone(model)
        record: dict[str, Any] = {
            "requires_grad": {n: p.requires_grad for n, p in model.named_parameters()},
            "attribute_set": [n or "model" for n, m in model.named_modules() if "requires_grad" in vars(m)],
            "eval_mode": [n or "model" for n, m in model.named_modules() if not m.training],
        }
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


def _strings(value: Any, what: str) -> list[str]:
    if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise ValueError(f"{what} is not a list of names")
    return value


def _backbone_cause(trainable: list[str], names: list[str], record: dict[str, Any]) -> str:
    """What the recorded state says about why `trainable` backbone parameters still require grad."""
    attribute = [m for m in _strings(record["attribute_set"], "the modules with an attribute")
                 if m == "backbone" or m.startswith("backbone.")]
    in_eval = "backbone" in _strings(record["eval_mode"], "the modules in eval mode")
    if attribute:
        return (f"`requires_grad = False` set on the module {attribute[0]} itself: a plain attribute (no underscore, "
                "no call), which changes no parameter")
    if len(trainable) < sum(n.startswith("backbone.") for n in names):
        return "only some of the backbone's parameters were frozen: your loop or test missed the ones listed"
    if in_eval:
        return "the backbone was put in eval mode: eval() switches dropout and batch norm, it does not freeze"
    return "no flag of the backbone's parameters changed: the function set them on copies (detach(), clone()), " \
           "used torch.no_grad() (which changes no parameter), or never reached them"


@judges("02-freeze-backbone")
def judge_freeze_backbone(seen: dict, *, case: Case) -> str:
    """Backbone frozen (no gradients, unchanged by a step), head trainable, also when it came in frozen."""
    for (seed, width, head_frozen_before), record in zip(_backbone_settings(case), seen["models"], strict=True):
        model = _seeded(seed, functools.partial(_BackboneModel, width))
        flags, names = record["requires_grad"], [n for n, _ in model.named_parameters()]
        if not (isinstance(flags, dict) and list(flags) == names):
            raise ValueError("the recorded parameters are not the model's")
        trainable_backbone = [n for n in names if n.startswith("backbone.") and flags[n] is not False]
        if trainable_backbone:
            fail("backbone-trainable", observed=f"backbone parameters still require grad: {trainable_backbone}",
                 expected="requires_grad False on every backbone parameter, nested ones included",
                 cause=_backbone_cause(trainable_backbone, names, record),
                 where="model.backbone.requires_grad_(False), or p.requires_grad_(False) for each of "
                       "model.backbone.parameters()")
        frozen_head = [n for n in names if n.startswith("head.") and flags[n] is not True]
        if frozen_head:
            fail("head-frozen", observed=f"head parameters do not require grad: {frozen_head}"
                 + (" (the head came in frozen)" if head_frozen_before else ""),
                 expected="every head parameter trainable after your function, whatever its flag before",
                 cause="the head came in frozen and your function did not set its flag back to True"
                 if head_frozen_before else "your function froze them too: the whole model, or a test meant to pick "
                 "the backbone's parameters that also picks these",
                 where="model.head.requires_grad_(True)")
        _no_exception(record, "taking an SGD step on the parameters that require grad")
        after = record["after"]
        if not (isinstance(after, dict) and list(after) == names):
            raise ValueError("the recorded parameters are not the model's")
        if any(grad is not None for grad in record["backbone_grads"]):
            fail("backbone-trainable", observed="backward() still computed backbone gradients although their "
                 "requires_grad is False", expected="no gradients for frozen parameters",
                 cause="gradients put on the backbone's parameters by your function (p.grad set by hand, or a "
                       "backward run before freezing)", where="freeze before any backward; do not set .grad")
        before = dict(model.named_parameters())
        unchanged = [torch.equal(before[n].detach(), _tensor(after[n], n)) for n in names]
        changed = [n for n, same in zip(names, unchanged, strict=True) if n.startswith("backbone.") and not same]
        if changed:
            fail("backbone-trainable", observed=f"your function changed backbone parameters {changed}",
                 expected="freezing leaves the values as they are", cause="the function wrote to the parameters "
                 "(an initialisation or an in-place operation) instead of only setting their flags",
                 where="only requires_grad_(False)")
        if all(same for n, same in zip(names, unchanged, strict=True) if n.startswith("head.")):
            fail("head-frozen", observed="an optimizer step left the head unchanged", expected="the head trains",
                 cause="the head's parameters require grad but received no gradient: the model's forward no longer "
                       "reaches them after your function", where="only set flags: model.head.requires_grad_(True)")
    return "backbone frozen (nested layers included), head trainable even when it came in frozen"


# ---------------------------------------------------------------------------------------------- 02-init-weights
# Elements of each weight the probe sends (the first ones, row by row): enough to measure std and mean to
# well under 1%, and a few hundred kB in all where the visible model's weights would take several MB.
_WEIGHT_SAMPLE = 32768


def _init_model(case: Case) -> nn.Module:
    """Linear layers nested in a ModuleDict, a ModuleList and Sequentials, one without bias, one a direct child,
    with a BatchNorm and a LayerNorm that must stay untouched."""

    def build() -> nn.Module:
        if not case.hidden:
            return nn.ModuleDict({
                "blocks": nn.ModuleList([nn.Sequential(nn.Linear(256, 1024), nn.ReLU()),
                                         nn.Sequential(nn.Linear(1024, 512, bias=False), nn.BatchNorm1d(512))]),
                "out": nn.Linear(512, 10), "norm": nn.LayerNorm(10)})
        return nn.ModuleDict({
            "blocks": nn.ModuleList([nn.Sequential(nn.Linear(100, 800), nn.LayerNorm(800)),
                                     nn.Linear(800, 300, bias=False), nn.BatchNorm1d(300)]),
            "out": nn.Linear(300, 40)})

    return _seeded(case.seeded(1 if case.hidden else 0), build)


def _norm_parameters(model: nn.Module) -> dict[str, torch.Tensor]:
    """The parameters of the model's normalisation layers (LayerNorm, BatchNorm), by name."""
    norms = [m for m in model.modules() if isinstance(m, (nn.LayerNorm, nn.modules.batchnorm._BatchNorm))]
    return {n: p for n, p in model.named_parameters() if any(p is q for m in norms for q in m.parameters())}


@register(
    "02-init-weights",
    hints=Hints(
        nudge="Visit every nn.Linear, however deeply nested, and initialise its weight and bias in place; leave "
              "every other layer alone.",
        concept="model.modules() walks the whole tree (model.children() only the first level); Kaiming (He) "
                "initialisation for ReLU draws weights with std sqrt(2 / fan_in), and nn.init's functions ending in "
                "_ work in place on the existing parameter.",
        solution="for m in model.modules(): if isinstance(m, nn.Linear): nn.init.kaiming_normal_(m.weight, "
                 "nonlinearity='relu'); if m.bias is not None: nn.init.zeros_(m.bias)",
        section="6. Initialisation"),
    requires={
        "not-in-place": Requirement(
            "works in place: the layers keep their parameter objects (an optimizer built before still sees them)",
            hint="Compare id(layer.weight) before and after your function. Is it the same tensor, filled anew, or a "
                 "new one assigned?"),
        "not-initialised": Requirement(
            "re-initialises the model's own Linear layers",
            hint="Print a Linear weight's std before and after your function: did it change at all?"),
        "missed-nested-layers": Requirement(
            "every nn.Linear, however deeply nested (ModuleDict, ModuleList, Sequential)",
            hint="Which of your model's Linear layers kept their weights? How does your loop reach layers inside "
                 "containers inside containers?"),
        "wrong-std": Requirement(
            "weights drawn with std sqrt(2 / in_features) (Kaiming normal, fan_in, ReLU)",
            hint="Measure your weights' std for an nn.Linear(256, 1024): it should be sqrt(2 / 256) = 0.088. Which "
                 "fan and which gain give that?"),
        "wrong-mean": Requirement(
            "weights centred on 0",
            hint="Print your weights' mean: should an initialisation for ReLU networks favour positive weights?"),
        "bias-not-zero": Requirement(
            "biases set to zero (where a layer has one)",
            hint="Print a Linear's bias after your function: is it all zeros?"),
        "norm-changed": Requirement(
            "every other layer (LayerNorm, BatchNorm) left untouched",
            hint="Print a LayerNorm's weight after your function: it should still be all ones. Which parameters "
                 "does your loop touch?"),
    },
)
@_isolated_rng
def probe_init_weights(init_weights_: Callable[[nn.Module], Any], *, case: Case) -> dict:
    """Initialise the case's model with the student's function; record which layers' parameters were replaced by
    new objects, (a sample of) every Linear's weight, the biases and the norm parameters afterwards."""
    model = _init_model(case)
    originals = [(m, m.weight, m.bias) for m in _linears(model)]
    torch.manual_seed(case.seeded(123))
    init_weights_(model)
    current = _linears(model)
    replaced = [index for index, (m, weight, bias) in enumerate(originals)
                if index >= len(current) or current[index] is not m or m.weight is not weight or m.bias is not bias]
    return {"replaced": replaced,
            "linears": [{"weight": _snapshot(m.weight.flatten()[:_WEIGHT_SAMPLE]), "bias": _snapshot(m.bias)}
                        for m, _, _ in originals],
            "norms": {n: _snapshot(p) for n, p in _norm_parameters(model).items()}}


def _judge_init_reached(model: nn.Module, seen: dict, weights: list[torch.Tensor]) -> None:
    """Every Linear re-initialised, in place."""
    linears = _linears(model)
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    replaced = seen["replaced"]
    if not (isinstance(replaced, list) and all(isinstance(i, int) for i in replaced)):
        raise ValueError("the replaced layers are not a list of indices")
    if replaced:
        fail("not-in-place", observed=f"the Linear layer(s) {[names[i] for i in replaced if i < len(names)]} hold "
             "new parameter objects (or are new layers) after your function",
             expected="the same parameters, filled in place", cause="a new nn.Parameter (or a new layer) assigned "
             "instead of filling the existing one: an optimizer built before would keep training the old tensors",
             where="nn.init.kaiming_normal_(m.weight, ...) and nn.init.zeros_(m.bias) fill them in place")
    unchanged = [index for index, (m, w) in enumerate(zip(linears, weights, strict=True))
                 if torch.equal(m.weight.detach().flatten()[:_WEIGHT_SAMPLE], w)]
    if len(unchanged) == len(linears):
        fail("not-initialised", observed="no Linear weight changed", expected="every Linear re-initialised",
             cause="the function never reached the layers: it initialised copies (detach(), clone(), deepcopy), "
                   "or its loop found no nn.Linear",
             where="loop over model.modules() and initialise in place (nn.init.*_ functions)")
    if unchanged:
        missed = [names[i] for i in unchanged]
        nested_only = set(missed) == {name for name in names if "." in name}
        fail("missed-nested-layers", observed=f"Linear layer(s) {missed} kept their weights",
             expected="every Linear, however deeply nested, re-initialised",
             cause="only the top level was visited (model.children(), or a loop over the direct attributes): "
                   "layers inside containers were missed" if nested_only else
                   "the loop's test skipped these layers (a test that only some Linear layers pass)",
             where="for m in model.modules(): if isinstance(m, nn.Linear): ...")


@judges("02-init-weights")
def judge_init_weights(seen: dict, *, case: Case) -> str:
    """Every Linear Kaiming-initialised in place (std sqrt(2/fan_in), mean 0), biases zero, norms untouched."""
    model = _init_model(case)
    linears = _linears(model)
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    records = seen["linears"]
    if not isinstance(records, list) or len(records) != len(linears):
        raise ValueError("the recorded layers are not the model's")
    weights = [_tensor(r["weight"], "a weight") for r in records]
    _judge_init_reached(model, seen, weights)
    for name, m, weight, record in zip(names, linears, weights, records, strict=True):
        fan_in, fan_out = m.in_features, m.out_features
        if weight.shape != (min(m.weight.numel(), _WEIGHT_SAMPLE),):
            raise ValueError(f"the sample of {name}'s weight has shape {tuple(weight.shape)}")
        std, mean = float(weight.std()), float(weight.mean())
        target = math.sqrt(2 / fan_in)
        if abs(std - target) > 0.05 * target:
            fan_out_std = math.sqrt(2 / fan_out)
            is_fan_out = abs(std - fan_out_std) < 0.05 * fan_out_std
            fail("wrong-std", observed=f"Linear {name} ({fan_in} -> {fan_out}): weight std {std:.4f}"
                 + (" = sqrt(2 / fan_out)" if is_fan_out else ""),
                 expected=f"sqrt(2 / fan_in) = {target:.4f} (Kaiming for ReLU, which keeps activation variance "
                 "across layers)",
                 cause="mode='fan_out': the std follows the output size" if is_fan_out else
                 "another initialiser (PyTorch's default, Xavier, kaiming_uniform_ with its default a), another "
                 "gain (nonlinearity), or another fan",
                 where="nn.init.kaiming_normal_(w, mode='fan_in', nonlinearity='relu')")
        if abs(mean) > 0.1 * target:
            fail("wrong-mean", observed=f"Linear {name}: weight mean {mean:.4f}", expected="mean 0",
                 cause="a distribution shifted away from 0 (a mean argument, or an offset added)",
                 where="the initialiser")
        if m.bias is not None:
            bias = _tensor(record["bias"], "a bias")
            if not torch.equal(bias, torch.zeros_like(m.bias)):
                untouched = torch.equal(bias, m.bias.detach())
                fail("bias-not-zero", observed=f"Linear {name}: bias has values up to {float(bias.abs().max()):.3g}",
                     expected="zeros", cause="the bias was left at its default (uniform) init" if untouched else
                     "the bias was set to other values than zero", where="nn.init.zeros_(m.bias)")
    norms = seen["norms"]
    for name, value in _norm_parameters(model).items():
        if not torch.equal(_tensor(norms[name], name), value.detach()):
            owner = type(model.get_submodule(name.rpartition(".")[0])).__name__
            fail("norm-changed", observed=f"{owner} parameter {name} changed",
                 expected="normalisation weights stay 1 and biases 0",
                 cause="parameters initialised without checking their layer's type (a norm weight set to 0 zeroes "
                       "the layer's output)", where="select nn.Linear modules with isinstance")
    return "every Linear Kaiming-initialised in place (std sqrt(2/fan_in), mean 0), biases zero, norms untouched"


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
    """(freeze the embedding, lr, weight_decay, backbone_lr): the visible model has a frozen parameter too."""
    return [(True, 1e-3, 0.1, 1e-4)] if not case.hidden else [(True, 3e-3, 0.05, 3e-5), (False, 0.1, 0.2, 0.01)]


def _group_model(case: Case, freeze_first: bool) -> nn.Module:
    return _seeded(case.seeded(0), functools.partial(_GroupModel, freeze_first))


# The optimizer's defaults in the probe: a group that leaves an option out gets these, visibly wrong.
_DEFAULT_LR, _DEFAULT_WEIGHT_DECAY = 12345.0, 0.777


@register(
    "02-param-groups",
    hints=Hints(
        nudge="Ask two questions of each trainable parameter: is it in the backbone (backbone_lr)? Is it a matrix "
              "(ndim >= 2: weight decay) or a bias or norm weight (ndim < 2: none)? Each answer pair is one group.",
        concept="An optimizer takes a list of groups, dicts with 'params' and their own options; a parameter may be "
                "in one group only, and options a group leaves out take the optimizer's defaults. "
                "model.named_parameters() gives each parameter with its name, p.requires_grad and p.ndim the rest.",
        solution="for name, p in model.named_parameters(): skip if not p.requires_grad; key = "
                 "(name.startswith('backbone.'), p.ndim >= 2); append p to that key's list; return "
                 "[{'params': ps, 'lr': backbone_lr if backbone else lr, 'weight_decay': weight_decay if decay else "
                 "0.0} for (backbone, decay), ps in lists.items()]",
        section="7. Parameter groups"),
    requires={
        "frozen-params-included": Requirement(
            "frozen parameters appear in no group",
            hint="The model you get may have frozen parameters. Which attribute tells, and does your function look "
                 "at it?"),
        "missing-params": Requirement(
            "every trainable parameter appears in a group (the parameters themselves, not copies)",
            hint="Count the parameters in your groups and compare with the trainable ones: which kind does no "
                 "branch take, and are they the model's own tensors?"),
        "duplicate-params": Requirement(
            "each parameter appears exactly once",
            hint="Can one parameter pass two of your selections? Each parameter needs one test that picks one group."),
        "decay-on-bias-or-norm": Requirement(
            "parameters with ndim < 2 (biases, norm weights) get weight_decay 0.0",
            hint="Print p.ndim for a bias and for a LayerNorm weight. Which group do they land in?"),
        "no-decay-on-weights": Requirement(
            "parameters with ndim >= 2 get weight_decay, set explicitly in their group",
            hint="An Embedding's weight is a matrix too. Does every group with matrices set 'weight_decay'?"),
        "wrong-lr": Requirement(
            "backbone parameters get backbone_lr, all others lr, set in every group",
            hint="Print each group's lr with the names of its parameters: which get backbone_lr, and does every "
                 "group set 'lr'?"),
    },
)
@_isolated_rng
def probe_param_groups(make_param_groups: Callable[..., list[dict[str, Any]]], *, case: Case) -> dict:
    """Build an AdamW from the student's groups (with defaults that a forgotten option makes visible); record
    its groups by parameter name."""
    described = []
    for freeze_first, lr, weight_decay, backbone_lr in _group_settings(case):
        model = _group_model(case, freeze_first)
        groups = make_param_groups(model, lr=lr, weight_decay=weight_decay, backbone_lr=backbone_lr)
        try:
            optimizer = torch.optim.AdamW(groups, lr=_DEFAULT_LR, weight_decay=_DEFAULT_WEIGHT_DECAY)
        except ValueError as error:
            if "more than one" not in str(error):
                raise
            fail("duplicate-params", observed=f"torch.optim.AdamW(groups) raised: {error}",
                 expected="each parameter in exactly one group",
                 cause="overlapping selections: a parameter passes the tests of two groups (for example a group of "
                       "all parameters plus a group of biases)",
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
            check_weight_decay(model, name, group, weight_decay, default=_DEFAULT_WEIGHT_DECAY,
                               default_is="the optimizer's default in this check")
            in_backbone = name.startswith("backbone.")
            wanted_lr = backbone_lr if in_backbone else lr
            got = group_lr(group, name)
            if not math.isclose(got, wanted_lr):
                swapped = math.isclose(got, lr if in_backbone else backbone_lr)
                fail("wrong-lr", observed=f"{name} has lr {got}", expected=f"{wanted_lr} "
                     f"({'backbone_lr: a backbone parameter' if in_backbone else 'lr: a head parameter'})",
                     cause=f"its group sets no lr, so it takes the optimizer's default ({_DEFAULT_LR} in this check)"
                     if math.isclose(got, _DEFAULT_LR) else "lr and backbone_lr swapped, or the test that tells a "
                     "backbone parameter (name.startswith('backbone.')) picks the wrong ones" if swapped
                     else "another learning rate than lr or backbone_lr",
                     where="set 'lr' in every group: backbone_lr for names starting with 'backbone.', lr otherwise")
    return "every trainable parameter in exactly one group, decay only on matrices, backbone at its own lr"
