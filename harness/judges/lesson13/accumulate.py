"""13-accumulate, the judge.

Each step's gradient is the full batch's mean-loss gradient; forwards stay within micro_batch_size.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from harness.checks.lesson13.accumulate import Batch, accum_cases, accum_setup
from harness.contract.case import Case
from harness.contract.compare import close_norm, close_values, judged, matching_tensors, same_values, type_name
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.instruments import snapshot
from harness.contract.registry import judges
from harness.contract.wire import WireError
from harness.judges.lesson13.common import _flat


def _grad_at(model: nn.Module, params: Sequence[torch.Tensor], batches: Sequence[Batch],
             weights: Sequence[float]) -> torch.Tensor:
    """The flat gradient of sum(weight * mean MSE) over `batches`, at `params` (on a copy of `model`)."""
    twin = copy.deepcopy(model)
    with torch.no_grad():
        for p, value in zip(twin.parameters(), params, strict=True):
            p.copy_(value)
    twin.zero_grad(set_to_none=True)
    for (inputs, targets), weight in zip(batches, weights, strict=True):
        (weight * nn.functional.mse_loss(twin(inputs), targets)).backward()
    return _flat([p.grad for p in twin.parameters()])


def _judge_accum_call(call: Any, model: nn.Module, start: list[torch.Tensor], batch: Batch, micro: int,
                      previous: torch.Tensor | None) -> torch.Tensor:
    """Judge one call (starting from `start`); the flat gradient the optimizer saw."""
    if not isinstance(call, dict) or not isinstance(call.get("sizes"), list) or not isinstance(call.get("steps"), list):
        raise WireError("malformed observation: a call record is not a dict of lists")
    size = len(batch[0])
    if any(not isinstance(s, int) for s in call["sizes"]) or not all(isinstance(t, bool) for t in call["training"]):
        raise WireError("malformed observation: forward sizes or modes are not data")
    if not all(call["training"]):
        fail("eval-mode", observed="a forward ran with the model in eval mode (the check leaves it in eval mode, as "
             "after validation)", expected="model.train() before the first forward",
             cause="model.train() is missing", where="the first line of accumulation_step")
    if any(s > micro for s in call["sizes"]):
        fail("micro-batch-too-large", observed=f"forwards on {call['sizes']} rows with micro_batch_size={micro}",
             expected=f"forwards of at most {micro} rows (the memory limit accumulation exists for)",
             cause="the whole batch goes through the model at once" if call["sizes"] == [size] else
             "x.chunk(micro_batch_size) cuts the batch into micro_batch_size pieces, not into pieces of "
             "micro_batch_size rows (x.split(micro_batch_size) does that)"
             if call["sizes"] == [len(piece) for piece in torch.arange(size).chunk(micro)] else
             "the micro-batches are cut wrongly (their sizes are listed above)",
             where="the split of the batch into micro-batches",
             hint="Print [len(piece) for piece in torch.arange(10).chunk(4)] and the same with .split(4): which one "
             "gives pieces of 4 rows?" if call["sizes"] == [len(piece) for piece in torch.arange(size).chunk(micro)]
             and call["sizes"] != [size] else None)
    if not call["steps"]:
        fail("no-step", observed="optimizer.step() never ran", expected="one step per call",
             cause="the optimizer step is missing", where="after the micro-batch loop")
    if len(call["steps"]) > 1:
        fail("steps-per-micro-batch", observed=f"optimizer.step() ran {len(call['steps'])} times in one call",
             expected="one step, after the last micro-batch", cause="the step is inside the micro-batch loop",
             where="the indentation of optimizer.step()")
    step = call["steps"][0]
    if not isinstance(step, dict):
        raise WireError("malformed observation: a step record is not a dict")
    params = matching_tensors(step.get("params"), start, "params")
    if not all(same_values(a, b.float(), dtype=False) for a, b in zip(params, start, strict=True)):
        raise WireError("malformed observation: the step did not start from the parameters of the call")
    grads = step.get("grads")
    if not isinstance(grads, list) or len(grads) != len(start):
        raise WireError("malformed observation: grads do not match the parameters")
    got = _flat([torch.zeros_like(p) if g is None else matching_tensors([g], [p], "grad")[0]
                 for g, p in zip(grads, start, strict=True)])
    chunks = list(zip(batch[0].split(micro), batch[1].split(micro), strict=True))
    shares = [len(x) / size for x, _ in chunks]
    want = _grad_at(model, start, chunks, shares)
    if close_norm(got, want, floor=1e-9):
        return got
    observed = f"the gradient at optimizer.step() differs from the full batch's (relative error " \
        f"{float((got - want).norm() / want.norm()):.2g}; {size} rows in micro-batches of {micro})"
    if previous is not None and close_norm(got, want + previous, floor=1e-9):
        fail("missing-zero-grad", observed=observed + ": it equals this call's plus the previous call's",
             expected="this call's gradient only", cause="the gradients are never cleared, so each call adds to "
             "the previous call's", where="optimizer.zero_grad(set_to_none=True) before the loop")
    if len(chunks) > 1 and close_norm(got, _grad_at(model, start, chunks[-1:], shares[-1:]), floor=1e-9):
        fail("only-last-micro-batch", observed=observed + ": it is the last micro-batch's alone",
             expected="the sum over every micro-batch", cause="zero_grad inside the micro-batch loop clears the "
             "earlier micro-batches' gradients", where="the position of zero_grad")
    count = len(chunks)
    hint = None
    if count > 1 and close_norm(got, _grad_at(model, start, chunks, [1.0 / count] * count), floor=1e-9):
        cause = f"each micro-batch's loss was divided by the number of micro-batches ({count}): the last, smaller " \
            "one weighs as much as a full one. Weight it by its share of the rows, len(chunk) / len(batch)"
    elif count != micro and close_norm(got, _grad_at(model, start, chunks, [1.0 / micro] * count), floor=1e-9):
        cause = f"each micro-batch's loss was divided by micro_batch_size ({micro}), not weighted by its share " \
            f"of the rows: with {count} micro-batches of {micro} rows or fewer the weights add up to " \
            f"{count / micro:.3g}, not 1"
        hint = f"Add up the factors your {count} micro-batches are multiplied by: do they make 1? Which number " \
            "of rows should each one's loss be divided by?"
    elif close_norm(got, _grad_at(model, start, chunks, [1.0] * count), floor=1e-9):
        cause = "the micro-batch losses were summed without weighting: the gradient is about k times too large"
        hint = "Each micro-batch's loss is already a mean over its rows: what does adding k such means give, " \
            "against the mean over the whole batch?"
    else:
        cause = "another weighting of the micro-batch losses (or a micro-batch left out or used twice)"
    fail("wrong-weighting", observed=observed, expected="the gradient of the mean loss over all rows",
         cause=cause, where="the factor each micro-batch's loss is multiplied by before backward", hint=hint)


def _judge_accum_return(got: Any, model: nn.Module, start: list[torch.Tensor], batch: Batch, micro: int) -> None:
    """Fail wrong-return unless `got` is a detached 0-dim tensor holding the batch's mean loss at `start`."""
    with torch.no_grad():
        twin = copy.deepcopy(model)
        for p, value in zip(twin.parameters(), start, strict=True):
            p.copy_(value)
        want = float(nn.functional.mse_loss(twin(batch[0]), batch[1]))
        means = [float(nn.functional.mse_loss(twin(x), y)) for x, y in zip(batch[0].split(micro),
                                                                            batch[1].split(micro), strict=True)]
    if not isinstance(got, torch.Tensor) or got.dim() != 0 or got.requires_grad:
        attached = isinstance(got, torch.Tensor) and got.dim() == 0
        fail("wrong-return", observed=f"returned {type_name(got)}" + (
            f" of shape {tuple(got.shape)}, requires_grad={got.requires_grad}" if isinstance(got, torch.Tensor)
            else ""), expected="a detached 0-dim tensor", cause="a loss still attached to the graph: it keeps the "
             "graph of every micro-batch alive (add .detach() to what you add up)" if attached else
             "a Python number (.item(), float())" if isinstance(got, (int, float)) else "a list of micro-batch "
             "losses, or a tensor that is not 0-dim", where="the return statement of accumulation_step",
             hint="Print the requires_grad of what you return: which call cuts it from the graph?" if attached
             else None)
    if abs(float(got) - want) > 1e-4 * abs(want) + 1e-7:
        slips = {"the last micro-batch's loss alone (the total is overwritten, not added to)": means[-1],
                 "the unweighted mean of the micro-batch losses: the smaller last one counts as much as a full one":
                     sum(means) / len(means),
                 "the unweighted sum of the micro-batch losses": sum(means)}
        named = [c for c, v in slips.items() if abs(float(got) - v) <= 1e-4 * abs(v) + 1e-7 and len(means) > 1]
        fail("wrong-return", observed=f"returned {float(got):.6g}", expected=f"the mean loss over the batch, "
             f"{want:.6g}", cause=named[0] if named else "another value than the batch's mean loss (the weighted "
             "micro-batch losses added up)", where="how the returned loss is accumulated",
             hint="Does your total add each micro-batch's loss to what it holds, or replace it?"
             if named and named[0].startswith("the last") else None)


@judges(
    "13-accumulate",
    hints=Hints(
        nudge="Split the batch with .split(micro_batch_size); weight each micro-batch's mean loss by its share of "
        "the rows, len(chunk) / len(batch), so the last, smaller one counts for less.",
        concept="Gradients add up in .grad across backward calls: clear once, backward on each micro-batch's loss "
        "times its share of the rows, step once. Then the update equals the full batch's, with a fraction of "
        "the activation memory.",
        solution="for x, y in zip(inputs.split(micro_batch_size), targets.split(micro_batch_size)):\n"
        "    loss = loss_fn(model(x), y) * (len(x) / len(inputs)); loss.backward(); total += loss.detach()",
        section="3. Fitting a bigger run: gradient accumulation",
    ),
    requires={
        "eval-mode": Requirement("puts the model in training mode",
                                 hint="Which call switches dropout and batch norm to training behaviour?"),
        "micro-batch-too-large": Requirement(
            "never runs a forward on more than micro_batch_size rows",
            hint="Print x.shape[0] inside your loop: is the whole batch going through the model at once?"),
        "missing-zero-grad": Requirement(
            "clears the gradients once, before the first micro-batch",
            hint="Call your step twice: does the second step's gradient still hold the first one's?"),
        "only-last-micro-batch": Requirement(
            "the gradient accumulates over every micro-batch",
            hint="What does zero_grad inside the loop do to the micro-batches before the last one?"),
        "wrong-weighting": Requirement(
            "the accumulated gradient equals the gradient of the mean loss over the whole batch, also when the "
            "last micro-batch is smaller",
            hint="With 10 rows in micro-batches of 4, 4 and 2, how much should the 2-row micro-batch weigh?"),
        "no-step": Requirement("calls optimizer.step() once per call",
                               hint="Where is optimizer.step()? Once, after the loop."),
        "steps-per-micro-batch": Requirement(
            "steps once, after the last micro-batch (not once per micro-batch)",
            hint="Is optimizer.step() indented inside your loop?"),
        "wrong-return": Requirement(
            "returns the mean loss over the whole batch as a detached 0-dim tensor (no .item())",
            hint="Add up each weighted micro-batch loss with .detach(); what does that sum equal?"),
    },
)
def judge_accumulate(seen: dict, *, case: Case) -> str:
    """Each step's gradient is the full batch's mean-loss gradient; forwards stay within micro_batch_size."""
    for (seed, size, micro), result in judged(accum_cases(case), seen["results"]):
        model, _, batches = accum_setup(seed, size)
        calls = result.get("calls") if isinstance(result, dict) else None
        if not isinstance(calls, list) or len(calls) != len(batches):
            raise WireError("malformed observation: not one record per call")
        start, previous = snapshot(model), None
        for call, batch in zip(calls, batches, strict=True):
            previous = _judge_accum_call(call, model, start, batch, micro, previous)
            _judge_accum_return(call.get("returned"), model, start, batch, micro)
            after = matching_tensors(call.get("after"), start, "after")
            want_after = [p - 0.1 * g for p, g in zip(start, _unflat(previous, start), strict=True)]
            if not all(close_values(a, w, rtol=1e-4, atol=1e-6, dtype=False)
                       for a, w in zip(after, want_after, strict=True)):
                raise WireError("malformed observation: the parameters after the call are not one SGD step")
            start = [a.clone() for a in after]
    return "full-batch gradient from uneven micro-batches, forwards within the limit, one step per call"


def _unflat(flat: torch.Tensor, like: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    out, at = [], 0
    for p in like:
        out.append(flat[at:at + p.numel()].reshape(p.shape).float())
        at += p.numel()
    return out
