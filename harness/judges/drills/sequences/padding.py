"""Sequence drills on padding: a collate that pads, a loss and a mask that skip padding, an LSTM's last real step."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from harness.contract import expect
from harness.contract.case import Case
from harness.contract.compare import close_values, malformed, same_values
from harness.contract.failure import fail
from harness.contract.wire import describe
from harness.drills.bank.sequences import (
    lstm_setup,
    mask_inputs,
    masked_loss_inputs,
    padding_collate_batches,
    valid_mask,
)
from harness.drills.core import Answers
from harness.drills.support import edited
from harness.judges.drills.sequences.common import CLOSE
from harness.judges.drills.whys import add_answers


def _judge_padding_collate(seen: dict, *, case: Case) -> str:
    where = "collate"
    pad, batches = padding_collate_batches(case)
    outputs = seen.get("outputs")
    if not isinstance(outputs, list) or len(outputs) != len(batches):
        malformed("collate outputs missing")
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
        padding = ~valid_mask(want_lengths, longest)
        if not same_values(padded[padding], want[padding], dtype=False):
            held = sorted(set(padded[padding].tolist()))[:4]
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
    inputs = masked_loss_inputs(case)
    if not isinstance(results, list) or len(results) != len(inputs):
        malformed("results missing")
    for (logits, targets, lengths), result in zip(inputs, results, strict=True):
        if not isinstance(result, dict):
            malformed("result")
        valid = valid_mask(lengths, targets.shape[1])
        logits = logits.clone().requires_grad_(True)
        per_token = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
        want = per_token[valid].mean()
        got = result.get("loss")
        if not close_values(got, want.detach(), **CLOSE):
            if close_values(got, per_token.mean().detach(), **CLOSE):
                fail("padding-counted", observed="the loss is the mean over every position, padding included",
                     expected="the mean over the real tokens only",
                     cause="padding positions hold arbitrary targets: they add noise to the loss and the gradient",
                     where="mask with lengths, or set padded targets to ignore_index (-100)")
            if close_values(got, (per_token * valid).sum(1).div(lengths).mean().detach(), **CLOSE):
                fail("per-sequence-mean", observed="the loss averages each sequence, then the sequences",
                     expected="one mean over all real tokens of the batch",
                     cause="that weighs a token of a short sequence more than one of a long sequence",
                     where="sum over real tokens / number of real tokens")
            if close_values(got, (per_token * valid).sum().div(valid.numel()).detach(), **CLOSE):
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
    inputs = mask_inputs(case)
    if not isinstance(masks, list) or len(masks) != len(inputs):
        malformed("masks missing")
    for (lengths, steps), got in zip(inputs, masks, strict=True):
        causal = torch.ones(steps, steps, dtype=torch.bool).tril()
        keys = valid_mask(lengths, steps)[:, None, None, :]
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
        queries = causal[None, None] & valid_mask(lengths, steps)[:, None, :, None]
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


def _judge_lstm(seen: dict, *, case: Case) -> str:
    where = "last_valid_output"
    lstm, x, lengths = lstm_setup(case)
    with torch.no_grad():
        want = torch.stack([lstm(x[b:b + 1, :int(n)])[0][0, -1] for b, n in enumerate(lengths)])
        padded_last = lstm(x)[0][:, -1]
    got = seen.get("out")
    if close_values(got, padded_last, **CLOSE) and not close_values(got, want, **CLOSE):
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


add_answers(
    Answers(
        drill_id="sequences-pad-collate",
        solution=_COLLATE_SOLUTION,
        wrong_answers=(
            (edited(_COLLATE_SOLUTION, (", padding_value=pad_value", "")), "wrong-pad-value"),
            (edited(_COLLATE_SOLUTION, ("batch_first=True, ", "")), "wrong-shape"),
            (edited(_COLLATE_SOLUTION,
                    ("[len(t) for t in tokens], dtype=torch.long",
                     "[padded.shape[1]] * len(tokens), dtype=torch.long")), "wrong-lengths"),
            (edited(_COLLATE_SOLUTION,
                    ("[len(t) for t in tokens], dtype=torch.long",
                     "[len(t) for t in tokens], dtype=torch.float32")), "wrong-dtype"),
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
            (edited(_MASK_SOLUTION, ("keys[:, None, None, :]", "keys[:, None, :, None]")), "padding-on-queries"),
            (edited(_MASK_SOLUTION,
                    ("    return causal[None, None, :, :] & keys[:, None, None, :]\n",
                     "    return ~(causal[None, None, :, :] & keys[:, None, None, :])\n")),
             "inverted-mask"),
            (edited(_MASK_SOLUTION, (".tril()", ".triu()")), "future-visible"),
            (edited(_MASK_SOLUTION, (".tril()", ".tril(diagonal=-1)")), "diagonal-masked"),
            (edited(_MASK_SOLUTION,
                    ("    return causal[None, None, :, :] & keys[:, None, None, :]\n",
                     "    return causal[None, None, :, :] & keys[:, None, :]\n")), "wrong-shape"),
        ),
        judge=_judge_attention_mask,
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
            (edited(_LSTM_SOLUTION, (", enforce_sorted=False", "")), "raised"),
        ),
        judge=_judge_lstm,
    )
)
