"""Drills on sequences: padding and lengths, masked losses, attention masks, attention by hand, positional
encodings, custom losses that keep autograd, label smoothing, packed LSTMs, and warm-up for Transformers.

Self-contained: every input is built here from the case's seed, by the probe and the judge alike.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

from harness.contract.case import Case
from harness.contract.forbidden import CallRecorder
from harness.drills.core import Drill, add
from harness.drills.support import case_generator, explain


def _lengths(gen: torch.Generator, batch: int, longest: int) -> torch.Tensor:
    """Unsorted lengths in [1, longest], with one sequence of full length and one of length 1."""
    lengths = torch.randint(1, longest + 1, (batch,), generator=gen)
    lengths[int(torch.randint(0, batch, (1,), generator=gen))] = longest
    lengths[(int(lengths.argmax()) + 1) % batch] = 1
    return lengths


def valid_mask(lengths: torch.Tensor, steps: int) -> torch.Tensor:
    """(B, T) bool: True at the real (not padded) positions."""
    return torch.arange(steps)[None, :] < lengths[:, None]


# --- padding collate ------------------------------------------------------------------------------------------

def padding_collate_batches(case: Case) -> tuple[int, list[list[tuple[torch.Tensor, int]]]]:
    """The pad value and batches of (token ids, label) whose longest sequence is longer than the batch."""
    gen = case_generator(case, 0)
    pad = int(torch.randint(50, 100, (1,), generator=gen))
    batches = []
    for size in (4, 3, 6):
        lengths = _lengths(gen, size, int(torch.randint(7, 12, (1,), generator=gen)))  # longest > batch size
        batches.append([(torch.randint(0, 50, (int(n),), generator=gen), int(torch.randint(0, 5, (1,), generator=gen)))
                        for n in lengths])
    return pad, batches


def _probe_padding_collate(answer: dict, *, case: Case) -> dict:
    pad, batches = padding_collate_batches(case)
    return {"outputs": [answer["collate"](batch, pad) for batch in batches]}


add(
    Drill(
        id="sequences-pad-collate",
        title="A padding collate_fn with lengths",
        kind="write",
        topics=("sequences", "data"),
        difficulty=1,
        prompt="collate(batch, pad_value) gets a list of (tokens, label): tokens an int64 tensor of shape (L_i,), "
        "label an int. Return (padded, lengths, labels): padded (batch, max L_i) filled with pad_value after each "
        "sequence, lengths an int64 tensor of the L_i, labels an int64 tensor, all in the batch's order.",
        entry="collate",
        starter="import torch\n\n\ndef collate(batch, pad_value):\n    raise NotImplementedError\n",
        hints=("torch.nn.utils.rnn.pad_sequence does the padding; check its defaults for the layout and the value.",
               "pad_sequence(tokens, batch_first=True, padding_value=pad_value); lengths from len(t) before padding."),
        probe=_probe_padding_collate,
    )
)


# --- masked mean loss ---------------------------------------------------------------------------------------

def masked_loss_inputs(case: Case) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Two (logits, targets, lengths), padding holding real class ids too."""
    out = []
    for base, (batch, steps, classes) in enumerate(((4, 7, 5), (3, 5, 3))):
        gen = case_generator(case, 10 + base)
        logits = torch.randn(batch, steps, classes, generator=gen) * 2
        targets = torch.randint(0, classes, (batch, steps), generator=gen)  # padding holds real class ids too
        out.append((logits, targets, _lengths(gen, batch, steps)))
    return out


def _probe_masked_loss(answer: dict, *, case: Case) -> dict:
    results = []
    for logits, targets, lengths in masked_loss_inputs(case):
        logits = logits.clone().requires_grad_(True)
        loss = answer["masked_cross_entropy"](logits, targets, lengths)
        tracked = isinstance(loss, torch.Tensor) and loss.requires_grad
        if tracked:
            loss.backward()
        results.append({"loss": loss, "tracked": tracked, "grad": logits.grad})
    return {"results": results}


add(
    Drill(
        id="sequences-masked-loss",
        title="Cross-entropy that ignores padding",
        kind="write",
        topics=("sequences", "loop"),
        difficulty=2,
        prompt="masked_cross_entropy(logits, targets, lengths): logits (B, T, C), targets (B, T) int64, lengths "
        "(B,). Positions t >= lengths[b] are padding and hold arbitrary targets. Return the mean cross-entropy over "
        "the real tokens only (one mean over all real tokens of the batch), differentiable wrt logits.",
        entry="masked_cross_entropy",
        starter="import torch\nimport torch.nn.functional as F\n\n\ndef masked_cross_entropy(logits, targets, "
        "lengths):\n    raise NotImplementedError\n",
        hints=("Build a (B, T) mask of real positions from lengths. F.cross_entropy expects the classes in dim 1.",
               "Set padded targets to -100 (ignore_index) and call F.cross_entropy(logits.transpose(1, 2), targets); "
               "or sum the masked per-token loss and divide by mask.sum()."),
        probe=_probe_masked_loss,
    )
)


# --- causal + key-padding mask ----------------------------------------------------------------------------------

def mask_inputs(case: Case) -> list[tuple[torch.Tensor, int]]:
    """(lengths, steps) of three batches, one of a single step."""
    out = []
    for base, (batch, steps) in enumerate(((3, 6), (4, 5), (2, 1))):
        out.append((_lengths(case_generator(case, 20 + base), batch, steps), steps))
    return out


def _probe_attention_mask(answer: dict, *, case: Case) -> dict:
    return {"masks": [answer["attention_mask"](lengths, steps) for lengths, steps in mask_inputs(case)]}


add(
    Drill(
        id="sequences-causal-padding-mask",
        title="A causal mask combined with a key-padding mask",
        kind="write",
        topics=("sequences",),
        difficulty=2,
        prompt="attention_mask(lengths, steps) returns a bool mask of shape (B, 1, steps, steps) for "
        "F.scaled_dot_product_attention (True = may attend): query i of sequence b may attend key j iff j <= i "
        "(causal) and j < lengths[b] (j is a real token, not padding).",
        entry="attention_mask",
        starter="import torch\n\n\ndef attention_mask(lengths, steps):\n    raise NotImplementedError\n",
        hints=("Build the two parts separately: a (T, T) lower-triangular mask and a (B, T) mask of real keys. "
               "Which axis of the (B, 1, T, T) result are the keys?",
               "causal[None, None] & keys[:, None, None, :] with causal = ones(T, T).tril()."),
        probe=_probe_attention_mask,
    )
)


# --- scaled dot-product attention by hand -------------------------------------------------------------------

def sdpa_inputs(case: Case) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]]:
    """(q, k, v, mask) of three attention calls: no mask, a causal mask and a key-padding mask."""
    gen = case_generator(case, 30)
    out = []
    for batch, heads, tq, tk, dim, kind in ((2, 3, 5, 5, 8, None), (2, 2, 6, 6, 4, "causal"),
                                          (3, 2, 4, 7, 16, "padding")):
        q = torch.randn(batch, heads, tq, dim, generator=gen) * 1.5
        k = torch.randn(batch, heads, tk, dim, generator=gen) * 1.5
        v = torch.randn(batch, heads, tk, dim, generator=gen)
        if kind == "causal":
            mask = torch.ones(tq, tk, dtype=torch.bool).tril()
        elif kind == "padding":
            mask = valid_mask(_lengths(gen, batch, tk), tk)[:, None, None, :]
        else:
            mask = None
        out.append((q, k, v, mask))
    return out


def _probe_sdpa_by_hand(answer: dict, *, case: Case) -> dict:
    with CallRecorder() as calls:
        outputs = [answer["attention"](q, k, v, mask) for q, k, v, mask in sdpa_inputs(case)]
    return {"outputs": outputs, "calls": calls.seen}


add(
    Drill(
        id="sequences-attention-by-hand", nonfinite=('outputs/*',),
        title="Scaled dot-product attention by hand",
        kind="write",
        topics=("sequences", "tensors"),
        difficulty=2,
        prompt="attention(q, k, v, mask=None) with q (B, H, Tq, d), k and v (B, H, Tk, d) and an optional bool mask "
        "broadcastable to (B, H, Tq, Tk) (True = may attend) must equal F.scaled_dot_product_attention(q, k, v, "
        "attn_mask=mask). Write it with matmul and softmax; do not call scaled_dot_product_attention. "
        "(A self-check: the calls are recorded inside your answer's own process, so its pass does not count in "
        "a mock interview.)",
        entry="attention",
        starter="import torch\n\n\ndef attention(q, k, v, mask=None):\n    raise NotImplementedError\n",
        hints=("scores = q @ k^T, scaled, masked, softmaxed over one axis, times v. Which scale, which fill value, "
               "which axis?",
               "scores / sqrt(d); masked_fill(~mask, -inf); softmax(dim=-1)."),
        probe=_probe_sdpa_by_hand,
        self_check=True,
    )
)


# --- sinusoidal positional encoding -------------------------------------------------------------------------

def pe_sizes(case: Case) -> list[tuple[int, int]]:
    """Three (length, even model width) of the positional-encoding drill."""
    gen = case_generator(case, 40)
    return [(int(torch.randint(3, 30, (1,), generator=gen)), 2 * int(torch.randint(2, 17, (1,), generator=gen)))
            for _ in range(3)]


def _probe_pe(answer: dict, *, case: Case) -> dict:
    return {"outputs": [answer["sinusoidal_pe"](steps, dim) for steps, dim in pe_sizes(case)]}


add(
    Drill(
        id="sequences-sinusoidal-pe",
        title="Sinusoidal positional encoding",
        kind="write",
        topics=("sequences", "tensors"),
        difficulty=1,
        prompt="sinusoidal_pe(steps, dim) returns the (steps, dim) float32 encoding of 'Attention is all you need' "
        "(dim even): PE[pos, 2i] = sin(pos / 10000^(2i/dim)), PE[pos, 2i+1] = cos(pos / 10000^(2i/dim)), for "
        "pos = 0 .. steps-1.",
        entry="sinusoidal_pe",
        starter="import torch\n\n\ndef sinusoidal_pe(steps, dim):\n    raise NotImplementedError\n",
        hints=("Build a (steps, 1) column of positions and a (dim/2,) row of frequencies; their product broadcasts.",
               "div = exp(arange(0, dim, 2) * -log(10000) / dim); pe[:, 0::2] = sin(pos * div); pe[:, 1::2] = cos."),
        probe=_probe_pe,
    )
)


# --- bug hunt: numpy inside a loss ---------------------------------------------------------------------------

def logcosh_inputs(case: Case) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Two (prediction, target): moderate ones, and ones far enough apart that cosh overflows float32."""
    gen = case_generator(case, 50)
    moderate = (torch.randn(6, 3, generator=gen), torch.randn(6, 3, generator=gen))
    pred = torch.randn(8, generator=gen)
    far = pred + torch.tensor([100.0, -120.0, 0.5, -0.3, 95.0, 2.0, -3.0, 0.0])  # cosh(100) overflows float32
    return [moderate, (pred, far)]


def _probe_logcosh(answer: dict, *, case: Case) -> dict:
    results = []
    for pred, target in logcosh_inputs(case):
        pred = pred.clone().requires_grad_(True)
        loss = answer["log_cosh_loss"](pred, target)
        tracked = isinstance(loss, torch.Tensor) and loss.requires_grad
        if tracked:
            loss.backward()
        results.append({"loss": loss, "grad": pred.grad})
    return {"results": results}


LOGCOSH_STARTER = '''import numpy as np
import torch


def log_cosh_loss(pred, target):
    diff = (pred - target).detach().cpu().numpy()
    loss = np.mean(np.log(np.cosh(diff)))
    return torch.tensor(loss, dtype=torch.float32, requires_grad=True)
'''


add(
    Drill(
        id="sequences-numpy-loss",
        title="Bug hunt: a custom loss that trains nothing",
        kind="bughunt",
        topics=("sequences", "autograd", "debugging"),
        difficulty=2,
        prompt="log_cosh_loss(pred, target) = mean(log(cosh(pred - target))), a smooth robust loss for a sequence "
        "regressor. With it the model's weights never change, and on outliers (|pred - target| near 100) the loss "
        "is inf. Rewrite it with torch ops so that the gradient reaches pred and the loss stays finite.",
        entry="log_cosh_loss",
        starter=LOGCOSH_STARTER,
        hints=("What does autograd know about how torch.tensor(loss) depends on pred? And what is cosh(100) in "
               "float32?",
               "Use torch ops on pred directly; log(cosh(x)) = |x| + softplus(-2|x|) - log(2)."),
        probe=_probe_logcosh,
    )
)


# --- label smoothing ------------------------------------------------------------------------------------------

def smoothing_inputs(case: Case) -> list[tuple[torch.Tensor, torch.Tensor, float, int]]:
    """Two (logits, targets, eps, ignore index), three targets of each ignored."""
    gen = case_generator(case, 60)
    out = []
    for rows, classes, ignore in ((10, 5, -100), (7, 3, 0)):
        logits = torch.randn(rows, classes, generator=gen) * 2
        targets = torch.randint(0, classes, (rows,), generator=gen)
        targets[torch.randperm(rows, generator=gen)[:3]] = ignore
        eps = float(torch.rand(1, generator=gen)) * 0.3 + 0.05
        out.append((logits, targets, eps, ignore))
    return out


def _probe_smoothing(answer: dict, *, case: Case) -> dict:
    with CallRecorder() as calls:
        outputs = [answer["smoothed_cross_entropy"](logits, targets, eps, ignore)
                   for logits, targets, eps, ignore in smoothing_inputs(case)]
    return {"outputs": outputs, "calls": calls.seen}


add(
    Drill(
        id="sequences-label-smoothing",
        title="Label smoothing with an ignore_index, by hand",
        kind="write",
        topics=("sequences",),
        difficulty=2,
        prompt="smoothed_cross_entropy(logits, targets, eps, ignore_index) for logits (N, C) must equal "
        "F.cross_entropy(logits, targets, label_smoothing=eps, ignore_index=ignore_index): the target distribution "
        "is (1 - eps) on the right class plus eps/C on every class, rows whose target is ignore_index are left out. "
        "Build it from log_softmax; do not call cross_entropy or nll_loss. (A self-check: the calls are "
        "recorded inside your answer's own process, so its pass does not count in a mock interview.)",
        entry="smoothed_cross_entropy",
        starter="import torch\n\n\ndef smoothed_cross_entropy(logits, targets, eps, ignore_index):\n"
        "    raise NotImplementedError\n",
        hints=("Cross-entropy against a mixed target distribution splits into (1 - eps) * nll + eps * (the "
               "cross-entropy against the uniform distribution).",
               "logp = log_softmax; nll = -logp[target]; smooth = -logp.mean(-1); average over rows != ignore_index "
               "(clamp the ignored targets before gather)."),
        probe=_probe_smoothing,
        self_check=True,
    )
)


# --- LSTM: the last valid step ----------------------------------------------------------------------------------

def lstm_setup(case: Case) -> tuple[nn.LSTM, torch.Tensor, torch.Tensor]:
    """A seeded LSTM, a zero-padded batch and its lengths, for the last-valid-step drill."""
    gen = case_generator(case, 70)
    batch, steps, features, hidden = 5, 7, 3, 4
    x = torch.randn(batch, steps, features, generator=gen)
    lengths = _lengths(gen, batch, steps)
    x = x * valid_mask(lengths, steps)[..., None]  # padding is zeros, as a collate would leave it
    torch.manual_seed(case.seeded(71))
    return nn.LSTM(features, hidden, batch_first=True), x, lengths


def _probe_lstm(answer: dict, *, case: Case) -> dict:
    lstm, x, lengths = lstm_setup(case)
    with torch.no_grad():
        return {"out": answer["last_valid_output"](lstm, x, lengths)}


add(
    Drill(
        id="sequences-lstm-last-step",
        title="An LSTM's output at each sequence's last real step",
        kind="write",
        topics=("sequences", "modules"),
        difficulty=2,
        prompt="last_valid_output(lstm, x, lengths): lstm is a one-layer nn.LSTM(batch_first=True), x (B, T, F) "
        "a padded batch (unsorted lengths). Return (B, hidden): for each sequence, the LSTM's output at its last "
        "real step lengths[b] - 1, exactly as if it had been run alone without padding.",
        entry="last_valid_output",
        starter="import torch\n\n\ndef last_valid_output(lstm, x, lengths):\n    raise NotImplementedError\n",
        hints=("output[:, -1] is the state after the padding. pack_padded_sequence lets the LSTM stop at each "
               "sequence's end; what does it need for unsorted lengths?",
               "pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False); the h_n of a packed "
               "run is each sequence's last real step (or gather output at lengths - 1)."),
        probe=_probe_lstm,
    )
)


# --- difficulty 3: a sequence classifier's training step with three bugs --------------------------------------

_VOCAB, _DIM, _CLASSES, _SEQ_STEPS = 20, 6, 3, 2


_Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def classifier_setup(case: Case) -> tuple[nn.Embedding, nn.Linear, list[_Batch]]:
    """A seeded embedding and classifier, and batches of (padded tokens, lengths, labels)."""
    torch.manual_seed(case.seeded(80))
    embed, classifier = nn.Embedding(_VOCAB, _DIM), nn.Linear(_DIM, _CLASSES)
    gen = case_generator(case, 81)
    batches = []
    for _ in range(_SEQ_STEPS):
        lengths = _lengths(gen, 4, 7)
        tokens = torch.randint(1, _VOCAB, (4, 7), generator=gen).masked_fill(~valid_mask(lengths, 7), 0)  # pad id 0
        batches.append((tokens, lengths, torch.randint(0, _CLASSES, (4,), generator=gen)))
    return embed, classifier, batches


def seq_lr(case: Case) -> float:
    """The case's learning rate of the sequence classifier drill."""
    return 0.1 + 0.05 * (case.seed % 5)


def _probe_seq_step(answer: dict, *, case: Case) -> dict:
    embed, classifier, batches = classifier_setup(case)
    params = {"embed.weight": embed.weight, "classifier.weight": classifier.weight, "classifier.bias": classifier.bias}
    names = {id(p): n for n, p in params.items()}
    optimizer = torch.optim.SGD(list(params.values()), lr=seq_lr(case))
    steps: list[dict] = []

    def record(opt: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        held = [p for group in opt.param_groups for p in group["params"]]
        steps.append({"params": {names[id(p)]: p.detach().clone() for p in held},
                      "grads": {names[id(p)]: None if p.grad is None else p.grad.detach().clone() for p in held}})

    handle = register_optimizer_step_pre_hook(record)
    try:
        losses = [answer["train_step"](embed, classifier, tokens, lengths, labels, optimizer)
                  for tokens, lengths, labels in batches]
    finally:
        handle.remove()
    return {"losses": losses, "steps": steps, "final": {n: p.detach().clone() for n, p in params.items()}}


SEQ_STARTER = '''import torch
import torch.nn.functional as F


def train_step(embed, classifier, tokens, lengths, labels, optimizer):
    """One step of a bag-of-embeddings classifier on a padded batch (pad id 0). Returns the loss, detached."""
    steps = tokens.shape[1]
    h = embed(tokens)  # (B, T, D)
    mask = torch.arange(steps)[None, :] <= lengths[:, None]  # (B, T): real tokens
    pooled = (h * mask[..., None]).sum(dim=1) / steps
    logits = classifier(pooled)
    loss = F.cross_entropy(logits, labels)
    loss.backward()
    optimizer.zero_grad(set_to_none=True)
    optimizer.step()
    return loss.detach()
'''


add(
    Drill(
        id="sequences-classifier-three-bugs",
        title="Bug hunt: a padded-batch classifier step with three bugs",
        kind="bughunt",
        topics=("sequences", "loop", "debugging"),
        difficulty=3,
        prompt="train_step(embed, classifier, tokens, lengths, labels, optimizer) should mean-pool the embeddings of "
        "each sequence's real tokens (t < lengths[b]; padding is token 0, whose embedding is not zero), classify "
        "the pooled vector, and take one optimizer step on F.cross_entropy. What a run shows: changing only the "
        "padding token's embedding changes the loss; the same sequence, padded to a longer batch, gets a smaller "
        "pooled vector and another prediction; and no parameter ever changes (calling it twice on one batch "
        "returns the same loss). Three bugs cause this; fix all three (the check reports the first problem it "
        "observes).",
        entry="train_step",
        starter=SEQ_STARTER,
        hints=("Check the mask at position lengths[b], what a short sequence's pooled vector is divided by, and what "
               ".grad holds when optimizer.step() runs.",
               "mask uses <, divide by lengths[:, None], and zero_grad goes before the forward pass."),
        probe=_probe_seq_step,
    )
)


# --- explain drills -----------------------------------------------------------------------------------------

def _warmup_experiment() -> None:
    gen = torch.Generator().manual_seed(0)
    param = torch.zeros(1000, requires_grad=True)
    optimizer = torch.optim.Adam([param], lr=1e-3)
    for step in range(1, 201):
        before = param.detach().clone()
        optimizer.zero_grad(set_to_none=True)
        scale = torch.logspace(-4, 0, 1000)  # gradients of very different sizes, as across a Transformer's layers
        param.grad = (torch.randn(1000, generator=gen) + 0.1) * scale
        optimizer.step()
        if step in (1, 2, 10, 200):
            move = (param.detach() - before).abs()
            print(f"Adam step {step:3d}: mean |update| / lr = {move.mean().item() / 1e-3:.2f} "
                  f"(smallest-gradient coordinates: {move[:100].mean().item() / 1e-3:.2f})")
    print("At the first steps every coordinate moves by about lr, whatever its gradient: the second-moment "
          "estimate rests on one sample. Warm-up keeps those early steps small.")


add(
    explain(
        id="sequences-transformer-warmup",
        title="Why Transformers use a learning-rate warm-up",
        topics=("sequences", "schedulers"),
        difficulty=2,
        question="Training a Transformer with Adam at its target learning rate from step 0 diverges or gets "
        "stuck, while a linear warm-up over the first few thousand steps trains well. What is the main reason?",
        hints=("Look at the size of Adam's first updates compared with the gradients' sizes.",
               "Adam divides by sqrt(v); after one step, v is one squared gradient."),
        experiment=_warmup_experiment,
    )
)


def _mha_mask_experiment() -> None:
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(4, 1, batch_first=True).eval()
    x = torch.randn(1, 4, 4)
    real = torch.tensor([[True, True, False, False]])  # True at the two real tokens
    with torch.no_grad():
        _, weights_true_real = mha(x, x, x, key_padding_mask=real)
        _, weights_true_pad = mha(x, x, x, key_padding_mask=~real)
    print("key_padding_mask=True at real tokens -> weights of query 0:", weights_true_real[0, 0].tolist())
    print("key_padding_mask=True at padding     -> weights of query 0:", weights_true_pad[0, 0].tolist())
    print("nn.MultiheadAttention ignores the keys marked True; F.scaled_dot_product_attention's bool attn_mask "
          "keeps the ones marked True.")


add(
    explain(
        id="sequences-mha-mask-convention",
        title="Which convention does a bool key-padding mask use?",
        topics=("sequences", "debugging"),
        difficulty=1,
        question="You pass nn.MultiheadAttention a bool key_padding_mask that is True at the REAL tokens (the "
        "convention of a bool attn_mask in F.scaled_dot_product_attention). What happens?",
        hints=("Read the key_padding_mask entry of nn.MultiheadAttention's docs: what does True mean there?",
               "Compare the attention weights with the mask and with its inverse."),
        experiment=_mha_mask_experiment,
    )
)
