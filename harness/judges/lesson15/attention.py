"""15-attention, the judge: softmax(q k^T / sqrt(d) + masks) v, written by hand, for each mask combination."""

from __future__ import annotations

import math

import torch

from harness.checks.lesson15.attention import attention_calls
from harness.contract.case import Case
from harness.contract.compare import judged, type_name
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.forbidden import forbid
from harness.contract.registry import judges
from harness.judges.lesson15.common import LOW_PRECISION, matches_for

_ATTENTION_FORBIDDEN = {
    "scaled_dot_product_attention": "the exercise asks you to write attention from matmul, softmax and masks",
    "_scaled_dot_product_attention_math": "scaled_dot_product_attention's math fallback is the same call",
    "multi_head_attention_forward": "nn.MultiheadAttention computes attention for you; the exercise asks you to",
}


def _reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                         causal: bool, *, scale: float | None = None, diagonal: int = 1,
                         padding: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(q k^T * scale + masks) v in float64, with the usual wrong variants reachable by argument
    (`padding`: the allowed positions the padding mask becomes, broadcastable to the scores; by default
    mask[:, None, None, :], over heads and queries)."""
    scores = q.double() @ k.double().transpose(-2, -1) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    allowed = torch.ones(scores.shape[-2:], dtype=torch.bool)
    if causal:
        allowed = ~torch.ones_like(allowed).triu(diagonal=diagonal)
    allowed = allowed.expand(scores.shape)
    if mask is not None:
        allowed = allowed & (mask[:, None, None, :] if padding is None else padding)
    return scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1) @ v.double()


def _misplaced_padding(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, causal: bool,
                       got: torch.Tensor) -> str | None:
    """How the padding mask was broadcast when `got` matches a misplaced one: over the keys (it blocked padded
    queries' rows), or against the heads axis (mask[:, None, :] lines its batch up with the heads); else None."""
    batch, heads, queries, keys = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    matches = matches_for(q.dtype)
    if queries == keys:
        on_queries = mask[:, None, :, None]
        for fill in ("-inf", "large"):
            want = _reference_attention(q, k, v, mask, causal, padding=on_queries) if fill == "-inf" else \
                _large_negative(q, k, v, on_queries, causal)
            if matches(got, want):
                return ("the mask was put on the queries' axis (mask[:, None, :, None]): it blocks the rows of padded "
                        "queries, not the columns of padded keys; a padding mask broadcasts over heads and queries as "
                        "mask[:, None, None, :]")
    if heads == batch:
        on_heads = mask[None, :, None, :]  # (batch, keys) read as (heads, 1, keys) by broadcasting
        if matches(got, _reference_attention(q, k, v, mask, causal, padding=on_heads)):
            return ("the mask was broadcast as mask[:, None, :] (3-d): against the 4-d scores it lines its batch "
                    "axis up with the heads, so head h of every sequence gets sequence h's mask; use "
                    "mask[:, None, None, :]")
    return None


def _large_negative(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor,
                    causal: bool) -> torch.Tensor:
    """The output when blocked scores get -1e9 (not -inf): a fully blocked row becomes uniform, not NaN."""
    scores = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
    keep = allowed.expand(scores.shape)
    if causal:
        keep = keep & ~torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1)
    return scores.masked_fill(~keep, -1e9).softmax(dim=-1) @ v.double()


@judges(
    "15-attention", nonfinite=('results/*',),
    hints=Hints(
        nudge="scores = q @ k.transpose(-2, -1) / sqrt(d); set the scores of blocked keys to -inf; softmax over the "
        "keys (the last axis); multiply by v.",
        concept="Attention weighs the values by softmax over keys of the scaled dot products. A blocked key gets "
        "score -inf before the softmax, so its weight is exactly 0 and the other weights still sum to 1. The "
        "padding mask (batch, keys) broadcasts over heads and queries as mask[:, None, None, :]; the causal mask "
        "blocks key j > i for query i (its own position included in what it sees). Both masks apply together.",
        solution="scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
        "allowed = mask[:, None, None, :] & ~torch.ones(Tq, Tk, dtype=torch.bool).triu(1)  # each only if given\n"
        "return scores.masked_fill(~allowed, float('-inf')).softmax(dim=-1) @ v",
        section="3. Attention by hand, with padding and causal masks",
    ),
    requires={
        "forbidden-call": Requirement(
            "does not call F.scaled_dot_product_attention or nn.MultiheadAttention",
            hint="Build it from @ (matmul), masked_fill and softmax; the reference is for comparing afterwards."),
        "wrong-shape": Requirement("returns one tensor of shape (batch, heads, queries, head_dim)",
                                   hint="Print the shape of what you return for q with 3 queries and k with 5 keys."),
        "wrong-dtype": Requirement("returns the output in q's dtype",
                                   hint="Print the dtype of what you return for bfloat16 q, k and v: which operation "
                                   "changed it?"),
        "wrong-scale": Requirement("scales the scores by 1/sqrt(head_dim)",
                                   hint="What do you divide q @ k^T by? The exercise says the square root of d."),
        "wrong-value": Requirement(
            "returns softmax(q k^T / sqrt(d)) v, the softmax over the keys",
            hint="Over which axis does your softmax normalise? Each query's weights over the keys must sum to 1."),
        "padding-not-masked": Requirement(
            "keys where mask is False get weight 0",
            hint="Print the attention weights for a short sequence: do its padded keys get any weight? Which value "
            "marks a real key in this lesson's mask?"),
        "causal-not-masked": Requirement(
            "with causal=True, query i attends to keys 0..i only",
            hint="With causal=True print the weights of query 0: only key 0 may have weight. Check the diagonal= "
            "of your triu/tril."),
    },
)
def judge_attention(seen: dict, *, case: Case) -> str:
    """softmax(q k^T / sqrt(d) + masks) v, written by hand, for each mask combination."""
    forbid(seen["calls"], _ATTENTION_FORBIDDEN, where="the text of exercise 3")
    for (description, q, k, v, mask, causal), got in judged(attention_calls(case), seen["results"]):
        want = _reference_attention(q, k, v, mask, causal)
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            shape = f" of shape {tuple(got.shape)}" if isinstance(got, torch.Tensor) else ""
            fail("wrong-shape", observed=f"attention returned {type_name(got)}{shape} for {description}",
                 expected=f"one tensor of shape {tuple(want.shape)} (batch, heads, queries, head_dim)",
                 cause="more than the output is returned (the attention weights too, as nn.MultiheadAttention does)"
                 if isinstance(got, tuple) else "the wrong operands were multiplied or transposed (q^T k instead of "
                 "q k^T, weights times v on the wrong side), or a dimension was squeezed or added",
                 where="the return statement of attention")
        if got.dtype != q.dtype:
            upcast = q.dtype in LOW_PRECISION and got.dtype == torch.float32
            fail("wrong-dtype", observed=f"attention returned a {got.dtype} tensor for {description}",
                 expected=f"{q.dtype}, q's dtype",
                 cause=f"the attention was computed in float32 (an upcast such as q.float(), or a float32 tensor or "
                 f"additive mask in the formula) and returned as it is: for {q.dtype} inputs the output must come "
                 f"back in {q.dtype}, with .to(q.dtype) at the end" if upcast else "the computation was moved to "
                 "another dtype (.double(), .half(), a float64 tensor or mask in the formula) and not brought back",
                 where="the scores line of attention, and what it returns",
                 hint=f"Call your attention on q, k and v in {q.dtype} and print the dtype of the scores, the weights "
                 "and the output: which line changed it, and is it cast back before the return?" if upcast else None)
        matches = matches_for(q.dtype)
        got = got.detach().double()
        if matches(got, want):
            continue
        d = q.shape[-1]
        nan = bool(torch.isnan(got).any())
        if matches(got, _reference_attention(q, k, v, mask, causal, scale=1.0)):
            code, cause = "wrong-scale", "the scores were not scaled: divide q @ k^T by sqrt(head_dim)"
        elif matches(got, _reference_attention(q, k, v, mask, causal, scale=1 / d)):
            code, cause = "wrong-scale", "the scores were divided by head_dim, not by its square root"
        elif matches(got, _reference_attention(q, k, v, mask, causal, scale=1 / math.sqrt(k.shape[-2]))):
            code, cause = "wrong-scale", "the scores were divided by the square root of the number of keys " \
                "(shape[-2]), not of head_dim (shape[-1])"
        elif mask is not None and matches(got, _reference_attention(q, k, v, None, causal)):
            code, cause = "padding-not-masked", "the padding mask was not applied" + (
                " (with causal=True too: only one of the two masks is applied, an if/elif?)" if causal else "")
        elif mask is not None and (misplaced := _misplaced_padding(q, k, v, mask, causal, got)):
            code, cause = "padding-not-masked", misplaced
        elif mask is not None and matches(got, _reference_attention(q, k, v, ~mask, causal)):
            code, cause = "padding-not-masked", "the mask is inverted: this lesson's mask is True at real keys " \
                "(nn.MultiheadAttention's key_padding_mask is True at padding)"
        elif causal and matches(got, _reference_attention(q, k, v, mask, False)):
            code, cause = "causal-not-masked", "the causal mask was not applied" + (
                " (with a padding mask too: only one of the two masks is applied, an if/elif?)" if mask is not None
                else "")
        elif causal and (nan or matches(got, _reference_attention(q, k, v, mask, True, diagonal=0))):
            code, cause = "causal-not-masked", "the diagonal was blocked too: query i must see key i " \
                "(triu(diagonal=1) marks the future)" + (" (the first query then sees nothing: NaN)" if nan else "")
        elif causal and matches(got, _reference_attention(q, k, v, mask, True, diagonal=2)):
            code, cause = "causal-not-masked", "the causal mask lets query i attend to key i + 1 as well (the next " \
                "position): tril(diagonal=1) keeps one diagonal above the main one; the keys query i may see are " \
                "tril(diagonal=0), the blocked ones triu(diagonal=1)"
        elif causal and matches(got, _future_only(q, k, v, mask)):
            code, cause = "causal-not-masked", "the mask is flipped: query i sees the future keys j >= i, not the past"
        elif mask is not None and matches(got, _masked_after_softmax(q, k, v, mask, causal)):
            code, cause = "padding-not-masked", "the padding mask was applied after the softmax: the padded keys' " \
                "weights are zeroed, but the other weights no longer sum to 1; put -inf on the scores before it"
        elif (mask is not None or causal) and matches(got, _zero_filled(q, k, v, mask, causal)):
            code = "padding-not-masked" if mask is not None else "causal-not-masked"
            cause = "blocked scores were set to 0, not -inf: exp(0) = 1 still gives them weight"
        elif matches(got, _softmax_over_queries(q, k, v, mask, causal)):
            code, cause = "wrong-value", "the softmax ran over the queries (dim=-2), not over the keys (dim=-1)"
        else:
            code, cause = "wrong-value", "another computation than the ones the check recognises (the scale, each " \
                "mask's placement, the softmax's axis): look for an operand transposed, a mask applied after the " \
                "softmax without renormalising, or v multiplied in another order"
        row = _worst_row(got, want)
        shown = ", ".join(map(str, row))
        fail(code, observed=f"the output differs from softmax(q k^T / sqrt(d)) v for {description}"
             + (" (it holds NaN)" if nan else "")
             + f"; at [{shown}, :3] it is {[round(x, 4) for x in got[row][:3].tolist()]}",
             expected=f"the reference output, {[round(x, 4) for x in want[row][:3].tolist()]} at [{shown}, :3] "
             "(batch, head, query)",
             cause=cause, where="the scores, masks and softmax lines of attention")
    return "softmax(q k^T / sqrt(d)) v by hand, with padding, causal and both masks"


def _worst_row(got: torch.Tensor, want: torch.Tensor) -> tuple[int, int, int]:
    """(batch, head, query) of the output row that differs most from the reference (a NaN counts as the most)."""
    difference = (got - want).abs().nan_to_num(float("inf")).amax(dim=-1)
    batch, head, query = (int(i) for i in torch.unravel_index(difference.argmax(), difference.shape))
    return batch, head, query


def _future_only(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The output when the causal mask is flipped (query i sees keys j >= i)."""
    scores = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
    allowed = ~torch.ones(scores.shape[-2:], dtype=torch.bool).tril(diagonal=-1)
    allowed = allowed.expand(scores.shape)
    if mask is not None:
        allowed = allowed & mask[:, None, None, :]
    return scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1).nan_to_num(0.0) @ v.double()


def _masked_after_softmax(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                          causal: bool) -> torch.Tensor:
    """The output when the padding mask multiplies the weights after the softmax (no renormalisation)."""
    scores = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return (scores.softmax(dim=-1) * mask[:, None, None, :]) @ v.double()


def _zero_filled(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                 causal: bool) -> torch.Tensor:
    """The output when every blocked score (padding and causal) is set to 0 instead of -inf."""
    scores = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
    blocked = torch.zeros(scores.shape, dtype=torch.bool)
    if causal:
        blocked = blocked | torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1)
    if mask is not None:
        blocked = blocked | ~mask[:, None, None, :]
    return scores.masked_fill(blocked, 0.0).softmax(dim=-1) @ v.double()


def _softmax_over_queries(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                          causal: bool) -> torch.Tensor:
    scores = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
    allowed = torch.ones(scores.shape[-2:], dtype=torch.bool)
    if causal:
        allowed = ~allowed.triu(diagonal=1)
    allowed = allowed.expand(scores.shape)
    if mask is not None:
        allowed = allowed & mask[:, None, None, :]
    return scores.masked_fill(~allowed, float("-inf")).softmax(dim=-2).nan_to_num(0.0) @ v.double()
