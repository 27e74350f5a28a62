"""12-first-nonfinite, the judge.

The first non-finite module's name (None when all finite); no hooks left, even after an exception.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from harness.checks.lesson12.first_nonfinite import SCENARIOS, scenario_setup
from harness.contract.case import Case
from harness.contract.compare import judged, malformed, type_name
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges


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


def _first_bad_input(model: nn.Module, inputs: torch.Tensor) -> str | None:
    """Judge side: the first module, in the order forward pre-hooks fire, whose inputs are not all finite."""
    seen: list[str] = []

    def look(name: str) -> Any:
        return lambda _m, args: seen.append(name) if any(
            isinstance(a, torch.Tensor) and not bool(torch.isfinite(a).all()) for a in args) else None

    handles = [m.register_forward_pre_hook(look(name)) for name, m in model.named_modules()]
    try:
        with torch.no_grad():
            model(inputs)
    finally:
        for handle in handles:
            handle.remove()
    return seen[0] if seen else None


_CONTAINER_HINT = ("Which modules carry your hooks? A container's own forward (a torch.log inside it) can make the "
                   "value, and its hook fires after its children's.")


def _rule_answers(trace: list[tuple[str, bool, bool]], model: nn.Module,
                  inputs: torch.Tensor) -> dict[tuple[str, str | None], str | None]:
    """What each mistaken rule answers on this model (the judge replays each on its own trace): its cause and
    hint (None where the requirement's own hint fits) -> its answer."""
    bad = [name for name, finite, _ in trace if not finite]
    order = [name for name, _ in model.named_modules()]
    leaves = {name for name, m in model.named_modules() if not list(m.children())}
    return {
        ("the last non-finite module was kept (every module after the first is non-finite too): keep the first",
         None): bad[-1] if bad else None,
        ("the modules were scanned in definition order (named_modules()), not in the order they ran", None):
            min(bad, key=order.index) if bad else None,
        ("hooks only on leaf modules: a container's own forward can produce the value (torch.log in its forward)",
         _CONTAINER_HINT): next((n for n in bad if n in leaves), None),
        ("hooks only on the model's direct children (named_children()): the name of a container, not of the module "
         "inside it", "Print the names your hooks go on: do they include the modules inside a container (such as "
         "body.fc), or only the model's direct children?"): next((n for n in bad if n and "." not in n), None),
        ("the inputs of each module were tested (forward pre-hooks), so the module after the culprit is named: the "
         "first one to receive a non-finite value, not the one that produced it",
         "Does your hook look at what a module returns, or at what it receives?"): _first_bad_input(model, inputs),
    }


def _wrong_module_causes(got: Any, scenario: tuple[int, str], case: Case,
                         answers: dict[tuple[int, str], Any]) -> list[tuple[str, str | None]]:
    """The mistaken rules that give `got` on this scenario's model; where several do, those that also give the
    answers recorded for the other scenarios (when any does)."""
    model, inputs = scenario_setup(scenario[1], case, scenario[0])
    trace = _trace(model, inputs)
    bad = [name for name, finite, _ in trace if not finite]
    if bad and bad[0] == "" and got is None:  # the model itself made it: no rule with a hook on the root sees it
        return [("no hook on the model itself (named '' by named_modules(), its first entry): the model's own "
                 "forward made the NaN (a torch.log in it) and every module inside it is finite",
                 "Print list(model.named_modules())[0]: is the model itself among the modules you hook, and do "
                 "you keep a name that is the empty string?")]
    causes = [cause for cause, answer in _rule_answers(trace, model, inputs).items()
              if answer == got and answer != (bad[0] if bad else None)]
    if len(causes) < 2:
        return causes
    others = []
    for (index, name), answer in answers.items():
        if (index, name) != scenario:
            model, inputs = scenario_setup(name, case, index)
            others.append((_rule_answers(_trace(model, inputs), model, inputs), answer))
    consistent = [cause for cause in causes if all(rules[cause] == answer for rules, answer in others)]
    return consistent or causes


@judges(
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
        "error-swallowed": Requirement(
            "lets the exception of the forward pass propagate to the caller",
            hint="When model(inputs) raises inside your function, does the caller see the error? What does your "
            "except clause do with it?"),
    },
)
def judge_first_nonfinite(seen: dict, *, case: Case) -> str:
    """The first non-finite module's name (None when all finite); no hooks left, even after an exception."""
    recorded = seen["calls"] if isinstance(seen["calls"], list) else []
    answers = {scenario: call.get("returned") for scenario, call in zip(enumerate(SCENARIOS), recorded, strict=False)
               if scenario[1] != "error" and isinstance(call, dict) and "stopped" not in call
               and (call.get("returned") is None or isinstance(call.get("returned"), str))}  # to tell causes apart
    for (index, name), call in judged(list(enumerate(SCENARIOS)), seen["calls"]):
        if not isinstance(call.get("hooks_left"), int):
            malformed("hooks_left")
        if name == "error":
            if call["hooks_left"]:
                fail("hooks-left-on-error", observed=f"{call['hooks_left']} hooks still on the model after its "
                     "forward pass raised", expected="none: the hooks removed whatever happens",
                     cause="the removal runs after model(inputs) but not in a finally block, so the exception skips it",
                     where="wrap the forward in try: ... finally: for handle in handles: handle.remove()")
            raised = call.get("raised")
            if raised is not None and not isinstance(raised, str):
                malformed("raised")
            if raised != "RuntimeError":
                fail("error-swallowed", observed="the model's forward pass raised RuntimeError inside "
                     "first_nonfinite_module, and the call " + ("returned normally" if raised is None
                                                               else f"raised {raised} instead"),
                     expected="the RuntimeError, propagated to the caller",
                     cause="an except clause around model(inputs) that does not re-raise" if raised is None
                     else "the error was replaced by another one (a raise inside an except clause, or an error in "
                     "the except clause itself)", where="use try: ... finally: ... without except (or re-raise)")
            continue
        model, inputs = scenario_setup(name, case, index)
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
            causes = _wrong_module_causes(got, (index, name), case, answers)
            fail("wrong-module", observed=f"returned {got!r} for the {name} model",
                 expected=f"{want!r}" + (" (the model itself)" if want == "" else "") + ", the first module (in "
                 "execution order) whose output is not finite",
                 cause=causes[0][0] if len(causes) == 1 else "one of: " + "; ".join(c for c, _ in causes) if causes
                 else "a module other than the first non-finite one was kept (check the order your hooks fire in "
                 "and the name you store)", where="your hook and what it stores",
                 hint=causes[0][1] if len(causes) == 1 else None)
        if call["hooks_left"]:
            fail("hooks-left", observed=f"{call['hooks_left']} hooks still on the model after the call",
                 expected="none: a diagnostic leaves the model as it found it",
                 cause="the handles returned by register_forward_hook were not removed",
                 where="after the forward pass: for handle in handles: handle.remove()")
    return "the first non-finite module in execution order (NaN or inf), None when finite, hooks always removed"
