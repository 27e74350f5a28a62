"""Checks of lesson 15, sequences and transformers: a padding collate function, a loss that ignores padding,
attention by hand with padding and causal masks, a warm-up schedule, and a label-smoothed cross-entropy in torch
operations.

Each probe builds the case's inputs from the seed, calls the student's function on copies, and returns what
came back (values, gradients, the inputs after the call, the torch calls made). Each judge rebuilds the
inputs, recomputes the reference with PyTorch's own operations, and compares; where the result is wrong it
also computes the usual wrong answers (padding counted, masks ignored or inverted, no 1/sqrt(d) scale,
smoothing spread over C - 1 classes) and names the one the observation matches.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.nn import functional as F

from harness.contract.case import Case
from harness.contract.compare import judged, type_name
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.forbidden import CallRecorder, forbid
from harness.contract.instruments import collect
from harness.contract.registry import judges, register
from harness.contract.wire import WireError


def _close(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-4) -> bool:
    """Same shape and values within `tol` (relative to the reference's scale); NaN matches NaN only (the
    references of correct answers hold none, those of some wrong answers do)."""
    if a.shape != b.shape:
        return False
    a, b = a.double(), b.double()
    scale = float(b.nan_to_num(0.0).abs().max()) if b.numel() else 1.0
    return bool(torch.allclose(a, b, rtol=tol, atol=tol * max(1.0, scale), equal_nan=True))


def _tensor(value: Any, what: str) -> torch.Tensor:
    """Judge side: a tensor of the observation, or WireError (a probe always sends tensors there)."""
    if not isinstance(value, torch.Tensor):
        raise WireError(f"malformed observation: {what} is not a tensor")
    return value


def _number(value: torch.Tensor) -> str:
    return f"{float(value):.5g}" if value.numel() == 1 else f"a tensor of shape {tuple(value.shape)}"


# --------------------------------------------------------------------------------------------------
# 15-pad-collate
# --------------------------------------------------------------------------------------------------
def _collate_cases(case: Case) -> list[tuple[str, list[torch.Tensor], float | int]]:
    """(description, sequences, pad_value) of each call. Visible: int64 tokens padded with 0 where a real token
    is 0 too, int32 tokens padded with 9, and float32 values padded with -1.0 where a real value is -1.0.
    Hidden: other lengths, a batch of one, equal lengths, other pad values."""
    generator = torch.Generator().manual_seed(case.seeded(151 if case.hidden else 150))

    def tokens(lengths: Sequence[int], dtype: torch.dtype, pad: int) -> list[torch.Tensor]:
        rows = [torch.randint(1, 9, (n,), generator=generator).to(dtype) for n in lengths]
        rows[0][min(1, len(rows[0]) - 1)] = pad  # a real token equal to the pad value
        return rows

    def values(lengths: Sequence[int], pad: float) -> list[torch.Tensor]:
        rows = [torch.randn(n, generator=generator) for n in lengths]
        rows[-1][0] = pad
        return rows

    if not case.hidden:
        return [("int64 tokens, pad_value=0", tokens([3, 5, 1, 4], torch.int64, 0), 0),
                ("int32 tokens, pad_value=9", tokens([2, 4], torch.int32, 9), 9),
                ("float32 values, pad_value=-1.0", values([2, 6, 4], -1.0), -1.0)]
    return [("int64 tokens, pad_value=0", tokens([6, 2, 7, 7, 3], torch.int64, 0), 0),
            ("int32 tokens, pad_value=3", tokens([4, 1, 3], torch.int32, 3), 3),
            ("one sequence", tokens([5], torch.int64, 0), 0),
            ("sequences of equal length", tokens([3, 3, 3], torch.int64, 0), 0),
            ("float32 values, pad_value=0.5", values([1, 3, 8], 0.5), 0.5)]


def _reference_collate(sequences: Sequence[torch.Tensor], pad: float) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.tensor([len(s) for s in sequences])
    padded = torch.nn.utils.rnn.pad_sequence(list(sequences), batch_first=True, padding_value=pad)
    return padded, torch.arange(padded.shape[1]) < lengths[:, None]


@register(
    "15-pad-collate",
    hints=Hints(
        nudge="Make a (batch, longest) tensor full of pad_value with the sequences' dtype, copy each sequence into "
        "the start of its row, and build the mask from the lengths.",
        concept="Padding makes sequences of different lengths one rectangular tensor; the mask (True at real "
        "tokens) is the only reliable record of which positions are real: a real token can equal the pad value, "
        "so the mask comes from the lengths, never from comparing values with pad_value.",
        solution="padded = nn.utils.rnn.pad_sequence(sequences, batch_first=True, padding_value=pad_value)\n"
        "mask = torch.arange(padded.shape[1]) < torch.tensor([len(s) for s in sequences])[:, None]",
        section="1. Variable-length batches: padding and masks",
    ),
    requires={
        "not-a-pair": Requirement("returns a pair (padded, mask) of tensors",
                                  hint="What does your return statement hand back? The exercise asks for two tensors."),
        "wrong-shape": Requirement(
            "padded is (batch, longest length): batch first, as long as the longest sequence",
            hint="Print padded.shape for three sequences of lengths 2, 5 and 3: you should see (3, 5). "
            "pad_sequence puts time first unless told otherwise."),
        "wrong-dtype": Requirement(
            "padded keeps the sequences' dtype",
            hint="Print padded.dtype for int64 tokens: torch.zeros and torch.full make float32 unless you pass dtype."),
        "wrong-values": Requirement(
            "each sequence's values sit, in order, at the start of its row, rows in the order given",
            hint="Print padded for two short sequences: is each row the sequence followed by padding, in the "
            "order you were given them?"),
        "wrong-pad-value": Requirement(
            "the positions after each sequence hold pad_value",
            hint="Call it with pad_value=-1 and look at the end of the shorter rows: what fills them?"),
        "mask-not-bool": Requirement(
            "mask is a bool tensor", hint="Print mask.dtype: a comparison (<, ==) gives bool, arithmetic does not."),
        "wrong-mask": Requirement(
            "mask has padded's shape and is True exactly at real tokens",
            hint="Put a real token equal to pad_value in one sequence: is its position True in your mask? "
            "And which value marks a real token, True or False?"),
    },
)
def probe_pad_collate(pad_collate: Callable[..., Any], *, case: Case) -> dict:
    """Call `pad_collate` on each case's sequences (copies); record what it returned."""
    def record(item: tuple[str, list[torch.Tensor], float | int]) -> dict:
        _, sequences, pad = item
        returned = pad_collate([s.clone() for s in sequences], pad)
        return {"returned": tuple(returned) if isinstance(returned, (tuple, list)) else returned,
                "kind": type(returned).__name__}

    return {"results": collect(_collate_cases(case), record)}


@judges("15-pad-collate")
def judge_pad_collate(seen: dict, *, case: Case) -> str:
    """(padded, mask): batch first, dtype kept, values in place, pad_value after them, bool mask from lengths."""
    for (description, sequences, pad), result in judged(_collate_cases(case), seen["results"]):
        want, want_mask = _reference_collate(sequences, pad)
        returned = result["returned"]
        if not (isinstance(returned, tuple) and len(returned) == 2
                and all(isinstance(t, torch.Tensor) for t in returned)):
            got = f"a {result['kind']} of {len(returned)} items" if isinstance(returned, tuple) else type_name(returned)
            fail("not-a-pair", observed=f"pad_collate returned {got} for {description}",
                 expected="a pair (padded, mask) of tensors",
                 cause="only the padded tensor is returned, or the lengths instead of a mask, or something extra",
                 where="the return statement of pad_collate")
        padded, mask = returned
        batch, longest = want.shape
        if padded.shape != want.shape:
            cause = ("time first: pad_sequence without batch_first=True gives (longest, batch)"
                     if padded.shape == (longest, batch) else
                     "a length other than the longest sequence's (a fixed length, or the shortest), or an extra "
                     "dimension")
            fail("wrong-shape", observed=f"padded has shape {tuple(padded.shape)} for {description}",
                 expected=f"(batch, longest length) = {tuple(want.shape)}", cause=cause,
                 where="where padded is created")
        if padded.dtype != want.dtype:
            fail("wrong-dtype", observed=f"padded is {padded.dtype} for {description}",
                 expected=f"{want.dtype}, the sequences' dtype",
                 cause="a new tensor made without dtype= (torch.zeros, torch.full and torch.ones default to "
                 "float32; torch.full with an integer pad value gives int64)",
                 where="where padded is created")
        if not torch.equal(padded[want_mask], want[want_mask]):
            rows = [torch.cat([s, want.new_full((longest - len(s),), pad)]) for s in sequences]
            left = torch.stack([torch.cat([want.new_full((longest - len(s),), pad), s]) for s in sequences])
            by_length = torch.stack([rows[i] for i in sorted(range(batch), key=lambda i: -len(sequences[i]))])
            cause = ("the padding went before the tokens (left padding): the exercise puts each sequence at the "
                     "start of its row" if torch.equal(padded, left) else
                     "the sequences were sorted by length: keep them in the order given (the labels of a batch "
                     "follow that order)" if torch.equal(padded, by_length) else
                     "the tokens were written to the wrong positions or rows (an index off by one, a reversed "
                     "sequence, rows in another order)")
            fail("wrong-values", observed=f"the real positions of padded differ from the sequences for {description}",
                 expected=f"row i starts with sequence i; here {want[0].tolist()} for row 0", cause=cause,
                 where="where each sequence is copied into padded")
        if not torch.equal(padded[~want_mask], want[~want_mask]):
            found = sorted({float(v) for v in padded[~want_mask].tolist()})[:4]
            fail("wrong-pad-value", observed=f"padded positions hold {found} for {description}",
                 expected=f"pad_value = {pad}",
                 cause="the pad_value argument is not used (pad_sequence's padding_value defaults to 0, torch.zeros "
                 "fills with 0)", where="the padding_value / fill value where padded is created")
        if mask.dtype != torch.bool:
            fail("mask-not-bool", observed=f"mask is {mask.dtype} for {description}", expected="torch.bool",
                 cause="the mask was made with arithmetic or converted (.long(), .float()), or lengths were returned",
                 where="where the mask is built")
        if mask.shape != want_mask.shape or not torch.equal(mask, want_mask):
            if mask.shape != want_mask.shape:
                cause = f"its shape is {tuple(mask.shape)}, padded's is {tuple(want.shape)}"
            elif torch.equal(mask, ~want_mask):
                cause = "it is inverted: True at padding (the convention of nn.MultiheadAttention's " \
                        "key_padding_mask); this lesson's mask is True at real tokens"
            elif torch.equal(mask, want != pad):
                cause = "it was computed from the values (padded != pad_value): a real token equal to pad_value " \
                        "is marked as padding. Build it from the lengths"
            else:
                cause = "positions are marked in the wrong rows or columns (a length off by one?)"
            fail("wrong-mask", observed=f"mask differs from the real tokens' positions for {description}",
                 expected=f"True at the first len(sequence) positions of each row, e.g. {want_mask[0].tolist()} "
                 "for row 0", cause=cause, where="where the mask is built")
    return "padded is batch first with the sequences' dtype and pad_value after them; the mask comes from the lengths"


# --------------------------------------------------------------------------------------------------
# 15-masked-loss
# --------------------------------------------------------------------------------------------------
def _loss_inputs(case: Case) -> list[tuple[str, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(description, logits (B, T, V), targets (B, T), mask (B, T)) of each call; targets at padded positions
    are arbitrary classes. Hidden: other shapes, and a batch where one row is all padding."""
    generator = torch.Generator().manual_seed(case.seeded(153 if case.hidden else 152))
    shapes = [((4, 7, 5), [7, 3, 5, 1]), ((3, 6, 4), [2, 6, 0])] if case.hidden else [((3, 6, 5), [6, 2, 4])]
    calls = []
    for (batch, time, vocab), lengths in shapes:
        logits = torch.randn(batch, time, vocab, generator=generator) * 2
        targets = torch.randint(0, vocab, (batch, time), generator=generator)
        mask = torch.arange(time) < torch.tensor(lengths)[:, None]
        calls.append((f"logits of shape {(batch, time, vocab)}, lengths {lengths}", logits, targets, mask))
    return calls


def _per_token(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view(targets.shape)


def _reference_masked(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return _per_token(logits, targets)[mask].mean()


def _scrambled(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor,
               seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The same inputs with other logits and targets at the padded positions only (the loss must not change)."""
    generator = torch.Generator().manual_seed(seed)
    other_logits = torch.where(mask[..., None], logits, torch.randn(logits.shape, generator=generator) * 5)
    other_targets = torch.where(mask, targets, torch.randint(0, logits.shape[-1], targets.shape, generator=generator))
    return other_logits, other_targets


@register(
    "15-masked-loss",
    hints=Hints(
        nudge="Compute the cross-entropy of every position (reduction='none'), keep the real ones with the mask, "
        "and average over those only.",
        concept="A padded batch has positions that are not tokens; their loss must count for nothing, and the mean "
        "divides by the number of real tokens (mask.sum()), not by batch * time. Either select with the mask, or "
        "set padded targets to ignore_index (on a copy) and let F.cross_entropy skip them.",
        solution="per_token = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction='none')\n"
        "return per_token[mask.flatten()].mean()",
        section="2. A loss that ignores padding",
    ),
    requires={
        "not-a-scalar": Requirement("returns a 0-dim tensor",
                                    hint="Print the .shape of what you return: it should be torch.Size([])."),
        "padding-counted": Requirement(
            "padded positions count for nothing: neither their logits and targets nor their number",
            hint="Change the logits at the padded positions only and call your loss again: does the value move? "
            "What do you divide by?"),
        "wrong-value": Requirement(
            "returns the mean cross-entropy over the real tokens of the whole batch",
            hint="Compare with F.cross_entropy on the real tokens alone, taken out with logits[mask]: is yours a sum, "
            "or a mean of per-sequence means?"),
        "no-gradient": Requirement(
            "the result is differentiable: its gradient reaches the logits",
            hint="Does the result have a grad_fn? .item(), float(), numpy and torch.tensor(...) all cut the graph."),
        "inputs-modified": Requirement(
            "leaves logits, targets and mask unchanged",
            hint="Which line writes into targets (or logits, or mask)? Change a copy (targets.masked_fill(...), "
            "not targets[...] = ...)."),
    },
)
def probe_masked_loss(masked_cross_entropy: Callable[..., Any], *, case: Case) -> dict:
    """Call the loss on each case's inputs and on the same inputs scrambled at the padded positions; record the
    values, the gradient reaching the logits, and the inputs after the call."""
    def record(item: tuple[str, torch.Tensor, torch.Tensor, torch.Tensor]) -> dict:
        _, logits, targets, mask = item
        leaf, targets_in, mask_in = logits.clone().requires_grad_(True), targets.clone(), mask.clone()
        returned = masked_cross_entropy(leaf, targets_in, mask_in)
        grad = None
        if isinstance(returned, torch.Tensor) and returned.numel() == 1 and returned.grad_fn is not None:
            returned.sum().backward()
            grad = leaf.grad
        other_logits, other_targets = _scrambled(logits, targets, mask, case.seeded(7))
        again = masked_cross_entropy(other_logits, other_targets, mask.clone())
        return {"returned": returned, "requires_grad": isinstance(returned, torch.Tensor) and returned.requires_grad,
                "grad": grad, "again": again,
                "after": [leaf.detach().clone(), targets_in, mask_in]}

    return {"results": collect(_loss_inputs(case), record)}


@judges("15-masked-loss")
def judge_masked_loss(seen: dict, *, case: Case) -> str:
    """The mean cross-entropy over real tokens, as a differentiable 0-dim tensor; padding and inputs untouched."""
    for (description, logits, targets, mask), result in judged(_loss_inputs(case), seen["results"]):
        got = result["returned"]
        after = result["after"]
        if not isinstance(after, list) or len(after) != 3:
            raise WireError("malformed observation: the inputs after the call are missing")
        for name, before, now in zip(("logits", "targets", "mask"), (logits, targets, mask), after, strict=True):
            now = _tensor(now, f"{name} after the call")
            if now.shape != before.shape or not torch.equal(now, before):
                fail("inputs-modified", observed=f"{name} changed during the call ({description})",
                     expected="the inputs left as they were",
                     cause="an in-place write such as targets[~mask] = -100 or a method ending in _ (masked_fill_, "
                     "mul_): the caller's tensor changes too", where=f"the line of your loss that writes into {name}")
        if not isinstance(got, torch.Tensor) or got.dim() != 0:
            fail("not-a-scalar",
                 observed=f"returned {type_name(got)}" + (f" of shape {tuple(got.shape)}"
                                                          if isinstance(got, torch.Tensor) else "")
                 + f" for {description}",
                 expected="a 0-dim tensor: the mean over real tokens",
                 cause="the per-token losses are returned without averaging (reduction='none'), a dimension was "
                 "kept (keepdim=True, view(1)), or the value became a Python number (.item(), float())",
                 where="the return statement of masked_cross_entropy")
        per_token = _per_token(logits, targets)
        want = per_token[mask].mean()
        value = got.detach().double()
        if not _close(value, want):
            every = per_token.mean()
            zeroed = (per_token * mask).mean()
            sequence_means = torch.stack([row[m].mean() for row, m in zip(per_token, mask, strict=True) if m.any()])
            if _close(value, every):
                code, cause = "padding-counted", "the mean over every position, padded ones included"
            elif _close(value, zeroed):
                code, cause = "padding-counted", ("the padded losses were zeroed but still counted in the mean: "
                                                  "(loss * mask).mean() divides by batch * time, not by mask.sum()")
            elif _close(value, per_token[mask].sum()):
                code, cause = "wrong-value", "the sum over real tokens, not their mean"
            elif _close(value, sequence_means.mean()):
                code, cause = "wrong-value", ("the mean of each sequence's mean: a short sequence's tokens then "
                                              "weigh more than a long one's")
            else:
                code, cause = "wrong-value", "another quantity (log of a softmax taken over the wrong axis, " \
                    "logits and targets paired in another order, a different reduction)"
            fail(code, observed=f"loss {float(value):.5g} for {description}",
                 expected=f"{float(want):.5g}, the mean cross-entropy over the {int(mask.sum())} real tokens",
                 cause=cause, where="the reduction in masked_cross_entropy")
        again = result["again"]
        if not isinstance(again, torch.Tensor) or again.numel() != 1 or not _close(again.detach().reshape(()), want):
            fail("padding-counted",
                 observed=f"changing the logits and targets at padded positions only changed the loss to "
                 f"{_number(again) if isinstance(again, torch.Tensor) else type_name(again)} ({description})",
                 expected=f"the same loss, {float(want):.5g}: padded positions count for nothing",
                 cause="the padded positions take part before the mask is applied (a weighting that depends on "
                 "them, a mask built from the targets' values)", where="how the mask is applied")
        grad = result["grad"]
        leaf = logits.clone().requires_grad_(True)
        _reference_masked(leaf, targets, mask).backward()
        if not result["requires_grad"] or grad is None:
            fail("no-gradient", observed=f"the loss has no gradient path to the logits ({description})",
                 expected="loss.backward() fills logits.grad",
                 cause="the graph was cut: .item(), float(), .detach(), numpy, or a new tensor made with "
                 "torch.tensor(...) from the value", where="the computation of the returned value")
        if not _close(_tensor(grad, "grad"), leaf.grad):
            fail("no-gradient", observed=f"logits.grad differs from the gradient of the masked mean ({description})",
                 expected="the gradient of the mean over real tokens (zero at padded positions)",
                 cause="part of the computation is detached, or a constant was computed from the values",
                 where="the computation of the returned value")
    return "the mean cross-entropy over real tokens, differentiable, with padding and inputs untouched"


# --------------------------------------------------------------------------------------------------
# 15-attention
# --------------------------------------------------------------------------------------------------
_ATTENTION_FORBIDDEN = {
    "scaled_dot_product_attention": "the exercise asks you to write attention from matmul, softmax and masks",
    "multi_head_attention_forward": "nn.MultiheadAttention computes attention for you; the exercise asks you to",
}


def _attention_calls(case: Case) -> list[tuple[str, torch.Tensor, torch.Tensor, torch.Tensor,
                                               torch.Tensor | None, bool]]:
    """(description, q, k, v, mask, causal) of each call: no mask (more keys than queries), padding mask,
    causal mask, both. Hidden: other sizes and head dimensions, and a padding mask with more keys than queries."""
    generator = torch.Generator().manual_seed(case.seeded(155 if case.hidden else 154))
    plan = ([(3, 2, 4, 7, 8, None, False), (2, 2, 6, 6, 8, [6, 2, 4], True), (2, 1, 5, 5, 16, [5, 3], False),
             (3, 2, 3, 6, 4, [6, 1, 3], False), (1, 3, 4, 4, 2, None, True)] if case.hidden else
            [(2, 2, 3, 5, 4, None, False), (2, 2, 5, 5, 4, [5, 3], False), (2, 2, 4, 4, 4, None, True),
             (2, 2, 4, 4, 4, [4, 2], True)])
    calls = []
    for batch, heads, queries, keys, dim, lengths, causal in plan:
        q = torch.randn(batch, heads, queries, dim, generator=generator)
        k = torch.randn(batch, heads, keys, dim, generator=generator)
        v = torch.randn(batch, heads, keys, dim, generator=generator)
        mask = None if lengths is None else torch.arange(keys) < torch.tensor(lengths[:batch])[:, None]
        text = f"q {tuple(q.shape)}, k {tuple(k.shape)}, mask={'None' if lengths is None else f'lengths {lengths}'}"
        calls.append((f"{text}, causal={causal}", q, k, v, mask, causal))
    return calls


def _reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                         causal: bool, *, scale: float | None = None, diagonal: int = 1) -> torch.Tensor:
    """softmax(q k^T * scale + masks) v in float64, with the usual wrong variants reachable by argument."""
    scores = q.double() @ k.double().transpose(-2, -1) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    allowed = torch.ones(scores.shape[-2:], dtype=torch.bool)
    if causal:
        allowed = ~torch.ones_like(allowed).triu(diagonal=diagonal)
    allowed = allowed.expand(scores.shape)
    if mask is not None:
        allowed = allowed & mask[:, None, None, :]
    return scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1) @ v.double()


@register(
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
def probe_attention(attention: Callable[..., Any], *, case: Case) -> dict:
    """Call `attention` on each case's inputs (copies) with the torch calls recorded; record the outputs."""
    with CallRecorder() as calls:
        def record(item: tuple[str, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, bool]) -> Any:
            _, q, k, v, mask, causal = item
            return attention(q.clone(), k.clone(), v.clone(), mask=None if mask is None else mask.clone(),
                             causal=causal)

        results = collect(_attention_calls(case), record)
    return {"results": results, "calls": calls.seen}


@judges("15-attention")
def judge_attention(seen: dict, *, case: Case) -> str:
    """softmax(q k^T / sqrt(d) + masks) v, written by hand, for each mask combination."""
    forbid(seen["calls"], _ATTENTION_FORBIDDEN, where="the text of exercise 3")
    for (description, q, k, v, mask, causal), got in judged(_attention_calls(case), seen["results"]):
        want = _reference_attention(q, k, v, mask, causal)
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            shape = f" of shape {tuple(got.shape)}" if isinstance(got, torch.Tensor) else ""
            fail("wrong-shape", observed=f"attention returned {type_name(got)}{shape} for {description}",
                 expected=f"one tensor of shape {tuple(want.shape)} (batch, heads, queries, head_dim)",
                 cause="more than the output is returned (the attention weights too, as nn.MultiheadAttention does)"
                 if isinstance(got, tuple) else "the wrong operands were multiplied or transposed (q^T k instead of "
                 "q k^T, weights times v on the wrong side), or a dimension was squeezed or added",
                 where="the return statement of attention")
        got = got.detach().double()
        if _close(got, want):
            continue
        d = q.shape[-1]
        nan = bool(torch.isnan(got).any())
        if _close(got, _reference_attention(q, k, v, mask, causal, scale=1.0)):
            code, cause = "wrong-scale", "the scores were not scaled: divide q @ k^T by sqrt(head_dim)"
        elif _close(got, _reference_attention(q, k, v, mask, causal, scale=1 / d)):
            code, cause = "wrong-scale", "the scores were divided by head_dim, not by its square root"
        elif mask is not None and _close(got, _reference_attention(q, k, v, None, causal)):
            code, cause = "padding-not-masked", "the padding mask was not applied" + (
                " (with causal=True too: only one of the two masks is applied, an if/elif?)" if causal else "")
        elif mask is not None and _close(got, _reference_attention(q, k, v, ~mask, causal)):
            code, cause = "padding-not-masked", "the mask is inverted: this lesson's mask is True at real keys " \
                "(nn.MultiheadAttention's key_padding_mask is True at padding)"
        elif causal and _close(got, _reference_attention(q, k, v, mask, False)):
            code, cause = "causal-not-masked", "the causal mask was not applied" + (
                " (with a padding mask too: only one of the two masks is applied, an if/elif?)" if mask is not None
                else "")
        elif causal and (nan or _close(got, _reference_attention(q, k, v, mask, True, diagonal=0))):
            code, cause = "causal-not-masked", "the diagonal was blocked too: query i must see key i " \
                "(triu(diagonal=1) marks the future)" + (" (the first query then sees nothing: NaN)" if nan else "")
        elif causal and _close(got, _future_only(q, k, v, mask)):
            code, cause = "causal-not-masked", "the mask is flipped: query i sees the future keys j >= i, not the past"
        elif mask is not None and not causal and _close(got, _zero_filled(q, k, v, mask)):
            code, cause = "padding-not-masked", "blocked scores were set to 0, not -inf: exp(0) = 1 still gives them " \
                "weight"
        elif _close(got, _softmax_over_queries(q, k, v, mask, causal)):
            code, cause = "wrong-value", "the softmax ran over the queries (dim=-2), not over the keys (dim=-1)"
        else:
            code, cause = "wrong-value", "another computation: the softmax's axis, which operand is transposed, " \
                "a mask applied after the softmax without renormalising, or v multiplied in another order"
        fail(code, observed=f"the output differs from softmax(q k^T / sqrt(d)) v for {description}"
             + (" (it holds NaN)" if nan else ""),
             expected=f"the reference output, e.g. {[round(x, 4) for x in want[0, 0, -1, :3].tolist()]} at "
             "[0, 0, -1, :3]",
             cause=cause, where="the scores, masks and softmax lines of attention")
    return "softmax(q k^T / sqrt(d)) v by hand, with padding, causal and both masks"


def _future_only(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The output when the causal mask is flipped (query i sees keys j >= i)."""
    scores = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
    allowed = ~torch.ones(scores.shape[-2:], dtype=torch.bool).tril(diagonal=-1)
    allowed = allowed.expand(scores.shape)
    if mask is not None:
        allowed = allowed & mask[:, None, None, :]
    return scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1).nan_to_num(0.0) @ v.double()


def _zero_filled(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    scores = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
    return scores.masked_fill(~mask[:, None, None, :], 0.0).softmax(dim=-1) @ v.double()


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


# --------------------------------------------------------------------------------------------------
# 15-warmup
# --------------------------------------------------------------------------------------------------
def _schedule_cases(case: Case) -> list[tuple[int, int, int]]:
    """(warmup_steps, total_steps, steps asked) of each schedule: one with warm-up, one without. Hidden: other
    lengths drawn from the seed, a one-step warm-up, and no warm-up."""
    if not case.hidden:
        return [(4, 12, 16), (0, 5, 8)]
    generator = torch.Generator().manual_seed(case.seeded(159))
    warmup = int(torch.randint(2, 9, (1,), generator=generator))
    total = warmup + int(torch.randint(3, 15, (1,), generator=generator))
    return [(warmup, total, total + 4), (1, 4, 7), (0, 3, 5), (10, 11, 13)]


def reference_lr_factor(step: int, warmup_steps: int, total_steps: int) -> float:
    """Linear warm-up ((step + 1) / warmup_steps), then linear decay to 0 at total_steps, 0 after."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return max(0.0, (total_steps - step) / (total_steps - warmup_steps))


@register(
    "15-warmup",
    hints=Hints(
        nudge="Two pieces: before warmup_steps, (step + 1) / warmup_steps; from there, the share of the decay "
        "still to go, (total_steps - step) / (total_steps - warmup_steps), never below 0.",
        concept="LambdaLR multiplies the base learning rate by your function of the step count (0 for the first "
        "optimizer step). Warm-up rises linearly so that the first step already learns and step warmup_steps - 1 "
        "reaches the full rate; the decay then falls linearly to 0 at total_steps and stays there.",
        solution="if step < warmup_steps: return (step + 1) / warmup_steps\n"
        "return max(0.0, (total_steps - step) / (total_steps - warmup_steps))",
        section="4. A small transformer against an LSTM",
    ),
    requires={
        "not-a-number": Requirement("returns a Python number (LambdaLR multiplies the learning rate by it)",
                                    hint="Print type(lr_factor(0, 4, 12)): a tensor or None is not a factor."),
        "zero-first-step": Requirement(
            "the first step (step 0) already has a learning rate above 0",
            hint="What is your factor at step 0? A step with learning rate 0 is a wasted step."),
        "wrong-warmup": Requirement(
            "during warm-up the factor is (step + 1) / warmup_steps, reaching 1 at step warmup_steps - 1",
            hint="Print the factors of steps 0 to warmup_steps: they should rise by 1/warmup_steps and reach 1.0 "
            "exactly at step warmup_steps - 1."),
        "wrong-decay": Requirement(
            "after warm-up it falls linearly from 1 at step warmup_steps to 0 at step total_steps",
            hint="Print the factor at step warmup_steps (1.0?) and at step total_steps (0.0?); is the fall in "
            "between a straight line, counted from the end of the warm-up?"),
        "negative-after-end": Requirement(
            "it is 0 from total_steps on, never negative",
            hint="Print the factor at total_steps + 3: a negative learning rate climbs the loss."),
        "no-warmup-case": Requirement(
            "warmup_steps = 0 means no warm-up (decay from step 0), without dividing by zero",
            hint="Call lr_factor(0, 0, 5): which division has warmup_steps in its denominator, and does that line "
            "run when there is no warm-up?"),
    },
)
def probe_warmup(lr_factor: Callable[[int, int, int], Any], *, case: Case) -> dict:
    """Call `lr_factor` for every step of each schedule; record each value, or the exception it raised."""
    schedules = []
    for warmup, total, steps in _schedule_cases(case):
        values: list[Any] = []
        for step in range(steps):
            try:
                values.append(lr_factor(step, warmup, total))
            except Exception as error:  # recorded as data: the judge says which case raised
                values.append({"raised": f"{type(error).__name__}: {error}"[:300]})
                break
        schedules.append(values)
    return {"schedules": schedules}


@judges("15-warmup")
def judge_warmup(seen: dict, *, case: Case) -> str:
    """(step + 1) / warmup_steps, then linear decay to 0 at total_steps, 0 after; no warm-up when warmup_steps = 0."""
    schedules = seen["schedules"]
    if not isinstance(schedules, list) or len(schedules) != len(_schedule_cases(case)):
        raise WireError("malformed observation: not one schedule per case")
    for (warmup, total, steps), values in zip(_schedule_cases(case), schedules, strict=True):
        if not isinstance(values, list) or not values or len(values) > steps:
            raise WireError("malformed observation: a schedule's values are missing")
        what = f"lr_factor(step, warmup_steps={warmup}, total_steps={total})"
        for step, got in enumerate(values):
            if isinstance(got, dict) and "raised" in got:
                if warmup == 0 and "ZeroDivisionError" in str(got["raised"]):
                    fail("no-warmup-case", observed=f"{what} raised {got['raised']} at step {step}",
                         expected=f"{reference_lr_factor(step, warmup, total):g}: no warm-up, the decay from step 0",
                         cause="the warm-up division by warmup_steps runs even when warmup_steps is 0",
                         where="the warm-up branch of lr_factor (its condition)")
                fail("raised", observed=f"{what} raised {got['raised']} at step {step}",
                     expected="a number for every step", cause="see the error above",
                     where="the line of lr_factor that raised")
            if isinstance(got, bool) or not isinstance(got, (int, float)):
                fail("not-a-number", observed=f"{what} returned {type_name(got)} at step {step}",
                     expected="a Python float (or int)",
                     cause="a tensor was built (torch.tensor, torch.cos) or a branch has no return (None)",
                     where="the return statements of lr_factor")
        if len(values) != steps:
            raise WireError("malformed observation: a schedule stops early without an exception")
        want = [reference_lr_factor(step, warmup, total) for step in range(steps)]
        wrong = [step for step in range(steps) if abs(values[step] - want[step]) > 1e-6]
        if not wrong:
            continue
        step = wrong[0]
        shown = ", ".join(f"{v:.3g}" for v in values[: min(steps, total + 2)])
        expected = ", ".join(f"{v:.3g}" for v in want[: min(steps, total + 2)])
        if step < warmup and step == 0 and abs(values[0]) < 1e-12:
            code, cause = "zero-first-step", "step / warmup_steps: the first step gets learning rate 0 (count from " \
                "step + 1)"
        elif step < warmup:
            code, cause = "wrong-warmup", "the warm-up ramp has another slope or end: (step + 1) / warmup_steps " \
                "reaches 1 at step warmup_steps - 1"
        elif step >= total and values[step] < 0:
            code, cause = "negative-after-end", "the decay formula keeps going past total_steps: clamp it at 0"
        elif warmup == 0 and step == 0 and abs(values[0]) < 1e-12:
            code, cause = "no-warmup-case", "with warmup_steps = 0 the first step got factor 0: without warm-up the " \
                "schedule starts at 1"
        else:
            cosine = 0.5 * (1 + math.cos(math.pi * (step - warmup) / (total - warmup))) if step < total else 0.0
            over_total = max(0.0, (total - step) / total)
            cause = ("a cosine decay: the exercise asks for a straight line" if abs(values[step] - cosine) < 1e-6
                     else "the decay counts from step 0 over total_steps, not from the end of the warm-up"
                     if abs(values[step] - over_total) < 1e-6 else
                     "the decay starts, ends or falls elsewhere than from 1 at warmup_steps to 0 at total_steps")
            code = "wrong-decay"
        fail(code, observed=f"{what} gives {values[step]:.4g} at step {step}; steps 0.. give {shown}",
             expected=f"{want[step]:.4g}; steps 0.. give {expected}", cause=cause,
             where="the warm-up branch of lr_factor" if step < warmup else "the decay branch of lr_factor")
    return "(step + 1) / warmup_steps, then a linear decay to 0 at total_steps, with and without warm-up"


# --------------------------------------------------------------------------------------------------
# 15-smoothed-loss
# --------------------------------------------------------------------------------------------------
_SMOOTHED_FORBIDDEN = {
    "cross_entropy": "the exercise asks you to write the loss from log_softmax (or logsumexp) yourself",
    "nll_loss": "the exercise asks you to pick the target's log-probability yourself (gather or indexing)",
    "numpy": "a numpy computation is invisible to autograd: the loss would have no gradient",
}


def _smoothed_calls(case: Case) -> list[tuple[str, torch.Tensor, torch.Tensor, float]]:
    """(description, logits (N, C), targets (N,), smoothing) of each call: ordinary logits, smoothing 0, and
    logits in the hundreds (where softmax then log gives log(0)). Hidden: other sizes and smoothings."""
    generator = torch.Generator().manual_seed(case.seeded(157 if case.hidden else 156))
    plan = ([(8, 7, 0.05, 1.0), (5, 2, 0.3, 1.0), (3, 6, 0.0, 3.0), (6, 5, 0.15, 150.0)] if case.hidden else
            [(6, 5, 0.1, 1.0), (4, 3, 0.0, 1.0), (4, 4, 0.2, 100.0)])
    calls = []
    for n, classes, smoothing, scale in plan:
        logits = torch.randn(n, classes, generator=generator) * scale
        targets = torch.randint(0, classes, (n,), generator=generator)
        size = "logits in the hundreds" if scale > 10 else f"logits of shape {(n, classes)}"
        calls.append((f"{size}, smoothing={smoothing}", logits, targets, smoothing))
    return calls


@register(
    "15-smoothed-loss", nonfinite=('results/*/returned', 'results/*/grad'),
    hints=Hints(
        nudge="log_probs = logits.log_softmax(-1); the target term is -log_probs at the target (gather); the "
        "smoothing term is -log_probs averaged over all classes; mix them with (1 - smoothing) and smoothing.",
        concept="Label smoothing trains towards (1 - eps) on the target plus eps / C on every class (the target "
        "included, as PyTorch does). Its cross-entropy is (1 - eps) * NLL + eps * mean over classes of -log p, "
        "averaged over the batch. log_softmax (or logits - logsumexp) stays finite for huge logits; "
        "softmax().log() does not. Torch operations keep the graph: autograd gives the gradient for free.",
        solution="log_probs = logits.log_softmax(dim=-1)\n"
        "nll = -log_probs.gather(1, targets[:, None]).squeeze(1)\n"
        "return ((1 - smoothing) * nll - smoothing * log_probs.mean(dim=-1)).mean()",
        section="5. A custom loss in torch operations",
    ),
    requires={
        "forbidden-call": Requirement(
            "does not call F.cross_entropy, F.nll_loss (or nn.CrossEntropyLoss) or numpy",
            hint="Write it from log_softmax, gather (or indexing) and mean: F.cross_entropy is what you compare with "
            "afterwards."),
        "not-a-scalar": Requirement("returns a 0-dim tensor (the mean over the batch)",
                                    hint="Print the .shape of what you return; did you average over the batch?"),
        "wrong-value": Requirement(
            "equals F.cross_entropy(logits, targets, label_smoothing=smoothing)",
            hint="Check smoothing=0 first (plain cross-entropy), then the smoothing term: PyTorch spreads eps over "
            "all C classes, the target's included."),
        "not-stable": Requirement(
            "stays finite for logits in the hundreds",
            hint="Try logits = torch.tensor([[300.0, 0.0, -300.0]]): softmax gives an exact 0, and log(0) = -inf. "
            "Which function computes log-probabilities without taking the log of a softmax?"),
        "no-gradient": Requirement(
            "is differentiable, with the gradient of F.cross_entropy(..., label_smoothing=smoothing)",
            hint="Does the result have a grad_fn? .item(), float() and torch.tensor(...) cut the graph."),
    },
)
def probe_smoothed_loss(smoothed_cross_entropy: Callable[..., Any], *, case: Case) -> dict:
    """Call the loss on each case's logits (a leaf that requires grad) with the torch calls recorded; record the
    value and the gradient reaching the logits."""
    recorder = CallRecorder()

    def record(item: tuple[str, torch.Tensor, torch.Tensor, float]) -> dict:
        _, logits, targets, smoothing = item
        leaf = logits.clone().requires_grad_(True)
        with recorder:
            returned = smoothed_cross_entropy(leaf, targets.clone(), smoothing)
        grad = None
        if isinstance(returned, torch.Tensor) and returned.numel() == 1 and returned.grad_fn is not None:
            returned.sum().backward()
            grad = leaf.grad
        return {"returned": returned, "grad": grad}

    results = collect(_smoothed_calls(case), record)
    return {"results": results, "calls": recorder.seen}


def _smoothed_other_classes(logits: torch.Tensor, targets: torch.Tensor, smoothing: float) -> torch.Tensor:
    """The convention that spreads eps over the C - 1 other classes (not PyTorch's)."""
    classes = logits.shape[-1]
    weights = torch.full(logits.shape, smoothing / (classes - 1), dtype=torch.float64)
    weights.scatter_(1, targets[:, None], 1 - smoothing)
    return -(weights * logits.double().log_softmax(-1)).sum(-1).mean()


@judges("15-smoothed-loss")
def judge_smoothed_loss(seen: dict, *, case: Case) -> str:
    """The value and gradient of F.cross_entropy(label_smoothing=...), finite for huge logits, no forbidden call."""
    forbid(seen["calls"], _SMOOTHED_FORBIDDEN, where="the text of exercise 5")
    for (description, logits, targets, smoothing), result in judged(_smoothed_calls(case), seen["results"]):
        got = result["returned"]
        if not isinstance(got, torch.Tensor) or got.dim() != 0:
            shape = f" of shape {tuple(got.shape)}" if isinstance(got, torch.Tensor) else ""
            fail("not-a-scalar", observed=f"returned {type_name(got)}{shape} for {description}",
                 expected="a 0-dim tensor: the mean over the batch",
                 cause="the per-example losses are returned without .mean(), a dimension was kept, or the value "
                 "became a Python number (.item(), float())", where="the return statement of smoothed_cross_entropy")
        leaf = logits.double().clone().requires_grad_(True)
        loss = F.cross_entropy(leaf, targets, label_smoothing=smoothing)
        loss.backward()
        want = loss.detach()
        value = got.detach().double()
        if not torch.isfinite(value):
            fail("not-stable", observed=f"the loss is {float(value)} for {description}",
                 expected=f"{float(want):.6g} (finite)",
                 cause="log of a softmax that underflowed to 0 (softmax(...).log() gives -inf), or exp of a large "
                 "logit overflowing (exp(100) is inf in float32 without subtracting the max first)",
                 where="where the log-probabilities are computed")
        if not _close(value, want):
            plain = F.cross_entropy(logits.double(), targets)
            if smoothing and _close(value, plain):
                cause = "the smoothing is missing: this is the plain cross-entropy"
            elif smoothing and _close(value, _smoothed_other_classes(logits, targets, smoothing)):
                cause = "smoothing spread over the C - 1 other classes; PyTorch spreads eps / C over all C classes, " \
                        "the target's included: (1 - eps) * NLL + eps * mean over classes of -log p"
            elif _close(value, want * len(targets)):
                cause = "the sum over the batch, not the mean"
            elif smoothing and _close(value, (1 - smoothing) * plain):
                cause = "the smoothing term is missing: only (1 - eps) * NLL"
            else:
                cause = "another formula: the sign of the log-probabilities, the weights of the two terms, or the " \
                    "target's log-probability taken from the wrong column (gather along dim 1)"
            fail("wrong-value", observed=f"loss {float(value):.6g} for {description}",
                 expected=f"{float(want):.6g}, F.cross_entropy(logits, targets, label_smoothing={smoothing})",
                 cause=cause, where="the formula in smoothed_cross_entropy")
        grad = result["grad"]
        if grad is None:
            fail("no-gradient", observed=f"the loss has no gradient path to the logits ({description})",
                 expected="loss.backward() fills logits.grad",
                 cause="the graph was cut: .item(), float(), .detach(), or a new tensor made with torch.tensor(...) "
                 "from the value", where="the computation of the returned value")
        grad = _tensor(grad, "grad").double()
        if not torch.isfinite(grad).all():
            fail("not-stable", observed=f"the gradient holds inf or NaN for {description}",
                 expected="a finite gradient",
                 cause="the log-probabilities went through log(0) or exp overflow on the way",
                 where="where the log-probabilities are computed")
        if not _close(grad, leaf.grad, tol=1e-3):
            fail("no-gradient", observed=f"logits.grad differs from F.cross_entropy's ({description})",
                 expected="the gradient of F.cross_entropy(logits, targets, label_smoothing=smoothing)",
                 cause="part of the computation is detached (a .detach() or a value computed outside the graph)",
                 where="the computation of the returned value")
    return "the value and gradient of F.cross_entropy(label_smoothing=...) from torch operations, finite for large " \
        "logits"
