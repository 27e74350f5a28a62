"""05-output-dtypes, the judge.

The recorded dtypes equal those of one autocast forward, one per leaf module; no hook is left.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from harness.checks.lesson05.common import REDUCED
from harness.checks.lesson05.output_dtypes import dtype_calls
from harness.contract.case import Case
from harness.contract.compare import judged, type_name
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.recorded import recorded
from harness.contract.registry import judges
from harness.contract.wire import WireError
from harness.judges.lesson05.common import _name


def _first_tensor(output: Any) -> torch.Tensor:
    while isinstance(output, (tuple, list)):
        output = output[0]
    return output


@recorded(weights=False)  # the case's models are not seeded: their values do not matter here
def reference_output_dtypes(model: nn.Module, x: torch.Tensor, device_type: str,
                            dtype: torch.dtype) -> dict[str, torch.dtype]:
    """Output dtype of each leaf module during one autocast forward (first tensor of tuple outputs)."""
    seen: dict[str, torch.dtype] = {}
    handles = [
        module.register_forward_hook(lambda _m, _i, out, name=name: seen.__setitem__(name, _first_tensor(out).dtype))
        for name, module in model.named_modules()
        if not any(module.children())
    ]
    try:
        with torch.no_grad(), torch.autocast(device_type, dtype=dtype):
            model(x)
    finally:
        for handle in handles:
            handle.remove()
    return seen


@judges(
    "05-output-dtypes",
    hints=Hints(
        nudge="A forward hook (module.register_forward_hook) sees each module's output; register one on every leaf "
        "module (a module without children), run one forward inside torch.autocast, then remove the hooks.",
        concept="Autocast picks a dtype per operation; a forward hook receives (module, inputs, output) after the "
        "module ran, so output.dtype is what autocast chose. Hooks stay until their handle is removed.",
        solution="for name, m in model.named_modules(): if not any(m.children()): handles.append(m.register_forward_"
        "hook(lambda mod, inp, out, name=name: dtypes.__setitem__(name, out.dtype))); run the forward under "
        "torch.no_grad() and torch.autocast(device_type, dtype=dtype); finally: remove every handle.",
        section="3. What autocast does, seen from a running model",
    ),
    requires={
        "wrong-modules": Requirement("one entry per leaf module, named as in model.named_modules()",
                                     hint="Print the names you record next to list(model.named_modules()): which "
                                     "of them have children?"),
        "no-autocast": Requirement("runs the forward under torch.autocast(device_type, dtype=dtype)",
                                   hint="Every output you recorded is float32: was autocast on, for this device "
                                   "type, during the forward?"),
        "wrong-dtype": Requirement("records each module's output dtype (the first tensor of a tuple output)",
                                   hint="Which argument of the hook holds what the module returned, and what does "
                                   "a GRU return?"),
        "hooks-left": Requirement("removes every hook it adds",
                                  hint="What does register_forward_hook return, and what do you do with it after "
                                  "the forward?"),
        "builds-graph": Requirement("runs the forward without building a graph",
                                    hint="Nothing will call backward on this forward: which context manager tells "
                                    "autograd not to record it?"),
    },
)
def judge_output_dtypes(seen: dict, *, case: Case) -> str:
    """The recorded dtypes equal those of one autocast forward, one per leaf module; no hook is left."""
    for (model, x, dtype), result in judged(dtype_calls(case), seen["results"]):
        last_name = [name for name, _ in model.named_modules()][-1]
        _compare_dtypes(result["returned"], reference_output_dtypes(model, x, "cpu", dtype), dtype, last_name)
        grad_enabled = result["grad_enabled"]
        if not isinstance(grad_enabled, list) or not grad_enabled or not all(isinstance(g, bool) for g in grad_enabled):
            raise WireError("malformed observation: grad_enabled is not a nonempty list of booleans")
        if any(grad_enabled):
            fail(
                "builds-graph",
                observed="the forward ran with gradient recording on",
                expected="the forward under torch.no_grad() (or torch.inference_mode()): no graph is needed",
                cause="the forward is not wrapped in torch.no_grad(), so autograd records a graph nobody uses",
                where="the with-statement around the forward in output_dtypes",
            )
        added = result["hooks_added"]
        if added != 0:
            fail(
                "hooks-left",
                observed=f"the model has {added} more hooks after the call",
                expected="every hook removed before returning",
                cause="the handles returned by register_forward_hook were not removed; every later forward "
                "would keep running them",
                where="the end of output_dtypes: call handle.remove() on each handle (in a finally block)",
            )
    return "one autocast forward without a graph: the dtype of every leaf module's output matches (fp16 and " \
        "bf16; an MLP, a CNN in eval mode, a GRU), hooks removed"


def _compare_dtypes(got: Any, want: dict[str, torch.dtype], dtype: torch.dtype, last_name: str) -> None:
    """Fail on the first difference between the recorded dtypes `got` and the reference `want`; `last_name` is
    the last name model.named_modules() yields (where a hook reading the loop variable records everything)."""
    if isinstance(got, dict) and len(want) > 1 and set(got) == {last_name}:
        fail(
            "wrong-modules",
            observed=f"a single entry, for {last_name!r}, the last module of model.named_modules(), for a model "
            f"with {len(want)} leaf modules",
            expected=f"one entry per leaf module: {sorted(want)}",
            cause="late binding: each hook reads the loop variable `name` when it runs, after the loop has ended, "
            "so every hook records under the last name",
            where="the hook you register in the loop: bind the name when you create it (a default argument "
            "name=name, or functools.partial)",
            hint="When does a lambda defined inside a loop read the loop variable: when it is created, or when it "
            "is called?",
        )
    if not isinstance(got, dict) or set(got) != set(want):
        keys = sorted(got) if isinstance(got, dict) else type_name(got)
        fail(
            "wrong-modules",
            observed=f"entries for {keys}",
            expected=f"one entry per leaf module, named as in model.named_modules(): {sorted(want)}",
            cause="containers (the model itself, named '') are included, or leaf modules are missing",
            where="the loop over model.named_modules() and its test for children",
        )
    if all(d == torch.float32 for d in got.values()) and any(d in REDUCED for d in want.values()):
        fail(
            "no-autocast",
            observed="every output is float32",
            expected=f"layers such as Linear output {_name(dtype)}",
            cause="the forward ran outside torch.autocast, or autocast was given another device type or dtype",
            where="the `with torch.autocast(device_type, dtype=dtype):` around the forward",
        )
    wrong = {name: (_name(got[name]), _name(want[name])) for name in want if got[name] != want[name]}
    if wrong:
        fail(
            "wrong-dtype",
            observed=f"(recorded, actual) dtypes differ for {wrong}",
            expected=f"{ {name: _name(d) for name, d in want.items()} }",
            cause="the dtype was recorded from the module's input rather than its output, from another element of "
            "a tuple output than the first, or autocast was given another dtype than `dtype`",
            where="the forward hook: it receives (module, inputs, output); record the output's dtype",
        )
