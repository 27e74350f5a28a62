"""Checks of lesson 11 (interview drills): each task is a drill of the bank, re-cut into probe and judge.

A test cell passes the cell's namespace (`check("11-train-step", globals())`, or `{"answer": ...}` for an
explain drill). Each probe finds the drill's entry in it, runs it on inputs built from the case with the
drill's instrumentation (optimizer step hooks, autocast and GradScaler recorders, a host-sync counter) and
records what happened; each judge rebuilds the inputs, recomputes the reference (gradients, one AMP step,
the closed-form schedule, the epoch metrics, the uninterrupted training run) and decides with the drill's
own failure codes and messages. The notebook's cells (prompts, starters, solutions, hints, options) come from
the bank; these checks keep their own instruments, so a change to a drill's judge never changes a grade.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import tempfile
from pathlib import Path
from typing import Any, Iterator

import torch
from torch import nn

from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.instruments import AutocastProbe, HostSyncCounter, RecordingScaler, StepRecord, StepRecorder
from harness.contract.registry import judges, register
from harness.contract.wire import Opaque, WireError, describe
from harness.drills.bank.loop import _batches, _binary_task
from harness.drills.bank.schedulers import warmup_cosine_factor
from harness.drills.choices import LETTERS
from harness.drills.core import get_drill

# The drills of notebook 11, in order: (task id, drill id). Names the answers define must not collide.
NOTEBOOK_DRILLS: tuple[tuple[str, str], ...] = (
    ("11-train-step", "loop-train-step"),
    ("11-plain-list", "modules-plain-list"),
    ("11-why-eval", "modules-why-eval"),
    ("11-warmup-cosine", "schedulers-warmup-cosine"),
    ("11-amp-step", "amp-train-step"),
    ("11-epoch-metrics", "performance-epoch-metrics"),
    ("11-exact-resume", "checkpointing-exact-resume"),
)
_DRILL_OF = dict(NOTEBOOK_DRILLS)
# The notebook's sections (its `##` headings), by task: the notebook builder writes each one before its first drill.
SECTIONS: dict[str, str] = {
    "11-train-step": "1. The training step",
    "11-plain-list": "2. Modules",
    "11-why-eval": "2. Modules",
    "11-warmup-cosine": "3. Learning-rate schedules",
    "11-amp-step": "4. Mixed precision",
    "11-epoch-metrics": "5. Host syncs",
    "11-exact-resume": "6. Checkpoints",
}


# --- Instruments and references the checks share (the drills' own, from before the bank was cut in probe
# and judge; lesson 11's checks keep their own copy so that the bank can change without changing a grade). ---

def _data(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(16, 8, generator=gen)
    return x, x[:, :1] * 2.0


def _train_epochs(model, optimizer, scheduler, first: int, last: int) -> None:
    for _ in range(first, last):
        x = torch.randn(32, 6)  # drawn from the global RNG: resuming must restore it
        y = x.sum(1, keepdim=True)
        optimizer.zero_grad(set_to_none=True)
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        scheduler.step()


def _reference_grads(model: nn.Module, params: list[torch.Tensor], batch: tuple[torch.Tensor, torch.Tensor],
                     loss_fn: nn.Module) -> list[torch.Tensor]:
    """The gradient of `batch`'s loss at `params` (in model.parameters() order), computed independently."""
    named = {name: p.clone().requires_grad_(True)
             for (name, _), p in zip(model.named_parameters(), params, strict=True)}
    x, y = batch
    loss = loss_fn(torch.func.functional_call(model, named, (x,)), y)
    return list(torch.autograd.grad(loss, list(named.values())))


def _check_fresh_gradients(model: nn.Module, records: list, batches: list, loss_fn: nn.Module, where: str) -> None:
    """Fail unless each recorded optimizer step used exactly the gradient of its own batch."""
    for k in range(1, min(len(records), 3)):
        reference = _reference_grads(model, records[k].params, batches[k % len(batches)], loss_fn)
        seen = records[k].grads
        if any(g is None for g in seen) or not all(torch.allclose(g, r, atol=1e-6)
                                                   for g, r in zip(seen, reference, strict=True)):
            fail("missing-zero-grad",
                 observed=f"the gradient the optimizer used at step {k + 1} is not the gradient of batch {k + 1}",
                 expected=f"only batch {k + 1}'s gradient at step {k + 1}",
                 cause=f"gradients accumulate in .grad: without zero_grad, step {k + 1} uses the sum of all earlier "
                 "batches' gradients (or step() ran before backward() and used the previous batch's gradient)",
                 where=where)


def require_warmup_cosine_factor(got: float, step: int, warmup: int, total: int) -> None:
    """Fail with `wrong-factor` unless `got` is the reference factor at (step, warmup, total)."""
    want = warmup_cosine_factor(step, warmup, total)
    if not math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9):
        phase = "warmup" if step < warmup else ("after the end" if step >= total else "cosine decay")
        fail("wrong-factor", observed=f"warmup_cosine({step}, {warmup}, {total}) = {got:.6f} ({phase})",
             expected=f"{want:.6f}", cause="linear warmup reaches 1 at the last warmup step ((step+1)/warmup); "
             "the cosine runs from 1 at step=warmup to 0 at step=total and stays 0 after",
             where=f"the {phase} branch")


def _hints(task_id: str, solution: str) -> Hints:
    """The drill's two hints as the nudge and the concept, `solution` as the last level, and the task's section."""
    nudge, concept = get_drill(_DRILL_OF[task_id]).hints[:2]
    return Hints(nudge=nudge, concept=concept, solution=solution, section=SECTIONS[task_id])


def _missing_entry(name: str) -> dict[str, Requirement]:
    """The requirement row every answer that defines `name` has: the test cell finds it under that name."""
    return {"missing-entry": Requirement(
        f"the answer defines `{name}` under that name",
        hint=f"The check looks for `{name}` in the cell's names: was it renamed, or was its cell not run?")}


def _entry(namespace: Any, name: str) -> Any:
    """The object the answer defines as `name` in the namespace passed to check(); fail when there is none."""
    if not isinstance(namespace, dict) or name not in namespace:
        fail("missing-entry", observed=f"your answer defines no `{name}`",
             expected=f"a definition of `{name}`, as in the drill's cell",
             cause="the name was changed or the definition deleted, or its cell was not run",
             where="the drill's solution cell, and the namespace passed to check()")
    return namespace[name]


@contextlib.contextmanager
def _global_rng(seed: int) -> Iterator[None]:
    """Seed torch's global CPU generator for the block, and restore its state afterwards."""
    with torch.random.fork_rng(devices=[]):
        torch.random.default_generator.manual_seed(seed)
        yield


def _require(condition: bool, what: str) -> None:
    """Raise unless the observation has the structure its probe builds (only a forged one lacks it)."""
    if not condition:
        raise WireError(f"malformed observation: {what}")


def _tensors_like(values: Any, like: list[torch.Tensor], what: str, *, none_ok: bool = False) -> list:
    """`values`, checked to be a list of tensors with the shapes of `like` (or None where `none_ok`)."""
    _require(isinstance(values, list) and len(values) == len(like), f"{what}: {len(like)} entries")
    for value, reference in zip(values, like, strict=True):
        if value is None and none_ok:
            continue
        _require(isinstance(value, torch.Tensor) and value.shape == reference.shape, f"{what}: shapes")
    return values


def _number(value: Any) -> float | None:
    """`value` as a float when it is a Python number or a one-element tensor; None otherwise."""
    if isinstance(value, (bool, Opaque)):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.device.type != "meta":
        return float(value)
    return None




# --- 11-train-step (loop-train-step) -------------------------------------------------------------------------

_STEP_SEEDS = (0, 1)
_STEP_LR = 0.1


def _train_step_inputs(case: Case, seed: int) -> tuple[nn.Module, list[tuple[torch.Tensor, torch.Tensor]]]:
    """The model and the two batches of one run: a seeded Linear(8, 1) on a seeded binary task."""
    with _global_rng(case.seeded(seed)):
        model = nn.Linear(8, 1)
    x, y = _binary_task(case.seeded(seed), 64)
    return model, _batches(x, y)[:2]


@register(
    "11-train-step",
    hints=_hints("11-train-step", "optimizer.zero_grad(set_to_none=True); loss = loss_fn(model(x), y); "
                 "loss.backward(); optimizer.step(); return loss.detach()"),
    requires={
        **_missing_entry("train_step"),
        "step-count": Requirement("one optimizer step per call",
                                  hint="Count the optimizer steps one call of train_step takes: "
                                  "how many should there be?"),
        "update-outside-step": Requirement(
            "the parameters change only through optimizer.step()",
            hint="Something besides optimizer.step() changed the weights between two steps: what else writes to them?"),
        "missing-zero-grad": Requirement(
            "each step uses the gradient of its own batch",
            hint="Step 2 did not use batch 2's gradient alone: what clears .grad, and does backward run before step?"),
        "not-a-tensor": Requirement(
            "returns the loss as a tensor (no .item(): it would sync the host every step)",
            hint="What type does train_step return? The text asks for a tensor, not a Python number."),
        "not-detached": Requirement(
            "the returned loss is detached from the graph",
            hint="The returned loss still requires grad: it keeps the whole graph of the step alive."),
        "wrong-loss": Requirement(
            "the returned loss is the batch's loss at the weights the step started from",
            hint="The returned value is not the loss the step trained on: when, and on what, was it computed?"),
    },
)
def probe_train_step(namespace: dict, *, case: Case) -> dict:
    """Call `train_step` on two batches per seed; record what the optimizer saw at each step and what it returned."""
    train_step = _entry(namespace, "train_step")
    runs, returned = [], []
    for seed in _STEP_SEEDS:
        model, batches = _train_step_inputs(case, seed)
        optimizer = torch.optim.SGD(model.parameters(), lr=_STEP_LR)
        with StepRecorder(optimizer) as steps:
            for batch in batches:
                out = train_step(model, batch, nn.BCEWithLogitsLoss(), optimizer)
                returned.append({"value": out.detach().clone(), "requires_grad": out.requires_grad}
                                if isinstance(out, torch.Tensor) else {"value": out})
        runs.append([{"grads": r.grads, "params": r.params} for r in steps.records])
    return {"runs": runs, "returned": returned}


@judges("11-train-step")
def judge_train_step(seen: dict, *, case: Case) -> str:
    """One SGD step per call, each with the gradient of its own batch at the parameters it started from."""
    _require(isinstance(seen.get("runs"), list), "runs")
    for seed, steps in zip(_STEP_SEEDS, seen["runs"], strict=True):
        model, batches = _train_step_inputs(case, seed)
        _require(isinstance(steps, list) and all(isinstance(s, dict) for s in steps), "steps")
        if len(steps) != 2:
            fail("step-count", observed=f"{len(steps)} optimizer steps for 2 calls", expected="one step per call",
                 cause="optimizer.step() missing or called twice", where="the end of train_step")
        like = list(model.parameters())
        records = [StepRecord(grad_norm=0.0, params=_tensors_like(s.get("params"), like, "params"),
                              grads=_tensors_like(s.get("grads"), like, "grads", none_ok=True), lrs=[])
                   for s in steps]
        _check_step_trajectory(like, records)
        _check_fresh_gradients(model, records, batches, nn.BCEWithLogitsLoss(),
                               where="call optimizer.zero_grad(set_to_none=True) before loss.backward(), then step()")
    returned = seen.get("returned")
    _require(isinstance(returned, list) and len(returned) == 2 * len(_STEP_SEEDS)
             and all(isinstance(r, dict) for r in returned), "returned")
    for index, (seed, steps) in enumerate(zip(_STEP_SEEDS, seen["runs"], strict=True)):
        model, batches = _train_step_inputs(case, seed)
        for k, (batch, step) in enumerate(zip(batches, steps, strict=True)):
            _check_returned_loss(returned[2 * index + k], model, step["params"], batch, k)
    return "one step per batch with that batch's gradient; returns that batch's loss, detached"


def _check_returned_loss(result: dict, model: nn.Module, params: list[torch.Tensor],
                         batch: tuple[torch.Tensor, torch.Tensor], k: int) -> None:
    """Fail unless call `k` returned a detached tensor holding its batch's loss at the step's starting weights."""
    value = result.get("value")
    if not isinstance(value, torch.Tensor):
        cause = {"float": "the loss was converted with .item() or float(): a host sync every step, which the text "
                 "rules out", "NoneType": "train_step has no return statement"}.get(
                 type(value).__name__, "something other than the loss tensor is returned")
        fail("not-a-tensor", observed=f"train_step returned {describe(value)}", expected="the loss, as a tensor",
             cause=cause, where="the return statement of train_step")
    if result.get("requires_grad") is not False:
        fail("not-detached", observed="the returned loss requires grad", expected="a detached tensor (loss.detach())",
             cause="the loss is returned as it is: a caller that keeps it keeps each step's whole graph in memory",
             where="the return statement of train_step")
    x, y = batch
    names = [name for name, _ in model.named_parameters()]
    with torch.no_grad():
        want = nn.BCEWithLogitsLoss()(torch.func.functional_call(model, dict(zip(names, params, strict=True)), (x,)), y)
    if value.shape != want.shape or not torch.allclose(value.double(), want.double(), rtol=1e-5, atol=1e-6):
        got = f"{value.item():.6f}" if value.numel() == 1 else describe(value)
        fail("wrong-loss", observed=f"call {k + 1} returned {got}",
             expected=f"the loss of batch {k + 1} at the weights the step started from: {want.item():.6f}",
             cause="the loss returned is not the one backward ran on: recomputed after optimizer.step(), "
             "reduced differently, or of another batch",
             where="return the very loss you called backward() on, detached")


def _check_step_trajectory(initial: list[torch.Tensor], records: list[StepRecord]) -> None:
    """Fail unless the first step starts from the initial weights and each next one from SGD's update."""
    expected = [p.detach() for p in initial]
    for k, record in enumerate(records):
        if not all(torch.allclose(p, e, rtol=1e-6, atol=1e-7) for p, e in zip(record.params, expected, strict=True)):
            fail("update-outside-step",
                 observed=f"the parameters at optimizer step {k + 1} are not the ones "
                 + ("the model started with" if k == 0 else f"optimizer step {k} left"),
                 expected="parameters that change only through optimizer.step()",
                 cause="the parameters were re-initialised or updated by hand inside train_step",
                 where="train_step must leave the update to optimizer.step()")
        expected = [p if g is None else p - _STEP_LR * g for p, g in zip(record.params, record.grads, strict=True)]


# --- 11-plain-list (modules-plain-list) ----------------------------------------------------------------------

_MLP_SIZES = ((4, 8, 8, 2), (3, 5, 1), (6, 7, 7, 7, 3))


def _mlp_input(case: Case, index: int) -> torch.Tensor:
    """The batch of two inputs fed to the MLP built with `_MLP_SIZES[index]`."""
    generator = torch.Generator().manual_seed(case.seeded(index))
    return torch.randn(2, _MLP_SIZES[index][0], generator=generator)


@register(
    "11-plain-list",
    hints=_hints("11-plain-list",
                 "self.hidden = nn.ModuleList([nn.Linear(a, b) for a, b in zip(sizes[:-2], sizes[1:-1])])"),
    requires={
        **_missing_entry("MLP"),
        "unregistered-layers": Requirement(
            "every layer's weights are registered (the optimizer and .to() see them)",
            hint="Count model.parameters(): some layers are missing. How does nn.Module find its submodules?"),
        "wrong-shape": Requirement("the output has one row per input and sizes[-1] columns",
                                   hint="Print the output's shape for sizes [4, 8, 8, 2]: is every layer applied?"),
        "wrong-output": Requirement(
            "the forward is the starter's: each hidden layer then ReLU, then the output layer",
            hint="The fix should change how the layers are stored, not what forward computes: "
            "compare with the starter."),
    },
)
def probe_plain_list(namespace: dict, *, case: Case) -> dict:
    """Build `MLP(sizes)` for each size list; record its parameters and its output on a seeded batch."""
    mlp = _entry(namespace, "MLP")
    results = []
    for index, sizes in enumerate(_MLP_SIZES):
        with _global_rng(case.seeded(10 + index)):
            model = mlp(list(sizes))
        results.append({"params": [p.detach() for p in model.parameters()], "output": model(_mlp_input(case, index))})
    return {"results": results}


def _reference_mlp(params: list[torch.Tensor], sizes: tuple[int, ...], x: torch.Tensor) -> torch.Tensor | None:
    """The starter's forward (Linear-ReLU chain) with the registered parameters; None if they form no chain."""
    unused = list(params)

    def take(shape: tuple[int, ...]) -> torch.Tensor | None:
        found = next((p for p in unused if tuple(p.shape) == shape), None)
        if found is not None:
            unused.remove(found)
        return found

    layers = [(take((b, a)), take((b,))) for a, b in zip(sizes[:-1], sizes[1:], strict=True)]
    if any(w is None or b is None for w, b in layers):
        return None
    for index, (weight, bias) in enumerate(layers):
        x = nn.functional.linear(x, weight.detach(), bias.detach())
        x = torch.relu(x) if index < len(layers) - 1 else x
    return x


@judges("11-plain-list")
def judge_plain_list(seen: dict, *, case: Case) -> str:
    """Every layer's parameters are registered, and the output is the chained MLP's."""
    _require(isinstance(seen.get("results"), list), "results")
    for index, (sizes, result) in enumerate(zip(_MLP_SIZES, seen["results"], strict=True)):
        params, out = result.get("params"), result.get("output")
        _require(isinstance(params, list) and all(isinstance(p, torch.Tensor) for p in params), "params")
        expected = sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:], strict=True))
        got = sum(p.numel() for p in params)
        if got != expected:
            fail("unregistered-layers", observed=f"model.parameters() holds {got} numbers for sizes {sizes}",
                 expected=f"{expected}", cause="layers kept in a plain Python list are invisible to nn.Module: "
                 "the optimizer never sees them and .to(device) never moves them", where="use nn.ModuleList")
        if not isinstance(out, torch.Tensor) or out.shape != (2, sizes[-1]):
            shape = tuple(out.shape) if isinstance(out, torch.Tensor) else describe(out)
            fail("wrong-shape", observed=f"output shape {shape}", expected=f"(2, {sizes[-1]})",
                 cause="the layers are not chained", where="forward")
        reference = _reference_mlp(params, sizes, _mlp_input(case, index))
        if reference is None or not torch.allclose(out.detach().double(), reference.double(), rtol=1e-4, atol=1e-5):
            fail("wrong-output", observed=f"the output for sizes {sizes} differs from Linear layers of sizes {sizes} "
                 "chained with ReLU, computed from your model's own parameters",
                 expected="each hidden layer then ReLU, then the output layer", cause="the layers are not chained "
                 "as in the starter, or a layer is applied twice or skipped", where="forward")
    return "every layer registered and reachable by the optimizer"


# --- 11-why-eval (modules-why-eval) --------------------------------------------------------------------------

@register(
    "11-why-eval",
    hints=_hints("11-why-eval", "answer_why_eval = " + get_drill("modules-why-eval").solution.split("=", 1)[1].strip()),
    requires={
        "no-choice": Requirement('the answer is one letter of the choices: answer = "<letter>"',
                                 hint='Set the answer to one of the letters "a", "b", "c" or "d", as a string.'),
        "wrong-choice": Requirement(
            "the answer is the right choice",
            hint="Run the experiment below the test cell: which of the four things did model.eval() change?"),
    },
)
def probe_why_eval(namespace: dict, *, case: Case) -> dict:
    """Record the chosen letter."""
    return {"answer": _entry(namespace, "answer")}


@judges("11-why-eval")
def judge_why_eval(seen: dict, *, case: Case) -> str:
    """The drill's own multiple-choice check, on the letter alone (one letter: "ab" is no choice)."""
    answer = seen.get("answer")
    if isinstance(answer, str) and len(answer.strip()) != 1:
        fail("no-choice", observed=f"answer = {answer!r}", expected="one letter: 'a', 'b', 'c' or 'd'",
             cause="more or less than one letter", where="the line `answer_why_eval = ...`")
    choices = get_drill(_DRILL_OF["11-why-eval"]).choices
    letter = answer.strip().lower() if isinstance(answer, str) else None
    if letter not in tuple(LETTERS):
        fail("no-choice", observed=f"answer = {answer!r}", expected="one of 'a', 'b', 'c', 'd'",
             cause="the starter's answer was not replaced", where="the line `answer_why_eval = ...`")
    chosen = LETTERS.index(letter)
    if chosen != choices.key:
        fail("wrong-choice", observed=f"you chose {answer!r}: {choices.options[chosen].text}",
             expected="another choice", cause=choices.options[chosen].why,
             where="the experiment below the test cell, and what it prints")
    return choices.options[choices.key].why


# --- 11-warmup-cosine (schedulers-warmup-cosine) -------------------------------------------------------------

_LAMBDA_LR = 0.1


def _schedule_points(case: Case) -> list[tuple[int, int, int]]:
    """(step, warmup, total) triples: each phase's boundaries, for several schedules (one more when hidden)."""
    shapes = [(5, 50), (1, 10), (10, 10), (3, 1000), (0, 20)]
    if case.hidden:
        shapes.append((2 + case.seed % 5, 30 + case.seed % 11))
    return [(step, warmup, total) for warmup, total in shapes
            for step in sorted({0, 1, max(warmup - 1, 0), warmup, (warmup + total) // 2, total - 1, total, total + 5})]


@register(
    "11-warmup-cosine",
    hints=_hints("11-warmup-cosine", "return (step + 1) / warmup if step < warmup else "
                 "0.5 * (1 + math.cos(math.pi * min((step - warmup) / max(1, total - warmup), 1.0)))"),
    requires={
        **_missing_entry("warmup_cosine"),
        "wrong-factor": Requirement(
            "(step + 1) / warmup during warmup, then the cosine from 1 to 0 at total, 0 after total; LambdaLR uses it",
            hint="The message names the step and the phase: compute that factor by hand from the formula."),
    },
)
def probe_warmup_cosine(namespace: dict, *, case: Case) -> dict:
    """Evaluate `warmup_cosine` at each point of the case; plug it into LambdaLR and record the first LR."""
    factor = _entry(namespace, "warmup_cosine")
    values: list[float | dict] = []
    for step, warmup, total in _schedule_points(case):
        try:
            values.append(float(factor(step, warmup, total)))
        except Exception as error:  # reported at its point, after the points before it were judged
            values.append({"raised": f"{type(error).__name__}: {error}"[:200]})
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=_LAMBDA_LR)
    torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: factor(s, 5, 50))
    return {"values": values, "lambda_lr": float(optimizer.param_groups[0]["lr"])}


@judges("11-warmup-cosine")
def judge_warmup_cosine(seen: dict, *, case: Case) -> str:
    """Each value matches the closed form; LambdaLR starts at lr * factor(0)."""
    points, values = _schedule_points(case), seen.get("values")
    _require(isinstance(values, list) and all(isinstance(v, (float, dict)) for v in values), "values")
    for (step, warmup, total), got in zip(points, values, strict=True):
        want = warmup_cosine_factor(step, warmup, total)
        if isinstance(got, dict):
            error = str(got.get("raised"))[:200]
            zeros = [name for name, value in (("warmup", warmup), ("total - warmup", total - warmup)) if value == 0]
            by_zero = error.startswith("ZeroDivisionError") and zeros
            fail("raised", observed=f"warmup_cosine({step}, {warmup}, {total}) raised {error}", expected=f"{want:.6f}",
                 cause=f"a division by {' or '.join(zeros)}, which is 0 here" if by_zero else "see the error",
                 where="guard that division, as in max(1, total - warmup)" if by_zero else "warmup_cosine")
        require_warmup_cosine_factor(got, step, warmup, total)
    first, want = seen.get("lambda_lr"), _LAMBDA_LR * warmup_cosine_factor(0, 5, 50)
    _require(isinstance(first, float), "lambda_lr")
    if not math.isclose(first, want, rel_tol=1e-6):
        fail("wrong-factor",
             observed=f"LambdaLR(lr={_LAMBDA_LR}) with warmup_cosine(step, 5, 50) started at lr {first:.6f}",
             expected=f"{want:.6f}", cause="the factor LambdaLR receives differs from the one returned when called "
             "directly", where="warmup_cosine's return value")
    return "matches the closed form in warmup, decay and after the end, and plugs into LambdaLR"


# --- 11-amp-step (amp-train-step) ----------------------------------------------------------------------------

_AMP_LR, _AMP_MAX_NORM, _AMP_SCALE = 0.01, 1.0, 2.0**10


def _amp_model(case: Case, run: int) -> AutocastProbe:
    """The seeded model of run `run` (0: a normal step, 1: a step whose gradients are infinite)."""
    with _global_rng(case.seeded(run)):
        return AutocastProbe()


@register(
    "11-amp-step",
    hints=_hints("11-amp-step", 'with torch.autocast("cpu", dtype=torch.bfloat16): loss = loss_fn(model(x), y); '
                 "scaler.scale(loss).backward(); scaler.unscale_(optimizer); "
                 "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm); scaler.step(optimizer); "
                 "scaler.update()"),
    requires={
        **_missing_entry("amp_step"),
        "no-autocast": Requirement("the forward and the loss run under bf16 autocast on the CPU",
                                   hint="Which context makes the forward run in bfloat16, and what must it wrap?"),
        "backward-inside-autocast": Requirement(
            "backward runs outside autocast", hint="Where does the autocast block end, and is backward inside it?"),
        "missing-update": Requirement("the scaler updates its scale after each step",
                                      hint="After an inf gradient the scale must shrink: which scaler call adapts it?"),
        "missing-unscale": Requirement(
            "gradients are unscaled before clipping", hint="Clipping needs the true gradients: which scaler call "
            "divides the scale out of them before clip_grad_norm_?"),
        "scaler-order": Requirement(
            "scale, unscale_, step and update, each once, in that order",
            hint="Compare the scaler calls the message lists with the order a scaled step needs."),
        "inf-step-applied": Requirement(
            "a step whose gradients are not finite is skipped",
            hint="A step ran on infinite gradients: which call steps the optimizer only when they are finite?"),
        "stale-gradients": Requirement(
            "each step uses its own batch's gradient (the gradients left in .grad are cleared first)",
            hint="The step used more than this batch's gradient: what was already in .grad before backward?"),
        "wrong-update": Requirement(
            "the step uses the unscaled gradient clipped to max_norm",
            hint="The weights moved by the wrong amount: compare the update with lr times the clipped gradient."),
    },
)
def probe_amp_step(namespace: dict, *, case: Case) -> dict:
    """Run `amp_step` once normally and once on infinite gradients; record autocast, scaler calls, weights."""
    amp_step = _entry(namespace, "amp_step")
    model = _amp_model(case, 0)
    scaler = RecordingScaler(init_scale=_AMP_SCALE)
    optimizer = torch.optim.SGD(model.parameters(), lr=_AMP_LR)
    for parameter, stale in zip(model.parameters(), _amp_stale_grads(case), strict=True):
        parameter.grad = stale.clone()  # what an earlier step left behind
    amp_step(model, _data(case.seeded(0)), nn.MSELoss(), optimizer, scaler, _AMP_MAX_NORM)
    blown = _amp_model(case, 1)
    blown.linear.weight.register_hook(lambda g: torch.full_like(g, float("inf")))
    blown_optimizer = torch.optim.SGD(blown.parameters(), lr=_AMP_LR)
    blown_scaler = RecordingScaler(init_scale=_AMP_SCALE)
    with StepRecorder(blown_optimizer) as steps:
        amp_step(blown, _data(case.seeded(1)), nn.MSELoss(), blown_optimizer, blown_scaler, _AMP_MAX_NORM)
    return {"forward_autocast": list(model.forward_autocast), "backward_autocast": list(model.backward_autocast),
            "calls": list(scaler.calls), "params": [p.detach() for p in model.parameters()],
            "inf_steps": len(steps.records), "inf_weight": blown.linear.weight.detach(),
            "inf_scale": float(blown_scaler.get_scale())}


def _amp_reference_grads(case: Case) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The initial parameters of run 0 and the unscaled (not yet clipped) gradient of its bf16 autocast loss."""
    model = _amp_model(case, 0)
    initial = [p.detach().clone() for p in model.parameters()]
    x, y = _data(case.seeded(0))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = nn.MSELoss()(model(x), y)
    grads = torch.autograd.grad(loss * _AMP_SCALE, list(model.parameters()))
    return initial, [g / _AMP_SCALE for g in grads]


def _amp_stale_grads(case: Case) -> list[torch.Tensor]:
    """The gradients left in .grad before run 0's step, as a scaled backward leaves them (at the scale's size, so that
    leaving them in changes the step far beyond rounding)."""
    generator = torch.Generator().manual_seed(case.seeded(7))
    return [torch.randn(p.shape, generator=generator) * _AMP_SCALE for p in _amp_model(case, 0).parameters()]


def _clipped(grads: list[torch.Tensor], max_norm: float) -> list[torch.Tensor]:
    """`grads` scaled as clip_grad_norm_ scales them."""
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    return [g * torch.clamp(max_norm / (norm + 1e-6), max=1.0) for g in grads]


@judges("11-amp-step")
def judge_amp_step(seen: dict, *, case: Case) -> str:
    """Autocast and scaler order as observed; the weights after one step and after an inf step recomputed."""
    forward, backward, calls = seen.get("forward_autocast"), seen.get("backward_autocast"), seen.get("calls")
    for name, flags in (("forward_autocast", forward), ("backward_autocast", backward)):
        _require(isinstance(flags, list) and all(isinstance(f, bool) for f in flags), name)
    _require(isinstance(calls, list) and all(isinstance(c, str) for c in calls), "calls")
    if not forward or not all(forward):
        fail("no-autocast", observed="the forward pass ran without autocast", expected="forward and loss under "
             "torch.autocast('cpu', dtype=torch.bfloat16)", cause="no autocast context",
             where="around model(x) and loss_fn")
    if any(backward):
        fail("backward-inside-autocast", observed="gradients were computed with autocast still enabled",
             expected="backward outside the autocast block",
             cause="loss.backward() indented inside `with torch.autocast`",
             where="dedent the backward call")
    _judge_inf_step_skipped(seen, case, calls)
    expected = ["scale", "unscale_", "step", "update"]
    if calls != expected:
        code, cause = _scaler_call_mistake(calls)
        fail(code, observed=f"scaler calls: {calls}", expected=f"{expected}", cause=cause,
             where="scaler.scale(loss).backward(); scaler.unscale_(opt); clip; scaler.step(opt); scaler.update()")
    _judge_scale_backed_off(seen)
    _judge_amp_update(seen, case)
    return "autocast around forward+loss, backward outside, scale/unscale_/step/update in order, inf steps skipped"


def _scaler_call_mistake(calls: list[str]) -> tuple[str, str]:
    """The failure code and cause of a scaler call sequence other than scale, unscale_, step, update."""
    before_step = calls[: calls.index("step")] if "step" in calls else calls
    if "update" not in calls:
        return "missing-update", "scaler.update() is never called: the scale never adapts (it must shrink after an " \
            "inf step and grow back later)"
    if "unscale_" not in before_step:
        if "unscale_" in calls:
            return "missing-unscale", "scaler.unscale_(optimizer) is not called before clipping: scaler.step() " \
                "unscaled the gradients itself, after clip_grad_norm_ had clipped the scaled ones"
        return "missing-unscale", "scaler.unscale_ never ran: clipping, if any, saw the scaled gradients"
    return "scaler-order", "a scaler call is repeated or out of order: scale before backward, unscale_ before " \
        "clipping, step, then update last"


def _judge_inf_step_skipped(seen: dict, case: Case, calls: list[str]) -> None:
    """Fail unless the step on infinite gradients was skipped: no optimizer step, the weights unchanged."""
    initial = _amp_model(case, 1).linear.weight.detach()
    weight, steps = seen.get("inf_weight"), seen.get("inf_steps")
    _require(isinstance(weight, torch.Tensor) and weight.shape == initial.shape, "inf_weight")
    _require(isinstance(steps, int) and not isinstance(steps, bool), "inf_steps")
    if steps or not torch.equal(initial, weight):
        observed = (f"{steps} optimizer step(s) ran on infinite gradients" if steps
                    else "the weights changed although the gradients were infinite")
        cause = ("optimizer.step() is called directly: scaler.step(optimizer) never ran, and it is the call that "
                 "skips a step whose gradients hold inf or nan" if "step" not in calls
                 else "the weights were changed outside scaler.step (optimizer.step() called as well, or an update "
                 "by hand)")
        fail("inf-step-applied", observed=observed, expected="the step skipped, the weights unchanged",
             cause=cause, where="step only through scaler.step(optimizer)")


def _judge_scale_backed_off(seen: dict) -> None:
    """Fail unless the scale backed off after the step on infinite gradients."""
    scale = seen.get("inf_scale")
    _require(isinstance(scale, float), "inf_scale")
    if scale >= _AMP_SCALE:
        fail("missing-update", observed="the scale did not back off after an inf gradient", expected="scale halved",
             cause="scaler.update() ran, but not on the skipped step's record: the scale was reset or set by hand, "
             "or the scaler passed in is not the one that stepped", where="scaler.step(optimizer); scaler.update()")


def _judge_amp_update(seen: dict, case: Case) -> None:
    """Fail unless the normal step moved the weights by lr times the unscaled gradient clipped to max_norm."""
    initial, grads = _amp_reference_grads(case)
    params = _tensors_like(seen.get("params"), initial, "params")
    moved = [p.detach() - p0 for p, p0 in zip(params, initial, strict=True)]

    def matches(candidate: list[torch.Tensor]) -> bool:
        return all(torch.allclose(m, -_AMP_LR * g, rtol=2e-2, atol=1e-6) for m, g in zip(moved, candidate, strict=True))

    if matches(_clipped(grads, _AMP_MAX_NORM)):
        return
    stale = [g + s / _AMP_SCALE for g, s in zip(grads, _amp_stale_grads(case), strict=True)]
    if matches(_clipped(stale, _AMP_MAX_NORM)) or matches(stale):
        fail("stale-gradients", observed="the step used this batch's gradient plus what was already in .grad",
             expected="only this batch's gradient", cause="no optimizer.zero_grad(set_to_none=True) before backward: "
             "backward adds to .grad", where="the first line of amp_step")
    if matches(grads):
        cause = "the gradients were not clipped to max_norm"
    elif matches([g / _AMP_SCALE for g in _clipped([g * _AMP_SCALE for g in grads], _AMP_MAX_NORM)]):
        cause = "clip_grad_norm_ ran on the scaled gradients, before scaler.unscale_"
    else:
        cause = "the update is not one scaler.step() with the unscaled gradient clipped to max_norm"
    size = float(torch.linalg.vector_norm(torch.cat([m.flatten() for m in moved])))
    fail("wrong-update", observed=f"one amp_step moved the weights by a norm of {size:.3g}",
         expected=f"lr * the clipped gradient: a norm of {_AMP_LR * _AMP_MAX_NORM:.3g} (max_norm={_AMP_MAX_NORM:g})",
         cause=cause, where="scaler.unscale_(optimizer); clip_grad_norm_(model.parameters(), max_norm); scaler.step")


# --- 11-epoch-metrics (performance-epoch-metrics) ------------------------------------------------------------

def _metrics_inputs(case: Case) -> tuple[nn.Module, list[list[tuple[torch.Tensor, torch.Tensor]]]]:
    """A seeded Linear(6, 3) in eval mode and two epochs of batches (3 and 12 batches of 8, the last one of 5)."""
    with _global_rng(case.seeded(0)):
        model = nn.Linear(6, 3).eval()
    generator = torch.Generator().manual_seed(case.seeded(1))
    epochs = [[(torch.randn(size, 6, generator=generator), torch.randint(0, 3, (size,), generator=generator))
               for size in [8] * (n_batches - 1) + [5]] for n_batches in (3, 12)]
    return model, epochs


@register(
    "11-epoch-metrics",
    hints=_hints("11-epoch-metrics", "total_loss += loss_fn(out, y) * len(y); correct += (out.argmax(1) == y).sum(); "
                 "return (total_loss / count).item(), (correct / count).item()"),
    requires={
        **_missing_entry("epoch_metrics"),
        "wrong-value": Requirement(
            "returns the same numbers: the mean loss and accuracy over all samples of the epoch",
            hint="The numbers changed: is each batch weighted by its size, and are both returned as numbers?"),
        "sync-per-step": Requirement(
            "at most two host syncs per epoch, whatever the number of batches",
            hint="Count the calls that bring a value to Python inside the loop (.item(), float(), int(), print)."),
    },
)
def probe_epoch_metrics(namespace: dict, *, case: Case) -> dict:
    """Call `epoch_metrics` on each epoch under a host-sync counter; record the results and the syncs."""
    epoch_metrics = _entry(namespace, "epoch_metrics")
    model, epochs = _metrics_inputs(case)
    results = []
    for batches in epochs:
        with HostSyncCounter() as counter:
            loss, accuracy = epoch_metrics(model, batches, nn.CrossEntropyLoss())
        results.append({"loss": loss, "accuracy": accuracy, "syncs": counter.count})
    return {"results": results}


@judges("11-epoch-metrics")
def judge_epoch_metrics(seen: dict, *, case: Case) -> str:
    """The mean loss and accuracy over all samples, recomputed; at most two host syncs per epoch."""
    model, epochs = _metrics_inputs(case)
    _require(isinstance(seen.get("results"), list), "results")
    for batches, result in zip(epochs, seen["results"], strict=True):
        _require(isinstance(result, dict) and isinstance(result.get("syncs"), int), "syncs")
        with torch.no_grad():
            x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
            want_loss = nn.CrossEntropyLoss()(model(x), y).item()
            want_acc = (model(x).argmax(1) == y).float().mean().item()
        loss, accuracy = _number(result.get("loss")), _number(result.get("accuracy"))
        if loss is None or accuracy is None:
            fail("wrong-value", observed=f"loss {describe(result.get('loss'))}, accuracy "
                 f"{describe(result.get('accuracy'))}", expected=f"two numbers: {want_loss:.5f} and {want_acc:.4f}",
                 cause="returning something other than two numbers (floats or one-element tensors)",
                 where="the return statement")
        if abs(loss - want_loss) > 1e-5 or abs(accuracy - want_acc) > 1e-6:
            fail("wrong-value", observed=f"loss {loss:.5f}, accuracy {accuracy:.4f}",
                 expected=f"{want_loss:.5f} and {want_acc:.4f} (the last batch holds 5 samples, the others 8)",
                 cause="the means are not over all samples: a mean of batch means (the short last batch weighs as "
                 "much as a full one), a count of batches instead of samples, the two values swapped, or a scaling "
                 "(a percentage)", where="sum loss * len(y) and the correct counts, divide by the number of samples")
        if result["syncs"] > 2:
            fail("sync-per-step", observed=f"{result['syncs']} host syncs for {len(batches)} batches",
                 expected="at most 2 (the final values)", cause=".item() or float() inside the loop forces the host to "
                 "wait for the device every batch", where="accumulate tensors on the device; convert once at the end")
    syncs = max(result["syncs"] for result in seen["results"])
    return (f"exact epoch metrics with {syncs} host sync{'' if syncs == 1 else 's'} per epoch at most, "
            "whatever the number of batches")


# --- 11-exact-resume (checkpointing-exact-resume) ------------------------------------------------------------

def _resume_setup() -> tuple[nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """The drill's model, Adam and StepLR, initialised from the global RNG (seeded by the caller)."""
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    return model, optimizer, torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)


def _weights_only_error(error: Exception) -> bool:
    """Whether `error` is torch.load refusing a checkpoint that is not made of tensors and plain values."""
    return "weights_only" in str(error) or "Unsupported global" in str(error)


@register(
    "11-exact-resume",
    hints=_hints("11-exact-resume", 'torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), '
                 '"scheduler": scheduler.state_dict(), "epoch": epoch, "rng": torch.get_rng_state()}, path)'),
    requires={
        **_missing_entry("save_checkpoint` and `load_checkpoint"),
        "not-weights-only-loadable": Requirement(
            "the checkpoint loads with weights_only=True (state dicts, tensors, plain values)",
            hint="torch.load(weights_only=True) refuses pickled objects: what did you save that is not a state_dict?"),
        "unsafe-load": Requirement(
            "the checkpoint is loaded with weights_only=True",
            hint="Your loader accepted a file holding an arbitrary object: which torch.load argument refuses those?"),
        "wrong-epoch": Requirement("load_checkpoint returns the saved epoch",
                                   hint="What does load_checkpoint return, and was the epoch saved at all?"),
        "missing-optimizer-state": Requirement(
            "the optimizer's state is restored",
            hint="Adam's moments and step count change every step: are they saved?"),
        "missing-scheduler-state": Requirement(
            "the scheduler's state is restored", hint="The resumed run's learning rate starts over: what holds it?"),
        "missing-rng-state": Requirement(
            "the global RNG state is restored", hint="The resumed run draws other data: what decides the next draws?"),
    },
)
def probe_exact_resume(namespace: dict, *, case: Case) -> dict:
    """Train 3 epochs, save, load into a fresh setup under another RNG state, train 3 more; record the result."""
    save, load = _entry(namespace, "save_checkpoint"), _entry(namespace, "load_checkpoint")
    with tempfile.TemporaryDirectory() as tmp, _global_rng(case.seeded(0)):
        path = Path(tmp) / "ckpt.pt"
        model, optimizer, scheduler = _resume_setup()
        _train_epochs(model, optimizer, scheduler, 0, 3)
        save(path, model, optimizer, scheduler, 3)
        torch.random.default_generator.manual_seed(case.seeded(99))  # a fresh process: another RNG state
        fresh_model, fresh_opt, fresh_sched = _resume_setup()
        try:
            epoch = load(path, fresh_model, fresh_opt, fresh_sched)
        except Exception as error:
            if _weights_only_error(error):
                return {"load_error": str(error)[:120]}
            raise
        keys = _checkpoint_keys(path)
        _train_epochs(fresh_model, fresh_opt, fresh_sched, 3, 6)
        unsafe_loaded = _loads_unsafe_file(load, path, Path(tmp) / "unsafe.pt") if isinstance(keys, list) else None
    state = next(iter(fresh_opt.state.values()), None)
    return {"load_error": None, "epoch": epoch, "keys": keys, "unsafe_loaded": unsafe_loaded,
            "params": [p.detach() for p in fresh_model.parameters()],
            "optimizer_step": int(state["step"]) if state and "step" in state else None,
            "scheduler_epoch": int(fresh_sched.last_epoch)}


def _loads_unsafe_file(load: Any, path: Path, unsafe: Path) -> bool:
    """Whether `load` accepts a copy of the checkpoint that also holds an object weights_only=True refuses (it
    must refuse it: unpickling an arbitrary object can run code)."""
    torch.save({**torch.load(path, weights_only=True), "note": argparse.Namespace(origin="unknown")}, unsafe)
    try:
        load(unsafe, *_resume_setup())
    except Exception as error:
        return not _weights_only_error(error)
    return True


def _checkpoint_keys(path: Path) -> list[str] | str | None:
    """The checkpoint's top-level keys read back with weights_only=True; an error text if it will not load."""
    try:
        contents = torch.load(path, weights_only=True)
    except Exception as error:
        if _weights_only_error(error):
            return f"not loadable with weights_only=True: {str(error)[:120]}"
        raise
    return [str(key) for key in contents] if isinstance(contents, dict) else None


def _uninterrupted_params(case: Case) -> list[torch.Tensor]:
    """The parameters after 6 epochs of training that never stopped (the reference run)."""
    with _global_rng(case.seeded(0)):
        model, optimizer, scheduler = _resume_setup()
        _train_epochs(model, optimizer, scheduler, 0, 6)
    return [p.detach() for p in model.parameters()]


@judges("11-exact-resume")
def judge_exact_resume(seen: dict, *, case: Case) -> str:
    """The resumed run ends with the weights of the uninterrupted run, recomputed here."""
    if seen.get("load_error") is not None:
        fail("not-weights-only-loadable", observed=f"loading failed: {str(seen['load_error'])[:120]}",
             expected="a checkpoint of tensors and plain values that loads with weights_only=True",
             cause="a pickled object (a whole module or optimizer, a lambda) saved instead of state dicts",
             where="save state_dict()s, not objects")
    epoch = seen.get("epoch")
    if _number(epoch) != 3:
        fail("wrong-epoch", observed=f"load returned epoch {describe(epoch)}", expected="3",
             cause="the counter was not saved", where="save and return the epoch")
    keys = seen.get("keys")
    if isinstance(keys, str):
        fail("not-weights-only-loadable", observed=f"the checkpoint file is {keys}",
             expected="a checkpoint of tensors and plain values that loads with weights_only=True",
             cause="a pickled object (a whole module or optimizer, a lambda) saved instead of state dicts",
             where="save state_dict()s, not objects")
    if seen.get("unsafe_loaded") is not False:
        fail("unsafe-load", observed="load_checkpoint loaded a checkpoint holding an arbitrary pickled object "
             "(an argparse.Namespace)", expected="torch.load(path, weights_only=True) refusing it",
             cause="weights_only=False (or a load that unpickles anything): unpickling can run arbitrary code",
             where="the torch.load call in load_checkpoint")
    reference = _uninterrupted_params(case)
    resumed = _tensors_like(seen.get("params"), reference, "params")
    if all(torch.equal(a, b) for a, b in zip(reference, resumed, strict=True)):
        return "resumed training is bitwise identical to the uninterrupted run"
    if all(torch.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(reference, resumed, strict=True)):
        return "resumed training matches the uninterrupted run (up to float rounding)"
    if seen.get("optimizer_step") != 6:
        part = "optimizer"
    elif seen.get("scheduler_epoch") != 6:
        part = "scheduler"
    else:
        part = "rng"
    text = f"dict_keys({keys!r})" if isinstance(keys, list) else ""
    fail(f"missing-{part}-state",
         observed=f"the resumed run diverges from the uninterrupted one (checkpoint keys: {text})",
         expected="identical weights after resuming",
         cause={"scheduler": "the scheduler state was not saved/restored: the LR schedule restarts",
                "optimizer": "the optimizer state (Adam's moments and step count) was not saved/restored",
                "rng": "the RNG states were not saved/restored: the resumed run draws different data"}[part],
         where=f"add the {part} state to save_checkpoint and restore it in load_checkpoint")
