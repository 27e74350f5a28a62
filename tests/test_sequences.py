"""harness.sequences: the toy language, padding, masks, positional encodings, the two language models, the
AdamW groups, the warm-up schedule and the training loop, each against an oracle or a stated property."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from harness.sequences import (
    LSTMLM,
    PAD,
    TinyTransformerLM,
    causal_mask,
    decay_groups,
    lm_batch,
    next_token_accuracy,
    pad_batch,
    progressions,
    sinusoidal_positions,
    train_lm,
)


def test_progressions_follow_their_rule_and_are_seeded():
    sequences = progressions(50, vocab_size=11, min_len=4, max_len=9, seed=3)
    assert len(sequences) == 50
    assert {len(s) for s in sequences} <= set(range(4, 10)) and len({len(s) for s in sequences}) > 1
    for s in sequences:
        assert s.dtype == torch.int64 and int(s.min()) >= 1 and int(s.max()) <= 10  # PAD (0) never appears
        values = s - 1
        step = (values[1] - values[0]) % 10
        assert step != 0 and torch.equal((values[1:] - values[:-1]) % 10, step.expand(len(s) - 1))
    again = progressions(50, vocab_size=11, min_len=4, max_len=9, seed=3)
    assert all(torch.equal(a, b) for a, b in zip(sequences, again, strict=True))
    other = progressions(50, vocab_size=11, min_len=4, max_len=9, seed=4)
    assert not all(len(a) == len(b) and torch.equal(a, b) for a, b in zip(sequences, other, strict=True))


def test_progressions_leave_the_global_rng_alone_and_refuse_bad_arguments():
    state = torch.get_rng_state()
    progressions(5)
    assert torch.equal(state, torch.get_rng_state())
    for kwargs in ({"n": 0}, {"n": 3, "vocab_size": 2}, {"n": 3, "min_len": 1}, {"n": 3, "min_len": 6, "max_len": 5}):
        with pytest.raises(ValueError):
            progressions(**kwargs)


def test_pad_batch_pads_batch_first_and_masks_from_the_lengths():
    sequences = [torch.tensor([3, 0, 2]), torch.tensor([5]), torch.tensor([1, 2, 3, 4])]
    padded, mask = pad_batch(sequences, pad_value=0)
    assert torch.equal(padded, torch.tensor([[3, 0, 2, 0], [5, 0, 0, 0], [1, 2, 3, 4]]))
    assert mask.dtype == torch.bool
    # the real 0 of the first sequence is a token: the mask says so, padded != 0 would not
    assert torch.equal(mask, torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.bool))
    floats, _ = pad_batch([torch.tensor([0.5]), torch.tensor([1.0, 2.0])], pad_value=-1.0)
    assert floats.dtype == torch.float32 and torch.equal(floats, torch.tensor([[0.5, -1.0], [1.0, 2.0]]))
    with pytest.raises(ValueError):
        pad_batch([])


def test_lm_batch_shifts_by_one_with_both_masks():
    inputs, input_mask, targets, target_mask = lm_batch([torch.tensor([1, 2, 3]), torch.tensor([4, 5])])
    assert torch.equal(inputs, torch.tensor([[1, 2], [4, 5]]))
    assert torch.equal(targets, torch.tensor([[2, 3], [5, PAD]]))
    assert torch.equal(input_mask, torch.tensor([[True, True], [True, True]]))
    assert torch.equal(target_mask, torch.tensor([[True, True], [True, False]]))


def test_causal_mask_blocks_the_future_only():
    assert torch.equal(causal_mask(3), torch.tensor([[0, 1, 1], [0, 0, 1], [0, 0, 0]], dtype=torch.bool))
    assert torch.equal(causal_mask(5), nn.Transformer.generate_square_subsequent_mask(5) == float("-inf"))


def test_sinusoidal_positions_match_the_formula():
    encoding = sinusoidal_positions(50, 8)
    assert encoding.shape == (50, 8) and encoding.dtype == torch.float32
    for pos in (0, 7, 49):
        for i in range(4):
            angle = pos / 10000 ** (2 * i / 8)
            assert encoding[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-5)
            assert encoding[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-5)
    assert len({tuple(row.tolist()) for row in encoding}) == 50  # every position distinct
    with pytest.raises(ValueError):
        sinusoidal_positions(4, 5)


def _batch(seed: int = 0):
    inputs, input_mask, targets, target_mask = lm_batch(progressions(6, seed=seed))
    return inputs, input_mask


@pytest.mark.parametrize("make", [TinyTransformerLM, LSTMLM])
def test_models_are_causal_and_ignore_padding(make):
    torch.manual_seed(0)
    model = make().eval()
    inputs, mask = _batch()
    logits = model(inputs, mask)
    assert logits.shape == (*inputs.shape, 17)
    # changing a later token never changes an earlier position's output
    changed = inputs.clone()
    changed[:, 4] = (changed[:, 4] % 16) + 1
    after = model(changed, mask)
    assert torch.allclose(logits[:, :4], after[:, :4], atol=1e-5)
    assert not torch.allclose(logits[:, 4:], after[:, 4:], atol=1e-5)
    # changing what sits in padded positions never changes a real position's output
    scrambled = torch.where(mask, inputs, torch.randint(1, 17, inputs.shape))
    again = model(scrambled, mask)
    assert torch.allclose(logits[mask], again[mask], atol=1e-5)


def test_the_transformer_builds_without_warnings(recwarn):
    model = TinyTransformerLM()
    inputs, mask = _batch()
    model(inputs, mask).sum().backward()
    model.eval()
    with torch.no_grad():
        model(inputs, mask)
    assert not recwarn.list, [str(w.message) for w in recwarn.list]


def test_decay_groups_split_matrices_from_biases_norms_and_embeddings():
    model = TinyTransformerLM()
    decayed, others = decay_groups(model, weight_decay=0.1)
    assert decayed["weight_decay"] == 0.1 and others["weight_decay"] == 0.0
    assert all(p.ndim >= 2 for p in decayed["params"])
    assert all(p is not model.embed.weight for p in decayed["params"])
    assert any(p is model.embed.weight for p in others["params"])
    assert any(p is model.norm.weight for p in others["params"]) and any(p is model.head.bias for p in others["params"])
    assert len(decayed["params"]) + len(others["params"]) == len(list(model.parameters()))
    model.embed.weight.requires_grad_(False)
    assert sum(len(g["params"]) for g in decay_groups(model, 0.1)) == len(list(model.parameters())) - 1


def course_factor(step: int, warmup: int, total: int) -> float:
    """Lesson 07's convention: (step + 1) / warmup during warm-up, then half a cosine to 0 at `total`."""
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, total - warmup))))


@pytest.mark.parametrize(("warmup", "total"), [(4, 12), (0, 6), (1, 5), (5, 5)])
def test_train_lm_warms_up_then_decays_to_zero_in_the_course_convention(warmup, total):
    """The rates train_lm trains with (torch's LinearLR then CosineAnnealingLR) are lesson 07's factor times lr,
    no warm-up and no decay span included."""
    history = train_lm(LSTMLM(dim=4, hidden=4), progressions(8, seed=0), steps=total, batch_size=2, lr=2.0,
                       warmup_steps=warmup, max_norm=None)
    expected = [2.0 * course_factor(step, warmup, total) for step in range(total)]
    assert history["lr"].tolist() == pytest.approx(expected, abs=1e-6), history["lr"]


def test_train_lm_learns_and_matches_a_hand_written_step():
    sequences = progressions(200, seed=0)
    torch.manual_seed(0)
    model = LSTMLM()
    before = next_token_accuracy(model, sequences)
    history = train_lm(model, sequences, steps=60, batch_size=32, lr=1e-2, warmup_steps=5, label_smoothing=0.1)
    assert history["loss"].shape == (60,) and history["loss"].device.type == "cpu"
    assert history["lr"][:5].tolist() == pytest.approx([2e-3, 4e-3, 6e-3, 8e-3, 1e-2])
    assert history["loss"][-10:].mean() < history["loss"][:10].mean() - 0.5
    assert next_token_accuracy(model, sequences) > before + 0.2
    assert model.training  # next_token_accuracy restores the mode

    # the first step's loss is the label-smoothed mean over real targets of the first batch
    torch.manual_seed(0)
    fresh = LSTMLM()
    index = torch.randint(0, 200, (32,), generator=torch.Generator().manual_seed(0)).tolist()
    inputs, input_mask, targets, target_mask = lm_batch([sequences[i] for i in index])
    logits = fresh(inputs, input_mask)
    expected = F.cross_entropy(logits[target_mask], targets[target_mask], label_smoothing=0.1)
    torch.manual_seed(0)
    first = train_lm(LSTMLM(), sequences, steps=1, batch_size=32, lr=1e-2, label_smoothing=0.1)["loss"][0]
    assert first.item() == pytest.approx(expected.item(), rel=1e-5)
