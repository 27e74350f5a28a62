"""Attention drills: attention by hand, sinusoidal position encodings."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from harness.contract import expect
from harness.contract.case import Case
from harness.contract.compare import close_values, malformed
from harness.contract.failure import fail
from harness.contract.forbidden import SELF_CHECKED, forbid
from harness.drills.bank.sequences import (
    pe_sizes,
    sdpa_inputs,
)
from harness.drills.core import Answers
from harness.drills.support import edited
from harness.judges.drills.sequences.common import CLOSE
from harness.judges.drills.whys import add_answers


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
    inputs = sdpa_inputs(case)
    if not isinstance(outputs, list) or len(outputs) != len(inputs):
        malformed("outputs missing")
    for (q, k, v, mask), got in zip(inputs, outputs, strict=True):
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        if close_values(got, want, **CLOSE):
            continue
        d = q.shape[-1]
        if close_values(got, _attention_variant(q, k, v, mask, scale=1 / d), **CLOSE) or close_values(
                got, _attention_variant(q, k, v, mask, scale=1.0), **CLOSE):
            fail("wrong-scale", observed="the scores are scaled by 1/d or not at all", expected="scores / sqrt(d)",
                 cause="without 1/sqrt(d) the scores grow with d and the softmax saturates", where=where)
        if close_values(got, _attention_variant(q, k, v, mask, scale=d ** -0.5, dim=-2), **CLOSE):
            fail("wrong-softmax-dim", observed="the softmax normalises over the queries", expected="over the keys "
                 "(the last dim): each query's weights sum to 1", cause="softmax(dim=-2)", where=where)
        if mask is not None and close_values(got, _attention_variant(q, k, v, mask, scale=d ** -0.5, fill=0.0),
                                             **CLOSE):
            fail("mask-fill-zero", observed="masked scores were set to 0", expected="masked scores set to -inf",
                 cause="a score of 0 still gets weight exp(0) = 1 after softmax: the masked keys are still attended",
                 where="scores.masked_fill(~mask, float('-inf'))")
        if mask is not None and close_values(got, _attention_variant(q, k, v, None, scale=d ** -0.5), **CLOSE):
            fail("mask-not-applied", observed="the output ignores the mask", expected="masked keys get zero weight",
                 cause="the mask argument was not used", where=where)
        # an inverted mask leaves some query rows with every key masked: NaN there, on purpose, in the variant too
        if mask is not None and close_values(got, _attention_variant(q, k, v, ~mask, scale=d ** -0.5), **CLOSE,
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
    sizes = pe_sizes(case)
    if not isinstance(outputs, list) or len(outputs) != len(sizes):
        malformed("outputs missing")
    for (steps, dim), got in zip(sizes, outputs, strict=True):
        want = _pe_reference(steps, dim)
        if isinstance(got, torch.Tensor) and got.dtype != torch.float32:
            fail("wrong-dtype", observed=f"the encoding has dtype {got.dtype}", expected="torch.float32",
                 cause="it is added to float32 embeddings", where=where)
        if close_values(got, want.float(), **CLOSE):
            continue
        if close_values(got, _pe_reference(steps, dim, interleave=False), **CLOSE):
            fail("concatenated-layout", observed="sines in the first half, cosines in the second",
                 expected="sin at even columns, cos at odd columns", cause="torch.cat instead of interleaving "
                 "(pe[:, 0::2] = sin, pe[:, 1::2] = cos)", where=where)
        if close_values(got, _pe_reference(steps, dim, two_i=False), **CLOSE):
            fail("wrong-frequencies", observed="the frequencies use 10000^(i/d)", expected="10000^(2i/d) for the "
                 "pair of columns (2i, 2i+1)", cause="i counts pairs of columns, so the exponent is 2i/d", where=where)
        if close_values(got, _pe_reference(steps, dim, start=1), **CLOSE):
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


add_answers(
    Answers(
        drill_id="sequences-attention-by-hand",
        solution=_ATTENTION_SOLUTION,
        wrong_answers=(
            (edited(_ATTENTION_SOLUTION, ("/ math.sqrt(q.shape[-1])", "/ q.shape[-1]")), "wrong-scale"),
            (edited(_ATTENTION_SOLUTION, ('float("-inf")', "0.0")), "mask-fill-zero"),
            (edited(_ATTENTION_SOLUTION, ("softmax(dim=-1)", "softmax(dim=-2)")), "wrong-softmax-dim"),
            (edited(_ATTENTION_SOLUTION, ("masked_fill(~mask,", "masked_fill(mask,")), "inverted-mask"),
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
            (edited(_PE_SOLUTION,
                    ("    pe = torch.zeros(steps, dim)\n    pe[:, 0::2] = torch.sin(pos * div)\n"
                     "    pe[:, 1::2] = torch.cos(pos * div)\n",
                     "    pe = torch.cat([torch.sin(pos * div), torch.cos(pos * div)], dim=1)\n")),
             "concatenated-layout"),
            (edited(_PE_SOLUTION,
                    ("torch.arange(0, dim, 2, dtype=torch.float32)",
                     "torch.arange(dim // 2, dtype=torch.float32)")), "wrong-frequencies"),
            (edited(_PE_SOLUTION,
                    ("torch.arange(steps, dtype=torch.float32)",
                     "torch.arange(1, steps + 1, dtype=torch.float32)")), "off-by-one-position"),
        ),
        judge=_judge_pe,
    )
)
