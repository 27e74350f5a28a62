"""The judge side of the tensors drills (`harness.drills.bank.tensors`): judges and the references
they recompute, reference solutions, planted wrong answers, explain drills' options and keys.

A graded kernel never mounts this package (`harness.judges`).
"""

from __future__ import annotations

import torch

from harness.contract import expect
from harness.contract.case import Case
from harness.contract.compare import close_values, malformed, same_values
from harness.contract.failure import fail
from harness.contract.forbidden import SELF_CHECKED, forbid
from harness.contract.wire import describe
from harness.drills.bank.tensors import (
    UINT8_STARTER,
    attention_scores_inputs,
    gather_inputs,
    logsumexp_inputs,
    masked_mean_inputs,
    pairwise_inputs,
    sgd_case,
    uint8_images,
)
from harness.drills.core import Answers, choice_answers
from harness.drills.support import edited
from harness.judges.drills.whys import add_answers

_OUTSIDE_TORCH = "computing outside torch (NumPy, SciPy, Python numbers) leaves autograd and the GPU behind"
_LOGSUMEXP_FORBIDDEN = {
    "logsumexp": "the drill asks you to build it from amax, exp, sum and log",
    "special_logsumexp": "torch.special.logsumexp is torch.logsumexp under another name",
    "log_softmax": "log_softmax computes logsumexp inside: x - log_softmax(x) is the forbidden call in disguise",
    "numpy": _OUTSIDE_TORCH, "__array__": _OUTSIDE_TORCH, "tolist": _OUTSIDE_TORCH, "item": _OUTSIDE_TORCH,
}


def _judge_logsumexp(seen: dict, *, case: Case) -> str:
    forbid(seen["calls"], _LOGSUMEXP_FORBIDDEN, where="the drill's prompt")
    inputs, outputs = logsumexp_inputs(case), seen["outputs"]
    if not isinstance(outputs, list) or len(outputs) != len(inputs):
        malformed("logsumexp outputs missing")
    for (x, dim), got in list(zip(inputs, outputs, strict=True))[:4]:
        expect.close("logsumexp(x, dim)", got, torch.logsumexp(x, dim), atol=1e-5, rtol=1e-5,
                     where="logsumexp", cause="the reduction or the max subtraction is off")
    (extreme, dim), got = inputs[4], outputs[4]
    expect.close("logsumexp of ±1000", got, torch.logsumexp(extreme, dim), atol=1e-4, rtol=1e-5,
                 where="logsumexp", cause="exp(1000) overflows: subtract the max before exp and add it back after")
    (inf_row, dim), got = inputs[5], outputs[5]
    if not isinstance(got, torch.Tensor) or not same_values(got, torch.logsumexp(inf_row, dim), dtype=False):
        shown = got.tolist() if isinstance(got, torch.Tensor) else describe(got)
        fail("all-inf-row", observed=f"logsumexp of a row of -inf gave {shown}", expected="[-inf, 0.0]",
             cause="max is -inf, and -inf - (-inf) is nan: replace a non-finite max by 0 before subtracting",
             where="the max you subtract")
    return ("matches torch.logsumexp on random and extreme inputs, -inf rows included; no logsumexp call or kernel "
            f"was seen while it ran ({SELF_CHECKED})")


def _judge_pairwise(seen: dict, *, case: Case) -> str:
    inputs, outputs, counts = pairwise_inputs(case), seen.get("outputs"), seen.get("counts")
    if not isinstance(outputs, list) or not isinstance(counts, list) or len(outputs) != len(inputs) \
            or len(counts) != len(inputs) or not all(isinstance(c, int) for c in counts):
        malformed("pairwise outputs missing")
    for (a, b), got, count in zip(inputs, outputs, counts, strict=True):
        expect.close("pairwise_sq_dists(a, b)", got, torch.cdist(a, b) ** 2, atol=1e-4, rtol=1e-4,
                     where="pairwise_sq_dists", cause="broadcast a to (n, 1, d) and b to (1, m, d)")
        if count > 30:
            fail("python-loop", observed=f"{count} torch calls for a ({len(a)}, {a.shape[1]}) by ({len(b)}, "
                 f"{b.shape[1]}) input", expected="a few broadcast calls, whatever n and m",
                 cause="a Python loop over the rows of a (or b): one call per row", where="broadcast instead: "
                 "a[:, None, :] - b[None, :, :]")
    return f"matches cdist² for several (n, m, d); no Python loop was seen ({SELF_CHECKED})"


def _judge_uint8(seen: dict, *, case: Case) -> str:
    images, outputs, after = uint8_images(case), seen.get("outputs"), seen.get("inputs_after")
    if not isinstance(outputs, list) or not isinstance(after, list) or len(outputs) != len(images) \
            or len(after) != len(images):
        malformed("outputs missing")
    for x, got, x_after in zip(images, outputs, after, strict=True):
        if not isinstance(x_after, torch.Tensor) or not same_values(x_after, x, dtype=False):
            fail("input-modified", observed="the caller's uint8 images changed", expected="the input left as it was",
                 cause="an in-place operation (images -= 128, images.sub_(...)) on the caller's tensor",
                 where="center: what it does to images")
        want = (x.float() - 128) / 128
        if isinstance(got, torch.Tensor) and got.dtype != torch.float32:
            fail("wrong-dtype", observed=f"the result's dtype is {got.dtype}", expected="torch.float32",
                 cause="float64 doubles the memory of every batch and mismatches float32 weights; an integer dtype "
                 "cannot hold the fractions", where="center: the dtype of what it returns")
        wrapped = ((x.to(torch.int64) - 128) % 256).float() / 128
        if isinstance(got, torch.Tensor) and got.shape == want.shape and close_values(got, wrapped, dtype=False) \
                and not close_values(got, want, dtype=False):
            fail("uint8-wraparound", observed="pixel 0 maps to +1.0 (and every pixel below 128 to a positive value)",
                 expected="pixel 0 -> -1.0", cause="images - 128 is computed in uint8, which wraps around modulo 256 "
                 "(0 - 128 = 128) before anything turns it into a float", where="center: the subtraction and its dtype")
        expect.close("center(images)", got, want, atol=1e-6, rtol=1e-6, where="center",
                     cause="the operations are not (pixel - 128) / 128 in float32: check the parentheses (/ binds "
                     "tighter than -)")
    return "float32, black is -1, white is 127/128, and the caller's images untouched"


def _judge_sgd(seen: dict, *, case: Case) -> str:
    lr, values, grads = sgd_case(case)
    params = seen.get("params")
    if not isinstance(params, list) or len(params) != len(values) or not all(isinstance(p, dict) for p in params):
        malformed("parameters missing")
    for p, v, g in zip(params, values, grads, strict=True):
        if p.get("is_leaf") is not True:
            fail("update-recorded", observed="after the update a parameter is no longer a leaf tensor",
                 expected="the same leaf tensors, updated outside autograd", cause="the update was recorded by "
                 "autograd (it ran with grad mode on, through an out-of-place op assigned back): the optimizer's "
                 "tensor now has a history", where="with torch.no_grad(): p -= lr * p.grad")
        if p.get("requires_grad") is not True:
            fail("requires-grad-lost", observed="a parameter no longer requires grad", expected="requires_grad=True "
                 "after the update", cause="requires_grad_(False) to get around the leaf error: the next forward "
                 "computes no gradient for it", where="torch.no_grad() instead")
        value = p.get("value")
        if not isinstance(value, torch.Tensor) or value.shape != v.shape:
            malformed("a parameter's value is missing")
        if close_values(value, v, dtype=False):
            fail("not-in-place", observed="the parameters are unchanged after sgd_update_",
                 expected="p - lr * p.grad, written into the same tensors", cause="p = p - lr * p.grad rebinds the "
                 "loop variable to a new tensor: the caller's parameter (and the optimizer's and module's "
                 "reference to it) never changes", where="p -= lr * p.grad (or p.sub_(lr * p.grad)) under no_grad")
        if close_values(value, v + lr * g, atol=1e-6, dtype=False):
            fail("wrong-sign", observed="the parameters moved up the gradient", expected="p - lr * p.grad",
                 cause="add_ instead of sub_ (or alpha=lr instead of alpha=-lr)", where="the update line")
        expect.close("the updated parameter", value, v - lr * g, atol=1e-6, rtol=1e-6, where="the update line",
                     cause="the step is not lr times the gradient")
        if p.get("grad") is not None:
            fail("grad-not-cleared", observed="p.grad is still set after the update", expected="p.grad = None",
                 cause="the next backward would add into this gradient", where="p.grad = None after the update")
    return "each parameter updated in place, still a leaf that requires grad, with its gradient cleared"


_SGD_SOLUTION = '''import torch


def sgd_update_(params, lr):
    with torch.no_grad():
        for p in params:
            p -= lr * p.grad
            p.grad = None
'''


def _judge_attention_scores(seen: dict, *, case: Case) -> str:
    inputs, outputs, counts = attention_scores_inputs(case), seen.get("outputs"), seen.get("counts")
    if not isinstance(outputs, list) or not isinstance(counts, list) or len(outputs) != len(inputs) \
            or len(counts) != len(inputs) or not all(isinstance(c, int) for c in counts):
        malformed("outputs missing")
    for (q, k), got, count in zip(inputs, outputs, counts, strict=True):
        b, h, t, d = q.shape
        s = k.shape[2]
        want = q @ k.transpose(-2, -1) / d ** 0.5
        if isinstance(got, torch.Tensor) and got.shape == want.shape:
            if close_values(got, q @ k.reshape(b, h, d, s) / d ** 0.5, atol=1e-5, dtype=False):
                fail("reshape-not-transpose", observed="the scores equal q @ k.reshape(B, H, D, S) / sqrt(D)",
                     expected="q @ k.transpose(-2, -1) / sqrt(D)", cause="reshape (or view) keeps the elements in "
                     "memory order and only regroups them: the shape is right but each 'column' mixes several keys. "
                     "Swapping two axes is transpose", where="k.transpose(-2, -1)")
            if close_values(got, want * d ** 0.5, atol=1e-4, dtype=False):
                fail("missing-scale", observed="the scores are the raw dot products", expected="dot products divided "
                     "by sqrt(D)", cause="without the 1/sqrt(D) scale the scores grow with D and softmax saturates",
                     where="divide by math.sqrt(q.shape[-1])")
            if close_values(got, want / d ** 0.5, atol=1e-5, dtype=False):
                fail("wrong-scale", observed="the scores are divided by D", expected="divided by sqrt(D)",
                     cause="the scale is 1/sqrt(D), the standard deviation of a sum of D unit-variance products",
                     where="the division")
        expect.close("attention_scores(q, k)", got, want, atol=1e-5, rtol=1e-5, where="attention_scores",
                     cause="contract over D, the last axis of both q and k, keeping T and S apart")
        if count > 20:
            fail("python-loop", observed=f"{count} torch calls for one call with B*H = {b * h}",
                 expected="a few batched calls", cause="a Python loop over the batch or the heads: one "
                 "batched matmul does all of them at once", where="q @ k.transpose(-2, -1)")
    return f"q·kᵀ/sqrt(D) for every batch and head, with T ≠ S; a few batched calls were seen ({SELF_CHECKED})"


_ATTENTION_SOLUTION = '''import math

import torch


def attention_scores(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
'''


def _judge_masked_mean(seen: dict, *, case: Case) -> str:
    inputs, outputs, counts = masked_mean_inputs(case), seen.get("outputs"), seen.get("counts")
    if not isinstance(outputs, list) or len(outputs) != len(inputs) or not isinstance(counts, list) \
            or len(counts) != len(inputs) or not all(isinstance(c, int) for c in counts):
        malformed("outputs missing")
    for (x, lengths), got, count in zip(inputs, outputs, counts, strict=True):
        t = x.shape[1]
        valid = torch.arange(t)[None, :, None] < lengths[:, None, None]
        want = torch.where(valid, x, 0.0).sum(1) / lengths[:, None]
        if isinstance(got, torch.Tensor) and got.shape == want.shape:
            if torch.isnan(got).any() and torch.isnan(x).any():
                fail("padding-nan-leaks", observed="nan in the result when the padding holds nan",
                     expected="the mean of the valid positions only", cause="x * mask keeps nan (0 * nan = nan): "
                     "select with torch.where(mask, x, 0) or x.masked_fill(~mask, 0) instead of multiplying",
                     where="how the padding is zeroed")
            off_by_one = torch.arange(t)[None, :, None] <= lengths[:, None, None]
            if close_values(got, torch.where(off_by_one, x, 0.0).sum(1) / lengths[:, None], atol=1e-4, dtype=False):
                fail("off-by-one-mask", observed="the first padding position is included", expected="positions "
                     "t < length only", cause="arange(T) <= lengths keeps position `length`, the first pad",
                     where="the mask comparison")
            if close_values(got, torch.where(valid, x, 0.0).sum(1) / t, atol=1e-5, dtype=False):
                fail("wrong-denominator", observed="the valid positions are summed but divided by T",
                     expected="divided by each sequence's length", cause="a mean over the padded axis",
                     where="divide by lengths[:, None]")
            if not torch.isnan(x).any() and close_values(got, x.mean(1), atol=1e-4, dtype=False):
                fail("padding-counted", observed="the result is the mean over all T positions, padding included",
                     expected="the mean of the valid positions only", cause="x.mean(1) averages the padding in",
                     where="build a (B, T) mask from lengths")
        expect.close("masked_mean(x, lengths)", got, want, atol=1e-5, rtol=1e-5, where="masked_mean",
                     cause="the padding enters the sum, or the count is not each sequence's length")
        if count > 40:
            fail("python-loop", observed=f"{count} torch calls for a batch of {len(x)} sequences",
                 expected="a few batched calls", cause="a Python loop over the sequences (x[b, :lengths[b]]): "
                 "one call per sequence instead of one mask for the batch", where="build the (B, T) mask once")
    return "mean over valid positions only, with finite or nan garbage in the padding"


_MASKED_SOLUTION = '''import torch


def masked_mean(x, lengths):
    mask = torch.arange(x.shape[1], device=x.device)[None, :] < lengths[:, None]
    total = x.masked_fill(~mask[:, :, None], 0.0).sum(1)
    return total / lengths[:, None].to(x.dtype)
'''


def _judge_gather_log_probs(seen: dict, *, case: Case) -> str:
    forbid(seen.get("calls"), {name: "the drill asks you to pick the log-probabilities yourself" for name in
                               ("cross_entropy", "nll_loss")}, where="the drill's prompt")
    inputs, outputs = gather_inputs(case), seen.get("outputs")
    if not isinstance(outputs, list) or len(outputs) != len(inputs):
        malformed("outputs missing")
    for (logits, targets), got in zip(inputs, outputs, strict=True):
        log_probs = torch.log_softmax(logits, 1)
        want = log_probs.gather(1, targets[:, None]).squeeze(1)
        if isinstance(got, torch.Tensor) and got.shape == want.shape:
            if torch.isinf(got[0]) and torch.isfinite(got[1:]).all():
                fail("log-of-softmax", observed=f"the log-probability of a target 200 below its row's best logit "
                     f"is {got[0].item()}", expected=f"{want[0].item():.2f}", cause="softmax underflows to 0 in "
                     "float32 and log(0) = -inf: log_softmax computes x - logsumexp(x) without forming the "
                     "probabilities", where="torch.log_softmax(logits, dim=1)")
            if close_values(got, log_probs.gather(0, targets[:, None]).squeeze(1), atol=1e-5, dtype=False):
                fail("gather-wrong-dim", observed="row n holds log_probs[targets[n], 0]", expected="log_probs[n, "
                     "targets[n]]", cause="gather(0, ...) indexes rows with the targets: the class axis is dim 1",
                     where="log_probs.gather(1, targets[:, None]).squeeze(1)")
        expect.close("target_log_probs(logits, targets)", got, want, atol=1e-5, rtol=1e-5,
                     where="target_log_probs", cause="logits[:, targets] picks every target for every row (an "
                     "(N, N) block); pick one entry per row with gather or logits[torch.arange(N), targets]")
    return ("one log-probability per row, finite even where softmax underflows; no cross_entropy call was seen "
            f"({SELF_CHECKED})")


_GATHER_SOLUTION = '''import torch


def target_log_probs(logits, targets):
    return torch.log_softmax(logits, dim=1).gather(1, targets[:, None]).squeeze(1)
'''


add_answers(
    Answers(
        drill_id="tensors-pairwise-distances",
        solution="import torch\n\n\ndef pairwise_sq_dists(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:\n"
        "    return ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)\n",
        wrong_answers=(("import torch\n\ndef pairwise_sq_dists(a, b):\n    return ((a - b) ** 2).sum(-1)\n", "raised"),
                       ("import torch\n\ndef pairwise_sq_dists(a, b):\n"
                        "    return ((a[:, None] - b[None]) ** 2).sum(0)\n", "wrong-shape"),
                       ("import torch\n\ndef pairwise_sq_dists(a, b):\n"
                        "    return torch.stack([((row - b) ** 2).sum(-1) for row in a])\n", "python-loop")),
        judge=_judge_pairwise,
    )
)


add_answers(
    choice_answers(
        "tensors-broadcast-shape",
        options=(
            ("an error: the shapes differ", "broadcasting allows different shapes when each pair of sizes, aligned "
             "from the right, is equal or 1"),
            ("(3, 1)", "the result takes the larger size in each dimension: the 1 stretches to 4"),
            ("(4, 3)", "shapes align from the right, so y's 4 meets x's last dimension (1), not its first"),
            ("(3, 4)", "(3, 1) + (4,) aligns as (3, 1) + (1, 4); each size-1 dimension stretches: (3, 4)"),
        ),
        key="d",
    )
)


add_answers(
    choice_answers(
        "tensors-view-or-copy",
        options=(
            ("y = x[x >= 0]", "boolean-mask indexing gathers the selected elements into a new tensor: a copy"),
            ("y = x.reshape(4, 3).clone()", "reshape of a contiguous tensor is a view, but clone() then copies it"),
            ("y = x[[0, 2]]", "indexing with a list of integers (advanced indexing) always copies"),
            ("y = x.t()[1:]", "transpose and basic slicing only change strides and offset: y is a view of x's "
             "storage, so y += 1 writes into x"),
        ),
        key="d",
    )
)


add_answers(
    Answers(
        drill_id="tensors-uint8-wraparound",
        solution=edited(UINT8_STARTER, ("(images - 128) / 128\n", "(images.float() - 128) / 128\n")),
        wrong_answers=(
            (edited(UINT8_STARTER, ("(images - 128) / 128\n", "(images - 128).float() / 128\n")), "uint8-wraparound"),
            (edited(UINT8_STARTER, ("(images - 128) / 128\n", "(images.double() - 128) / 128\n")), "wrong-dtype"),
            (edited(UINT8_STARTER, ("(images - 128) / 128\n", "images.float() - 128 / 128\n")), "wrong-value"),
        ),
        judge=_judge_uint8,
    )
)


add_answers(
    Answers(
        drill_id="tensors-sgd-in-place",
        solution=_SGD_SOLUTION,
        wrong_answers=(
            (edited(_SGD_SOLUTION, ("p -= lr * p.grad", "p = p - lr * p.grad")), "not-in-place"),
            (edited(_SGD_SOLUTION, ("            p.grad = None\n", "")), "grad-not-cleared"),
            (edited(_SGD_SOLUTION, ("p -= lr * p.grad", "p.add_(p.grad, alpha=lr)")), "wrong-sign"),
            ("import torch\n\ndef sgd_update_(params, lr):\n    for p in params:\n        p.requires_grad_(False)\n"
             "        p -= lr * p.grad\n        p.grad = None\n", "requires-grad-lost"),
            ("import torch\n\ndef sgd_update_(params, lr):\n    for p in params:\n        p -= lr * p.grad\n",
             "raised"),
        ),
        judge=_judge_sgd,
    )
)


add_answers(
    Answers(
        drill_id="tensors-attention-scores",
        solution=_ATTENTION_SOLUTION,
        wrong_answers=(
            (edited(_ATTENTION_SOLUTION,
                    ("k.transpose(-2, -1)", "k.reshape(*k.shape[:2], k.shape[3], k.shape[2])")),
             "reshape-not-transpose"),
            (edited(_ATTENTION_SOLUTION, ("math.sqrt(q.shape[-1])", "q.shape[-1]")), "wrong-scale"),
            ("import torch\n\ndef attention_scores(q, k):\n    return torch.einsum('bhtd,bhsd->bhts', q, k)\n",
             "missing-scale"),
            ("import math\nimport torch\n\ndef attention_scores(q, k):\n    b, h = q.shape[:2]\n"
             "    return torch.stack([torch.stack([q[i, j] @ k[i, j].T for j in range(h)]) for i in range(b)])"
             " / math.sqrt(q.shape[-1])\n", "python-loop"),
        ),
        judge=_judge_attention_scores,
    )
)


add_answers(
    Answers(
        drill_id="tensors-masked-mean",
        solution=_MASKED_SOLUTION,
        wrong_answers=(
            ("import torch\n\ndef masked_mean(x, lengths):\n    return x.mean(1)\n", "padding-counted"),
            ("import torch\n\ndef masked_mean(x, lengths):\n"
             "    mask = (torch.arange(x.shape[1])[None, :] < lengths[:, None]).float()\n"
             "    return (x * mask[:, :, None]).sum(1) / lengths[:, None]\n", "padding-nan-leaks"),
            (edited(_MASKED_SOLUTION, ("[None, :] < lengths", "[None, :] <= lengths")), "off-by-one-mask"),
            (edited(_MASKED_SOLUTION, ("lengths[:, None].to(x.dtype)", "x.shape[1]")), "wrong-denominator"),
            ("import torch\n\ndef masked_mean(x, lengths):\n"
             "    return torch.stack([x[b, :lengths[b]].mean(0) for b in range(x.shape[0])])\n", "python-loop"),
        ),
        judge=_judge_masked_mean,
    )
)


add_answers(
    Answers(
        drill_id="tensors-gather-log-probs",
        solution=_GATHER_SOLUTION,
        wrong_answers=(
            (edited(_GATHER_SOLUTION,
                    ("torch.log_softmax(logits, dim=1)", "torch.softmax(logits, dim=1).log()")),
             "log-of-softmax"),
            (edited(_GATHER_SOLUTION, (".gather(1, targets[:, None])", ".gather(0, targets[:, None])")),
             "gather-wrong-dim"),
            (edited(_GATHER_SOLUTION, (".gather(1, targets[:, None]).squeeze(1)", "[:, targets]")), "wrong-shape"),
            ("import torch\nimport torch.nn.functional as F\n\ndef target_log_probs(logits, targets):\n"
             "    return -F.cross_entropy(logits, targets, reduction='none')\n", "forbidden-call"),
        ),
        judge=_judge_gather_log_probs,
    )
)
