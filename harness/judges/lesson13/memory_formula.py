"""13-memory-formula, the judge: The four byte counts equal the formula, on every model and optimizer of the case."""

from __future__ import annotations

import torch
from torch import nn

from harness.checks.lesson13.memory_formula import memory_models
from harness.contract.case import Case
from harness.contract.compare import judged, type_name
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.recorded import recorded
from harness.contract.registry import judges

STATE_COPIES = {"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2}


KEYS = ("params", "grads", "optimizer", "total")


@recorded(weights=False)  # the case's models are not seeded: their values do not matter here
def reference_training_memory(model: nn.Module, optimizer: str) -> dict[str, int]:
    """The formula: parameters at their own element size (a tied weight once), gradients of the trainable
    ones, optimizer state of `STATE_COPIES[optimizer]` copies of the trainable ones."""
    params = list(model.parameters())  # deduplicated: a tied weight is one parameter
    sizes = {"params": sum(p.numel() * p.element_size() for p in params),
             "grads": sum(p.numel() * p.element_size() for p in params if p.requires_grad)}
    sizes["optimizer"] = STATE_COPIES[optimizer] * sizes["grads"]
    return {**sizes, "total": sum(sizes.values())}


@recorded(weights=False)  # its counts are the answer's lines with one slip each: withheld from the student course too
def params_miscounts(model: nn.Module) -> dict[str, int]:
    """The parameter bytes of `model` as each known mistake counts them (the keys of `_PARAMS_CAUSES`)."""
    params = list(model.parameters())
    elements = sum(p.numel() for p in params)
    every = [p for m in model.modules() for p in m.parameters(recurse=False)]  # a tied weight twice
    return {"elements": elements, "four-bytes": 4 * elements,
            "tied-twice": sum(p.numel() * p.element_size() for p in every),
            "frozen-left-out": sum(p.numel() * p.element_size() for p in params if p.requires_grad)}


# Each known miscount of the parameter bytes: its cause, and the hint for it.
_PARAMS_CAUSES = {
    "elements": ("elements were counted, not bytes (multiply numel() by element_size())",
                 "numel() counts values: how many bytes does one value of each parameter's dtype take?"),
    "four-bytes": ("4 bytes were assumed per element: a bfloat16 or float16 parameter has 2, a float64 one 8 "
                   "(use p.element_size())",
                   "Print p.dtype and p.element_size() for each parameter: are they all 4-byte floats?"),
    "tied-twice": ("a shared (tied) weight was counted twice: iterate over model.parameters(), which lists it once, "
                   "not over each module's own parameters or the state_dict",
                   "Two modules hold the same weight tensor: how many times does your loop meet it?"),
    "frozen-left-out": ("frozen parameters were left out: they take memory too (requires_grad=False only spares their "
                        "gradient)",
                        "Does a frozen parameter still sit in memory? Which of the three counts does requires_grad "
                        "change?"),
}


def _params_cause(got: int, want: int, miscounts: dict[str, int]) -> tuple[str, str | None]:
    """Which known mistake gives `got` as the parameter bytes, where the reference counts `want` and each mistake
    `miscounts` (candidates when none fits), and the hint for it (None when none fits: the requirement's own hint
    lists them all)."""
    # two mistakes that count alike: the later one's cause (the first's place in the order)
    candidates = {miscounts[mistake]: found for mistake, found in _PARAMS_CAUSES.items()}
    return next((found for value, found in candidates.items() if value == got and value != want),
                ("a different count: elements instead of bytes, a fixed 4 bytes per element, frozen parameters left "
                 "out, or a tied weight counted twice", None))


@judges(
    "13-memory-formula",
    hints=Hints(
        nudge="Each parameter costs numel() * element_size() bytes; its gradient the same if it is trained; "
        "the optimizer keeps 0, 1 or 2 more tensors like each trained parameter.",
        concept="Static training memory = parameters + gradients (trainable only) + optimizer state (SGD: none; "
        "momentum: one buffer; Adam/AdamW: exp_avg and exp_avg_sq). model.parameters() lists a tied weight once.",
        solution="params = list(model.parameters()); trained = [p for p in params if p.requires_grad]\n"
        "size = lambda ps: sum(p.numel() * p.element_size() for p in ps)\n"
        "grads = size(trained); optimizer = {'sgd': 0, 'momentum': 1, 'adam': 2, 'adamw': 2}[name] * grads",
        section="2. Where the memory goes",
    ),
    requires={
        "missing-key": Requirement(
            "returns a dict with exactly the keys params, grads, optimizer and total",
            hint="Print sorted(training_memory(model, 'sgd')): are the four keys spelled as the exercise says?"),
        "not-an-int": Requirement(
            "each value is an int number of bytes",
            hint="Print type(...) of each value: which one is a tensor or a float? sum() of Python ints is an int."),
        "wrong-params": Requirement(
            "params counts every parameter (frozen ones too) in bytes at its own dtype's size, a tied weight once",
            hint="Compare with the bytes of one small layer by hand: is yours counting elements, assuming 4 bytes, "
            "skipping frozen layers, or counting a shared weight twice?"),
        "wrong-grads": Requirement(
            "grads counts the trainable parameters only (requires_grad)",
            hint="Which parameters get a .grad in backward? Filter on p.requires_grad."),
        "wrong-optimizer-state": Requirement(
            "optimizer: no state for 'sgd', one copy of the trainable parameters for 'momentum', two for "
            "'adam' and 'adamw'",
            hint="What does each optimizer keep per parameter? Momentum: one velocity; Adam: two moments."),
        "wrong-total": Requirement(
            "total is the sum of the three others",
            hint="Print the four values and add the first three by hand."),
    },
)
def judge_memory_formula(seen: dict, *, case: Case) -> str:
    """The four byte counts equal the formula, on every model and optimizer of the case."""
    for (description, model, name), result in judged(memory_models(case), seen["results"]):
        got, want = result["returned"], reference_training_memory(model, name)
        miscounts = params_miscounts(model)  # on every model: the release records what the tree needs
        if not isinstance(got, dict) or sorted(got) != sorted(KEYS):
            fail("missing-key", observed=f"returned {type_name(got)}" + (f" with keys {sorted(got)}"
                                                                          if isinstance(got, dict) else ""),
                 expected=f"a dict with the keys {list(KEYS)}", cause="a key is missing or spelled differently, or "
                 "something other than a dict is returned", where="the return statement of training_memory")
        for key in KEYS:
            if type(got[key]) is not int:
                fail("not-an-int", observed=f"{key} is {type_name(got[key])} for {description}",
                     expected="an int (bytes)", cause="a tensor: the bytes were added up with torch "
                     "(torch.tensor(...), .sum() of a tensor) and not converted" if isinstance(got[key], torch.Tensor)
                     else "a float: a division (/ instead of //) or a float factor" if isinstance(got[key], float)
                     else f"a {type_name(got[key])}, not an int (a numpy number?)",
                     where=f"the line that computes {key}")
        if got["params"] != want["params"]:
            cause, hint = _params_cause(got["params"], want["params"], miscounts)
            fail("wrong-params", observed=f"params = {got['params']} for {description}",
                 expected=f"{want['params']} bytes", cause=cause, where="the line that computes params", hint=hint)
        if got["grads"] != want["grads"]:
            cause = ("frozen parameters were counted: they get no gradient" if got["grads"] == want["params"]
                     else "a different count of the trainable parameters' bytes")
            fail("wrong-grads", observed=f"grads = {got['grads']} for {description}", expected=f"{want['grads']}",
                 cause=cause, where="the line that computes grads (filter on p.requires_grad)")
        if got["optimizer"] != want["optimizer"]:
            copies = got["optimizer"] / want["grads"] if want["grads"] else float("nan")
            frozen_state = got["optimizer"] == STATE_COPIES[name] * want["params"] != want["optimizer"]
            fail("wrong-optimizer-state", observed=f"optimizer = {got['optimizer']} for {description} "
                 f"({copies:.3g} times the trainable parameters' bytes)",
                 expected=f"{want['optimizer']} ({STATE_COPIES[name]} copies of the trainable parameters for "
                 f"{name!r})", cause="state was counted for the frozen parameters too: the optimizer only holds "
                 "state for the parameters it trains" if frozen_state else f"the number of state tensors per "
                 f"parameter for {name!r} (SGD keeps none, momentum one buffer, Adam and AdamW two moments)",
                 where="the optimizer's entry of your formula",
                 hint="Does the optimizer keep a momentum buffer for a parameter it never updates? Which bytes do "
                 "you multiply by the number of state copies?" if frozen_state else None)
        if got["total"] != got["params"] + got["grads"] + got["optimizer"]:
            fail("wrong-total", observed=f"total = {got['total']} for {description}",
                 expected=f"params + grads + optimizer = {want['total']}", cause="the total leaves out or repeats a "
                 "part", where="the line that computes total")
    return "bytes of parameters, gradients and optimizer state, with frozen, tied and 16-bit parameters"
