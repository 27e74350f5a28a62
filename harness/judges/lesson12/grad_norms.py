"""12-grad-norms, the judge.

`{name: ||grad||}` over the parameters that have a gradient, as tensors; gradients unchanged.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from harness.checks.lesson12.grad_norms import grad_model
from harness.contract.case import Case
from harness.contract.compare import isclose_number, malformed, same_values, type_name
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.judges.lesson12.common import _scalar


@judges(
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
def judge_grad_norms(seen: dict, *, case: Case) -> str:
    """`{name: ||grad||}` over the parameters that have a gradient, as tensors; gradients unchanged."""
    model, _ = grad_model(case)
    named = [(name, p.grad) for name, p in model.named_parameters()]
    after = seen["grads_after"]
    if not isinstance(after, list) or len(after) != len(named):
        malformed("grads_after")
    for (name, before), now in zip(named, after, strict=False):
        if before is not None and not (isinstance(now, torch.Tensor) and now.shape == before.shape
                                       and same_values(now, before, dtype=False)):
            fail("grads-modified", observed=f"the gradient of {name} {_change(now, before)} during the call",
                 expected="gradients left as they were (the next step uses them)",
                 cause=_change_cause(now, before), where="the body of grad_norms_per_layer",
                 hint="Does your function clear the gradients (zero_grad, or p.grad = None) after reading them? "
                 "Who still needs them after your call?" if _change(now, before) != "changed" else None)
    got = seen["returned"]
    want = {name: float(torch.linalg.vector_norm(g)) for name, g in named if g is not None}
    if not isinstance(got, dict):
        fail("wrong-keys", observed=f"grad_norms_per_layer returned {type_name(got)}",
             expected="a dict {parameter name: norm}", cause="a dict whose keys are not strings (parameters or "
             "modules as keys?)" if type_name(got) == "dict" else "a list or tuple of norms: the names are lost"
             if type_name(got) in ("list", "tuple") else f"a {type_name(got)} instead of a dict",
             where="the return statement")
    _judge_buffer_names(got, model)
    without = [name for name, g in named if g is None]
    extra = [k for k in got if k in without]
    if extra:
        fail("none-included", observed=f"keys for parameters without a gradient: {extra}",
             expected=f"only the parameters whose .grad is not None ({len(want)} of {len(named)})",
             cause="parameters whose .grad is None were listed too, with a placeholder value",
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
        if number is None or not isclose_number(number, value, rel_tol=1e-4, abs_tol=1e-6):
            gradient = dict(named)[name]
            candidates = {"the squared norm (no square root)": value ** 2,
                          "the mean absolute value": float(gradient.abs().mean()),
                          "the largest absolute value": float(gradient.abs().max()),
                          "the root mean square (the norm divided by sqrt(numel))": value / math.sqrt(gradient.numel()),
                          "the norm of the parameter itself, not of its gradient":
                              float(dict(model.named_parameters())[name].detach().norm())}
            causes = [c for c, v in candidates.items() if isclose_number(number, v, rel_tol=1e-4, abs_tol=1e-6)]
            of_parameter = bool(causes) and causes[0].startswith("the norm of the parameter")
            fail("wrong-norm", observed=f"{name}: {number if number is not None else _shape_or_type(norm)}",
                 expected=f"the L2 norm of its gradient, {value:.6g}",
                 cause=f"your value is {causes[0]}" if causes else "another quantity than the L2 norm of p.grad",
                 where="the expression that computes each value",
                 hint="Which tensor does your norm read: the parameter, or the gradient stored on it?"
                 if of_parameter else None)
    return f"the gradient norm of each of the {len(want)} parameters with a gradient, as tensors, gradients kept"


def _judge_buffer_names(got: dict, model: torch.nn.Module) -> None:
    """Fail wrong-keys when a buffer's name is a key: names from state_dict() (which lists buffers too) zipped
    with model.parameters() shift by one at each buffer, so later norms get another parameter's name."""
    buffers = [name for name, _ in model.named_buffers()]
    keyed = [k for k in got if k in buffers]
    if not keyed:
        return
    names, params = list(model.state_dict()), list(model.parameters())
    zipped = [name for name, p in zip(names, params, strict=False) if p.grad is not None]
    fail("wrong-keys", observed=f"the buffer {keyed[0]!r} is a key of your dict (keys {sorted(got)[:4]}...)",
         expected="only parameters' names, as model.named_parameters() gives them",
         cause=("the names come from model.state_dict(), zipped with model.parameters(): state_dict() lists "
                f"buffers too ({keyed[0]!r} is registered before the first parameter), so from there on each "
                "norm is stored under the name of the entry before it") if set(got) == set(zipped) else
         "buffers' names among the keys (model.state_dict() or named_buffers() lists them): buffers have no "
         "gradient", where="where your names come from: model.named_parameters() gives each name with its parameter",
         hint="Print list(model.state_dict())[:3] next to [n for n, _ in model.named_parameters()][:3]: do they "
         "line up?")


def _shape_or_type(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    return type_name(value)


def _change(now: Any, before: torch.Tensor) -> str:
    """How a gradient changed: 'was set to None', 'was zeroed' or 'changed'."""
    if now is None:
        return "was set to None"
    if isinstance(now, torch.Tensor) and now.shape == before.shape and not bool(now.any()) and bool(before.any()):
        return "was zeroed"
    return "changed"


def _change_cause(now: Any, before: torch.Tensor) -> str:
    """The calls that make the change `_change` names."""
    return {"was set to None": "model.zero_grad() (or optimizer.zero_grad(), or p.grad = None) inside the function",
            "was zeroed": "zero_grad(set_to_none=False) or p.grad.zero_() inside the function",
            }.get(_change(now, before), "an in-place operation on p.grad (pow_, mul_, abs_, ...) or an assignment "
                  "into it")
