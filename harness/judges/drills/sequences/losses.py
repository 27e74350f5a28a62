"""Sequence loss drills: a loss ported from NumPy, label smoothing."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from harness.contract import expect
from harness.contract.case import Case
from harness.contract.compare import close_values, malformed
from harness.contract.failure import fail
from harness.contract.forbidden import SELF_CHECKED, forbid
from harness.contract.wire import describe
from harness.drills.bank.sequences import (
    LOGCOSH_STARTER,
    logcosh_inputs,
    smoothing_inputs,
)
from harness.drills.core import Answers
from harness.drills.support import edited
from harness.judges.drills.sequences.common import CLOSE
from harness.judges.drills.whys import add_answers


def _judge_logcosh(seen: dict, *, case: Case) -> str:
    where = "log_cosh_loss"
    results = seen.get("results")
    inputs = logcosh_inputs(case)
    if not isinstance(results, list) or len(results) != len(inputs):
        malformed("results missing")
    for (pred, target), result in zip(inputs, results, strict=True):
        if not isinstance(result, dict):
            malformed("result")
        diff = (pred - target).double()
        want = (diff.abs() + F.softplus(-2 * diff.abs()) - math.log(2)).mean()
        got = result.get("loss")
        if isinstance(got, torch.Tensor) and got.dim() == 0 and not torch.isfinite(got):
            fail("not-finite", observed=f"the loss is {got.item()} for differences of about 100",
                 expected=f"{want.item():.4f}", cause="cosh(100) overflows float32 (max 3.4e38), so log(cosh(x)) is "
                 "inf before the log can bring it back", where=where)
        expect.close("the loss", got if isinstance(got, torch.Tensor) else describe(got), want.float(), atol=1e-4,
                     rtol=1e-4, where=where, cause="mean of log(cosh(pred - target)) over every element")
        grad = result.get("grad")
        if not isinstance(grad, torch.Tensor):
            fail("no-gradient", observed="after loss.backward(), pred.grad is None",
                 expected="the gradient tanh(pred - target) / N",
                 cause="numpy (or .item(), or torch.tensor(value)) builds a new leaf: autograd never sees how the "
                 "loss depends on pred, so training silently does nothing", where="how the loss is computed from "
                 "pred")
        expect.close("the gradient wrt pred", grad, (torch.tanh(diff) / diff.numel()).float(), atol=1e-5, rtol=1e-4,
                     where=where, cause="the loss is not the mean of log(cosh(pred - target))")
    return "the right value and gradient, and finite for differences of 100"


_LOGCOSH_SOLUTION = '''import math

import torch
import torch.nn.functional as F


def log_cosh_loss(pred, target):
    diff = (pred - target).abs()
    # log(cosh(x)) = |x| + log(1 + exp(-2|x|)) - log(2): no overflow for large |x|
    return (diff + F.softplus(-2 * diff) - math.log(2.0)).mean()
'''


def _judge_smoothing(seen: dict, *, case: Case) -> str:
    where = "smoothed_cross_entropy"
    forbid(seen.get("calls"), {"cross_entropy": "the drill asks you to build it from log_softmax",
                               "nll_loss": "the drill asks you to build it from log_softmax"},
           where="the drill's prompt")
    outputs = seen.get("outputs")
    inputs = smoothing_inputs(case)
    if not isinstance(outputs, list) or len(outputs) != len(inputs):
        malformed("outputs missing")
    for (logits, targets, eps, ignore), got in zip(inputs, outputs, strict=True):
        want = F.cross_entropy(logits, targets, label_smoothing=eps, ignore_index=ignore)
        if close_values(got, want, **CLOSE):
            continue
        logp = logits.log_softmax(-1)
        keep = targets != ignore
        safe = targets.clamp(min=0)
        nll = -logp.gather(1, safe[:, None])[:, 0]
        classes = logits.shape[1]
        other = (-logp.sum(1) - nll) / (classes - 1)
        if close_values(got, ((1 - eps) * nll + eps * other)[keep].mean(), **CLOSE):
            fail("wrong-smoothing", observed="eps is spread over the C-1 wrong classes only",
                 expected="PyTorch's label smoothing: target (1 - eps) + eps/C, every other class eps/C",
                 cause="the smoothing distribution is uniform over ALL classes, the right one included",
                 where="loss = (1 - eps) * nll + eps * mean over classes of -log p")
        per_row = (1 - eps) * nll + eps * (-logp.mean(1))
        if (close_values(got, (per_row * keep).sum() / len(targets), **CLOSE)
                or close_values(got, per_row.mean(), **CLOSE)):
            fail("padding-counted", observed="ignored rows count in the mean", expected="the mean over the "
                 "rows whose target is not ignore_index", cause="both the nll and the smoothing term of ignored rows "
                 "must leave the sum and the count", where=where)
        expect.close("the loss", got, want, atol=1e-5, rtol=1e-4, where=where,
                     cause="(1 - eps) * nll + eps * mean_c(-log p_c), averaged over non-ignored rows")
    return ("equal to F.cross_entropy(label_smoothing=eps, ignore_index=...); no cross_entropy or nll_loss call or "
            f"kernel was seen while it ran ({SELF_CHECKED})")


_SMOOTHING_SOLUTION = '''import torch


def smoothed_cross_entropy(logits, targets, eps, ignore_index):
    logp = logits.log_softmax(dim=-1)
    keep = targets != ignore_index
    nll = -logp.gather(1, targets.clamp(min=0)[:, None]).squeeze(1)
    smooth = -logp.mean(dim=-1)  # uniform over all classes
    loss = (1 - eps) * nll + eps * smooth
    return loss[keep].mean()
'''


add_answers(
    Answers(
        drill_id="sequences-numpy-loss",
        solution=_LOGCOSH_SOLUTION,
        wrong_answers=(
            (edited(LOGCOSH_STARTER,
                    ("np.log(np.cosh(diff))", "np.logaddexp(diff, -diff) - np.log(2.0)")),
             "no-gradient"),
            ("import torch\n\ndef log_cosh_loss(pred, target):\n"
             "    return torch.log(torch.cosh(pred - target)).mean()\n",
             "not-finite"),
            (edited(_LOGCOSH_SOLUTION, (").mean()", ").sum()")), "wrong-value"),
        ),
        judge=_judge_logcosh,
    )
)


add_answers(
    Answers(
        drill_id="sequences-label-smoothing",
        solution=_SMOOTHING_SOLUTION,
        wrong_answers=(
            (edited(_SMOOTHING_SOLUTION,
                    ("    smooth = -logp.mean(dim=-1)  # uniform over all classes\n",
                     "    smooth = (-logp.sum(dim=-1) - nll) / (logits.shape[1] - 1)\n")),
             "wrong-smoothing"),
            (edited(_SMOOTHING_SOLUTION, ("loss[keep].mean()", "(loss * keep).mean()")), "padding-counted"),
            ("import torch.nn.functional as F\n\ndef smoothed_cross_entropy(logits, targets, eps, ignore_index):\n"
             "    return F.cross_entropy(logits, targets, label_smoothing=eps, ignore_index=ignore_index)\n",
             "forbidden-call"),
        ),
        judge=_judge_smoothing,
    )
)
