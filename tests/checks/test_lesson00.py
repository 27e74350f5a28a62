"""Planted bugs against lesson 00's checks: each failure code triggered, correct variants pass."""

import pytest
import torch

from harness.checks import CheckFailed, check


def zeros_batch(n, device):
    return torch.zeros(n, 3, 8, 8, dtype=torch.float32, device=device)


def zeros_like_batch(n, device):
    return torch.zeros((n, 3, 8, 8), device=device).float()


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize("implementation", [zeros_batch, zeros_like_batch])
def test_make_batch_accepts_correct(implementation, hidden):
    check("00-make-batch", implementation, hidden=hidden)


@pytest.mark.parametrize(
    ("buggy", "code", "phrase"),
    [
        (lambda n, d: [[0.0] * 8] * n, "not-a-tensor", "torch.Tensor"),
        (lambda n, d: torch.zeros(3, 8, 8, device=d), "wrong-shape", "channels come second"),
        (lambda n, d: torch.zeros(n, 8, 8, 3, device=d), "wrong-shape", "(4, 3, 8, 8)"),
        (lambda n, d: torch.zeros(n, 3, 8, 8, dtype=torch.float64, device=d), "wrong-dtype", "float32"),
        (lambda n, d: torch.zeros(n, 3, 8, 8, device="meta"), "wrong-device", "device argument"),
        (lambda n, d: torch.ones(n, 3, 8, 8, device=d), "not-zeros", "torch.zeros"),
    ],
)
def test_make_batch_rejects_planted_bug(buggy, code, phrase):
    with pytest.raises(CheckFailed) as failure:
        check("00-make-batch", buggy)
    assert failure.value.code == code and phrase in str(failure.value)


def count_with_numel(model):
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def count_with_named(model):
    total = 0
    for _, parameter in model.named_parameters():
        total += parameter.numel() if parameter.requires_grad else 0
    return int(total)


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize("implementation", [count_with_numel, count_with_named])
def test_count_params_accepts_correct(implementation, hidden):
    check("00-count-params", implementation, hidden=hidden)


@pytest.mark.parametrize(
    ("buggy", "code", "hidden", "phrase"),
    [
        (lambda m: torch.tensor(sum(p.numel() for p in m.parameters())), "not-an-int", False, "Python int"),
        (lambda m: len(list(m.parameters())), "counts-tensors", False, "numel"),
        (lambda m: sum(p.numel() for p in m.parameters()), "counts-frozen", True, "requires_grad"),
        (lambda m: sum(t.numel() for t in m.state_dict().values()), "wrong-count", True, "buffers"),
        (lambda m: sum(p.numel() for _, p in m.named_parameters(remove_duplicate=False) if p.requires_grad),
         "wrong-count", True,
         "shared weight"),
    ],
)
def test_count_params_rejects_planted_bug(buggy, code, hidden, phrase):
    with pytest.raises(CheckFailed) as failure:
        check("00-count-params", buggy, hidden=hidden)
    assert failure.value.code == code and phrase in str(failure.value)


def accuracy_argmax(logits, targets):
    return (logits.argmax(dim=1) == targets).float().mean().item()


def accuracy_loop(logits, targets):
    correct = sum(int(torch.argmax(row) == t) for row, t in zip(logits, targets))
    return correct / len(targets)


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize("implementation", [accuracy_argmax, accuracy_loop])
def test_accuracy_accepts_correct(implementation, hidden):
    check("00-accuracy", implementation, hidden=hidden)


@pytest.mark.parametrize(
    ("buggy", "code", "phrase"),
    [
        (lambda lo, t: (lo.argmax(dim=1) == t).float().mean(), "not-a-float", ".item()"),
        (lambda lo, t: 100 * (lo.argmax(dim=1) == t).float().mean().item(), "percent-not-fraction", "100"),
        (lambda lo, t: (lo.argmax(dim=0) == t[: lo.shape[1]]).float().mean().item(), "wrong-accuracy", "dim=0"),
        (lambda lo, t: float("nan"), "wrong-accuracy", "comparing"),
    ],
)
def test_accuracy_rejects_planted_bug(buggy, code, phrase):
    with pytest.raises(CheckFailed) as failure:
        check("00-accuracy", buggy)
    assert failure.value.code == code and phrase in str(failure.value)


def test_a_check_reports_exceptions_in_student_code():
    def crashes(n, device):
        raise NotImplementedError()

    with pytest.raises(CheckFailed) as failure:
        check("00-make-batch", crashes)
    assert failure.value.code == "raised" and "NotImplementedError" in str(failure.value)
