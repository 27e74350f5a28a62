"""Checks of lesson 12, debugging a training run: the loss at initialisation, gradient norms per layer, the first
non-finite module, and an LR range test.

Each probe builds the case's seeded models and inputs, calls the student's function with instrumentation
(forward pre-hooks for the mode and grad mode, a step pre-hook for the gradients and learning rates the
optimizer sees, the hooks left on the model afterwards) and returns data. Each judge rebuilds the same models
and inputs, recomputes what the result must be (the cross-entropy, the gradient norms, the first non-finite
module through its own hooks, every step of the sweep at the parameters it started from) and compares.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from harness.contract.case import Case
from harness.contract.compare import judged, matching_tensors, type_name
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.instruments import ForwardRecorder, StepRecorder, collect, snapshot
from harness.contract.registry import judges, register
from harness.contract.wire import WireError

Batch = tuple[torch.Tensor, torch.Tensor]


def _close(a: float, b: float, rtol: float = 1e-4) -> bool:
    return math.isclose(a, b, rel_tol=rtol, abs_tol=1e-6) or (math.isnan(a) and math.isnan(b)) or a == b


def _scalar(value: Any) -> float | None:
    """A returned number as a float (a Python number or a one-element tensor); None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.is_floating_point():
        return float(value.detach())
    return None


# --------------------------------------------------------------------------------------------------
# 12-init-loss
# --------------------------------------------------------------------------------------------------
def _classifier(seed: int, features: int, classes: int, hidden: int = 32) -> nn.Module:
    """A small MLP classifier with dropout (so the mode matters), default PyTorch init, seeded."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Dropout(0.5), nn.Linear(hidden, classes))


def _init_cases(case: Case) -> list[dict[str, Any]]:
    """(seed, features, classes, batch size, the mode the model is in before the call) of each call."""
    shapes = [(20, 7, 48, True), (12, 100, 256, False), (5, 2, 9, True)] if case.hidden else \
        [(16, 10, 64, True), (8, 4, 32, False)]
    return [{"seed": case.seeded(120 + i), "features": f, "classes": c, "batch": b, "training": t}
            for i, (f, c, b, t) in enumerate(shapes)]


def _init_inputs(item: dict[str, Any]) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    model = _classifier(item["seed"], item["features"], item["classes"]).train(item["training"])
    generator = torch.Generator().manual_seed(item["seed"] + 1)
    inputs = torch.randn(item["batch"], item["features"], generator=generator)
    targets = torch.randint(0, item["classes"], (item["batch"],), generator=generator)
    return model, inputs, targets


@register(
    "12-init-loss",
    hints=Hints(
        nudge="At initialisation the logits are small, so the softmax is close to uniform: every class gets about "
        "1/C, and the cross-entropy of any target is -ln(1/C).",
        concept="Measure the loss as the model would be evaluated (model.eval(), no dropout) and without building a "
        "graph (torch.no_grad()), then put the model back in the mode it was in; compare with ln(C).",
        solution="was_training = model.training; model.eval()\nwith torch.no_grad(): loss = "
        "F.cross_entropy(model(inputs), targets)\nmodel.train(was_training); return loss, math.log(num_classes)",
        section="1. Sanity checks before training",
    ),
    requires={
        "wrong-expected": Requirement(
            "returns the expected loss ln(num_classes) as the second value",
            hint="Which logarithm does cross-entropy use? Compute -log(1/C) for C = 10 with math.log and compare."),
        "wrong-loss": Requirement(
            "returns the mean cross-entropy of the model's logits against the targets as the first value",
            hint="F.cross_entropy takes raw logits and averages over the batch: does anything of yours change "
            "the logits first, or sum instead of averaging?"),
        "train-mode": Requirement(
            "measures the loss in eval mode (dropout off)",
            hint="The model has dropout: which mode is it in while your forward runs?"),
        "graph-built": Requirement(
            "runs the forward pass without building an autograd graph",
            hint="Does your forward pass record a graph? Which context manager turns that off?"),
        "mode-not-restored": Requirement(
            "leaves the model in the mode it was in before the call (training or eval)",
            hint="Call your function on a model in train mode, then print model.training: was it put back?"),
    },
)
def probe_init_loss(loss_at_init: Callable[..., Any], *, case: Case) -> dict:
    """Call `loss_at_init` on each case's fresh model; record what it returned, the forward's modes, the mode after."""
    def record(item: dict[str, Any]) -> dict:
        model, inputs, targets = _init_inputs(item)
        with ForwardRecorder(model) as forwards:
            got = loss_at_init(model, inputs, targets, item["classes"])
        got = tuple(got) if isinstance(got, (tuple, list)) else got
        return {"returned": got, "training_after": model.training,
                "forwards": [(r.training, r.grad_enabled) for r in forwards.records]}

    return {"calls": collect(_init_cases(case), record)}


@judges("12-init-loss")
def judge_init_loss(seen: dict, *, case: Case) -> str:
    """(mean cross-entropy in eval mode without a graph, ln C); the model's mode left as it was."""
    for item, call in judged(_init_cases(case), seen["calls"]):
        model, inputs, targets = _init_inputs(item)
        classes = item["classes"]
        got = call["returned"]
        if not (isinstance(got, tuple) and len(got) == 2):
            fail("wrong-loss", observed=f"loss_at_init returned {type_name(got)}",
                 expected="a pair (measured loss, expected loss)",
                 cause="the return statement does not return two values", where="the return statement")
        measured, expected = _scalar(got[0]), _scalar(got[1])
        want = math.log(classes)
        if expected is None or not _close(expected, want, 1e-6):
            alternatives = {"log10(C)": math.log10(classes), "log2(C)": math.log2(classes), "1/C": 1 / classes,
                            "ln(C - 1)": math.log(classes - 1) if classes > 1 else math.nan, "C": float(classes)}
            named = [name for name, value in alternatives.items() if expected is not None and _close(expected, value)]
            fail("wrong-expected", observed=f"expected loss {expected!r} for C = {classes}" if expected is not None
                 else f"the second value is {type_name(got[1])}",
                 expected=f"ln({classes}) = {want:.5f}",
                 cause=f"your value equals {named[0]}: cross-entropy uses the natural log of 1/C" if named
                 else "a different formula: the loss of a uniform prediction is -ln(1/C) = ln(C)",
                 where="the second value of your return statement")
        forwards = call["forwards"]
        if not isinstance(forwards, list) or not all(isinstance(f, tuple) and len(f) == 2 for f in forwards):
            raise WireError("malformed observation: forwards")
        if not forwards:
            fail("wrong-loss", observed="the model was never called as model(inputs) (its forward hooks never ran)",
                 expected="the loss of model(inputs), measured through the module call",
                 cause="model.forward(inputs) called directly (it skips the module's hooks), or no forward pass",
                 where="the forward pass of loss_at_init")
        with torch.no_grad():
            model.eval()
            logits = model(inputs)
            reference = float(nn.functional.cross_entropy(logits, targets))
        if any(training for training, _ in forwards):
            fail("train-mode", observed=f"the model's forward ran in training mode (C = {classes})",
                 expected="model.eval() before the forward: dropout makes a training-mode loss random",
                 cause="the model is measured in the mode it was handed over in (train)",
                 where="before the forward pass of loss_at_init")
        if measured is None or not _close(measured, reference, 1e-4):
            candidates = {
                "the per-example losses were summed (reduction='sum')": reference * len(targets),
                "softmax was applied before F.cross_entropy, which applies log_softmax itself":
                    float(nn.functional.cross_entropy(logits.softmax(-1), targets)),
                "F.nll_loss on raw logits (it expects log-probabilities)":
                    float(nn.functional.nll_loss(logits, targets)),
            }
            named = [cause for cause, value in candidates.items() if measured is not None and _close(measured, value)]
            fail("wrong-loss", observed=f"measured loss {measured!r}" if measured is not None
                 else f"the first value is {type_name(got[0])}",
                 expected=f"the mean cross-entropy of the logits, {reference:.5f} (ln C = {want:.4f})",
                 cause=named[0] if named else "a different loss: the mean of F.cross_entropy(logits, targets) is "
                 "wanted (candidates: another reduction, a transformed input, other targets)",
                 where="the line that computes the loss")
        if isinstance(got[0], torch.Tensor) and got[0].requires_grad or any(grad for _, grad in forwards):
            fail("graph-built", observed="the forward pass ran with gradients enabled (it built a graph)",
                 expected="a measurement only: the forward inside torch.no_grad() (or torch.inference_mode())",
                 cause="no torch.no_grad() around the forward pass", where="the forward pass of loss_at_init")
        if not isinstance(call["training_after"], bool):
            raise WireError("malformed observation: training_after")
        if call["training_after"] != item["training"]:
            before, after = ("train", "eval") if item["training"] else ("eval", "train")
            fail("mode-not-restored", observed=f"a model handed over in {before} mode came back in {after} mode",
                 expected="the mode it was in (remember model.training, restore it with model.train(was_training))",
                 cause="model.eval() without putting the previous mode back" if item["training"]
                 else "model.train() at the end, whatever the mode was before",
                 where="the end of loss_at_init")
    return "the eval-mode cross-entropy without a graph, ln(C), and the model's mode left as it was"


# --------------------------------------------------------------------------------------------------
# 12-grad-norms
# --------------------------------------------------------------------------------------------------
class _WithUnused(nn.Module):
    """A network plus a registered head it never calls (its parameters' .grad stays None)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net
        self.unused = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def _grad_model(case: Case) -> tuple[nn.Module, Batch]:
    """A small network after one backward: one frozen parameter and one unused parameter have no .grad."""
    seed = case.seeded(131 if case.hidden else 130)
    torch.manual_seed(seed)
    widths = [9, 17, 13, 6, 3] if case.hidden else [10, 16, 12, 4]
    layers: OrderedDict[str, nn.Module] = OrderedDict()
    for i, (a, b) in enumerate(zip(widths, widths[1:], strict=False)):
        layers[f"fc{i}"] = nn.Linear(a, b)
        layers[f"act{i}"] = nn.Tanh()
    model = _WithUnused(nn.Sequential(layers))
    model.net.fc0.bias.requires_grad_(False)  # frozen
    generator = torch.Generator().manual_seed(seed + 1)
    inputs = torch.randn(24, widths[0], generator=generator) * (3.0 if case.hidden else 1.0)
    targets = torch.randn(24, widths[-1], generator=generator)
    model.zero_grad(set_to_none=True)
    nn.functional.mse_loss(model(inputs), targets).backward()
    return model, (inputs, targets)


@register(
    "12-grad-norms",
    hints=Hints(
        nudge="Walk model.named_parameters(): for each parameter whose .grad is not None, the L2 norm of .grad.",
        concept="The gradient norm per parameter shows where the gradient flows and where it vanishes or explodes. "
        "Keep the norms as tensors (no .item() per layer: each is a host sync on a GPU), and only read .grad.",
        solution="return {name: p.grad.detach().norm() for name, p in model.named_parameters() if p.grad is not None}",
        section="2. Gradient flow, layer by layer",
    ),
    requires={
        "wrong-keys": Requirement(
            "keys are the parameters' names as model.named_parameters() gives them",
            hint="Print list(model.named_parameters())[0][0]: that is the key wanted. What are yours?"),
        "wrong-norm": Requirement(
            "each value is the L2 norm of that parameter's gradient",
            hint="Compare your value for one parameter with torch.linalg.vector_norm(p.grad): a mean, a square, "
            "a maximum?"),
        "none-included": Requirement(
            "leaves out parameters whose .grad is None (frozen or unused)",
            hint="A frozen parameter has no gradient at all: should it appear with a zero, or not appear?"),
        "not-a-tensor": Requirement(
            "returns the norms as tensors (no .item() or float() per parameter)",
            hint="Print type() of one of your values: which call turned it into a Python number?"),
        "grads-modified": Requirement(
            "leaves the gradients unchanged",
            hint="Which of your operations ends with an underscore, or writes into p.grad?"),
    },
)
def probe_grad_norms(grad_norms_per_layer: Callable[[nn.Module], Any], *, case: Case) -> dict:
    """Call the student's function on the case's model after backward; record the result and the grads after."""
    model, _ = _grad_model(case)
    got = grad_norms_per_layer(model)
    return {"returned": dict(got) if isinstance(got, dict) else got,
            "grads_after": [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()]}


@judges("12-grad-norms")
def judge_grad_norms(seen: dict, *, case: Case) -> str:
    """`{name: ||grad||}` over the parameters that have a gradient, as tensors; gradients unchanged."""
    model, _ = _grad_model(case)
    named = [(name, p.grad) for name, p in model.named_parameters()]
    after = seen["grads_after"]
    if not isinstance(after, list) or len(after) != len(named):
        raise WireError("malformed observation: grads_after")
    for (name, before), now in zip(named, after, strict=False):
        if before is not None and not (isinstance(now, torch.Tensor) and now.shape == before.shape
                                       and torch.equal(now, before)):
            fail("grads-modified", observed=f"the gradient of {name} changed during the call",
                 expected="gradients left as they were (the next step uses them)",
                 cause="an in-place operation on p.grad (pow_, mul_, abs_, ...) or an assignment into it",
                 where="the body of grad_norms_per_layer")
    got = seen["returned"]
    want = {name: float(torch.linalg.vector_norm(g)) for name, g in named if g is not None}
    if not isinstance(got, dict):
        fail("wrong-keys", observed=f"grad_norms_per_layer returned {type_name(got)}",
             expected="a dict {parameter name: norm}", cause="a list or another container was returned (a dict "
             "with non-string keys arrives as an object)", where="the return statement")
    without = [name for name, g in named if g is None]
    extra = [k for k in got if k in without]
    if extra:
        fail("none-included", observed=f"keys for parameters without a gradient: {extra}",
             expected=f"only the parameters whose .grad is not None ({len(want)} of {len(named)})",
             cause="every parameter was listed, with a placeholder where .grad is None",
             where="the condition of your loop or comprehension (skip p.grad is None)")
    if set(got) != set(want):
        missing = [k for k in want if k not in got][:3]
        fail("wrong-keys", observed=f"keys {sorted(got)[:4]}{'...' if len(got) > 4 else ''}",
             expected=f"the parameter names {list(want)[:4]}...",
             cause="the keys are not the names of model.named_parameters() (module names, indices, or parameters "
             f"missing: {missing})", where="the keys of the dict you build")
    for name, value in want.items():
        norm = got[name]
        if not isinstance(norm, torch.Tensor):
            fail("not-a-tensor", observed=f"the value for {name} is {type_name(norm)}",
                 expected="a 0-dim tensor: reading it is the caller's choice (one sync, not one per parameter)",
                 cause=".item() or float() on each norm", where="the values of the dict you build")
        number = _scalar(norm)
        if number is None or not _close(number, value, 1e-4):
            gradient = dict(named)[name]
            candidates = {"the squared norm (no square root)": value ** 2,
                          "the mean absolute value": float(gradient.abs().mean()),
                          "the largest absolute value": float(gradient.abs().max()),
                          "the root mean square (the norm divided by sqrt(numel))": value / math.sqrt(gradient.numel()),
                          "the norm of the parameter itself, not of its gradient":
                              float(dict(model.named_parameters())[name].detach().norm())}
            causes = [c for c, v in candidates.items() if number is not None and _close(number, v)]
            fail("wrong-norm", observed=f"{name}: {number if number is not None else _describe(norm)}",
                 expected=f"the L2 norm of its gradient, {value:.6g}",
                 cause=f"your value is {causes[0]}" if causes else "another quantity than the L2 norm of p.grad",
                 where="the expression that computes each value")
    return f"the gradient norm of each of the {len(want)} parameters with a gradient, as tensors, gradients kept"


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    return type_name(value)


# --------------------------------------------------------------------------------------------------
# 12-first-nonfinite
# --------------------------------------------------------------------------------------------------
class Log(nn.Module):
    """log(x): NaN where x < 0."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x)


class Exp(nn.Module):
    """exp(scale * x): inf where it overflows float32."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.exp(self.scale * x)


class LogBlock(nn.Module):
    """A block whose own forward (not a child) produces the NaN: log of its child's output."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(self.proj(x))


class Reordered(nn.Module):
    """Children defined in one order and called in another: `late` is defined first, runs second."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.late = nn.Linear(width, width)
        self.early = Log()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.late(self.early(x))


class Fails(nn.Module):
    """A module that raises, as a bug in a forward would."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (the check's planted error)")


def _net(width: int, middle: nn.Module, nan_in: str | None = None) -> nn.Sequential:
    model = nn.Sequential(OrderedDict(
        stem=nn.Linear(width, width), act=nn.ReLU(),
        body=nn.Sequential(OrderedDict(fc=nn.Linear(width, width), mid=middle)),
        head=nn.Linear(width, 3)))
    if nan_in is not None:
        with torch.no_grad():
            model.get_submodule(nan_in).weight[1, 0] = math.nan
    return model


_SCENARIOS = ("finite", "nan-weight", "functional-log", "inf", "reordered", "error")


def _scenario(name: str, case: Case, index: int) -> tuple[nn.Module, torch.Tensor]:
    """The model and input of one scenario, rebuilt identically by probe and judge."""
    seed = case.seeded((1210 if case.hidden else 1200) + index)
    torch.manual_seed(seed)
    width = 7 if case.hidden else 5
    generator = torch.Generator().manual_seed(seed + 1)
    inputs = torch.randn(4 if case.hidden else 3, width, generator=generator)
    if name == "nan-weight":
        layers = ["stem", "body.fc", "head"]
        where = layers[int(torch.randint(0, 3, (1,), generator=generator))]
        return _net(width, nn.Tanh(), nan_in=where), inputs
    if name == "functional-log":
        return _net(width, LogBlock(width)), inputs
    if name == "inf":
        return _net(width, Exp(400.0)), inputs
    if name == "reordered":
        model = nn.Sequential(OrderedDict(stem=nn.Linear(width, width), block=Reordered(width),
                                          head=nn.Linear(width, 3)))
        return model, inputs
    if name == "finite":
        return _net(width, nn.Tanh()), inputs
    return _net(width, Fails()), inputs


def _hooks_on(model: nn.Module) -> int:
    """Forward hooks left on the model's modules, plus global module hooks."""
    from torch.nn.modules import module as module_module

    local = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())
    return local + len(getattr(module_module, "_global_forward_hooks", {})) + \
        len(getattr(module_module, "_global_forward_pre_hooks", {}))


@register(
    "12-first-nonfinite",
    hints=Hints(
        nudge="Put a forward hook on every module of model.named_modules(); in the hook, test the output with "
        "torch.isfinite and remember the name the first time it fails.",
        concept="Forward hooks fire in execution order, a child's before its parent's, so the first report is the "
        "innermost module that produced the value. torch.isfinite catches NaN and inf alike. Hooks you add "
        "must be removed in a finally block, or they stay on the model after an exception.",
        solution="handles = [m.register_forward_hook(make_hook(name)) for name, m in model.named_modules()]\n"
        "try: with torch.no_grad(): model(inputs)\nfinally: for h in handles: h.remove()\nreturn found[0] "
        "if found else None",
        section="3. The first NaN",
    ),
    requires={
        "wrong-module": Requirement(
            "returns the qualified name (as named_modules() gives it) of the first module, in execution order, "
            "whose output is not finite",
            hint="Print the name and torch.isfinite(output).all() inside your hook: in which order do they fire, "
            "and which one do you keep?"),
        "missed-inf": Requirement(
            "treats inf as non-finite, not only NaN",
            hint="torch.isnan(torch.tensor(float('inf'))) is False: which test catches both?"),
        "false-alarm": Requirement(
            "returns None when every output is finite",
            hint="Run your function on a healthy model: what does it return?"),
        "not-a-name": Requirement(
            "returns a string (the module's name) or None",
            hint="Return the name string from named_modules(), not the module object."),
        "hooks-left": Requirement(
            "removes every hook it registered before returning",
            hint="Print len(model.stem._forward_hooks) after your call: keep the handles and call .remove()."),
        "hooks-left-on-error": Requirement(
            "removes its hooks even when the forward pass raises",
            hint="If model(inputs) raises, is your remove loop still reached? Which statement guarantees it?"),
    },
)
def probe_first_nonfinite(first_nonfinite_module: Callable[[nn.Module, torch.Tensor], Any], *, case: Case) -> dict:
    """Call the student's locator on each scenario's model; record what it returned and the hooks left."""
    def record(index_name: tuple[int, str]) -> dict:
        index, name = index_name
        model, inputs = _scenario(name, case, index)
        if name == "error":
            raised = None
            try:
                first_nonfinite_module(model, inputs)
            except Exception as error:  # the planted error (or another): only the hooks left matter
                raised = type(error).__name__
            return {"raised": raised, "hooks_left": _hooks_on(model)}
        got = first_nonfinite_module(model, inputs)
        return {"returned": got, "hooks_left": _hooks_on(model)}

    return {"calls": collect(list(enumerate(_SCENARIOS)), record)}


def _trace(model: nn.Module, inputs: torch.Tensor) -> list[tuple[str, bool, bool]]:
    """Judge side: (name, output finite, output has NaN) of every module's output, in execution order."""
    seen: list[tuple[str, bool, bool]] = []
    handles = [m.register_forward_hook(lambda _m, _a, out, name=name: seen.append(
        (name, bool(torch.isfinite(out).all()), bool(torch.isnan(out).any()))))
        for name, m in model.named_modules()]
    try:
        with torch.no_grad():
            model(inputs)
    finally:
        for handle in handles:
            handle.remove()
    return seen


def _wrong_module_causes(got: Any, trace: list[tuple[str, bool, bool]], model: nn.Module) -> list[str]:
    """Which mistaken rule gives `got` on this model (the judge replays each on its own trace)."""
    bad = [name for name, finite, _ in trace if not finite]
    order = [name for name, _ in model.named_modules()]
    leaves = {name for name, m in model.named_modules() if not list(m.children())}
    rules = {
        "the last non-finite module was kept (every module after the first is non-finite too): keep the first":
            bad[-1] if bad else None,
        "the modules were scanned in definition order (named_modules()), not in the order they ran":
            min(bad, key=order.index) if bad else None,
        "hooks only on leaf modules: a container's own forward can produce the value (torch.log in its forward)":
            next((n for n in bad if n in leaves), None),
        "hooks only on the model's direct children (named_children()): the name of a container, not of the module "
        "inside it": next((n for n in bad if n and "." not in n), None),
    }
    return [cause for cause, answer in rules.items() if answer == got and answer != (bad[0] if bad else None)]


@judges("12-first-nonfinite")
def judge_first_nonfinite(seen: dict, *, case: Case) -> str:
    """The first non-finite module's name (None when all finite); no hooks left, even after an exception."""
    for (index, name), call in judged(list(enumerate(_SCENARIOS)), seen["calls"]):
        if not isinstance(call.get("hooks_left"), int):
            raise WireError("malformed observation: hooks_left")
        if name == "error":
            if call["hooks_left"]:
                fail("hooks-left-on-error", observed=f"{call['hooks_left']} hooks still on the model after its "
                     "forward pass raised", expected="none: the hooks removed whatever happens",
                     cause="the removal runs after model(inputs) but not in a finally block, so the exception skips it",
                     where="wrap the forward in try: ... finally: for handle in handles: handle.remove()")
            continue
        model, inputs = _scenario(name, case, index)
        trace = _trace(model, inputs)
        want = next((n for n, finite, _ in trace if not finite), None)
        got = call["returned"]
        if got is not None and not isinstance(got, str):
            fail("not-a-name", observed=f"returned {type_name(got)} ({got!r})"[:160],
                 expected="the module's qualified name, a string such as 'body.fc' (or None)",
                 cause="the module object (or a tuple with it) was returned instead of its name",
                 where="what your hook stores, and your return statement")
        if got != want:
            if want is None:
                fail("false-alarm", observed=f"returned {got!r} on a model whose outputs are all finite",
                     expected="None", cause="a module is reported without testing its output (or with a test that "
                     "is always true, such as torch.isfinite(out).any())", where="the test inside your hook")
            nan_only = next((n for n, _, has_nan in trace if has_nan), None)
            if name == "inf" and got == nan_only:
                fail("missed-inf", observed=f"returned {got!r}; module {want!r} produced inf first",
                     expected=f"{want!r}: inf is non-finite too", cause="the test is torch.isnan, which misses inf",
                     where="use torch.isfinite(output).all() in your hook")
            causes = _wrong_module_causes(got, trace, model)
            fail("wrong-module", observed=f"returned {got!r} for the {name} model",
                 expected=f"{want!r}, the first module (in execution order) whose output is not finite",
                 cause=causes[0] if len(causes) == 1 else "one of: " + "; ".join(causes) if causes else
                 "a module other than the first non-finite one was kept (check the order your hooks fire in and "
                 "the name you store)", where="your hook and what it stores")
        if call["hooks_left"]:
            fail("hooks-left", observed=f"{call['hooks_left']} hooks still on the model after the call",
                 expected="none: a diagnostic leaves the model as it found it",
                 cause="the handles returned by register_forward_hook were not removed",
                 where="after the forward pass: for handle in handles: handle.remove()")
    return "the first non-finite module in execution order (NaN or inf), None when finite, hooks always removed"


# --------------------------------------------------------------------------------------------------
# 12-lr-range
# --------------------------------------------------------------------------------------------------
_BASE_LR, _MOMENTUM = 0.05, 0.9


def _sweeps(case: Case) -> list[dict[str, Any]]:
    """(seed, batches, start_lr, end_lr, num_steps, diverge) of each sweep: one that diverges, one that does not."""
    if case.hidden:
        plan = [(3, 1e-3, 40.0, 28, 4.0), (3, 1e-4, 3e-3, 6, 3.0)]
    else:
        plan = [(4, 1e-3, 30.0, 30, 4.0), (3, 1e-4, 1e-2, 8, 4.0)]
    return [{"seed": case.seeded((1250 if case.hidden else 1240) + i), "batches": b, "start_lr": s, "end_lr": e,
             "num_steps": n, "diverge": d} for i, (b, s, e, n, d) in enumerate(plan)]


def _sweep_setup(item: dict[str, Any]) -> tuple[nn.Module, torch.optim.Optimizer, list[Batch]]:
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
    optimizer = torch.optim.SGD([{"params": weights}, {"params": biases}], lr=_BASE_LR, momentum=_MOMENTUM)
    warm_x = torch.randn(32, 12, generator=generator)
    warm_y = torch.randint(0, 6, (32,), generator=generator)
    optimizer.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(model(warm_x), warm_y).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return model, optimizer, batches


def _buffers(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[torch.Tensor | None]:
    return [optimizer.state.get(p, {}).get("momentum_buffer") for p in model.parameters()]


def _schedule(item: dict[str, Any]) -> list[float]:
    start, end, n = item["start_lr"], item["end_lr"], item["num_steps"]
    return [start * (end / start) ** (i / (n - 1)) for i in range(n)]


@register(
    "12-lr-range",
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
        model, optimizer, batches = _sweep_setup(item)
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
                "params_after": snapshot(model), "buffers_after": _buffers(model, optimizer),
                "lrs_after": [float(g["lr"]) for g in optimizer.param_groups]}

    return {"calls": collect(_sweeps(case), record)}


def _set(model: nn.Module, tensors: Sequence[torch.Tensor]) -> None:
    with torch.no_grad():
        for p, value in zip(model.parameters(), tensors, strict=False):
            p.copy_(value)


def _reference_step(model: nn.Module, params: list[torch.Tensor], batch: Batch) -> tuple[float, list[torch.Tensor]]:
    """Judge side: the loss and gradients of `batch` at `params`."""
    _set(model, params)
    model.zero_grad(set_to_none=True)
    loss = nn.functional.cross_entropy(model(batch[0]), batch[1])
    loss.backward()
    return float(loss.detach()), [p.grad.detach().clone() for p in model.parameters()]


def _same(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor], rtol: float = 1e-4) -> bool:
    return all(torch.allclose(x, y, rtol=rtol, atol=1e-6, equal_nan=True) for x, y in zip(a, b, strict=False))


def _check_lrs(item: dict[str, Any], i: int, lrs: Any, schedule: list[float]) -> None:
    """Fail unless every param group of step `i` ran at the exponential schedule's learning rate."""
    if not isinstance(lrs, list) or len(lrs) != 2 or not all(isinstance(v, float) for v in lrs):
        raise WireError("malformed observation: lrs")
    if all(_close(v, schedule[i], 1e-6) for v in lrs):
        return
    start, end, n = item["start_lr"], item["end_lr"], item["num_steps"]
    if any(_close(v, schedule[i], 1e-6) for v in lrs):
        cause = "only some param groups were set (each group has its own 'lr')"
    elif _close(lrs[0], start + (end - start) * i / (n - 1), 1e-6):
        cause = "the learning rates are spaced linearly, not exponentially"
    elif _close(lrs[0], start * (end / start) ** (i / n), 1e-6):
        cause = "the exponent is i / num_steps: the last step never reaches end_lr"
    else:
        cause = "another schedule than the exponential one"
    fail("wrong-lrs", observed=f"step {i} ran with learning rates {[f'{v:.4g}' for v in lrs]}",
         expected=f"{schedule[i]:.4g} in every group (start_lr {start:g} to end_lr {end:g} in {n} steps, geometric)",
         cause=cause, where="where you set group['lr'] for each step")


def _check_grads(i: int, grads: list[torch.Tensor], want: list[torch.Tensor], previous: list[torch.Tensor] | None,
                 model: nn.Module, recorded: list[torch.Tensor], batches: list[Batch]) -> None:
    """Fail unless step `i`'s gradient is the gradient of its own batch at the parameters it started from."""
    if _same(grads, want, 1e-3):
        return
    if previous is not None and _same(grads, [a + b for a, b in zip(want, previous, strict=True)], 1e-3):
        fail("missing-zero-grad", observed=f"at step {i} the optimizer saw that step's gradient plus the previous "
             "step's", expected="each step's own gradient",
             cause="the gradients are not cleared between steps, so backward adds to them",
             where="optimizer.zero_grad(set_to_none=True) before each backward")
    own = i % len(batches)
    others = [j for j in range(len(batches))
              if j != own and _same(grads, _reference_step(model, recorded, batches[j])[1], 1e-3)]
    fail("wrong-batch", observed=f"the gradient of step {i} is not that of batches[{own}]"
         + (f" (it is that of batches[{others[0]}])" if others else ""),
         expected=f"step {i} trains on batches[{i} % len(batches)] = batches[{own}]",
         cause="the same batch every step (a fresh iter(batches) or batches[0])" if others
         else "another loss or batch than loss_fn on batches[i % len(batches)]",
         where="the line that picks the step's batch")


def _replay_steps(item: dict[str, Any], steps: Any, model: nn.Module, batches: list[Batch],
                  start: list[torch.Tensor], start_buffers: list[torch.Tensor]) -> list[float]:
    """Judge each recorded optimizer step in turn (parameters, learning rates, gradient); the reference losses.

    The parameters of step i+1 must follow from step i by SGD with momentum: the trajectory is the judge's own,
    from the case's start, so a forged one is refused.
    """
    schedule = _schedule(item)
    if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
        raise WireError("malformed observation: steps")
    if len(steps) > item["num_steps"]:
        fail("wrong-stop", observed=f"{len(steps)} optimizer steps for num_steps = {item['num_steps']}",
             expected=f"at most {item['num_steps']} steps",
             cause="more than one optimizer step per sweep step, or a loop longer than num_steps", where="your loop")
    losses, buffers, params, previous = [], start_buffers, start, None
    for i, step in enumerate(steps):
        recorded = matching_tensors(step.get("params"), start, "params")
        if not _same(recorded, params, 1e-4):
            raise WireError("malformed observation: the parameters do not follow the recorded steps")
        _check_lrs(item, i, step.get("lrs"), schedule)
        raw = step.get("grads")
        grads = matching_tensors([torch.zeros_like(p) if g is None else g for g, p in zip(raw, start, strict=False)]
                                 if isinstance(raw, list) and len(raw) == len(start) else None, start, "grads")
        loss, want = _reference_step(model, recorded, batches[i % len(batches)])
        _check_grads(i, grads, want, previous, model, recorded, batches)
        losses.append(loss)
        buffers = [_MOMENTUM * b + g for b, g in zip(buffers, grads, strict=True)]
        params = [p - schedule[i] * b for p, b in zip(recorded, buffers, strict=True)]
        previous = grads
    return losses


def _smoothed(losses: list[float], beta: float = 0.98) -> list[float]:
    out, running = [], None
    for v in losses:
        running = v if running is None else beta * running + (1 - beta) * v
        out.append(running)
    return out


def _check_returned(got: Any, losses: list[float], schedule: list[float]) -> None:
    """Fail unless the sweep returned (lrs, losses): one entry per step taken, the losses before each update."""
    if not (isinstance(got, tuple) and len(got) == 2 and all(isinstance(v, list) for v in got)):
        fail("wrong-losses", observed=f"lr_range_test returned {type_name(got)}",
             expected="a pair of lists (lrs, losses)", cause="the return statement returns something else",
             where="the return statement")
    got_lrs, values = got[0], [_scalar(v) for v in got[1]]
    counts_match = len(got_lrs) == len(losses) == len(values)
    if not counts_match or any(v is None for v in values) or not all(
            _close(a, b, 1e-4) for a, b in zip(values, losses, strict=True)):
        if not counts_match:
            cause = "a different number of values than steps taken"
        elif all(v is not None and _close(v, s, 1e-4) for v, s in zip(values, _smoothed(losses), strict=True)):
            cause = "the losses are smoothed (a running average): return the raw loss of each step"
        else:
            cause = "the loss was computed at another time (after optimizer.step()), or another quantity"
        fail("wrong-losses", observed=f"{len(losses)} optimizer steps; returned {len(got_lrs)} lrs and losses "
             f"{[f'{v:.4g}' if v is not None else '?' for v in values[:6]]}",
             expected=f"{len(losses)} lrs and the losses before each update {[f'{v:.4g}' for v in losses[:6]]}",
             cause=cause, where="what you append to losses, and when")
    if not all(isinstance(v, float) and _close(v, lr, 1e-6) for v, lr in zip(got_lrs, schedule, strict=False)):
        fail("wrong-losses", observed=f"returned lrs {got_lrs[:4]}", expected=f"{[f'{v:.4g}' for v in schedule[:4]]}",
             cause="the returned learning rates are not those of the steps", where="what you append to lrs")


def _check_stop(item: dict[str, Any], losses: list[float], batch_count: int) -> None:
    """Fail unless the sweep stopped right after the first diverging step (or ran num_steps without one)."""
    n, diverge = item["num_steps"], item["diverge"]
    stop = next((i for i, v in enumerate(losses) if not math.isfinite(v) or v > diverge * min(losses[:i + 1])), None)
    if stop is not None and stop < len(losses) - 1:
        rule = f"the loss of step {stop}, {losses[stop]:.4g}, was above {diverge:g} x the best " \
            f"{min(losses[:stop + 1]):.4g}"
        if len(losses) == n:
            fail("no-divergence-stop", observed=f"all {n} steps ran; {rule}",
                 expected=f"the sweep stops after step {stop}",
                 cause="no divergence test in the loop (or one that never fires)",
                 where="after recording each loss: if not finite or > diverge * best: break")
        fail("wrong-stop", observed=f"stopped after step {len(losses) - 1}; {rule}", expected=f"stop after step {stop}",
             cause="the loss is compared with another reference than the best (lowest) loss so far: the first loss "
             "or the previous one", where="your stop test")
    if stop is None and len(losses) < n:
        if len(losses) == batch_count:
            fail("batches-not-cycled", observed=f"{len(losses)} steps, one per batch, for num_steps = {n}",
                 expected=f"{n} steps (no divergence): the batches are reused in turn",
                 cause="the loop runs over batches, so it ends when they do",
                 where="loop over range(num_steps) and take batches[i % len(batches)]")
        fail("wrong-stop", observed=f"stopped after {len(losses)} of {n} steps (the next step's loss was never "
             "recorded)", expected="the loss never exceeded diverge x best in the steps recorded, so the sweep goes on",
             cause="the break runs before the diverging step is recorded, or the stop compares with another "
             "reference than the lowest loss so far", where="your stop test and the order of append and break")


def _check_restored(call: dict[str, Any], start: list[torch.Tensor], start_buffers: list[torch.Tensor],
                    groups: int) -> None:
    """Fail unless the model's parameters and the optimizer's buffers and learning rates are back as they were."""
    after = matching_tensors(call["params_after"], start, "params_after")
    if not _same(after, start, 1e-6):
        fail("model-not-restored", observed="the model's parameters differ from those before the call",
             expected="the parameters restored exactly (the sweep is a diagnostic, not training)",
             cause="no restore, or the saved copy is model.state_dict() without copy.deepcopy (it holds the live "
             "tensors, which training changed)", where="save before the loop, load_state_dict at the end")
    buffers_after, lrs_after = call["buffers_after"], call["lrs_after"]
    if not isinstance(buffers_after, list) or len(buffers_after) != len(start) or not isinstance(lrs_after, list) \
            or len(lrs_after) != groups:
        raise WireError("malformed observation: optimizer state")
    restored_buffers = all(isinstance(b, torch.Tensor) and b.shape == s.shape and torch.allclose(b, s, atol=1e-7)
                           for b, s in zip(buffers_after, start_buffers, strict=True))
    if not restored_buffers or not all(isinstance(v, float) and _close(v, _BASE_LR, 1e-9) for v in lrs_after):
        what = "the momentum buffers" if not restored_buffers else f"the learning rates ({lrs_after})"
        fail("optimizer-not-restored", observed=f"{what} differ from those before the call",
             expected=f"the optimizer as it was: its momentum buffers, and lr {_BASE_LR:g} in each group",
             cause="only the model was restored, or the optimizer's state_dict() was saved without copy.deepcopy "
             "(its buffers are updated in place)" if not restored_buffers else
             "the learning rates of the sweep were left in the param groups",
             where="save copy.deepcopy(optimizer.state_dict()) before, optimizer.load_state_dict(...) after")


def _judge_sweep(item: dict[str, Any], call: dict[str, Any]) -> None:
    """Judge one call of the student's sweep: its steps, what it returned, where it stopped, what it restored."""
    model, optimizer, batches = _sweep_setup(item)
    start, start_buffers = snapshot(model), [b.clone() for b in _buffers(model, optimizer)]
    losses = _replay_steps(item, call["steps"], model, batches, start, start_buffers)
    _check_returned(call["returned"], losses, _schedule(item))
    _check_stop(item, losses, len(batches))
    _check_restored(call, start, start_buffers, len(optimizer.param_groups))


@judges("12-lr-range")
def judge_lr_range(seen: dict, *, case: Case) -> str:
    """Every step at the geometric LR on its batch, the losses returned, the stop rule, and both states restored."""
    for item, call in judged(_sweeps(case), seen["calls"]):
        _judge_sweep(item, call)
    return "an exponential sweep cycling the batches, stopped on divergence, model and optimizer restored"


# --------------------------------------------------------------------------------------------------
# 12-dead-units
# --------------------------------------------------------------------------------------------------
def _dead_setup(case: Case) -> tuple[nn.Module, list[torch.Tensor]]:
    """A ReLU MLP whose biases kill some units on every batch and others on some batches only, and its batches."""
    seed = case.seeded(1261 if case.hidden else 1260)
    torch.manual_seed(seed)
    widths = (10, 24, 12, 3) if case.hidden else (8, 16, 10, 3)
    model = nn.Sequential(OrderedDict(
        fc1=nn.Linear(widths[0], widths[1]), act1=nn.ReLU(),
        fc2=nn.Linear(widths[1], widths[2]), act2=nn.ReLU(),
        head=nn.Linear(widths[2], widths[3])))
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        shift = torch.zeros(widths[1])
        shift[: widths[1] // 4] = -50.0  # dead on every input
        model.fc1.bias.add_(shift)
        model.fc2.bias.sub_(0.4)  # some units alive on a few examples only
    batches = [torch.randn(6, widths[0], generator=generator) for _ in range(4 if case.hidden else 3)]
    batches[-1] = batches[-1] * 0.1  # a quiet last batch: units fire less on it
    return model, batches


@register(
    "12-dead-units",
    hints=Hints(
        nudge="A forward hook on each nn.ReLU can keep, per unit, whether it was ever positive: "
        "alive |= (output > 0).any(dim=0), accumulated over every batch.",
        concept="A unit is dead when it outputs 0 for every example you show it: per unit (a column of the "
        "(batch, units) output), over all batches together. Keep a running 'ever active' mask per ReLU, then "
        "dead fraction = 1 - mask.float().mean(). Remove the hooks in a finally block.",
        solution="alive[name] = alive.get(name, False) | (out > 0).any(dim=0)  # in the hook, per batch\n"
        "return {name: 1 - mask.float().mean() for name, mask in alive.items()}",
        section="5. Dead units and saturated activations",
    ),
    requires={
        "wrong-fraction": Requirement(
            "each value is the fraction of that ReLU's units that output 0 for every example",
            hint="Is your count per unit (a column of the output), and is a unit dead only when it is zero for "
            "every example, not for some?"),
        "last-batch-only": Requirement(
            "a unit counts as dead only if it is zero on every batch (all batches together)",
            hint="Does your hook replace what it stored at each batch, or combine it with the earlier batches?"),
        "wrong-keys": Requirement(
            "keys are the names of the nn.ReLU modules, as model.named_modules() gives them",
            hint="Print the keys you return: are they the ReLU modules' names?"),
        "not-a-tensor": Requirement(
            "returns the fractions as tensors (no .item() or float() per layer)",
            hint="Print type() of one of your values: which call turned it into a Python number?"),
        "hooks-left": Requirement(
            "removes every hook it registered before returning",
            hint="Keep the handles that register_forward_hook returns, and remove them in a finally block."),
    },
)
def probe_dead_units(dead_units: Callable[[nn.Module, list[torch.Tensor]], Any], *, case: Case) -> dict:
    """Call the student's function on the case's model and batches; record the result and the hooks left."""
    model, batches = _dead_setup(case)
    got = dead_units(model, batches)
    return {"returned": dict(got) if isinstance(got, dict) else got, "hooks_left": _hooks_on(model)}


def _alive(model: nn.Module, batches: Sequence[torch.Tensor]) -> dict[str, list[torch.Tensor]]:
    """Judge side: each ReLU's per-batch 'active on some example' masks (per unit)."""
    outputs = {name: [] for name, m in model.named_modules() if isinstance(m, nn.ReLU)}
    handles = [m.register_forward_hook(lambda _m, _a, out, name=name: outputs[name].append((out > 0).any(dim=0)))
               for name, m in model.named_modules() if isinstance(m, nn.ReLU)]
    try:
        with torch.no_grad():
            for x in batches:
                model(x)
    finally:
        for handle in handles:
            handle.remove()
    return outputs


def _outputs_of(model: nn.Module, name: str, batches: Sequence[torch.Tensor]) -> torch.Tensor:
    """Judge side: the outputs of module `name` over every batch, concatenated."""
    outs: list[torch.Tensor] = []
    handle = model.get_submodule(name).register_forward_hook(lambda _m, _a, out: outs.append(out))
    try:
        with torch.no_grad():
            for x in batches:
                model(x)
    finally:
        handle.remove()
    return torch.cat(outs)


@judges("12-dead-units")
def judge_dead_units(seen: dict, *, case: Case) -> str:
    """{ReLU name: fraction of units zero on every example of every batch}, as tensors; hooks removed."""
    model, batches = _dead_setup(case)
    masks = _alive(model, batches)
    want = {name: 1.0 - float(torch.stack(m).any(dim=0).float().mean()) for name, m in masks.items()}
    got = seen["returned"]
    if not isinstance(got, dict) or set(got) != set(want):
        fail("wrong-keys", observed=f"returned {type_name(got)}" + (f" with keys {sorted(got)}" if isinstance(got, dict)
                                                                     else ""),
             expected=f"a dict with the ReLU modules' names {sorted(want)}",
             cause="keys of other modules (the Linear layers, every module) or indices instead of the ReLUs' names",
             where="the modules your hooks go on, and the keys you store")
    for name, value in want.items():
        number = _scalar(got[name])
        if not isinstance(got[name], torch.Tensor):
            fail("not-a-tensor", observed=f"the value for {name} is {type_name(got[name])}",
                 expected="a 0-dim tensor (one host sync for the caller, not one per layer)",
                 cause=".item() or float() on each fraction", where="the values of the dict you return")
        if number is not None and _close(number, value, 1e-5):
            continue
        stacked = torch.stack(masks[name])
        last_only = 1.0 - float(stacked[-1].float().mean())
        every = _outputs_of(model, name, batches)  # (all examples, units)
        per_value = float((every <= 0).float().mean())
        any_zero = float((every <= 0).any(dim=0).float().mean())
        if number is not None and _close(number, last_only, 1e-5):
            fail("last-batch-only", observed=f"{name}: {number:.4f}, the dead fraction on the last batch alone",
                 expected=f"{value:.4f}: dead on every batch ({len(batches)} batches)",
                 cause="the hook replaces what it stored at each call, so only the last batch counts",
                 where="combine the masks across calls: alive |= (out > 0).any(dim=0)")
        causes = {"the fraction of zero values (over examples and units), not of units": per_value,
                  "units zero on at least one example, instead of on every example": any_zero,
                  "the fraction of negative outputs (a ReLU's output is never negative)": 0.0}
        named = [c for c, v in causes.items() if number is not None and _close(number, v, 1e-5)]
        fail("wrong-fraction", observed=f"{name}: {number if number is not None else type_name(got[name])}",
             expected=f"{value:.4f}, the fraction of its {stacked.shape[1]} units that output 0 for every example",
             cause=f"your value is {named[0]}" if named else "another quantity than the dead-unit fraction",
             where="how your hook reduces the output, and the final fraction")
    if not isinstance(seen["hooks_left"], int):
        raise WireError("malformed observation: hooks_left")
    if seen["hooks_left"]:
        fail("hooks-left", observed=f"{seen['hooks_left']} hooks still on the model after the call",
             expected="none", cause="the handles returned by register_forward_hook were not removed",
             where="after the forward passes: for handle in handles: handle.remove()")
    return f"the dead-unit fraction of each of the {len(want)} ReLUs over all batches, as tensors, hooks removed"
