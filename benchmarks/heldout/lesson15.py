"""Lesson 15 held-out entries (written from the exercise text only)."""

from entry import Entry

PRELUDE = '''
import math
import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils.rnn import pad_sequence
from harness.checks import check, hint
from harness.env import select_device
from harness.repro import seed_everything
seed_everything(0)
device = select_device()
'''

PC = "def pad_collate(sequences, pad_value):\n"
ML = "def masked_cross_entropy(logits, targets, mask):\n"
AT = "def attention(q, k, v, mask=None, causal=False):\n"
LF = "def lr_factor(step, warmup_steps, total_steps):\n"
SC = "def smoothed_cross_entropy(logits, targets, smoothing):\n"


def attn(scores: str = "q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])", tril: str = "allowed.tril()",
         key_mask: str = "mask[:, None, None, :]", fill: str = 'float("-inf")', dim: str = "-1",
         tail: str = "") -> str:
    """The solution's attention with one piece varied."""
    return AT + f'''
    scores = {scores}
    allowed = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device)
    if causal:
        allowed = {tril}
    if mask is not None:
        allowed = allowed & {key_mask}
    out = scores.masked_fill(~allowed, {fill}).softmax(dim={dim}) @ v
    return out{tail}
'''


ENTRIES = [
    Entry("15-pad-collate", "mistake", "mask from the values",
          "mask = padded != pad_value: a real token equal to the pad value is called padding", PC + '''
    padded = pad_sequence(sequences, batch_first=True, padding_value=pad_value)
    return padded, padded != pad_value
''', ("pad_collate",)),
    Entry("15-pad-collate", "mistake", "torch.full without dtype",
          "padded takes the pad value's default dtype (float32 or int64), not the sequences' dtype", PC + '''
    longest = max(len(s) for s in sequences)
    padded = torch.full((len(sequences), longest), pad_value)
    mask = torch.zeros(len(sequences), longest, dtype=torch.bool)
    for i, s in enumerate(sequences):
        padded[i, :len(s)] = s
        mask[i, :len(s)] = True
    return padded, mask
''', ("pad_collate",)),
    Entry("15-pad-collate", "mistake", "sorted by length first",
          "the rows are sorted longest first: row i is not sequence i", PC + '''
    sequences = sorted(sequences, key=len, reverse=True)
    lengths = torch.tensor([len(s) for s in sequences])
    padded = pad_sequence(sequences, batch_first=True, padding_value=pad_value)
    return padded, torch.arange(padded.shape[1]) < lengths[:, None]
''', ("pad_collate",)),
    Entry("15-pad-collate", "mistake", "pad_sequence's default padding",
          "padding_value not passed: pads with 0 instead of pad_value", PC + '''
    lengths = torch.tensor([len(s) for s in sequences])
    padded = pad_sequence(sequences, batch_first=True)
    return padded, torch.arange(padded.shape[1]) < lengths[:, None]
''', ("pad_collate",)),
    Entry("15-masked-loss", "mistake", "multiplied by the mask and took the mean",
          "divides by all positions (padding included) instead of the number of real tokens", ML + '''
    per = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    return (per * mask).mean()
''', ("masked_cross_entropy",)),
    Entry("15-masked-loss", "mistake", "wrote ignore_index into the targets",
          "targets[~mask] = -100 modifies the caller's targets in place", ML + '''
    targets[~mask] = -100
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
''', ("masked_cross_entropy",)),
    Entry("15-masked-loss", "mistake", "padding found from target 0",
          "mask rebuilt as targets != 0: real tokens of class 0 are dropped", ML + '''
    real = targets != 0
    per = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
    return per[real.flatten()].mean()
''', ("masked_cross_entropy",)),
    Entry("15-masked-loss", "mistake", "mean per sequence, then mean over the batch",
          "mean of per-sequence means: short sequences' tokens weigh more", ML + '''
    per = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none") * mask
    return (per.sum(1) / mask.sum(1)).mean()
''', ("masked_cross_entropy",)),
    Entry("15-masked-loss", "mistake", "upcast to float32 for accuracy",
          "the loss is computed and returned in float32 for low-precision logits (not the logits' dtype)", ML + '''
    per = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none")
    return per[mask.flatten()].mean()
''', ("masked_cross_entropy",)),
    Entry("15-attention", "mistake", "padding mask on the queries",
          "mask[:, None, :, None] masks query rows, not keys", attn(key_mask="mask[:, None, :, None]"),
          ("attention",)),
    Entry("15-attention", "mistake", "tril(diagonal=1)",
          "the causal mask lets query i see key i + 1", attn(tril="allowed.tril(diagonal=1)"), ("attention",)),
    Entry("15-attention", "mistake", "scaled by d",
          "divides the scores by d instead of sqrt(d)", attn(scores="q @ k.transpose(-2, -1) / q.shape[-1]"),
          ("attention",)),
    Entry("15-attention", "mistake", "softmax over dim=-2",
          "softmax over the queries instead of the keys", attn(dim="-2"), ("attention",)),
    Entry("15-attention", "mistake", "masked_fill with 0",
          "masked scores set to 0, not -inf: masked keys still get weight", attn(fill="0.0"), ("attention",)),
    Entry("15-attention", "mistake", "scores upcast to float32",
          "computes in float32 and returns float32 for half/bf16 inputs (not q's dtype)",
          attn(scores="q.float() @ k.float().transpose(-2, -1) / math.sqrt(q.shape[-1])").replace(
              "@ v\n", "@ v.float()\n"), ("attention",)),
    Entry("15-warmup", "mistake", "ramp step / warmup_steps",
          "off-by-one: the first step has factor 0", LF + '''
    if step < warmup_steps:
        return step / warmup_steps
    return max(0.0, (total_steps - step) / (total_steps - warmup_steps))
''', ("lr_factor",)),
    Entry("15-warmup", "mistake", "no floor at 0",
          "after total_steps the factor goes negative", LF + '''
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return (total_steps - step) / (total_steps - warmup_steps)
''', ("lr_factor",)),
    Entry("15-warmup", "mistake", "decay measured from step 0",
          "the decay is (total - step) / total: it does not start at 1 at the end of warm-up", LF + '''
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return max(0.0, (total_steps - step) / total_steps)
''', ("lr_factor",)),
    Entry("15-warmup", "mistake", "decay one step early",
          "off-by-one in the decay: (total - step - 1): below 1 at step warmup_steps", LF + '''
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return max(0.0, (total_steps - step - 1) / (total_steps - warmup_steps))
''', ("lr_factor",)),
    Entry("15-smoothed-loss", "mistake", "log of softmax",
          "log(softmax) underflows to log(0) = -inf for logits in the hundreds", SC + '''
    log_probs = torch.log(torch.softmax(logits, dim=-1))
    nll = -log_probs.gather(1, targets[:, None]).squeeze(1)
    return ((1 - smoothing) * nll - smoothing * log_probs.mean(-1)).mean()
''', ("smoothed_cross_entropy",)),
    Entry("15-smoothed-loss", "mistake", "smoothing spread over the other C - 1 classes",
          "target distribution 1 - eps on the true class and eps/(C-1) elsewhere: not PyTorch's", SC + '''
    log_probs = logits.log_softmax(-1)
    c = logits.shape[-1]
    target = torch.full_like(log_probs, smoothing / (c - 1))
    target.scatter_(1, targets[:, None], 1 - smoothing)
    return -(target * log_probs).sum(-1).mean()
''', ("smoothed_cross_entropy",)),
    Entry("15-smoothed-loss", "mistake", "sum over classes for the uniform term",
          "the smoothing term sums -log p over classes instead of averaging", SC + '''
    log_probs = logits.log_softmax(-1)
    nll = -log_probs.gather(1, targets[:, None]).squeeze(1)
    return ((1 - smoothing) * nll - smoothing * log_probs.sum(-1)).mean()
''', ("smoothed_cross_entropy",)),
    Entry("15-smoothed-loss", "mistake", "computed in float64 for safety",
          "returns float64 instead of the logits' dtype", SC + '''
    log_probs = logits.double().log_softmax(-1)
    nll = -log_probs.gather(1, targets[:, None]).squeeze(1)
    return ((1 - smoothing) * nll - smoothing * log_probs.mean(-1)).mean()
''', ("smoothed_cross_entropy",)),
    Entry("15-pad-collate", "correct", "new_full and a lengths comparison", "", PC + '''
    lengths = torch.as_tensor([s.numel() for s in sequences])
    out = sequences[0].new_full((len(sequences), int(lengths.max())), pad_value)
    for row, s in zip(out, sequences):
        row[: s.numel()].copy_(s)
    return out, torch.arange(out.size(1)).expand(len(sequences), -1) < lengths.unsqueeze(1)
''', ("pad_collate",)),
    Entry("15-masked-loss", "correct", "torch.where and a sum over the count", "", ML + '''
    lp = logits.log_softmax(-1)
    safe = torch.where(mask, targets, torch.zeros_like(targets))
    nll = -lp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    return torch.where(mask, nll, torch.zeros_like(nll)).sum() / mask.sum()
''', ("masked_cross_entropy",)),
    Entry("15-attention", "correct", "einsum with an additive float mask", "", AT + '''
    d = q.size(-1)
    s = torch.einsum("bhqd,bhkd->bhqk", q, k) * d ** -0.5
    block = torch.zeros(s.shape[-2:], dtype=torch.bool, device=q.device)
    if causal:
        block = torch.ones_like(block).triu(1)
    if mask is not None:
        block = block | ~mask[:, None, None, :]
    w = s.masked_fill(block, float("-inf")).softmax(-1)
    return torch.einsum("bhqk,bhkd->bhqd", w, v)
''', ("attention",)),
    Entry("15-warmup", "correct", "min/max expression", "", LF + '''
    ramp = (step + 1) / warmup_steps if warmup_steps else 1.0
    decay = (total_steps - step) / max(total_steps - warmup_steps, 1)
    return max(0.0, min(ramp, decay, 1.0)) if step >= warmup_steps else ramp
''', ("lr_factor",)),
    Entry("15-smoothed-loss", "correct", "logits minus logsumexp", "", SC + '''
    lp = logits - logits.logsumexp(dim=1, keepdim=True)
    true = lp[torch.arange(len(targets)), targets]
    return -((1 - smoothing) * true + smoothing * lp.mean(dim=1)).mean()
''', ("smoothed_cross_entropy",)),
]
