"""The judge side of the shapes drills (`harness.drills.bank.shapes`): judges and the references
they recompute, reference solutions, planted wrong answers, explain drills' options and keys.

A graded kernel never mounts this package (`harness.judges`).
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn

from harness.contract.case import Case
from harness.contract.compare import close_values, malformed, max_difference, number
from harness.contract.failure import fail
from harness.contract.wire import describe
from harness.drills.bank.shapes import (
    BROADCAST_BATCHES,
    HEADS_STARTER,
    LOSS_STARTER,
    B,
    D,
    H,
    T,
    broadcast_loss_inputs,
    heads_inputs,
)
from harness.drills.core import Answers, choice_answers
from harness.drills.support import edited
from harness.judges.drills.whys import add_answers


def _judge_heads(seen: dict, *, case: Case) -> str:
    tokens, per_head = heads_inputs(case)
    checks = (
        ("split", "split_heads(x, heads)", tokens.view(B, T, H, D).transpose(1, 2), (
            ("split-mixes-tokens", tokens.view(B, H, T, D), "x.view(B, heads, T, D) cuts the memory of (B, T, "
             "H * D) in the wrong order: a 'token' of a head is made of features of several tokens"),
            ("split-interleaves-features", tokens.view(B, T, D, H).permute(0, 3, 1, 2), "the features were "
             "dealt out to the heads one by one (head h gets features h, h + H, ...), not in blocks of D"),
        )),
        ("merge", "merge_heads(x)", per_head.transpose(1, 2).reshape(B, T, H * D), (
            ("merge-mixes-tokens", per_head.reshape(B, T, H * D), "reshape without moving the heads' dimension "
             "first: the rows of (B, H, T, D) are read in memory order, so one output token holds pieces of "
             "several tokens"),
            ("merge-interleaves-features", per_head.permute(0, 2, 3, 1).reshape(B, T, H * D), "the heads' "
             "features were interleaved (D before H): the output projection expects head 0's D features, then "
             "head 1's"),
        )),
    )
    for key, call, want, variants in checks:
        got = seen.get(key)
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            fail("wrong-shape", observed=f"{call} returned {describe(got)}", expected=f"shape {tuple(want.shape)}",
                 cause="the dimensions were not moved where the docstring puts them", where=call)
        if close_values(got, want):
            continue
        for code, variant, cause in variants:
            if close_values(got, variant):
                fail(code, observed=f"{call} has the right shape, but its entries sit at other tokens or heads",
                     expected=f"shape {tuple(want.shape)} with each token's features kept together", cause=cause,
                     where=call)
        fail("wrong-value", observed=f"{call} differs from the reference by up to {max_difference(got, want):.3g}",
             expected="each token's features kept together", cause="another order of the dimensions",
             where=call)
    return "split_heads and merge_heads move the heads' dimension, so every head sees whole tokens"


_SPLIT_FIX = ("x.view(b, heads, t, e // heads)", "x.view(b, t, heads, e // heads).transpose(1, 2)")
_MERGE_FIX = ("x.reshape(b, t, h * d)", "x.transpose(1, 2).reshape(b, t, h * d)")


def _loss_variants(model: nn.Linear, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = model(x)
        return {"reference": F.mse_loss(out, y), "broadcast-loss": F.mse_loss(out.squeeze(-1), y),
                "wrong-reduction": F.mse_loss(out, y, reduction="sum")}


def _judge_loss(seen: dict, *, case: Case) -> str:
    results = seen.get("results")
    if not (isinstance(results, list) and len(results) == len(BROADCAST_BATCHES) and all(
            isinstance(r, dict) and isinstance(r.get("graph"), bool) and isinstance(r.get("grads"), list)
            and len(r["grads"]) == 2 for r in results)):
        malformed("not one loss per batch")
    for base, (batch, result) in enumerate(zip(BROADCAST_BATCHES, results, strict=True)):
        model, x, y = broadcast_loss_inputs(case, base, batch)
        where = f"regression_loss on a batch of {batch}"
        loss = result["loss"]
        if not result["graph"] or number(loss) is None:
            fail("no-graph", observed=f"regression_loss returned {describe(loss)}",
                 expected="a one-element tensor that backward() can differentiate",
                 cause="a Python number (.item()) or a detached tensor: the optimizer gets no gradient",
                 where=where)
        variants = _loss_variants(model, x, y)
        want = variants["reference"]
        got = torch.tensor(number(loss))
        if not close_values(got, want, rtol=1e-5, atol=1e-7, dtype=False):
            if close_values(got, variants["broadcast-loss"], rtol=1e-5, atol=1e-7, dtype=False):
                fail("broadcast-loss", observed=f"loss {float(got):.5g}, the mean over all {batch * batch} pairs "
                     f"(prediction i, target j)", expected=f"{float(want):.5g}, the mean over the {batch} samples",
                     cause=f"predictions of shape ({batch},) against targets of shape ({batch}, 1) broadcast to "
                     f"({batch}, {batch}): the loss is smallest when every prediction is the mean target",
                     where=where)
            if close_values(got, variants["wrong-reduction"], rtol=1e-5, atol=1e-7, dtype=False):
                fail("wrong-reduction", observed=f"loss {float(got):.5g}, the sum over the batch",
                     expected=f"{float(want):.5g}, the mean", cause="reduction='sum': the loss and the gradients grow "
                     "with the batch size, so the learning rate depends on it", where=where)
            fail("wrong-value", observed=f"loss {float(got):.5g}", expected=f"{float(want):.5g}",
                 cause="another loss than the mean squared error of model(x) against y", where=where)
        out = F.mse_loss(model(x), y)
        out.backward()
        for name, got_grad, parameter in zip(("weight", "bias"), result["grads"], (model.weight, model.bias),
                                             strict=True):
            if not close_values(got_grad, parameter.grad, rtol=1e-5, atol=1e-7):
                fail("wrong-gradient", observed=f"the model's {name} gradient is "
                     + ("missing" if got_grad is None else f"{max_difference(got_grad, parameter.grad):.3g} off"),
                     expected="the gradient of the mean squared error", cause="the loss was computed on a detached "
                     "output, or on something other than model(x)", where=where)
    return "the mean squared error over the batch, with matching shapes, and its gradients"


add_answers(
    Answers(
        drill_id="tensors-split-merge-heads",
        solution=edited(HEADS_STARTER, _SPLIT_FIX, _MERGE_FIX),
        wrong_answers=(
            (edited(HEADS_STARTER, _MERGE_FIX), "split-mixes-tokens"),
            (edited(HEADS_STARTER, _SPLIT_FIX), "merge-mixes-tokens"),
            (edited(HEADS_STARTER,
                    _SPLIT_FIX,
                    ("x.reshape(b, t, h * d)", "x.transpose(1, 2).view(b, t, h * d)")), "raised"),
            (edited(HEADS_STARTER,
                    _SPLIT_FIX,
                    ("x.reshape(b, t, h * d)", "x.permute(0, 2, 3, 1).reshape(b, t, h * d)")),
             "merge-interleaves-features"),
            (edited(HEADS_STARTER,
                    ("x.view(b, heads, t, e // heads)",
                     "x.view(b, t, e // heads, heads).permute(0, 3, 1, 2)"),
                    _MERGE_FIX),
             "split-interleaves-features"),
        ),
        judge=_judge_heads,
    )
)


add_answers(
    choice_answers(
        "tensors-view-after-transpose",
        options=(
            ("raises a RuntimeError: y's strides allow no such view",
             "x.t() only swaps the strides, to (1, 3): no single stride walks y's rows in order over x's memory, so "
             "view refuses; reshape (or .contiguous().view) makes a copy"),
            ("returns [0, 1, 2, 3, 4, 5], x's memory in order",
             "view never reads memory in another order than the tensor's own: it keeps y's logical order or raises"),
            ("returns the copy [0, 3, 1, 4, 2, 5] made contiguous",
             "that is reshape: view never copies, it only gives existing memory a new shape and strides"),
            ("returns [0, 3, 1, 4, 2, 5] sharing x's memory",
             "that order cannot be walked over x's memory with one stride, so no view of it exists"),
        ),
        key="a",
    )
)


add_answers(
    Answers(
        drill_id="loop-loss-broadcasting",
        solution=edited(LOSS_STARTER, ("model(x).squeeze(-1)", "model(x)")),
        wrong_answers=(
            (edited(LOSS_STARTER, ("return F.mse_loss(pred, y)", "return ((pred - y) ** 2).mean()")),
             "broadcast-loss"),
            (edited(LOSS_STARTER,
                    ("model(x).squeeze(-1)", "model(x)"),
                    ("(pred, y)", "(pred, y, reduction='sum')")), "wrong-reduction"),
            (edited(LOSS_STARTER,
                    ("model(x).squeeze(-1)", "model(x)"),
                    ("(pred, y)", "(pred, y).item()")),
             "no-graph"),
        ),
        judge=_judge_loss,
    )
)


add_answers(
    choice_answers(
        "loop-loss-broadcast-shape",
        options=(
            ("a RuntimeError, since the input and target sizes differ",
             "mse_loss only warns (a UserWarning) and broadcasts, as the arithmetic operators do"),
            ("the mean of 64 squared differences, all pairs of the two",
             "(8,) and (8, 1) broadcast to (8, 8): entry (i, j) is (pred[j] - target[i])², and the mean of all 64 "
             "is smallest when every prediction is the mean target"),
            ("the mean of 8 squared differences, target squeezed to (8,)",
             "mse_loss never squeezes: it broadcasts the two shapes, after a warning that is easy to miss"),
            ("an (8, 8) tensor of squared differences, one for each pair",
             "the default reduction is 'mean': a scalar comes back; the (8, 8) tensor exists only inside"),
        ),
        key="b",
    )
)
