"""Planted bugs for the checks of lesson 15 (sequences and transformers): each plausible wrong answer fails with its
code and a message that names it; right answers written differently from the solution pass."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from harness.checks.testing import Correct, Mistake, assert_check_fails, assert_forgeries_refused, solution_cell
from harness.contract.case import Case
from tests.exercises import notebook_namespace


# --------------------------------------------------------------------------------------------------
# 15-pad-collate
# --------------------------------------------------------------------------------------------------
def collate_solution(sequences, pad_value):
    lengths = torch.tensor([len(s) for s in sequences])
    padded = nn.utils.rnn.pad_sequence(sequences, batch_first=True, padding_value=pad_value)
    return padded, torch.arange(padded.shape[1]) < lengths[:, None]


def collate_loop(sequences, pad_value):
    longest = max(len(s) for s in sequences)
    padded = sequences[0].new_full((len(sequences), longest), pad_value)
    mask = torch.zeros(len(sequences), longest, dtype=torch.bool)
    for i, s in enumerate(sequences):
        padded[i, : len(s)] = s
        mask[i, : len(s)] = True
    return padded, mask


def collate_cat(sequences, pad_value):
    longest = max(s.numel() for s in sequences)
    rows = [torch.cat([s, s.new_full((longest - s.numel(),), pad_value)]) for s in sequences]
    masks = [torch.cat([torch.ones(s.numel(), dtype=torch.bool), torch.zeros(longest - s.numel(), dtype=torch.bool)])
             for s in sequences]
    return torch.stack(rows), torch.stack(masks)


def collate_time_first(sequences, pad_value):
    padded = nn.utils.rnn.pad_sequence(sequences, padding_value=pad_value)  # (time, batch)
    return padded, padded != pad_value


def collate_float_zeros(sequences, pad_value):
    longest = max(len(s) for s in sequences)
    padded = torch.zeros(len(sequences), longest) + pad_value  # float32 whatever the sequences' dtype
    for i, s in enumerate(sequences):
        padded[i, : len(s)] = s
    return padded, torch.arange(longest) < torch.tensor([len(s) for s in sequences])[:, None]


def collate_sorted(sequences, pad_value):
    return collate_solution(sorted(sequences, key=len, reverse=True), pad_value)


def collate_left(sequences, pad_value):
    longest = max(len(s) for s in sequences)
    padded, mask = collate_solution(sequences, pad_value)
    for i, s in enumerate(sequences):
        padded[i] = torch.cat([s.new_full((longest - len(s),), pad_value), s])
    return padded, mask


def collate_default_padding(sequences, pad_value):
    padded = nn.utils.rnn.pad_sequence(sequences, batch_first=True)  # padding_value defaults to 0
    return padded, torch.arange(padded.shape[1]) < torch.tensor([len(s) for s in sequences])[:, None]


def collate_mask_from_values(sequences, pad_value):
    padded, _ = collate_solution(sequences, pad_value)
    return padded, padded != pad_value


def collate_mask_inverted(sequences, pad_value):
    padded, mask = collate_solution(sequences, pad_value)
    return padded, ~mask  # the key_padding_mask convention


def collate_long_mask(sequences, pad_value):
    padded, mask = collate_solution(sequences, pad_value)
    return padded, mask.long()


def collate_swapped(sequences, pad_value):
    padded, mask = collate_solution(sequences, pad_value)
    return mask, padded


def collate_lengths(sequences, pad_value):
    padded, _ = collate_solution(sequences, pad_value)
    return padded, torch.tensor([len(s) for s in sequences])


# --------------------------------------------------------------------------------------------------
# 15-masked-loss
# --------------------------------------------------------------------------------------------------
def per_token(logits, targets):
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view(targets.shape)


def loss_ignore_index(logits, targets, mask):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.masked_fill(~mask, -100).reshape(-1))


def loss_weighted(logits, targets, mask):
    weights = mask.to(logits.dtype)
    return (per_token(logits, targets) * weights).sum() / weights.sum()


def loss_transposed(logits, targets, mask):
    losses = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # (batch, time)
    return torch.masked_select(losses, mask).mean()


def loss_every_position(logits, targets, mask):
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def loss_times_mask_mean(logits, targets, mask):
    return (per_token(logits, targets) * mask).mean()


def loss_sum(logits, targets, mask):
    return per_token(logits, targets)[mask].sum()


def loss_sequence_means(logits, targets, mask):
    losses = per_token(logits, targets)
    return ((losses * mask).sum(1) / mask.sum(1)).mean()


def loss_item(logits, targets, mask):
    return torch.tensor(per_token(logits, targets)[mask].mean().item())


def loss_new_leaf(logits, targets, mask):
    value = per_token(logits, targets)[mask].mean()
    return torch.tensor(value.item(), requires_grad=True)


def loss_in_place(logits, targets, mask):
    targets[~mask] = -100
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)


def loss_per_token(logits, targets, mask):
    return per_token(logits, targets) * mask


def loss_ignore_zero(logits, targets, mask):
    padded_as_pad = targets.masked_fill(~mask, 0)  # PAD is token 0 in this lesson
    return F.cross_entropy(logits.flatten(0, 1), padded_as_pad.flatten(), ignore_index=0)


def loss_ignore_zero_unmasked(logits, targets, mask):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=0)


def loss_in_float64(logits, targets, mask):
    per_position = F.cross_entropy(logits.double().flatten(0, 1), targets.flatten(), reduction="none")
    return per_position[mask.flatten()].mean()  # float64: "more accurate"


def loss_upcast(logits, targets, mask):
    per = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none")  # float32 "for accuracy"
    return per[mask.flatten()].mean()


def loss_where_count(logits, targets, mask):
    log_probs = logits.log_softmax(-1)
    nll = -log_probs.gather(-1, torch.where(mask, targets, torch.zeros_like(targets)).unsqueeze(-1)).squeeze(-1)
    return torch.where(mask, nll, torch.zeros_like(nll)).sum() / mask.sum()


def loss_per_sequence_sum(logits, targets, mask):
    return (per_token(logits, targets) * mask).sum() / logits.shape[0]  # summed per sequence, averaged over batch


def loss_softmax_time(logits, targets, mask):
    log_probs = logits.log_softmax(dim=1)  # over time, not classes
    picked = -log_probs.gather(2, targets[..., None]).squeeze(2)
    return picked[mask].mean()


# --------------------------------------------------------------------------------------------------
# 15-attention
# --------------------------------------------------------------------------------------------------
def attention_using(*, scale="sqrt", softmax_dim=-1, use_mask=True, invert=False, causal_diagonal=1, fill="-inf",
                    only_one=False, flip_causal=False, with_weights=False, sdpa=False, spread="keys"):
    def attention(q, k, v, mask=None, causal=False):
        if sdpa:
            allowed = None if mask is None else mask[:, None, None, :]
            if causal:
                future = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
                allowed = future if allowed is None else allowed & future
            return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        d = q.shape[-1]
        factor = {"sqrt": 1 / math.sqrt(d), "none": 1.0, "d": 1 / d}[scale]
        scores = q @ k.transpose(-2, -1) * factor
        blocked = torch.zeros(scores.shape[-2:], dtype=torch.bool)
        if causal:
            blocked = torch.ones_like(blocked).tril(diagonal=-1) if flip_causal else \
                torch.ones_like(blocked).triu(diagonal=causal_diagonal)
        blocked = blocked.expand(scores.shape)
        if mask is not None and use_mask and not (only_one and causal):
            padding = mask if invert else ~mask
            blocked = blocked | {"keys": padding[:, None, None, :], "queries": padding[:, None, :, None],
                                 "3-d": padding[:, None, :]}[spread]
        scores = scores.masked_fill(blocked, {"-inf": float("-inf"), "zero": 0.0, "large": -1e9}[fill])
        weights = scores.softmax(dim=softmax_dim)
        out = weights @ v
        return (out, weights) if with_weights else out
    return attention


def attention_unseen(q, k, v, mask=None, causal=False):
    with torch._C.DisableTorchFunction():
        return attention_using(sdpa=True)(q, k, v, mask, causal)


def attention_math(q, k, v, mask=None, causal=False):
    allowed = None if mask is None else mask[:, None, None, :]
    if causal:
        future = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        allowed = future if allowed is None else allowed & future
    return torch._scaled_dot_product_attention_math(q, k, v, attn_mask=allowed)[0]


def attention_float64(q, k, v, mask=None, causal=False):
    """Wrong: scores in float64 "for accuracy", and the float64 result returned."""
    out = attention_using()(q.double(), k.double(), v.double(), mask=mask, causal=causal)
    return out


def attention_upcast(q, k, v, mask=None, causal=False):
    """Wrong: scores, weights and output in float32 "for accuracy" whatever q's dtype, returned so."""
    return attention_using()(q.float(), k.float(), v.float(), mask=mask, causal=causal)


def attention_upcast_cast_back(q, k, v, mask=None, causal=False):
    """Right: float32 inside, the output cast back to q's dtype."""
    return attention_using()(q.float(), k.float(), v.float(), mask=mask, causal=causal).to(q.dtype)


def attention_scaled_by_keys(q, k, v, mask=None, causal=False):
    """Wrong: the square root of the number of keys (shape[-2]) instead of head_dim."""
    return attention_using()(q * math.sqrt(q.shape[-1]) / math.sqrt(k.shape[-2]), k, v, mask=mask, causal=causal)


def attention_mask_after_softmax(q, k, v, mask=None, causal=False):
    """Wrong: the padding mask multiplies the weights after the softmax."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    weights = scores.softmax(-1)
    if mask is not None:
        weights = weights * mask[:, None, None, :]
    return weights @ v


def attention_sees_next(q, k, v, mask=None, causal=False):
    """Wrong: the allowed keys built with tril(diagonal=1), so each position also sees the next one."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        allowed = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril(diagonal=1)
        scores = scores.masked_fill(~allowed, float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
    return scores.softmax(dim=-1) @ v


def attention_additive(q, k, v, mask=None, causal=False):
    """Right: an additive float mask built with torch.where, einsum for the products."""
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / q.shape[-1] ** 0.5
    bias = torch.zeros_like(scores)
    if causal:
        bias = bias + torch.full(scores.shape[-2:], float("-inf"), dtype=scores.dtype).triu(1)
    if mask is not None:
        bias = bias.masked_fill(~mask[:, None, None, :], float("-inf"))
    return torch.einsum("bhqk,bhkd->bhqd", torch.softmax(scores + bias, dim=-1), v)


def attention_large_negative(q, k, v, mask=None, causal=False):
    """Right: -1e9 instead of -inf, and the scale applied to q first."""
    scores = (q / math.sqrt(q.size(-1))) @ k.transpose(2, 3)
    keep = torch.ones(q.size(0), 1, q.size(2), k.size(2), dtype=torch.bool)
    if mask is not None:
        keep = keep & mask.view(mask.size(0), 1, 1, -1)
    if causal:
        keep = keep & torch.tril(torch.ones(q.size(2), k.size(2), dtype=torch.bool))
    return torch.matmul(F.softmax(scores.masked_fill(~keep, -1e9), dim=-1), v)


# --------------------------------------------------------------------------------------------------
# 15-warmup
# --------------------------------------------------------------------------------------------------
def factor_piecewise(step, warmup_steps, total_steps):
    if step >= total_steps:
        return 0.0
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return 1.0 - (step - warmup_steps) / (total_steps - warmup_steps)


def factor_min_max(step, warmup_steps, total_steps):
    ramp = (step + 1) / warmup_steps if warmup_steps else 1.0
    decay = (total_steps - step) / (total_steps - warmup_steps)
    return float(min(ramp, 1.0, max(decay, 0.0))) if step >= warmup_steps else float(ramp)


class WarmupThenLinear:
    """Right: a callable object, as LambdaLR accepts one, with the warm-up as a share of the ramp done."""

    def __call__(self, step, warmup_steps, total_steps):
        if warmup_steps and step < warmup_steps:
            return float(step + 1) / float(warmup_steps)
        remaining = total_steps - step
        return remaining / (total_steps - warmup_steps) if remaining > 0 else 0.0


def factor_from_zero(step, warmup_steps, total_steps):
    if step < warmup_steps:
        return step / warmup_steps
    return max(0.0, (total_steps - step) / (total_steps - warmup_steps))


def factor_slow_ramp(step, warmup_steps, total_steps):
    if step < warmup_steps:
        return (step + 1) / (warmup_steps + 1)
    return max(0.0, (total_steps - step) / (total_steps - warmup_steps))


def factor_cosine(step, warmup_steps, total_steps):
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
    return 0.5 * (1 + math.cos(math.pi * progress))


def factor_decay_over_total(step, warmup_steps, total_steps):
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return max(0.0, (total_steps - step) / total_steps)


def factor_decay_early(step, warmup_steps, total_steps):
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return max(0.0, (total_steps - step - 1) / (total_steps - warmup_steps))  # one step early


def factor_unclamped(step, warmup_steps, total_steps):
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return (total_steps - step) / (total_steps - warmup_steps)


def factor_divides_always(step, warmup_steps, total_steps):
    ramp = min(1.0, (step + 1) / warmup_steps)
    return min(ramp, max(0.0, (total_steps - step) / (total_steps - warmup_steps)))


def factor_no_decay(step, warmup_steps, total_steps):
    return min(1.0, (step + 1) / warmup_steps) if warmup_steps else 1.0


def factor_tensor(step, warmup_steps, total_steps):
    return torch.tensor(factor_piecewise(step, warmup_steps, total_steps))


# --------------------------------------------------------------------------------------------------
# 15-smoothed-loss
# --------------------------------------------------------------------------------------------------
def smoothed_solution(logits, targets, smoothing):
    log_probs = logits.log_softmax(dim=-1)
    nll = -log_probs.gather(1, targets[:, None]).squeeze(1)
    return ((1 - smoothing) * nll - smoothing * log_probs.mean(dim=-1)).mean()


def smoothed_upcast(logits, targets, smoothing):
    # computed in float32 "for stability" and returned as it is: a bfloat16 model gets a float32 loss
    return smoothed_solution(logits.float(), targets, smoothing)


def smoothed_upcast_cast_back(logits, targets, smoothing):
    """Right: computed in float32, cast back to the logits' dtype at the end (as autocast's losses are)."""
    return smoothed_solution(logits.float(), targets, smoothing).to(logits.dtype)


def smoothed_distribution(logits, targets, smoothing):
    """Right: the smoothed target distribution, written out, with logsumexp."""
    classes = logits.shape[1]
    log_probs = logits - logits.logsumexp(dim=1, keepdim=True)
    target = torch.full_like(logits, smoothing / classes)
    target[torch.arange(len(targets)), targets] += 1 - smoothing
    return -(target * log_probs).sum(dim=1).mean()


def smoothed_one_hot(logits, targets, smoothing):
    """Right: a one-hot mixed with the uniform distribution, mean over the batch by hand."""
    one_hot = F.one_hot(targets, logits.size(-1)).to(logits.dtype)
    soft = one_hot * (1 - smoothing) + smoothing / logits.size(-1)
    return torch.sum(-soft * F.log_softmax(logits, dim=-1)) / logits.size(0)


def smoothed_calls_cross_entropy(logits, targets, smoothing):
    return F.cross_entropy(logits, targets, label_smoothing=smoothing)


def smoothed_cross_entropy_unseen(logits, targets, smoothing):
    with torch._C.DisableTorchFunction():
        return F.cross_entropy(logits, targets, label_smoothing=smoothing)


def smoothed_nll(logits, targets, smoothing):
    log_probs = logits.log_softmax(-1)
    return (1 - smoothing) * F.nll_loss(log_probs, targets) - smoothing * log_probs.mean(-1).mean()


def smoothed_numpy(logits, targets, smoothing):
    x = logits.detach().numpy()
    log_probs = x - np.log(np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True)) - x.max(1, keepdims=True)
    nll = -log_probs[np.arange(len(x)), targets.numpy()]
    return torch.tensor(((1 - smoothing) * nll - smoothing * log_probs.mean(1)).mean())


def smoothed_other_classes(logits, targets, smoothing):
    log_probs = logits.log_softmax(-1)
    weights = torch.full_like(logits, smoothing / (logits.shape[1] - 1))
    weights.scatter_(1, targets[:, None], 1 - smoothing)
    return -(weights * log_probs).sum(-1).mean()


def smoothed_uniform_summed(logits, targets, smoothing):
    log_probs = logits.log_softmax(-1)
    nll = -log_probs.gather(1, targets[:, None]).squeeze(1)
    return ((1 - smoothing) * nll - smoothing * log_probs.sum(-1)).mean()  # sum over classes, not mean


def smoothed_no_smoothing(logits, targets, smoothing):
    log_probs = logits.log_softmax(-1)
    return -log_probs.gather(1, targets[:, None]).mean()


def smoothed_sum(logits, targets, smoothing):
    log_probs = logits.log_softmax(-1)
    nll = -log_probs.gather(1, targets[:, None]).squeeze(1)
    return ((1 - smoothing) * nll - smoothing * log_probs.mean(-1)).sum()


def smoothed_softmax_log(logits, targets, smoothing):
    log_probs = logits.softmax(-1).log()
    nll = -log_probs.gather(1, targets[:, None]).squeeze(1)
    return ((1 - smoothing) * nll - smoothing * log_probs.mean(-1)).mean()


def smoothed_no_max(logits, targets, smoothing):
    log_probs = logits - logits.exp().sum(-1, keepdim=True).log()  # exp overflows for large logits
    nll = -log_probs.gather(1, targets[:, None]).squeeze(1)
    return ((1 - smoothing) * nll - smoothing * log_probs.mean(-1)).mean()


def smoothed_float64(logits, targets, smoothing):
    log_probs = logits.double().log_softmax(-1)  # float64 "for stability"
    nll = -log_probs.gather(1, targets[:, None]).squeeze(1)
    return ((1 - smoothing) * nll - smoothing * log_probs.mean(-1)).mean()


def smoothed_target_share_missing(logits, targets, smoothing):
    log_probs = logits.log_softmax(-1)
    weights = torch.full_like(logits, smoothing / logits.shape[1])
    weights[torch.arange(len(targets)), targets] = 1 - smoothing  # = instead of +=: loses the target's eps / C
    return -(weights * log_probs).sum(-1).mean()


def smoothed_per_example(logits, targets, smoothing):
    log_probs = logits.log_softmax(-1)
    nll = -log_probs.gather(1, targets[:, None]).squeeze(1)
    return (1 - smoothing) * nll - smoothing * log_probs.mean(-1)


def smoothed_item(logits, targets, smoothing):
    return torch.tensor(smoothed_solution(logits, targets, smoothing).item())


def smoothed_detached_term(logits, targets, smoothing):
    log_probs = logits.log_softmax(-1)
    nll = -log_probs.gather(1, targets[:, None]).squeeze(1)
    return ((1 - smoothing) * nll - smoothing * log_probs.detach().mean(-1)).mean()


# What the notebook's other cells define, for the planted cells that use it
NOTEBOOK = notebook_namespace("15_sequences_transformers")

MISTAKES = [
    # 15-pad-collate
    Mistake("15-pad-collate", "not-a-pair", "pair (padded, mask)",
            (lambda sequences, pad_value: collate_solution(sequences, pad_value)[0],),
            story="returns the padded tensor alone, forgetting the mask"),
    Mistake("15-pad-collate", "not-a-pair", "other order", (collate_swapped,),
            story="returns (mask, padded)"),
    Mistake("15-pad-collate", "not-a-pair", "pair (padded, mask)",
            (lambda sequences, pad_value: (*collate_solution(sequences, pad_value), [len(s) for s in sequences]),),
            story="returns padded, mask and the lengths"),
    Mistake("15-pad-collate", "wrong-shape", "batch_first=True", (collate_time_first,),
            story="pad_sequence without batch_first (time first by default)"),
    Mistake("15-pad-collate", "wrong-shape", "a fixed length",
            (lambda sequences, pad_value: collate_loop([*sequences, sequences[0].new_full((20,), pad_value)],
                                                      pad_value),),
            story="pads to a fixed maximum length (20) instead of the longest in the batch"),
    Mistake("15-pad-collate", "wrong-dtype", "default to float32", (collate_float_zeros,),
            story="torch.zeros without dtype: int64 tokens become float32"),
    Mistake("15-pad-collate", "wrong-dtype", "int64",
            (lambda sequences, pad_value: collate_loop([s.long() for s in sequences], pad_value),),
            story="converts every sequence to int64 (.long()) first"),
    Mistake("15-pad-collate", "wrong-values", "sorted by length", (collate_sorted,),
            story="sorts by length first, as pack_padded_sequence used to require"),
    Mistake("15-pad-collate", "wrong-values", "left padding", (collate_left,),
            story="pads on the left, as some generation code does"),
    Mistake("15-pad-collate", "wrong-pad-value", "pad_value argument is not used", (collate_default_padding,),
            story="pad_sequence without padding_value: pads with 0 whatever pad_value is"),
    Mistake("15-pad-collate", "mask-not-bool", "torch.bool", (collate_long_mask,),
            story="returns the mask as 0/1 integers"),
    Mistake("15-pad-collate", "mask-not-bool", "torch.bool", (collate_lengths,),
            story="returns the lengths instead of a mask"),
    Mistake("15-pad-collate", "wrong-mask", "computed from the values", (collate_mask_from_values,),
            story="mask = padded != pad_value: a real token equal to the pad value is lost"),
    Mistake("15-pad-collate", "wrong-mask", "inverted", (collate_mask_inverted,),
            story="returns the key_padding_mask convention (True at padding)"),
    Mistake("15-pad-collate", "wrong-mask", "computed from the values", solution_cell(
        "def pad_collate(sequences, pad_value):\n"
        "    padded = nn.utils.rnn.pad_sequence(sequences, batch_first=True, padding_value=pad_value)\n"
        "    return padded, padded != pad_value\n",
        "pad_collate"),
        story="the mask is computed from the values: a real token equal to pad_value is marked as padding",
        planted=True),
    # 15-masked-loss
    Mistake("15-masked-loss", "padding-counted", "padded ones included", (loss_every_position,),
            story="plain F.cross_entropy over every position"),
    Mistake("15-masked-loss", "padding-counted", "mask.sum()", (loss_times_mask_mean,),
            story="(loss * mask).mean(): zeroed, but still divided by batch * time"),
    Mistake("15-masked-loss", "wrong-value", "sum over real tokens", (loss_sum,),
            story="sums the real tokens' losses"),
    Mistake("15-masked-loss", "wrong-value", "divided by the batch size (3)", (loss_per_sequence_sum,),
            story="sums each sequence's loss and averages over the batch, as seq2seq code often does"),
    Mistake("15-masked-loss", "wrong-value", "short sequence", (loss_sequence_means,),
            story="averages each sequence, then the sequences"),
    Mistake("15-masked-loss", "wrong-value", "over the time axis", (loss_softmax_time,),
            story="log_softmax over the time axis of (batch, time, classes)"),
    Mistake("15-masked-loss", "wrong-value", "class 0 were left out", (loss_ignore_zero,),
            story="sets padded targets to PAD (0) and passes ignore_index=0: real tokens of class 0 vanish too"),
    Mistake("15-masked-loss", "padding-counted", "ignore_index=0 without the mask", (loss_ignore_zero_unmasked,),
            story="ignore_index=0 because PAD is 0, trusting the targets at padded positions to be 0"),
    Mistake("15-masked-loss", "wrong-dtype", "torch.float64 loss", (loss_in_float64,),
            story="computes the cross-entropy in float64 and returns it so"),
    Mistake("15-masked-loss", "wrong-dtype", "computed in float32 (an upcast", (loss_upcast,),
            story="logits.float() before the cross-entropy, the float32 loss returned for bfloat16 logits"),
    Mistake("15-masked-loss", "no-gradient", "no gradient path", (loss_item,),
            story="torch.tensor(loss.item()) to make it a tensor again"),
    Mistake("15-masked-loss", "no-gradient", "no gradient path", (loss_new_leaf,),
            story="a new tensor with requires_grad=True: it has a grad, the logits never get one"),
    Mistake("15-masked-loss", "inputs-modified", "targets changed", (loss_in_place,),
            story="targets[~mask] = -100 in place: the caller's targets change"),
    Mistake("15-masked-loss", "not-a-scalar", "reduction='none'", (loss_per_token,),
            story="returns the masked per-token losses without averaging"),
    Mistake("15-masked-loss", "padding-counted", "mask.sum()", solution_cell(
        "def masked_cross_entropy(logits, targets, mask):\n"
        "    per_token = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction='none')\n"
        "    return (per_token * mask.flatten()).mean()\n",
        "masked_cross_entropy", given=NOTEBOOK),
        story="the padded losses are zeroed but the mean still divides by every position", planted=True),
    # 15-attention
    Mistake("15-attention", "forbidden-call", "scaled_dot_product_attention", (attention_using(sdpa=True),),
            story="calls F.scaled_dot_product_attention"),
    Mistake("15-attention", "forbidden-call", "return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)",
            (attention_unseen,), story="calls F.scaled_dot_product_attention under torch._C.DisableTorchFunction()"),
    Mistake("15-attention", "forbidden-call", "torch._scaled_dot_product_attention_math", (attention_math,),
            story="calls the math fallback of scaled_dot_product_attention, a private name for the same thing"),
    Mistake("15-attention", "wrong-shape", "the attention weights too", (attention_using(with_weights=True),),
            story="returns (output, weights) like nn.MultiheadAttention"),
    Mistake("15-attention", "wrong-dtype", "torch.float64 tensor", (attention_float64,),
            story="upcasts q, k and v to float64 for accuracy and returns the float64 result"),
    Mistake("15-attention", "wrong-dtype", "computed in float32 (an upcast", (attention_upcast,),
            story="q.float(), k.float(), v.float() for accuracy; the float32 output returned for bfloat16 inputs"),
    Mistake("15-attention", "wrong-scale", "not scaled", (attention_using(scale="none"),),
            story="forgets the 1/sqrt(d)"),
    Mistake("15-attention", "wrong-scale", "number of keys", (attention_scaled_by_keys,),
            story="math.sqrt(k.shape[-2]): the sequence length instead of the head dimension"),
    Mistake("15-attention", "padding-not-masked", "after the softmax", (attention_mask_after_softmax,),
            story="multiplies the attention weights by the mask after the softmax"),
    Mistake("15-attention", "wrong-scale", "not by its square root", (attention_using(scale="d"),),
            story="divides by d"),
    Mistake("15-attention", "wrong-value", "over the queries", (attention_using(softmax_dim=-2),),
            story="softmax(dim=-2)"),
    Mistake("15-attention", "padding-not-masked", "padding mask was not applied", (attention_using(use_mask=False),),
            story="never uses mask"),
    Mistake("15-attention", "padding-not-masked", "inverted", (attention_using(invert=True),),
            story="treats mask as True = padding (nn.MultiheadAttention's convention)"),
    Mistake("15-attention", "padding-not-masked", "not -inf", (attention_using(fill="zero"),),
            story="masked_fill(..., 0): blocked keys keep weight"),
    Mistake("15-attention", "padding-not-masked", "queries' axis", (attention_using(spread="queries"),),
            story="mask[:, None, :, None]: blocks the padded queries' rows instead of the padded keys"),
    Mistake("15-attention", "padding-not-masked", "queries' axis", (attention_using(spread="queries", fill="large"),),
            story="the mask on the queries' axis with -1e9: no NaN, the padded rows just turn uniform"),
    Mistake("15-attention", "padding-not-masked", "lines its batch axis up with the heads",
            (attention_using(spread="3-d"),), story="mask[:, None, :], one None short: batch broadcast onto heads"),
    Mistake("15-attention", "padding-not-masked", "if/elif", (attention_using(only_one=True),),
            story="applies the causal mask or the padding mask, not both"),
    Mistake("15-attention", "causal-not-masked", "diagonal was blocked", (attention_using(causal_diagonal=0),),
            story="triu(diagonal=0): a query cannot see itself"),
    Mistake("15-attention", "causal-not-masked", "lets query i attend to key i + 1", (attention_sees_next,),
            story="tril(diagonal=1) for the allowed keys: each position sees the next one too"),
    Mistake("15-attention", "causal-not-masked", "mask is flipped", (attention_using(flip_causal=True),),
            story="tril instead of triu: queries see the future"),
    Mistake("15-attention", "padding-not-masked", "inverted", solution_cell(
        "def attention(q, k, v, mask=None, causal=False):\n"
        "    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
        "    if causal:\n"
        "        scores = scores.masked_fill(torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1), float('-inf'))\n"
        "    if mask is not None:\n"
        "        scores = scores.masked_fill(mask[:, None, None, :], float('-inf'))\n"
        "    return scores.softmax(dim=-1) @ v\n",
        "attention", given=NOTEBOOK),
        story="the mask is read as True = padding (nn.MultiheadAttention's key_padding_mask convention)", planted=True),
    # 15-warmup
    Mistake("15-warmup", "not-a-number", "torch.tensor", (factor_tensor,),
            story="returns torch.tensor(factor)"),
    Mistake("15-warmup", "zero-first-step", "learning rate 0", (factor_from_zero,),
            story="step / warmup_steps: the first step does nothing"),
    Mistake("15-warmup", "wrong-warmup", "another slope", (factor_slow_ramp,),
            story="(step + 1) / (warmup_steps + 1): never reaches 1 during warm-up"),
    Mistake("15-warmup", "wrong-decay", "cosine", (factor_cosine,),
            story="copies the cosine schedule from a tutorial"),
    Mistake("15-warmup", "wrong-decay", "counts from step 0", (factor_decay_over_total,),
            story="decays over total_steps, ignoring the warm-up offset"),
    Mistake("15-warmup", "wrong-decay", "the decay runs one step early", (factor_decay_early,),
            story="(total - step - 1) in the decay: below 1 right after the warm-up"),
    Mistake("15-warmup", "wrong-decay", "stays at 1", (factor_no_decay,),
            story="warm-up only: forgets the decay after it"),
    Mistake("15-warmup", "negative-after-end", "clamp it at 0", (factor_unclamped,),
            story="no max(0, ...): negative learning rates after total_steps"),
    Mistake("15-warmup", "no-warmup-case", "ZeroDivisionError", (factor_divides_always,),
            story="min of the ramp and the decay, the ramp dividing by warmup_steps every time"),
    Mistake("15-warmup", "negative-after-end", "clamp it at 0", solution_cell(
        "def lr_factor(step, warmup_steps, total_steps):\n"
        "    if step < warmup_steps:\n"
        "        return (step + 1) / warmup_steps\n"
        "    return (total_steps - step) / (total_steps - warmup_steps)\n",
        "lr_factor"),
        story="no clamp: the linear decay goes negative after total_steps", planted=True),
    # 15-smoothed-loss
    Mistake("15-smoothed-loss", "forbidden-call", "cross_entropy", (smoothed_calls_cross_entropy,),
            story="calls F.cross_entropy(label_smoothing=...)"),
    Mistake("15-smoothed-loss", "forbidden-call", "F.cross_entropy", (smoothed_cross_entropy_unseen,),
            story="calls F.cross_entropy(label_smoothing=...) under torch._C.DisableTorchFunction()"),
    Mistake("15-smoothed-loss", "forbidden-call", "nll_loss", (smoothed_nll,),
            story="uses F.nll_loss for the target term"),
    Mistake("15-smoothed-loss", "forbidden-call", "numpy", (smoothed_numpy,),
            story="computes the loss in numpy after .detach()"),
    Mistake("15-smoothed-loss", "wrong-value", "C - 1 other classes", (smoothed_other_classes,),
            story="spreads eps over the other classes (the paper's wording, not PyTorch's)"),
    Mistake("15-smoothed-loss", "wrong-value", "target's own share", (smoothed_target_share_missing,),
            story="sets the target's weight to 1 - eps instead of adding it to eps / C"),
    Mistake("15-smoothed-loss", "wrong-value", "smoothing is missing", (smoothed_no_smoothing,),
            story="ignores smoothing"),
    Mistake("15-smoothed-loss", "wrong-value", "sums -log p over the classes instead of averaging",
            (smoothed_uniform_summed,), story="log_probs.sum(-1) for the uniform term"),
    Mistake("15-smoothed-loss", "wrong-value", "sum over the batch", (smoothed_sum,),
            story="sums over the batch"),
    Mistake("15-smoothed-loss", "not-stable", "log of a softmax", (smoothed_softmax_log,),
            story="softmax(...).log()"),
    Mistake("15-smoothed-loss", "not-stable", "log of a softmax", (smoothed_no_max,),
            story="logsumexp by hand without subtracting the max"),
    Mistake("15-smoothed-loss", "wrong-dtype", "as F.cross_entropy returns", (smoothed_float64,),
            story="log_softmax in float64 for stability, never cast back"),
    Mistake("15-smoothed-loss", "wrong-dtype", "computed in float32 (an upcast", (smoothed_upcast,),
            story="logits.float() for a stable loss, the float32 result returned for bfloat16 logits"),
    Mistake("15-smoothed-loss", "not-a-scalar", "without .mean()", (smoothed_per_example,),
            story="returns the per-example losses"),
    Mistake("15-smoothed-loss", "no-gradient", "no gradient path", (smoothed_item,),
            story="torch.tensor(loss.item())"),
    Mistake("15-smoothed-loss", "no-gradient", "differs from F.cross_entropy's", (smoothed_detached_term,),
            story="detaches the smoothing term"),
    Mistake("15-smoothed-loss", "not-stable", "log of a softmax", solution_cell(
        "def smoothed_cross_entropy(logits, targets, smoothing):\n"
        "    log_probs = logits.softmax(dim=-1).log()\n"
        "    nll = -log_probs.gather(1, targets[:, None]).squeeze(1)\n"
        "    return ((1 - smoothing) * nll - smoothing * log_probs.mean(dim=-1)).mean()\n",
        "smoothed_cross_entropy"),
        story="softmax then log: log(0) = -inf for logits in the hundreds", planted=True),
]

CORRECT = [
    Correct("15-pad-collate", (collate_solution,), story="pad_sequence and a mask from arange < lengths"),
    Correct("15-pad-collate", (collate_loop,), story="new_full and a loop that fills both"),
    Correct("15-pad-collate", (collate_cat,), story="each row concatenated with its padding, stacked"),
    Correct("15-masked-loss", (loss_ignore_index,), story="ignore_index on a masked_fill copy"),
    Correct("15-masked-loss", (loss_weighted,), story="weighted sum divided by the weights' sum"),
    Correct("15-masked-loss", (loss_transposed,), story="cross_entropy on (batch, classes, time), masked_select"),
    Correct("15-masked-loss", (loss_where_count,), story="log_softmax, torch.where and a sum over mask.sum()"),
    Correct("15-attention", (attention_using(),), story="boolean blocked mask with masked_fill"),
    Correct("15-attention", (attention_additive,), story="additive -inf bias and einsum"),
    Correct("15-attention", (attention_large_negative,), story="-1e9 fill, q scaled first"),
    Correct("15-attention", (attention_upcast_cast_back,), story="float32 inside, cast back to q's dtype"),
    Correct("15-warmup", (factor_piecewise,), story="piecewise, one minus the share of the decay done"),
    Correct("15-warmup", (factor_min_max,), story="min of ramp and clamped decay"),
    Correct("15-warmup", (WarmupThenLinear(),), story="a callable object, the decay's remaining steps"),
    Correct("15-smoothed-loss", (smoothed_solution,), story="log_softmax, gather and the uniform term"),
    Correct("15-smoothed-loss", (smoothed_distribution,), story="the smoothed distribution with logsumexp"),
    Correct("15-smoothed-loss", (smoothed_one_hot,), story="one_hot mixed with uniform, F.log_softmax"),
    Correct("15-smoothed-loss", (smoothed_upcast_cast_back,), story="float32 inside, cast back to the logits' dtype"),
]


def test_a_numpy_loss_without_detach_is_reported_with_its_error():
    def numpy_loss(logits, targets, smoothing):
        return torch.tensor(float(logits.numpy().mean()))

    assert_check_fails("15-smoothed-loss", numpy_loss, code="raised", phrase="numpy")


@pytest.mark.parametrize("task, answer", [("15-pad-collate", collate_solution), ("15-masked-loss", loss_weighted),
                                          ("15-attention", attention_additive), ("15-warmup", factor_piecewise),
                                          ("15-smoothed-loss", smoothed_solution)])
def test_shortened_observations_are_refused(task, answer):
    assert_forgeries_refused(task, answer, case=Case(hidden=True, seed=11))
