"""12-lr-range, the judge.

Every step at the geometric LR on its batch, the losses returned, the stop rule, and both states restored.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from harness.checks.lesson12.common import Batch
from harness.checks.lesson12.lr_range import BASE_LR, MOMENTUM, momentum_buffers, sweep_setup, sweeps
from harness.contract.case import Case
from harness.contract.compare import (
    close_tensors,
    close_values,
    isclose_number,
    judged,
    malformed,
    matching_tensors,
    type_name,
)
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.instruments import snapshot
from harness.contract.registry import judges
from harness.judges.lesson12.common import _scalar


def _schedule(item: dict[str, Any]) -> list[float]:
    start, end, n = item["start_lr"], item["end_lr"], item["num_steps"]
    return [start * (end / start) ** (i / (n - 1)) for i in range(n)]


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


# How close recorded tensors must be to the replay's (close_tensors' options; each comparison names its rtol,
# GRADIENTS that of a step's gradients)
REPLAYED = {"atol": 1e-6, "dtype": False, "expected_nan": True}
GRADIENTS = {"rtol": 1e-3, **REPLAYED}


def _check_lrs(item: dict[str, Any], i: int, lrs: Any, schedule: list[float]) -> None:
    """Fail unless every param group of step `i` ran at the exponential schedule's learning rate."""
    if not isinstance(lrs, list) or len(lrs) != 2 or not all(isinstance(v, float) for v in lrs):
        malformed("lrs")
    if all(isclose_number(v, schedule[i], rel_tol=1e-6, abs_tol=1e-6) for v in lrs):
        return
    start, end, n = item["start_lr"], item["end_lr"], item["num_steps"]
    if any(isclose_number(v, schedule[i], rel_tol=1e-6, abs_tol=1e-6) for v in lrs):
        cause = "only some param groups were set (each group has its own 'lr')"
    elif isclose_number(lrs[0], start + (end - start) * i / (n - 1), rel_tol=1e-6, abs_tol=1e-6):
        cause = "the learning rates are spaced linearly, not exponentially"
    elif isclose_number(lrs[0], start * (end / start) ** (i / n), rel_tol=1e-6, abs_tol=1e-6):
        cause = "the exponent is i / num_steps: the last step never reaches end_lr"
    else:
        cause = "another schedule than the exponential one"
    fail("wrong-lrs", observed=f"step {i} ran with learning rates {[f'{v:.4g}' for v in lrs]}",
         expected=f"{schedule[i]:.4g} in every group (start_lr {start:g} to end_lr {end:g} in {n} steps, geometric)",
         cause=cause, where="where you set group['lr'] for each step")


def _check_grads(i: int, grads: list[torch.Tensor], want: list[torch.Tensor], previous: list[torch.Tensor] | None,
                 model: nn.Module, recorded: list[torch.Tensor], batches: list[Batch]) -> None:
    """Fail unless step `i`'s gradient is the gradient of its own batch at the parameters it started from."""
    if close_tensors(grads, want, **GRADIENTS):
        return
    if previous is not None and close_tensors(grads, [a + b for a, b in zip(want, previous, strict=True)], **GRADIENTS):
        fail("missing-zero-grad", observed=f"at step {i} the optimizer saw that step's gradient plus the previous "
             "step's", expected="each step's own gradient",
             cause="the gradients are not cleared between steps, so backward adds to them",
             where="optimizer.zero_grad(set_to_none=True) before each backward")
    own = i % len(batches)
    others = [j for j in range(len(batches))
              if j != own and close_tensors(grads, _reference_step(model, recorded, batches[j])[1], **GRADIENTS)]
    fail("wrong-batch", observed=f"the gradient of step {i} is not that of batches[{own}]"
         + (f" (it is that of batches[{others[0]}])" if others else ""),
         expected=f"step {i} trains on batches[{i} % len(batches)] = batches[{own}]",
         cause=("the same batch every step (batches[0], or next(iter(batches)) at each step)" if others[0] == 0
                else f"another index than i % len(batches): step {i} took batches[{others[0]}]") if others
         else "another loss or batch than loss_fn on batches[i % len(batches)]",
         where="the line that picks the step's batch")


def _replay_steps(item: dict[str, Any], steps: Any, model: nn.Module, batches: list[Batch],
                  start: list[torch.Tensor], start_buffers: list[torch.Tensor]) -> tuple[list[float],
                                                                                          list[torch.Tensor]]:
    """Judge each recorded optimizer step in turn (parameters, learning rates, gradient); the reference losses,
    and the parameters after the last step.

    The parameters of step i+1 must follow from step i by SGD with momentum: the trajectory is the judge's own,
    from the case's start, so a forged one is refused.
    """
    schedule = _schedule(item)
    if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
        malformed("steps")
    if len(steps) > item["num_steps"]:
        fail("wrong-stop", observed=f"{len(steps)} optimizer steps for num_steps = {item['num_steps']}",
             expected=f"at most {item['num_steps']} steps",
             cause="more than one optimizer step per sweep step, or a loop longer than num_steps", where="your loop")
    losses, buffers, params, previous = [], start_buffers, start, None
    for i, step in enumerate(steps):
        recorded = matching_tensors(step.get("params"), start, "params")
        if not close_tensors(recorded, params, rtol=1e-4, **REPLAYED):
            malformed("the parameters do not follow the recorded steps")
        _check_lrs(item, i, step.get("lrs"), schedule)
        raw = step.get("grads")
        grads = matching_tensors([torch.zeros_like(p) if g is None else g for g, p in zip(raw, start, strict=False)]
                                 if isinstance(raw, list) and len(raw) == len(start) else None, start, "grads")
        loss, want = _reference_step(model, recorded, batches[i % len(batches)])
        _check_grads(i, grads, want, previous, model, recorded, batches)
        losses.append(loss)
        buffers = [MOMENTUM * b + g for b, g in zip(buffers, grads, strict=True)]
        params = [p - schedule[i] * b for p, b in zip(recorded, buffers, strict=True)]
        previous = grads
    return losses, params


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
    other = next(((k, v) for k, v in enumerate(got[1]) if not isinstance(v, float)), None)
    if other is not None:  # types before values
        k, value = other
        fail("wrong-losses", observed=f"losses[{k}] is {type_name(value)}", expected="a float per step (loss.item())",
             cause="the loss tensor was recorded (loss or loss.detach()), not its value: a list of tensors keeps "
             "them (and, without detach, their graphs) alive" if isinstance(value, torch.Tensor)
             else "something other than the step's loss was recorded", where="what you append to losses",
             hint="Print type(losses[0]): which call turns a 0-dim loss tensor into a Python float?"
             if isinstance(value, torch.Tensor) else None)
    got_lrs, values = got[0], [_scalar(v) for v in got[1]]
    counts_match = len(got_lrs) == len(losses) == len(values)
    if not counts_match or any(v is None for v in values) or not all(
            isclose_number(a, b, rel_tol=1e-4, abs_tol=1e-6, expected_nan=True)
            for a, b in zip(values, losses, strict=True)):
        if not counts_match:
            cause = "a different number of values than steps taken"
        elif all(isclose_number(v, s, rel_tol=1e-4, abs_tol=1e-6)
                 for v, s in zip(values, _smoothed(losses), strict=True)):
            cause = "the losses are smoothed (a running average): return the raw loss of each step"
        else:
            cause = "the loss was computed at another time (after optimizer.step()), or another quantity"
        fail("wrong-losses", observed=f"{len(losses)} optimizer steps; returned {len(got_lrs)} lrs and losses "
             f"{[f'{v:.4g}' if v is not None else '?' for v in values[:6]]}",
             expected=f"{len(losses)} lrs and the losses before each update {[f'{v:.4g}' for v in losses[:6]]}",
             cause=cause, where="what you append to losses, and when")
    typed = next(((k, v) for k, v in enumerate(got_lrs) if not isinstance(v, float)), None)
    if typed is not None:
        k, value = typed
        fail("wrong-losses", observed=f"lrs[{k}] is {type_name(value)}", expected="a float per step",
             cause="the learning rate was recorded as a tensor (an element of torch.logspace or torch.linspace), "
             "not as a number" if isinstance(value, torch.Tensor) else "something other than the step's learning "
             "rate was recorded", where="what you append to lrs",
             hint="Print type(lrs[0]): did you append a number, or an element of a tensor?"
             if isinstance(value, torch.Tensor) else None)
    if not all(isclose_number(v, lr, rel_tol=1e-6, abs_tol=1e-6) for v, lr in zip(got_lrs, schedule, strict=False)):
        fail("wrong-losses", observed=f"returned lrs {got_lrs[:4]}", expected=f"{[f'{v:.4g}' for v in schedule[:4]]}",
             cause="the returned learning rates are not those of the steps", where="what you append to lrs")


def _reference_cause(losses: list[float], diverge: float) -> str:
    """Which other reference than the best loss so far makes a sweep stop where this one stopped: the first loss
    or the previous one (each replayed on the recorded losses); both candidates when neither does."""
    references = {"the first loss": lambda i: losses[0], "the previous loss": lambda i: losses[max(i - 1, 0)]}
    named = [name for name, reference in references.items()
             if next((i for i, v in enumerate(losses) if not math.isfinite(v) or v > diverge * reference(i)),
                     None) == len(losses) - 1]
    if len(named) == 1:
        return f"the loss is compared with another reference than the best (lowest) loss so far: {named[0]}"
    return ("the loss is compared with another reference than the best (lowest) loss so far: the first loss or the "
            "previous one")


def _check_stop(item: dict[str, Any], losses: list[float], batch_count: int, next_loss: float | None) -> None:
    """Fail unless the sweep stopped right after the first diverging step (or ran num_steps without one).

    `next_loss`: the loss the step after the last recorded one had (the judge's replay), None after num_steps.
    """
    n, diverge = item["num_steps"], item["diverge"]
    stop = next((i for i, v in enumerate(losses) if not math.isfinite(v) or v > diverge * min(losses[:i + 1])), None)
    if stop is not None and stop < len(losses) - 1:
        rule = f"the loss of step {stop}, {losses[stop]:.4g}, was above {diverge:g} x the best " \
            f"{min(losses[:stop + 1]):.4g}" if math.isfinite(losses[stop]) else \
            f"the loss of step {stop} was {losses[stop]} (not finite)"
        if len(losses) == n and math.isnan(losses[stop]):
            fail("no-divergence-stop", observed=f"all {n} steps ran; {rule}, the first non-finite loss, after "
                 f"losses no higher than {max(losses[:stop], default=math.nan):.4g}",
                 expected=f"the sweep stops after step {stop}: a loss that is not finite ends it",
                 cause="the stop test only compares the loss with diverge * best, and every comparison with NaN "
                 "is False, so a NaN loss never stops the sweep",
                 where="your stop test: test math.isfinite(loss) as well as the ratio",
                 hint="What is float('nan') > 4.0 * 1.5? Which test is true for NaN and inf alike?")
        if len(losses) == n:
            fail("no-divergence-stop", observed=f"all {n} steps ran; {rule}",
                 expected=f"the sweep stops after step {stop}",
                 cause="no divergence test in the loop (or one that never fires)",
                 where="after recording each loss: if not finite or > diverge * best: break")
        fail("wrong-stop", observed=f"stopped after step {len(losses) - 1}; {rule}", expected=f"stop after step {stop}",
             cause=_reference_cause(losses, diverge), where="your stop test")
    if stop is None and len(losses) < n:
        if len(losses) == batch_count:
            fail("batches-not-cycled", observed=f"{len(losses)} steps, one per batch, for num_steps = {n}",
                 expected=f"{n} steps (no divergence): the batches are reused in turn",
                 cause="the loop runs over batches, so it ends when they do",
                 where="loop over range(num_steps) and take batches[i % len(batches)]")
        step = len(losses)
        unrecorded = next_loss is not None and (not math.isfinite(next_loss)
                                                or next_loss > item["diverge"] * min(losses, default=math.inf))
        fail("wrong-stop", observed=f"stopped after {step} of {n} steps (the next step's loss was never "
             "recorded)", expected="the loss never exceeded diverge x best in the steps recorded, so the sweep goes on",
             cause=f"the break runs before the diverging step is recorded: step {step}'s loss, {next_loss:.4g}, is "
             f"above {item['diverge']:g} x the best {min(losses, default=math.inf):.4g}, and the sweep left before "
             "appending it (and before its backward and step)" if unrecorded else "the stop compares with another "
             "reference than the lowest loss so far, or stops for another reason",
             where="your stop test and the order of append and break")


def _check_restored(call: dict[str, Any], start: list[torch.Tensor], start_buffers: list[torch.Tensor],
                    groups: int) -> None:
    """Fail unless the model's parameters and the optimizer's buffers and learning rates are back as they were."""
    after = matching_tensors(call["params_after"], start, "params_after")
    if not close_tensors(after, start, rtol=1e-6, **REPLAYED):
        fail("model-not-restored", observed="the model's parameters differ from those before the call",
             expected="the parameters restored exactly (the sweep is a diagnostic, not training)",
             cause="no restore, or the saved copy is model.state_dict() without copy.deepcopy (it holds the live "
             "tensors, which training changed)", where="save before the loop, load_state_dict at the end")
    buffers_after, lrs_after = call["buffers_after"], call["lrs_after"]
    if not isinstance(buffers_after, list) or len(buffers_after) != len(start) or not isinstance(lrs_after, list) \
            or len(lrs_after) != groups:
        malformed("optimizer state")
    restored_buffers = all(isinstance(b, torch.Tensor) and close_values(b, s, atol=1e-7, dtype=False)
                           for b, s in zip(buffers_after, start_buffers, strict=True))
    if not restored_buffers or not all(isinstance(v, float) and isclose_number(v, BASE_LR, rel_tol=1e-9, abs_tol=1e-6)
                                       for v in lrs_after):
        what = "the momentum buffers" if not restored_buffers else f"the learning rates ({lrs_after})"
        fail("optimizer-not-restored", observed=f"{what} differ from those before the call",
             expected=f"the optimizer as it was: its momentum buffers, and lr {BASE_LR:g} in each group",
             cause="only the model was restored, or the optimizer's state_dict() was saved without copy.deepcopy "
             "(its buffers are updated in place)" if not restored_buffers else
             "the learning rates of the sweep were left in the param groups",
             where="save copy.deepcopy(optimizer.state_dict()) before, optimizer.load_state_dict(...) after")


def _judge_sweep(item: dict[str, Any], call: dict[str, Any]) -> None:
    """Judge one call of the student's sweep: its steps, what it returned, where it stopped, what it restored."""
    model, optimizer, batches = sweep_setup(item)
    start, start_buffers = snapshot(model), [b.clone() for b in momentum_buffers(model, optimizer)]
    losses, params = _replay_steps(item, call["steps"], model, batches, start, start_buffers)
    _check_returned(call["returned"], losses, _schedule(item))
    next_loss = _reference_step(model, params, batches[len(losses) % len(batches)])[0] \
        if len(losses) < item["num_steps"] else None
    _check_stop(item, losses, len(batches), next_loss)
    _check_restored(call, start, start_buffers, len(optimizer.param_groups))


@judges(
    "12-lr-range",
    # the poisoned sweep's NaN loss, and the NaN gradients and weights of the steps from there on (a sweep that
    # does not stop, or does not restore): the judge compares them with its own replay, NaN where it has NaN
    nonfinite=("calls/*/returned/1/*", "calls/*/steps/*", "calls/*/params_after/*", "calls/*/buffers_after/*"),
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
def judge_lr_range(seen: dict, *, case: Case) -> str:
    """Every step at the geometric LR on its batch, the losses returned, the stop rule, and both states restored."""
    for item, call in judged(sweeps(case), seen["calls"]):
        _judge_sweep(item, call)
    return "an exponential sweep cycling the batches, stopped on divergence, model and optimizer restored"
