"""The judge side of the sequences drills (`harness.drills.bank.sequences`): judges and the references
they recompute, reference solutions, planted wrong answers, explain drills' options and keys.

A graded kernel never mounts this package (`harness.judges`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from harness.contract import expect
from harness.contract.case import Case
from harness.contract.compare import close_values, same_values
from harness.contract.failure import fail
from harness.contract.forbidden import SELF_CHECKED, forbid
from harness.contract.wire import WireError, describe
from harness.drills.bank.sequences import (
    _LOGCOSH_STARTER,
    _SEQ_STARTER,
    _classifier_setup,
    _logcosh_inputs,
    _lstm_setup,
    _mask_inputs,
    _masked_loss_inputs,
    _padding_collate_batches,
    _pe_sizes,
    _sdpa_inputs,
    _seq_lr,
    _smoothing_inputs,
    _valid,
)
from harness.drills.core import Answers, choice_answers
from harness.judges.drills.whys import add_answers

# How close a result must be to a reference (in float64, whatever its dtype) to count as it
_CLOSE = {"atol": 1e-5, "rtol": 1e-4, "dtype": False}


def _judge_padding_collate(seen: dict, *, case: Case) -> str:
    where = "collate"
    pad, batches = _padding_collate_batches(case)
    outputs = seen.get("outputs")
    if not isinstance(outputs, list) or len(outputs) != len(batches):
        raise WireError("collate outputs missing")
    for batch, out in zip(batches, outputs, strict=True):
        if not isinstance(out, (tuple, list)) or len(out) != 3:
            fail("wrong-return", observed=f"collate returned {describe(out)}",
                 expected="a tuple (padded, lengths, labels)", cause="a missing element", where=where)
        padded, lengths, labels = out
        want_lengths = torch.tensor([len(tokens) for tokens, _ in batch])
        longest = int(want_lengths.max())
        want = torch.full((len(batch), longest), pad, dtype=torch.long)
        for row, (tokens, _) in enumerate(batch):
            want[row, :len(tokens)] = tokens
        if not isinstance(padded, torch.Tensor) or padded.shape != want.shape:
            fail("wrong-shape", observed=f"padded is {describe(padded)}", expected=f"shape {tuple(want.shape)} "
                 "(batch, longest sequence of this batch)",
                 cause="pad_sequence stacks time first unless batch_first=True, or every batch is padded to a fixed "
                 "length", where=where)
        if padded.dtype != torch.int64:
            fail("wrong-dtype", observed=f"padded has dtype {padded.dtype}", expected="int64, as the token ids",
                 cause="token ids index an embedding: keep them int64", where=where)
        if not same_values(padded[~_valid(want_lengths, longest)], want[~_valid(want_lengths, longest)], dtype=False):
            held = sorted(set(padded[~_valid(want_lengths, longest)].tolist()))[:4]
            fail("wrong-pad-value", observed=f"padded positions hold {held}", expected=f"the pad value {pad}",
                 cause="pad_sequence pads with 0 unless given padding_value; 0 is often a real token id", where=where)
        if not same_values(padded, want, dtype=False):
            fail("wrong-value", observed="the real tokens are not where they belong", expected="row i starts with "
                 "sequence i's tokens", cause="sequences reordered or truncated", where=where)
        if not isinstance(lengths, torch.Tensor) or lengths.dtype != torch.int64 or lengths.shape != want_lengths.shape:
            fail("wrong-dtype", observed=f"lengths is {describe(lengths)}",
                 expected="an int64 tensor of shape (batch,)",
                 cause="pack_padded_sequence and indexing need integer lengths", where=where)
        if not same_values(lengths, want_lengths, dtype=False):
            fail("wrong-lengths", observed=f"lengths {lengths.tolist()}", expected=f"{want_lengths.tolist()}",
                 cause="the lengths are those of the sequences before padding", where=where)
        want_labels = torch.tensor([label for _, label in batch])
        if not isinstance(labels, torch.Tensor) or not same_values(labels, want_labels, dtype=False):
            fail("wrong-labels", observed=f"labels {describe(labels)}", expected=f"{want_labels.tolist()}",
                 cause="labels must stay in the batch's order, as an int64 tensor", where=where)
    return "padded to each batch's longest sequence with the pad value, with the true lengths and labels"


_COLLATE_SOLUTION = '''import torch
from torch.nn.utils.rnn import pad_sequence


def collate(batch, pad_value):
    tokens = [t for t, _ in batch]
    padded = pad_sequence(tokens, batch_first=True, padding_value=pad_value)
    lengths = torch.tensor([len(t) for t in tokens], dtype=torch.long)
    labels = torch.tensor([label for _, label in batch], dtype=torch.long)
    return padded, lengths, labels
'''


def _judge_masked_loss(seen: dict, *, case: Case) -> str:
    where = "masked_cross_entropy"
    results = seen.get("results")
    inputs = _masked_loss_inputs(case)
    if not isinstance(results, list) or len(results) != len(inputs):
        raise WireError("results missing")
    for (logits, targets, lengths), result in zip(inputs, results, strict=True):
        if not isinstance(result, dict):
            raise WireError("malformed result")
        valid = _valid(lengths, targets.shape[1])
        logits = logits.clone().requires_grad_(True)
        per_token = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
        want = per_token[valid].mean()
        got = result.get("loss")
        if not close_values(got, want.detach(), **_CLOSE):
            if close_values(got, per_token.mean().detach(), **_CLOSE):
                fail("padding-counted", observed="the loss is the mean over every position, padding included",
                     expected="the mean over the real tokens only",
                     cause="padding positions hold arbitrary targets: they add noise to the loss and the gradient",
                     where="mask with lengths, or set padded targets to ignore_index (-100)")
            if close_values(got, (per_token * valid).sum(1).div(lengths).mean().detach(), **_CLOSE):
                fail("per-sequence-mean", observed="the loss averages each sequence, then the sequences",
                     expected="one mean over all real tokens of the batch",
                     cause="that weighs a token of a short sequence more than one of a long sequence",
                     where="sum over real tokens / number of real tokens")
            if close_values(got, (per_token * valid).sum().div(valid.numel()).detach(), **_CLOSE):
                fail("wrong-denominator", observed="the loss divides the real tokens' sum by batch * steps",
                     expected="division by the number of real tokens", cause="mask.numel() counts padding too",
                     where="divide by mask.sum()")
            expect.close("the loss", got, want.detach(), atol=1e-5, rtol=1e-4, where=where,
                         cause="the mean of F.cross_entropy over the real tokens")
        if result.get("tracked") is not True or not isinstance(result.get("grad"), torch.Tensor):
            fail("no-gradient", observed="the loss carries no gradient to the logits",
                 expected="loss.backward() reaches the logits", cause="a .item(), .detach() or torch.tensor(...) "
                 "inside the loss cuts the graph", where=where)
        want.backward()
        grad = result["grad"]
        if grad.shape == logits.shape and grad[~valid].abs().max() > 0:
            fail("padding-gets-gradient", observed="padded positions receive a gradient", expected="zero gradient "
                 "at padding", cause="the padding positions entered the loss", where=where)
        expect.close("the gradient wrt the logits", grad, logits.grad, atol=1e-5, rtol=1e-4, where=where)
    return "the mean cross-entropy over real tokens only, with no gradient at padding"


_MASKED_SOLUTION = '''import torch
import torch.nn.functional as F


def masked_cross_entropy(logits, targets, lengths):
    steps = targets.shape[1]
    valid = torch.arange(steps, device=targets.device)[None, :] < lengths[:, None]
    targets = targets.masked_fill(~valid, -100)  # ignore_index
    return F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=-100)
'''


def _judge_attention_mask(seen: dict, *, case: Case) -> str:
    where = "attention_mask"
    masks = seen.get("masks")
    inputs = _mask_inputs(case)
    if not isinstance(masks, list) or len(masks) != len(inputs):
        raise WireError("masks missing")
    for (lengths, steps), got in zip(inputs, masks, strict=True):
        causal = torch.ones(steps, steps, dtype=torch.bool).tril()
        keys = _valid(lengths, steps)[:, None, None, :]
        want = causal[None, None] & keys
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            fail("wrong-shape", observed=f"the mask is {describe(got)}", expected=f"shape {tuple(want.shape)} "
                 "(batch, 1, queries, keys): the 1 broadcasts over heads", cause="a missing head dimension, or the "
                 "padding mask left at (batch, keys)", where=where)
        if got.dtype != torch.bool:
            fail("wrong-dtype", observed=f"the mask has dtype {got.dtype}", expected="torch.bool",
                 cause="a float mask is added to the scores, not used as allowed / not allowed", where=where)
        if same_values(got, want, dtype=False):
            continue
        if same_values(got, ~want, dtype=False):
            fail("inverted-mask", observed="True where attention is forbidden", expected="True where query i may "
                 "attend key j (F.scaled_dot_product_attention's convention)",
                 cause="nn.MultiheadAttention's key_padding_mask uses the opposite convention (True = ignore)",
                 where=where)
        if (got & ~causal).any():
            fail("future-visible", observed="a query may attend a later key", expected="key j <= query i only",
                 cause="the causal part is missing or uses triu instead of tril", where=where)
        queries = causal[None, None] & _valid(lengths, steps)[:, None, :, None]
        if same_values(got, queries, dtype=False):
            fail("padding-on-queries", observed="the padding mask is on the query axis",
                 expected="padded KEYS masked (the last axis)",
                 cause="masking padded queries leaves padded keys visible to real queries, and gives padded "
                 "queries rows with nothing to attend (softmax of all -inf is nan)",
                 where="index lengths on the keys axis")
        if same_values(got, want & ~torch.eye(steps, dtype=torch.bool), dtype=False):
            fail("diagonal-masked", observed="mask[b, 0, i, i] is False: no query may attend its own key, and the "
                 "first query may attend no key at all", expected="key j <= query i: each token sees itself and "
                 "the tokens before it", cause="the causal part is strict (j < i): attention's causal mask keeps "
                 "the diagonal, and a row with every key masked gives nan after the softmax", where=where)
        fail("wrong-value", observed="the mask differs from causal AND key-padding", expected="mask[b, 0, i, j] = "
             "j <= i and j < lengths[b]", cause="one of the two parts is wrong", where=where)
    return "causal AND key-padding, as a (batch, 1, queries, keys) bool mask"


_MASK_SOLUTION = '''import torch


def attention_mask(lengths, steps):
    causal = torch.ones(steps, steps, dtype=torch.bool, device=lengths.device).tril()
    keys = torch.arange(steps, device=lengths.device)[None, :] < lengths[:, None]  # (B, T): real keys
    return causal[None, None, :, :] & keys[:, None, None, :]
'''


def _attention_variant(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, *,
                       scale: float, fill: float = -math.inf, dim: int = -1) -> torch.Tensor:
    scores = q @ k.transpose(-2, -1) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, fill)
    return scores.softmax(dim) @ v


def _judge_sdpa_by_hand(seen: dict, *, case: Case) -> str:
    where = "attention"
    by_hand = "the drill asks you to write it by hand"
    forbid(seen.get("calls"), {"scaled_dot_product_attention": by_hand, "_scaled_dot_product_attention_math": by_hand,
                               "multi_head_attention_forward": by_hand}, where="the drill's prompt")
    outputs = seen.get("outputs")
    inputs = _sdpa_inputs(case)
    if not isinstance(outputs, list) or len(outputs) != len(inputs):
        raise WireError("outputs missing")
    for (q, k, v, mask), got in zip(inputs, outputs, strict=True):
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        if close_values(got, want, **_CLOSE):
            continue
        d = q.shape[-1]
        if close_values(got, _attention_variant(q, k, v, mask, scale=1 / d), **_CLOSE) or close_values(
                got, _attention_variant(q, k, v, mask, scale=1.0), **_CLOSE):
            fail("wrong-scale", observed="the scores are scaled by 1/d or not at all", expected="scores / sqrt(d)",
                 cause="without 1/sqrt(d) the scores grow with d and the softmax saturates", where=where)
        if close_values(got, _attention_variant(q, k, v, mask, scale=d ** -0.5, dim=-2), **_CLOSE):
            fail("wrong-softmax-dim", observed="the softmax normalises over the queries", expected="over the keys "
                 "(the last dim): each query's weights sum to 1", cause="softmax(dim=-2)", where=where)
        if mask is not None and close_values(got, _attention_variant(q, k, v, mask, scale=d ** -0.5, fill=0.0),
                                             **_CLOSE):
            fail("mask-fill-zero", observed="masked scores were set to 0", expected="masked scores set to -inf",
                 cause="a score of 0 still gets weight exp(0) = 1 after softmax: the masked keys are still attended",
                 where="scores.masked_fill(~mask, float('-inf'))")
        if mask is not None and close_values(got, _attention_variant(q, k, v, None, scale=d ** -0.5), **_CLOSE):
            fail("mask-not-applied", observed="the output ignores the mask", expected="masked keys get zero weight",
                 cause="the mask argument was not used", where=where)
        # an inverted mask leaves some query rows with every key masked: NaN there, on purpose, in the variant too
        if mask is not None and close_values(got, _attention_variant(q, k, v, ~mask, scale=d ** -0.5), **_CLOSE,
                                             expected_nan=True):
            fail("inverted-mask", observed="True in the mask was treated as 'forbidden'",
                 expected="True = may attend (F.scaled_dot_product_attention's convention)",
                 cause="masked_fill(mask, -inf) instead of masked_fill(~mask, -inf)", where=where)
        expect.close("attention(q, k, v, mask)", got, want, atol=1e-5, rtol=1e-4, where=where,
                     cause="softmax(q @ k^T / sqrt(d), masked with -inf) @ v")
    return ("matches F.scaled_dot_product_attention with no mask, a causal mask and a key-padding mask; no "
            f"scaled_dot_product_attention call or kernel was seen ({SELF_CHECKED})")


_ATTENTION_SOLUTION = '''import math

import torch


def attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-1) @ v
'''


def _pe_reference(steps: int, dim: int, *, interleave: bool = True, two_i: bool = True, start: int = 0) -> torch.Tensor:
    pos = torch.arange(start, start + steps, dtype=torch.float64)[:, None]
    i = torch.arange(dim // 2, dtype=torch.float64)[None, :]
    angle = pos / 10000 ** ((2 * i if two_i else i) / dim)
    if not interleave:
        return torch.cat([angle.sin(), angle.cos()], dim=1)
    pe = torch.empty(steps, dim, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = angle.sin(), angle.cos()
    return pe


def _judge_pe(seen: dict, *, case: Case) -> str:
    where = "sinusoidal_pe"
    outputs = seen.get("outputs")
    sizes = _pe_sizes(case)
    if not isinstance(outputs, list) or len(outputs) != len(sizes):
        raise WireError("outputs missing")
    for (steps, dim), got in zip(sizes, outputs, strict=True):
        want = _pe_reference(steps, dim)
        if isinstance(got, torch.Tensor) and got.dtype != torch.float32:
            fail("wrong-dtype", observed=f"the encoding has dtype {got.dtype}", expected="torch.float32",
                 cause="it is added to float32 embeddings", where=where)
        if close_values(got, want.float(), **_CLOSE):
            continue
        if close_values(got, _pe_reference(steps, dim, interleave=False), **_CLOSE):
            fail("concatenated-layout", observed="sines in the first half, cosines in the second",
                 expected="sin at even columns, cos at odd columns", cause="torch.cat instead of interleaving "
                 "(pe[:, 0::2] = sin, pe[:, 1::2] = cos)", where=where)
        if close_values(got, _pe_reference(steps, dim, two_i=False), **_CLOSE):
            fail("wrong-frequencies", observed="the frequencies use 10000^(i/d)", expected="10000^(2i/d) for the "
                 "pair of columns (2i, 2i+1)", cause="i counts pairs of columns, so the exponent is 2i/d", where=where)
        if close_values(got, _pe_reference(steps, dim, start=1), **_CLOSE):
            fail("off-by-one-position", observed="positions start at 1", expected="positions 0 .. T-1",
                 cause="arange(1, T + 1)", where=where)
        expect.close(f"sinusoidal_pe({steps}, {dim})", got, want.float(), atol=1e-5, rtol=1e-4, where=where,
                     cause="PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(same)")
    return "the Transformer's sinusoidal encoding, interleaved sin / cos, for several lengths and sizes"


_PE_SOLUTION = '''import math

import torch


def sinusoidal_pe(steps, dim):
    pos = torch.arange(steps, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    pe = torch.zeros(steps, dim)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    return pe
'''


def _judge_logcosh(seen: dict, *, case: Case) -> str:
    where = "log_cosh_loss"
    results = seen.get("results")
    inputs = _logcosh_inputs(case)
    if not isinstance(results, list) or len(results) != len(inputs):
        raise WireError("results missing")
    for (pred, target), result in zip(inputs, results, strict=True):
        if not isinstance(result, dict):
            raise WireError("malformed result")
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
    inputs = _smoothing_inputs(case)
    if not isinstance(outputs, list) or len(outputs) != len(inputs):
        raise WireError("outputs missing")
    for (logits, targets, eps, ignore), got in zip(inputs, outputs, strict=True):
        want = F.cross_entropy(logits, targets, label_smoothing=eps, ignore_index=ignore)
        if close_values(got, want, **_CLOSE):
            continue
        logp = logits.log_softmax(-1)
        keep = targets != ignore
        safe = targets.clamp(min=0)
        nll = -logp.gather(1, safe[:, None])[:, 0]
        classes = logits.shape[1]
        other = (-logp.sum(1) - nll) / (classes - 1)
        if close_values(got, ((1 - eps) * nll + eps * other)[keep].mean(), **_CLOSE):
            fail("wrong-smoothing", observed="eps is spread over the C-1 wrong classes only",
                 expected="PyTorch's label smoothing: target (1 - eps) + eps/C, every other class eps/C",
                 cause="the smoothing distribution is uniform over ALL classes, the right one included",
                 where="loss = (1 - eps) * nll + eps * mean over classes of -log p")
        per_row = (1 - eps) * nll + eps * (-logp.mean(1))
        if (close_values(got, (per_row * keep).sum() / len(targets), **_CLOSE)
                or close_values(got, per_row.mean(), **_CLOSE)):
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


def _judge_lstm(seen: dict, *, case: Case) -> str:
    where = "last_valid_output"
    lstm, x, lengths = _lstm_setup(case)
    with torch.no_grad():
        want = torch.stack([lstm(x[b:b + 1, :int(n)])[0][0, -1] for b, n in enumerate(lengths)])
        padded_last = lstm(x)[0][:, -1]
    got = seen.get("out")
    if close_values(got, padded_last, **_CLOSE) and not close_values(got, want, **_CLOSE):
        fail("padding-step-used", observed="the output is the LSTM's state after the last PADDED step",
             expected="the output at step lengths[b] - 1 of each sequence",
             cause="output[:, -1] and h_n of an unpacked run have read the padding too",
             where="pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False), then h_n[-1]")
    expect.close("last_valid_output", got, want, atol=1e-5, rtol=1e-4, where=where,
                 cause="for each sequence, the LSTM output at its last real step")
    return "each sequence's LSTM output at its own last real step, whatever the padding"


_LSTM_SOLUTION = '''import torch
from torch.nn.utils.rnn import pack_padded_sequence


def last_valid_output(lstm, x, lengths):
    packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
    _, (h_n, _) = lstm(packed)
    return h_n[-1]  # restored to the batch's order by the packed sequence's unsorted_indices
'''


def _pooled_loss(params: dict[str, torch.Tensor], tokens: torch.Tensor, lengths: torch.Tensor, labels: torch.Tensor,
                 *, include_next: bool = False, by_steps: bool = False) -> torch.Tensor:
    steps = tokens.shape[1]
    h = F.embedding(tokens, params["embed.weight"])
    positions = torch.arange(steps)[None, :]
    mask = positions <= lengths[:, None] if include_next else positions < lengths[:, None]
    pooled = (h * mask[..., None]).sum(1) / (steps if by_steps else lengths[:, None])
    return F.cross_entropy(F.linear(pooled, params["classifier.weight"], params["classifier.bias"]), labels)


def _judge_seq_step(seen: dict, *, case: Case) -> str:
    where = "train_step"
    _, _, batches = _classifier_setup(case)
    steps, losses = seen.get("steps"), seen.get("losses")
    if not isinstance(steps, list) or not isinstance(losses, list) or len(losses) != len(batches):
        raise WireError("records missing")
    if len(steps) != len(batches):
        fail("wrong-step-count", observed=f"{len(steps)} optimizer steps for {len(batches)} calls",
             expected="one optimizer.step() per call", cause="the step is missing or repeated", where=where)
    earlier: dict[str, torch.Tensor] = {}
    for i, ((tokens, lengths, labels), step, got_loss) in enumerate(zip(batches, steps, losses, strict=True)):
        if not isinstance(step, dict):
            raise WireError("malformed step record")
        params = {n: t.detach().clone().requires_grad_(True)
                  for n, t in _dict_of_tensors(step.get("params")).items()}
        if set(params) != {"embed.weight", "classifier.weight", "classifier.bias"}:
            raise WireError("the probe's optimizer records are incomplete")
        want = _pooled_loss(params, tokens, lengths, labels)
        if not close_values(got_loss, want.detach(), **_CLOSE):
            if isinstance(got_loss, torch.Tensor) and got_loss.dim() == 0 and any(
                    close_values(got_loss, _pooled_loss(params, tokens, lengths, labels, include_next=True, by_steps=s),
                                 **_CLOSE)
                    for s in (False, True)):
                fail("pad-token-pooled", observed=f"at step {i} the pooled vector includes the first padding token",
                     expected="the mean of the real tokens' embeddings (t < length)",
                     cause="`<=` in the mask: position lengths[b] is the first PAD, not the last real token",
                     where="the padding mask's comparison")
            if close_values(got_loss, _pooled_loss(params, tokens, lengths, labels, by_steps=True), **_CLOSE):
                fail("divides-by-padded-length", observed=f"at step {i} the sum of real embeddings is divided by T",
                     expected="divided by each sequence's length",
                     cause="dividing by the padded length shrinks short sequences' vectors toward 0: the prediction "
                     "depends on how much padding the batch had", where="the division of the pooled sum")
            expect.close(f"the loss returned at step {i}", got_loss if isinstance(got_loss, torch.Tensor)
                         else describe(got_loss), want.detach(), atol=1e-5, rtol=1e-4, where=where,
                         cause="cross_entropy of the classifier on the masked mean of the embeddings")
        want.backward()
        grads = step.get("grads")
        if not isinstance(grads, dict):
            raise WireError("grads missing")
        if all(grads.get(n) is None or (isinstance(grads.get(n), torch.Tensor) and grads[n].abs().sum() == 0)
               for n in params):
            fail("gradients-cleared", observed=f"at step {i} the optimizer saw no gradient (None or zeros)",
                 expected="the gradient of this step's loss", cause="zero_grad() between backward() and step() "
                 "erases the gradient just computed", where="what happens to .grad between steps")
        summed = {n: p.grad + earlier[n] for n, p in params.items()} if earlier else None
        if summed and not all(close_values(grads.get(n), p.grad, atol=1e-5, rtol=1e-4) for n, p in params.items()) \
                and all(close_values(grads.get(n), summed[n], atol=1e-5, rtol=1e-4) for n in params):
            fail("stale-gradients", observed=f"at step {i} the optimizer saw the sum of this step's gradient and "
                 "every earlier step's", expected="the gradient of this step's loss alone",
                 cause="nothing clears .grad between steps: backward() adds into it", where="what happens to .grad "
                 "between steps")
        for name, p in params.items():
            expect.close(f"the gradient of {name} at step {i}", grads.get(name), p.grad, atol=1e-5, rtol=1e-4,
                         where=where, cause="the gradient of another loss than the prompt's")
        earlier = summed or {n: p.grad for n, p in params.items()}
    final = _dict_of_tensors(seen.get("final"))
    last = _dict_of_tensors(steps[-1].get("params"))
    lr = _seq_lr(case)
    params = {n: t.clone().requires_grad_(True) for n, t in last.items()}
    _pooled_loss(params, *batches[-1]).backward()
    for name, p in params.items():
        expect.close(f"{name} after the last step", final.get(name), (p - lr * p.grad).detach(), atol=1e-5,
                     rtol=1e-4, where=where, cause="the step is not SGD(lr) on this gradient")
    return "pooling over real tokens only, divided by the true lengths, and each step's own gradient"


def _dict_of_tensors(value: Any) -> dict[str, torch.Tensor]:
    if not isinstance(value, dict) or not all(isinstance(v, torch.Tensor) for v in value.values()):
        raise WireError("not a dict of tensors")
    return value


_SEQ_SOLUTION = '''import torch
import torch.nn.functional as F


def train_step(embed, classifier, tokens, lengths, labels, optimizer):
    """One step of a bag-of-embeddings classifier on a padded batch (pad id 0). Returns the loss, detached."""
    optimizer.zero_grad(set_to_none=True)
    steps = tokens.shape[1]
    h = embed(tokens)  # (B, T, D)
    mask = torch.arange(steps, device=tokens.device)[None, :] < lengths[:, None]  # (B, T): real tokens
    pooled = (h * mask[..., None]).sum(dim=1) / lengths[:, None]
    logits = classifier(pooled)
    loss = F.cross_entropy(logits, labels)
    loss.backward()
    optimizer.step()
    return loss.detach()
'''

_SEQ_FIX_MASK = ("<= lengths[:, None]", "< lengths[:, None]")
_SEQ_FIX_DIV = ("/ steps\n", "/ lengths[:, None]\n")
_SEQ_FIX_ZERO = ("    loss.backward()\n    optimizer.zero_grad(set_to_none=True)\n",
                 "    loss.backward()\n")


def _seq_fixed(*fixes: tuple[str, str]) -> str:
    source = _SEQ_STARTER
    for old, new in fixes:
        source = source.replace(old, new)
    if _SEQ_FIX_ZERO in fixes:
        source = source.replace('    steps = tokens.shape[1]\n',
                                '    optimizer.zero_grad(set_to_none=True)\n    steps = tokens.shape[1]\n')
    return source


add_answers(
    Answers(
        drill_id="sequences-pad-collate",
        solution=_COLLATE_SOLUTION,
        wrong_answers=(
            (_COLLATE_SOLUTION.replace(", padding_value=pad_value", ""), "wrong-pad-value"),
            (_COLLATE_SOLUTION.replace("batch_first=True, ", ""), "wrong-shape"),
            (_COLLATE_SOLUTION.replace("[len(t) for t in tokens], dtype=torch.long",
                                       "[padded.shape[1]] * len(tokens), dtype=torch.long"), "wrong-lengths"),
            (_COLLATE_SOLUTION.replace("[len(t) for t in tokens], dtype=torch.long",
                                       "[len(t) for t in tokens], dtype=torch.float32"), "wrong-dtype"),
        ),
        judge=_judge_padding_collate,
    )
)


add_answers(
    Answers(
        drill_id="sequences-masked-loss",
        solution=_MASKED_SOLUTION,
        wrong_answers=(
            ("import torch.nn.functional as F\n\ndef masked_cross_entropy(logits, targets, lengths):\n"
             "    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())\n", "padding-counted"),
            ("import torch\nimport torch.nn.functional as F\n\ndef masked_cross_entropy(logits, targets, lengths):\n"
             "    loss = F.cross_entropy(logits.transpose(1, 2), targets, reduction='none')\n"
             "    mask = torch.arange(targets.shape[1])[None, :] < lengths[:, None]\n"
             "    return ((loss * mask).sum(1) / lengths).mean()\n", "per-sequence-mean"),
            ("import torch\nimport torch.nn.functional as F\n\ndef masked_cross_entropy(logits, targets, lengths):\n"
             "    loss = F.cross_entropy(logits.transpose(1, 2), targets, reduction='none')\n"
             "    mask = torch.arange(targets.shape[1])[None, :] < lengths[:, None]\n"
             "    return (loss * mask).sum() / mask.numel()\n", "wrong-denominator"),
            ("import torch\nimport torch.nn.functional as F\n\ndef masked_cross_entropy(logits, targets, lengths):\n"
             "    loss = F.cross_entropy(logits.transpose(1, 2), targets, reduction='none')\n"
             "    mask = torch.arange(targets.shape[1])[None, :] < lengths[:, None]\n"
             "    return torch.tensor(loss[mask].mean().item())\n", "no-gradient"),
        ),
        judge=_judge_masked_loss,
    )
)


add_answers(
    Answers(
        drill_id="sequences-causal-padding-mask",
        solution=_MASK_SOLUTION,
        wrong_answers=(
            (_MASK_SOLUTION.replace("keys[:, None, None, :]", "keys[:, None, :, None]"), "padding-on-queries"),
            (_MASK_SOLUTION.replace("    return causal[None, None, :, :] & keys[:, None, None, :]\n",
                                    "    return ~(causal[None, None, :, :] & keys[:, None, None, :])\n"),
             "inverted-mask"),
            (_MASK_SOLUTION.replace(".tril()", ".triu()"), "future-visible"),
            (_MASK_SOLUTION.replace(".tril()", ".tril(diagonal=-1)"), "diagonal-masked"),
            (_MASK_SOLUTION.replace("    return causal[None, None, :, :] & keys[:, None, None, :]\n",
                                    "    return causal[None, None, :, :] & keys[:, None, :]\n"), "wrong-shape"),
        ),
        judge=_judge_attention_mask,
    )
)


add_answers(
    Answers(
        drill_id="sequences-attention-by-hand",
        solution=_ATTENTION_SOLUTION,
        wrong_answers=(
            (_ATTENTION_SOLUTION.replace("/ math.sqrt(q.shape[-1])", "/ q.shape[-1]"), "wrong-scale"),
            (_ATTENTION_SOLUTION.replace('float("-inf")', "0.0"), "mask-fill-zero"),
            (_ATTENTION_SOLUTION.replace("softmax(dim=-1)", "softmax(dim=-2)"), "wrong-softmax-dim"),
            (_ATTENTION_SOLUTION.replace("masked_fill(~mask,", "masked_fill(mask,"), "inverted-mask"),
            ("import torch.nn.functional as F\n\ndef attention(q, k, v, mask=None):\n"
             "    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)\n", "forbidden-call"),
        ),
        judge=_judge_sdpa_by_hand,
    )
)


add_answers(
    Answers(
        drill_id="sequences-sinusoidal-pe",
        solution=_PE_SOLUTION,
        wrong_answers=(
            (_PE_SOLUTION.replace("    pe = torch.zeros(steps, dim)\n    pe[:, 0::2] = torch.sin(pos * div)\n"
                                  "    pe[:, 1::2] = torch.cos(pos * div)\n",
                                  "    pe = torch.cat([torch.sin(pos * div), torch.cos(pos * div)], dim=1)\n"),
             "concatenated-layout"),
            (_PE_SOLUTION.replace("torch.arange(0, dim, 2, dtype=torch.float32)",
                                  "torch.arange(dim // 2, dtype=torch.float32)"), "wrong-frequencies"),
            (_PE_SOLUTION.replace("torch.arange(steps, dtype=torch.float32)",
                                  "torch.arange(1, steps + 1, dtype=torch.float32)"), "off-by-one-position"),
        ),
        judge=_judge_pe,
    )
)


add_answers(
    Answers(
        drill_id="sequences-numpy-loss",
        solution=_LOGCOSH_SOLUTION,
        wrong_answers=(
            (_LOGCOSH_STARTER.replace("np.log(np.cosh(diff))", "np.logaddexp(diff, -diff) - np.log(2.0)"),
             "no-gradient"),
            ("import torch\n\ndef log_cosh_loss(pred, target):\n"
             "    return torch.log(torch.cosh(pred - target)).mean()\n",
             "not-finite"),
            (_LOGCOSH_SOLUTION.replace(").mean()", ").sum()"), "wrong-value"),
        ),
        judge=_judge_logcosh,
    )
)


add_answers(
    Answers(
        drill_id="sequences-label-smoothing",
        solution=_SMOOTHING_SOLUTION,
        wrong_answers=(
            (_SMOOTHING_SOLUTION.replace("    smooth = -logp.mean(dim=-1)  # uniform over all classes\n",
                                         "    smooth = (-logp.sum(dim=-1) - nll) / (logits.shape[1] - 1)\n"),
             "wrong-smoothing"),
            (_SMOOTHING_SOLUTION.replace("loss[keep].mean()", "(loss * keep).mean()"), "padding-counted"),
            ("import torch.nn.functional as F\n\ndef smoothed_cross_entropy(logits, targets, eps, ignore_index):\n"
             "    return F.cross_entropy(logits, targets, label_smoothing=eps, ignore_index=ignore_index)\n",
             "forbidden-call"),
        ),
        judge=_judge_smoothing,
    )
)


add_answers(
    Answers(
        drill_id="sequences-lstm-last-step",
        solution=_LSTM_SOLUTION,
        wrong_answers=(
            ("def last_valid_output(lstm, x, lengths):\n    out, _ = lstm(x)\n    return out[:, -1]\n",
             "padding-step-used"),
            ("def last_valid_output(lstm, x, lengths):\n    _, (h_n, _) = lstm(x)\n    return h_n[-1]\n",
             "padding-step-used"),
            (_LSTM_SOLUTION.replace(", enforce_sorted=False", ""), "raised"),
        ),
        judge=_judge_lstm,
    )
)


add_answers(
    Answers(
        drill_id="sequences-classifier-three-bugs",
        solution=_SEQ_SOLUTION,
        wrong_answers=(
            (_seq_fixed(_SEQ_FIX_DIV, _SEQ_FIX_ZERO), "pad-token-pooled"),
            (_seq_fixed(_SEQ_FIX_MASK, _SEQ_FIX_ZERO), "divides-by-padded-length"),
            (_seq_fixed(_SEQ_FIX_MASK, _SEQ_FIX_DIV), "gradients-cleared"),
            (_seq_fixed(_SEQ_FIX_MASK, _SEQ_FIX_DIV, _SEQ_FIX_ZERO).replace(
                "    optimizer.zero_grad(set_to_none=True)\n    steps", "    steps"), "stale-gradients"),
        ),
        judge=_judge_seq_step,
    )
)


add_answers(
    choice_answers(
        "sequences-transformer-warmup",
        options=(
            ("The data loader needs the warm-up steps to fill its prefetch queue",
             "data loading affects throughput, never the optimisation: the same batches arrive either way"),
            ("Adam's first variance estimates are noisy: early steps are too big",
             "with one or a few gradients, v is a poor estimate and every coordinate moves by about lr: at full lr "
             "that jolts attention logits and LayerNorm-ed layers; warm-up keeps the early steps small"),
            ("Positional encodings must be learned before attention weights can train",
             "sinusoidal encodings are not learned at all, and learned ones train jointly with attention"),
            ("Warm-up only matters for SGD; with Adam it has no effect on training",
             "it is with Adam (and post-LN Transformers) that warm-up became standard, for its early steps"),
        ),
        key="b",
    )
)


add_answers(
    choice_answers(
        "sequences-mha-mask-convention",
        options=(
            ("It works as intended: True marks keys that take part in attention",
             "that is F.scaled_dot_product_attention's convention for a bool attn_mask, not MultiheadAttention's"),
            ("It raises an error, because a key padding mask must be a float tensor",
             "bool masks are accepted (and preferred); float masks are added to the scores instead"),
            ("Real tokens are ignored, padding attended: True means 'mask out'",
             "nn.MultiheadAttention (and nn.Transformer*) read True as 'ignore this key', so the mask is inverted "
             "and no error is raised: the model silently attends to padding"),
            ("The mask is applied only in train mode; in eval every key is attended",
             "masks apply in both modes; only dropout depends on train / eval"),
        ),
        key="c",
    )
)
