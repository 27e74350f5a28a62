"""Sequences for lesson 15: a toy language generated offline, padding helpers, and two small language models
(a causal transformer and an LSTM) with the training loop the lesson compares them with.

The toy language is modular arithmetic progressions: a sequence starts at a random token and keeps adding a
random step, modulo the vocabulary (`progressions`). Its first two tokens are random; every later token
follows from the two before it, so a causal language model can learn to predict all but the first two.
Sequences have different lengths: a batch is padded (`pad_batch`) and the loss ignores the padding.

Conventions, one for the whole lesson: token 0 is padding (`PAD`), and a *mask* is a bool tensor that is
True at real tokens. PyTorch's `nn.TransformerEncoder` and `nn.MultiheadAttention` take the opposite, a
`key_padding_mask` that is True at *padding*: the models here pass `~mask`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F
from torch.optim.lr_scheduler import CosineAnnealingLR, LinearLR, SequentialLR

PAD = 0
IGNORE_INDEX = -100  # F.cross_entropy's default ignore_index


def progressions(n: int, *, vocab_size: int = 17, min_len: int = 5, max_len: int = 16,
                 seed: int = 0) -> list[torch.Tensor]:
    """`n` sequences of the toy language: arithmetic progressions modulo `vocab_size - 1`, of random lengths.

    Token t (1 to vocab_size - 1) stands for the number t - 1; a sequence is start, start + step,
    start + 2 step, ... (mod vocab_size - 1), with start and step (step >= 1) drawn at random. Token 0 is
    `PAD` and never appears in a sequence.

    Args:
        n: number of sequences.
        vocab_size: size of the vocabulary, padding included (at least 3).
        min_len: shortest length (at least 2).
        max_len: longest length (at least min_len).
        seed: the seed of the sequences' own generator (the global RNG is not used).

    Returns:
        A list of `n` 1-D int64 tensors.

    Raises:
        ValueError: an argument is out of range.
    """
    if n < 1 or vocab_size < 3 or min_len < 2 or max_len < min_len:
        raise ValueError(f"progressions(n={n}, vocab_size={vocab_size}, min_len={min_len}, max_len={max_len}): "
                         "need n >= 1, vocab_size >= 3 and 2 <= min_len <= max_len.")
    modulus = vocab_size - 1
    generator = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, modulus, (n,), generator=generator)
    steps = torch.randint(1, modulus, (n,), generator=generator)
    lengths = torch.randint(min_len, max_len + 1, (n,), generator=generator)
    positions = torch.arange(max_len)
    tokens = 1 + (starts[:, None] + steps[:, None] * positions) % modulus  # (n, max_len)
    return [row[:length] for row, length in zip(tokens, lengths.tolist(), strict=True)]


def pad_batch(sequences: Sequence[torch.Tensor], pad_value: float = PAD) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad 1-D sequences into one batch-first tensor, with the mask of real tokens.

    Args:
        sequences: 1-D tensors of one dtype, of any lengths (at least one sequence).
        pad_value: the value of padded positions.

    Returns:
        (padded, mask): padded is (batch, longest length) with the sequences' dtype; mask is bool, same shape,
        True at real tokens. The mask comes from the lengths, never from comparing values with `pad_value`
        (a real token may equal it).
    """
    if not sequences:
        raise ValueError("pad_batch needs at least one sequence")
    lengths = torch.tensor([len(s) for s in sequences], device=sequences[0].device)
    padded = nn.utils.rnn.pad_sequence(list(sequences), batch_first=True, padding_value=pad_value)
    mask = torch.arange(padded.shape[1], device=padded.device) < lengths[:, None]
    return padded, mask


def lm_batch(sequences: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inputs and targets for next-token prediction on a padded batch, with their masks of real tokens.

    Returns:
        (inputs, input_mask, targets, target_mask), each (batch, longest length - 1): inputs are the tokens but
        the last, targets the tokens shifted by one; each mask is True where its tensor holds a real token.
    """
    padded, mask = pad_batch(sequences, PAD)
    return padded[:, :-1], mask[:, :-1], padded[:, 1:], mask[:, 1:]


def causal_mask(size: int, device: torch.device | str | None = None) -> torch.Tensor:
    """The (size, size) bool mask of future positions, True where query i must NOT see key j (j > i).

    This is the convention of `nn.TransformerEncoder`'s `mask` and `nn.MultiheadAttention`'s `attn_mask`
    (True = blocked); `F.scaled_dot_product_attention` takes the opposite (True = may attend).
    """
    return torch.ones(size, size, dtype=torch.bool, device=device).triu(diagonal=1)


def sinusoidal_positions(length: int, dim: int) -> torch.Tensor:
    """The sinusoidal positional encoding of "Attention is all you need": a (length, dim) float32 tensor.

    Column 2i holds sin(pos / 10000^(2i/dim)) and column 2i+1 cos(pos / 10000^(2i/dim)): each pair of columns
    turns at its own frequency, from one turn per 2*pi positions down to one per 10000 * 2*pi.

    Raises:
        ValueError: `dim` is odd.
    """
    if dim % 2:
        raise ValueError(f"sinusoidal_positions: dim must be even, got {dim}")
    position = torch.arange(length, dtype=torch.float32)[:, None]  # (length, 1)
    frequency = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))  # (dim/2,)
    encoding = torch.zeros(length, dim)
    encoding[:, 0::2] = torch.sin(position * frequency)
    encoding[:, 1::2] = torch.cos(position * frequency)
    return encoding


class TinyTransformerLM(nn.Module):
    """A causal transformer language model: token embedding + sinusoidal positions -> pre-norm encoder -> logits.

    `forward(tokens, mask)` takes tokens (batch, time) and the mask of real tokens (True = real) and returns
    logits (batch, time, vocab). Position t sees positions 0..t only (the causal mask).
    """

    def __init__(self, vocab_size: int = 17, dim: int = 32, heads: int = 4, layers: int = 2,
                 max_len: int = 512, dropout: float = 0.0) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=PAD)
        self.register_buffer("positions", sinusoidal_positions(max_len, dim), persistent=False)
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=4 * dim, dropout=dropout,
                                           batch_first=True, norm_first=True)
        # enable_nested_tensor only helps inference without norm_first; off, it warns about neither
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab_size)

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        time = tokens.shape[1]
        x = self.embed(tokens) * math.sqrt(self.embed.embedding_dim) + self.positions[:time]  # (batch, time, dim)
        x = self.encoder(x, mask=causal_mask(time, tokens.device), src_key_padding_mask=~mask,
                         is_causal=True)  # PyTorch's masks are True where attention is blocked
        return self.head(self.norm(x))  # (batch, time, vocab)


class LSTMLM(nn.Module):
    """An LSTM language model with the same interface as `TinyTransformerLM` (the mask is not needed: an LSTM
    reads left to right, so padding at the end never reaches a real position's output)."""

    def __init__(self, vocab_size: int = 17, dim: int = 32, hidden: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=PAD)
        self.lstm = nn.LSTM(dim, hidden, batch_first=True)
        self.head = nn.Linear(hidden, vocab_size)

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        out, _ = self.lstm(self.embed(tokens))  # (batch, time, hidden)
        return self.head(out)  # (batch, time, vocab)


def decay_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW parameter groups: weight decay on the weight matrices of linear, attention and recurrent layers;
    none on biases, normalisation weights and embeddings (decaying them only pulls useful scales towards 0).

    Returns:
        [{"params": decayed, "weight_decay": weight_decay}, {"params": others, "weight_decay": 0.0}]
    """
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    decayed, others = [], []
    for parameter in model.parameters():
        if not parameter.requires_grad:
            continue
        (decayed if parameter.ndim >= 2 and id(parameter) not in embeddings else others).append(parameter)
    return [{"params": decayed, "weight_decay": weight_decay}, {"params": others, "weight_decay": 0.0}]


def train_lm(model: nn.Module, sequences: Sequence[torch.Tensor], *, steps: int, batch_size: int = 64,
             lr: float = 3e-3, warmup_steps: int = 0, weight_decay: float = 0.01, label_smoothing: float = 0.0,
             max_norm: float | None = 1.0, seed: int = 0,
             device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """Train a language model (`model(tokens, mask) -> logits`) on next-token prediction, padding ignored.

    AdamW on `decay_groups`; a warm-up then cosine schedule, stepped once per optimizer step (torch's own
    `LinearLR` from lr / warmup_steps up to lr at step warmup_steps - 1, then `CosineAnnealingLR` down to 0 at
    `steps`: the course's convention, lesson 07); gradient clipping at `max_norm` (None: none), label
    smoothing in the loss; batches drawn with a seeded generator. The model is moved to `device` before the
    optimizer is built. Losses stay on the device during training (no sync per step).

    Returns:
        {"loss": (steps,) training losses on the CPU, "lr": (steps,) learning rates used}.
    """
    model.to(device).train()
    optimizer = torch.optim.AdamW(decay_groups(model, weight_decay), lr=lr)
    warmup = LinearLR(optimizer, start_factor=1 / max(1, warmup_steps), total_iters=max(0, warmup_steps - 1))
    cosine = CosineAnnealingLR(optimizer, T_max=max(1, steps - warmup_steps))
    scheduler = SequentialLR(optimizer, [warmup, cosine], milestones=[warmup_steps])
    generator = torch.Generator().manual_seed(seed)
    losses, rates = [], []
    for _ in range(steps):
        index = torch.randint(0, len(sequences), (batch_size,), generator=generator).tolist()
        inputs, input_mask, targets, mask = (t.to(device) for t in lm_batch([sequences[i] for i in index]))
        logits = model(inputs, input_mask)  # (batch, time, vocab)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.masked_fill(~mask, IGNORE_INDEX).flatten(),
                               ignore_index=IGNORE_INDEX, label_smoothing=label_smoothing)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if max_norm is not None:
            nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
        rates.append(scheduler.get_last_lr()[0])
        scheduler.step()
        losses.append(loss.detach())
    return {"loss": torch.stack(losses).cpu(), "lr": torch.tensor(rates)}


@torch.no_grad()
def next_token_accuracy(model: nn.Module, sequences: Sequence[torch.Tensor], *, skip: int = 2,
                        device: torch.device | str = "cpu") -> float:
    """The share of predictable next tokens the model gets right (targets from position `skip` on; in the toy
    language the first two tokens are random), in eval mode. The model's mode is restored after."""
    was_training = model.training
    model.eval()
    inputs, input_mask, targets, mask = (t.to(device) for t in lm_batch(sequences))
    predicted = model(inputs, input_mask).argmax(dim=-1)
    counted = mask.clone()
    counted[:, : max(0, skip - 1)] = False  # target j is token j + 1
    correct = ((predicted == targets) & counted).sum() / counted.sum()
    model.train(was_training)
    return float(correct)
