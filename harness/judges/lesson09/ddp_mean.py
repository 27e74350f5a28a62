"""09-ddp-mean, the judge: Every rank must get the mean over ranks, and its input must be left unchanged."""

from __future__ import annotations

import torch

from harness.checks.lesson09.ddp_mean import mean_inputs
from harness.contract.case import Case
from harness.contract.compare import close_values, malformed, same_values
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import type_name
from harness.judges.lesson09.common import _hang_row, _ranks


@judges(
    "09-ddp-mean",
    hints=Hints(
        nudge="Every rank holds its own value; an all_reduce with SUM leaves the sum on every rank. "
        "What do you divide it by, and which tensor does all_reduce overwrite?",
        concept="dist.all_reduce(t) replaces t, in place, with the element-wise sum over ranks, on every rank; "
        "every rank must call it",
        solution="total = value.detach().clone(); dist.all_reduce(total, op=dist.ReduceOp.SUM); "
        "return total / dist.get_world_size()",
        section="2. Collectives: what moves between processes"),
    requires={
        "not-a-tensor": Requirement("returns a tensor",
                                    hint="What type does ddp_mean return? The text asks for a tensor."),
        "not-averaged": Requirement("communicates: each rank gets the mean over all ranks, not its own value",
                                    hint="Each rank got back its own value: which collective brings the others' in?"),
        "summed": Requirement("the mean, not the sum", hint="Every rank got the sum over ranks: one step is missing."),
        "wrong-mean": Requirement("the mean over ranks, element-wise, of the input's shape, on every rank",
                                  hint="Compare what each rank got with the sum of the ranks' values divided by the "
                                  "number of ranks."),
        "modified-input": Requirement("value itself is left unchanged",
                                      hint="The caller's tensor changed: which call works in place on its argument?"),
        **_hang_row("all_reduce"),
    },
)
def judge_ddp_mean(seen: dict, *, case: Case) -> str:
    """Every rank must get the mean over ranks, and its input must be left unchanged."""
    for values, run in zip(mean_inputs(case), seen["runs"], strict=True):
        total = sum(values[1:], values[0])
        expected = total / len(values)
        for rank, result in enumerate(_ranks(run, len(values))):
            out = result["out"]
            if not isinstance(out, torch.Tensor):
                cause = ("the result was turned into a Python number (.item(), float() or .tolist())"
                         if isinstance(out, (float, int, list))
                         else "the function returns something other than a tensor")
                fail("not-a-tensor", observed=f"rank {rank} got a {type_name(out)}", expected="a tensor",
                     cause=cause, where="the return statement of ddp_mean")
            if out.shape != expected.shape:
                fail("wrong-mean", observed=f"rank {rank} got a tensor of shape {tuple(out.shape)}",
                     expected=f"the mean over ranks, {expected.tolist()}, of the input's shape {tuple(expected.shape)}",
                     cause="the result is reshaped, stacked or indexed instead of reduced element-wise",
                     where="ddp_mean: all_reduce a copy of the input, then divide")
            out = out.detach().to(expected.dtype)
            if close_values(out, values[rank], dtype=False) and not close_values(values[rank], expected, dtype=False):
                fail("not-averaged", observed=f"rank {rank} got its own value {values[rank].tolist()}",
                     expected=f"the mean over ranks, {expected.tolist()}, on every rank",
                     cause="the value is returned without communicating: no all_reduce, so each rank reports "
                     "only its own shard's metric", where="ddp_mean: all_reduce a copy, then divide")
            if len(values) > 1 and close_values(out, total, dtype=False):
                fail("summed", observed=f"rank {rank} got the sum {out.tolist()}",
                     expected=f"the mean {expected.tolist()}",
                     cause="all_reduce(SUM) without dividing by the world size",
                     where="divide by dist.get_world_size() after the all_reduce")
            if len(values) != 2 and close_values(out, total / 2, dtype=False):
                fail("wrong-mean", observed=f"on a world of {len(values)} rank(s), rank {rank} got the sum over ranks "
                     f"divided by 2, {out.tolist()}",
                     expected=f"the mean {expected.tolist()}: the sum divided by the world size, {len(values)}",
                     cause="the sum is divided by a fixed 2 instead of the world size: right on 2 ranks only",
                     where="divide by dist.get_world_size()",
                     hint="How many processes does your divisor assume? The process group knows how many there are.")
            if not close_values(out, expected, dtype=False):
                fail("wrong-mean", observed=f"rank {rank} got {out.tolist()}", expected=f"{expected.tolist()}",
                     cause="the reduction or the division is not the mean over ranks", where="ddp_mean")
            after = result["input_after"]
            if not isinstance(after, torch.Tensor):
                malformed("input_after is not a tensor")
            if not same_values(after, values[rank], dtype=False):
                fail("modified-input", observed=f"rank {rank}'s input became {after.tolist()}",
                     expected=f"the input left as {values[rank].tolist()}",
                     cause="dist.all_reduce works in place: reducing the caller's tensor overwrites their metric",
                     where="all_reduce a clone: total = value.detach().clone()")
    return "every rank gets the mean over ranks; inputs are left unchanged"
