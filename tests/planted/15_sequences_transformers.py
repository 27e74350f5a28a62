"""Planted bugs in 15_sequences_transformers: each replaces one solution cell; the pipeline test expects that exercise
alone to fail."""

PLANTED = {
    "15-pad-collate": (
        # the mask is computed from the values: a real token equal to pad_value is marked as padding
        "def pad_collate(sequences, pad_value):\n"
        "    padded = nn.utils.rnn.pad_sequence(sequences, batch_first=True, padding_value=pad_value)\n"
        "    return padded, padded != pad_value\n",
        "wrong-mask",
    ),
    "15-masked-loss": (
        # the padded losses are zeroed but the mean still divides by every position
        "def masked_cross_entropy(logits, targets, mask):\n"
        "    per_token = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction='none')\n"
        "    return (per_token * mask.flatten()).mean()\n",
        "padding-counted",
    ),
    "15-attention": (
        # the mask is read as True = padding (nn.MultiheadAttention's key_padding_mask convention)
        "def attention(q, k, v, mask=None, causal=False):\n"
        "    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
        "    if causal:\n"
        "        scores = scores.masked_fill(torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1), float('-inf'))\n"
        "    if mask is not None:\n"
        "        scores = scores.masked_fill(mask[:, None, None, :], float('-inf'))\n"
        "    return scores.softmax(dim=-1) @ v\n",
        "padding-not-masked",
    ),
    "15-warmup": (
        # no clamp: the linear decay goes negative after total_steps
        "def lr_factor(step, warmup_steps, total_steps):\n"
        "    if step < warmup_steps:\n"
        "        return (step + 1) / warmup_steps\n"
        "    return (total_steps - step) / (total_steps - warmup_steps)\n",
        "negative-after-end",
    ),
    "15-smoothed-loss": (
        # softmax then log: log(0) = -inf for logits in the hundreds
        "def smoothed_cross_entropy(logits, targets, smoothing):\n"
        "    log_probs = logits.softmax(dim=-1).log()\n"
        "    nll = -log_probs.gather(1, targets[:, None]).squeeze(1)\n"
        "    return ((1 - smoothing) * nll - smoothing * log_probs.mean(dim=-1)).mean()\n",
        "not-stable",
    ),
}
