"""Lesson 01 checks: each rejects planted bugs with its code and message, and accepts different correct solutions."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from harness.checks.core import Case
from harness.checks.testing import assert_check_fails, assert_check_passes, assert_forgeries_refused


# ------------------------------------------------------------------------------------------------ 01-to-tokens
def tokens_permute_reshape(images: torch.Tensor) -> torch.Tensor:
    n, c, h, w = images.shape
    return images.permute(0, 2, 3, 1).reshape(n, h * w, c)


def tokens_flatten_transpose(images: torch.Tensor) -> torch.Tensor:
    return images.flatten(2).transpose(1, 2)


def tokens_einsum(images: torch.Tensor) -> torch.Tensor:
    n, c, h, w = images.shape
    return torch.einsum("nchw->nhwc", images).contiguous().view(n, h * w, c)


def tokens_view_after_permute(images: torch.Tensor) -> torch.Tensor:
    n, c, h, w = images.shape
    return images.permute(0, 2, 3, 1).view(n, h * w, c)


def tokens_reshape_only(images: torch.Tensor) -> torch.Tensor:
    n, c, h, w = images.shape
    return images.reshape(n, h * w, c)


def tokens_channels_first(images: torch.Tensor) -> torch.Tensor:
    return images.flatten(2)


def tokens_in_place(images: torch.Tensor) -> torch.Tensor:
    n, c, h, w = images.shape
    return images.transpose_(1, 3).transpose_(1, 2).reshape(n, h * w, c)


def tokens_numpy(images: torch.Tensor) -> np.ndarray:
    return tokens_permute_reshape(images).numpy()


@pytest.mark.parametrize("solution", [tokens_permute_reshape, tokens_flatten_transpose, tokens_einsum])
def test_to_tokens_accepts_correct(solution: Callable, capsys) -> None:
    assert_check_passes("01-to-tokens", solution, capsys=capsys)


@pytest.mark.parametrize("solution, code, phrase", [
    (tokens_view_after_permute, "view-on-non-contiguous", "use reshape()"),
    (tokens_reshape_only, "wrong-order", "equals images.reshape"),
    (tokens_channels_first, "wrong-shape", "(N, H*W, C)"),
    (tokens_in_place, "input-modified", "transpose_"),
    (tokens_numpy, "not-a-tensor", "ndarray"),
])
def test_to_tokens_rejects_bug(solution: Callable, code: str, phrase: str) -> None:
    assert_check_fails("01-to-tokens", solution, code=code, phrase=phrase)


# --------------------------------------------------------------------------------------- 01-pairwise-distances
def distances_difference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x[:, None, :] - y[None, :, :]).pow(2).sum(-1).sqrt()


def distances_norm(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.linalg.vector_norm(x.unsqueeze(1) - y.unsqueeze(0), dim=-1)


def distances_expansion_clamped(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    squared = x.pow(2).sum(1, keepdim=True) - 2 * x @ y.T + y.pow(2).sum(1)
    return squared.clamp_min(0).sqrt()


def distances_expansion_unclamped(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x.pow(2).sum(1, keepdim=True) - 2 * x @ y.T + y.pow(2).sum(1)).sqrt()


def distances_squared(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x[:, None, :] - y[None, :, :]).pow(2).sum(-1)


def distances_transposed(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x[None, :, :] - y[:, None, :]).pow(2).sum(-1).sqrt()


def distances_float32(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return distances_difference(x.float(), y.float())


def distances_list(x: torch.Tensor, y: torch.Tensor) -> list:
    return distances_difference(x, y).tolist()


@pytest.mark.parametrize("solution", [distances_difference, distances_norm, distances_expansion_clamped])
def test_pairwise_distances_accepts_correct(solution: Callable, capsys) -> None:
    assert_check_passes("01-pairwise-distances", solution, capsys=capsys)


@pytest.mark.parametrize("solution, code, phrase", [
    (distances_expansion_unclamped, "non-finite", "clamp"),
    (distances_squared, "wrong-values", "squared distances"),
    (distances_transposed, "wrong-shape", "one distance per"),
    (distances_float32, "dtype-changed", "torch.float64 inputs gave a torch.float32"),
    (distances_list, "not-a-tensor", "returned list"),
])
def test_pairwise_distances_rejects_bug(solution: Callable, code: str, phrase: str) -> None:
    assert_check_fails("01-pairwise-distances", solution, code=code, phrase=phrase)


# ---------------------------------------------------------------------------------------------- 01-logsumexp
def lse_where(x: torch.Tensor, dim: int) -> torch.Tensor:
    m = x.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    return m.squeeze(dim) + (x - m).exp().sum(dim=dim).log()


def lse_masked_fill(x: torch.Tensor, dim: int) -> torch.Tensor:
    m = x.max(dim=dim, keepdim=True).values.detach()
    m = m.masked_fill(torch.isneginf(m), 0.0)
    return torch.log(torch.sum(torch.exp(x - m), dim=dim)) + m.squeeze(dim)


def lse_naive(x: torch.Tensor, dim: int) -> torch.Tensor:
    return x.exp().sum(dim).log()


def lse_unguarded(x: torch.Tensor, dim: int) -> torch.Tensor:
    m = x.amax(dim=dim, keepdim=True)
    return m.squeeze(dim) + (x - m).exp().sum(dim=dim).log()


def lse_forgot_max(x: torch.Tensor, dim: int) -> torch.Tensor:
    m = x.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    return (x - m).exp().sum(dim=dim).log()


def lse_keepdim(x: torch.Tensor, dim: int) -> torch.Tensor:
    m = x.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    return m + (x - m).exp().sum(dim=dim, keepdim=True).log()


def lse_no_grad(x: torch.Tensor, dim: int) -> torch.Tensor:
    with torch.no_grad():
        return lse_where(x, dim)


def lse_detached_sum(x: torch.Tensor, dim: int) -> torch.Tensor:
    m = x.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    return m.squeeze(dim) + (x - m).exp().sum(dim=dim).log().detach()


@pytest.mark.parametrize("solution", [lse_where, lse_masked_fill])
def test_logsumexp_accepts_correct(solution: Callable, capsys) -> None:
    assert_check_passes("01-logsumexp", solution, capsys=capsys)


@pytest.mark.parametrize("solution, code, phrase", [
    (lse_naive, "overflow", "subtract the max"),
    (lse_unguarded, "masked-row", "fully masked"),
    (lse_forgot_max, "wrong-values", "the max is not added back"),
    (lse_keepdim, "wrong-shape", "keepdim"),
    (lse_no_grad, "no-gradient", "does not require grad"),
    (lse_detached_sum, "wrong-gradient", "softmax"),
])
def test_logsumexp_rejects_bug(solution: Callable, code: str, phrase: str) -> None:
    assert_check_fails("01-logsumexp", solution, code=code, phrase=phrase)


@settings(max_examples=30, deadline=None, derandomize=True, database=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 4), st.integers(1, 6)),
              elements=st.one_of(st.floats(-1e300, 1e300), st.just(-np.inf))))
def test_reference_solution_matches_torch_on_arbitrary_inputs(values: np.ndarray) -> None:
    x = torch.from_numpy(values)
    torch.testing.assert_close(lse_where(x, 1), torch.logsumexp(x, 1), rtol=1e-12, atol=0)


# --------------------------------------------------------------------------------------- 01-per-loss-gradients
def grads_reset(w: torch.Tensor, losses: list) -> list[torch.Tensor]:
    gradients = []
    for loss in losses:
        w.grad = None
        loss(w).backward()
        gradients.append(w.grad)
    w.grad = None
    return gradients


def grads_autograd(w: torch.Tensor, losses: list) -> list[torch.Tensor]:
    return [torch.autograd.grad(loss(w), w)[0] for loss in losses]


def grads_clone_and_zero(w: torch.Tensor, losses: list) -> list[torch.Tensor]:
    gradients = []
    for loss in losses:
        loss(w).backward()
        gradients.append(w.grad.clone())
        w.grad.zero_()
    w.grad = None
    return gradients


def grads_accumulating(w: torch.Tensor, losses: list) -> list[torch.Tensor]:
    gradients = []
    for loss in losses:
        loss(w).backward()
        gradients.append(w.grad.clone())
    w.grad = None
    return gradients


def grads_aliased(w: torch.Tensor, losses: list) -> list[torch.Tensor]:
    gradients = []
    for loss in losses:
        loss(w).backward()
        gradients.append(w.grad)
        w.grad.zero_()
    w.grad = None
    return gradients


def grads_left_behind(w: torch.Tensor, losses: list) -> list[torch.Tensor]:
    gradients = []
    for loss in losses:
        w.grad = None
        loss(w).backward()
        gradients.append(w.grad)
    return gradients


def grads_create_graph(w: torch.Tensor, losses: list) -> list[torch.Tensor]:
    return [torch.autograd.grad(loss(w), w, create_graph=True)[0] for loss in losses]


def grads_negated(w: torch.Tensor, losses: list) -> list[torch.Tensor]:
    return [torch.autograd.grad(-loss(w), w)[0] for loss in losses]


def grads_total_only(w: torch.Tensor, losses: list) -> list[torch.Tensor]:
    return [torch.autograd.grad(sum(loss(w) for loss in losses), w)[0]]


def grads_as_lists(w: torch.Tensor, losses: list) -> list:
    return [g.tolist() for g in grads_autograd(w, losses)]


@pytest.mark.parametrize("solution", [grads_reset, grads_autograd, grads_clone_and_zero])
def test_per_loss_gradients_accepts_correct(solution: Callable, capsys) -> None:
    assert_check_passes("01-per-loss-gradients", solution, capsys=capsys)


@pytest.mark.parametrize("solution, code, phrase", [
    (grads_accumulating, "accumulated", "equals the sum of the gradients"),
    (grads_aliased, "aliased", "same tensor"),
    (grads_left_behind, "grad-left-behind", "w.grad is not None"),
    (grads_create_graph, "graph-kept", "create_graph"),
    (grads_negated, "wrong-values", "another quantity"),
    (grads_total_only, "wrong-count", "of length 1"),
    (grads_as_lists, "not-a-tensor", "entry 0 returned list"),
])
def test_per_loss_gradients_rejects_bug(solution: Callable, code: str, phrase: str) -> None:
    assert_check_fails("01-per-loss-gradients", solution, code=code, phrase=phrase)


# ----------------------------------------------------------------------------------------------- 01-ema-update
def ema_no_grad(ema: list, params: list, decay: float) -> None:
    with torch.no_grad():
        for e, p in zip(ema, params):
            e.mul_(decay).add_(p, alpha=1 - decay)


def ema_detach_copy(ema: list, params: list, decay: float) -> None:
    for e, p in zip(ema, params):
        e.copy_(decay * e + (1 - decay) * p.detach())


def ema_lerp(ema: list, params: list, decay: float) -> None:
    with torch.no_grad():
        torch._foreach_lerp_(ema, params, 1 - decay)


def ema_replaces_entries(ema: list, params: list, decay: float) -> None:
    for i, p in enumerate(params):
        ema[i] = decay * ema[i] + (1 - decay) * p.detach()


def ema_records_graph(ema: list, params: list, decay: float) -> None:
    for e, p in zip(ema, params):
        e.mul_(decay).add_(p, alpha=1 - decay)


def ema_local_rebind(ema: list, params: list, decay: float) -> None:
    for e, p in zip(ema, params):
        e = decay * e + (1 - decay) * p.detach()  # noqa: F841 (the bug: a local name, the tensor is untouched)


def ema_swapped(ema: list, params: list, decay: float) -> None:
    with torch.no_grad():
        for e, p in zip(ema, params):
            e.mul_(1 - decay).add_(p, alpha=decay)


def ema_modifies_params(ema: list, params: list, decay: float) -> None:
    with torch.no_grad():
        for e, p in zip(ema, params):
            e.copy_(p.mul_(1 - decay).add_(e, alpha=decay))


def ema_returns_list(ema: list, params: list, decay: float) -> list:
    ema_no_grad(ema, params, decay)
    return ema


@pytest.mark.parametrize("solution", [ema_no_grad, ema_detach_copy, ema_lerp])
def test_ema_update_accepts_correct(solution: Callable, capsys) -> None:
    assert_check_passes("01-ema-update", solution, capsys=capsys)


@pytest.mark.parametrize("solution, code, phrase", [
    (ema_replaces_entries, "not-in-place", "rebinds the list entry"),
    (ema_records_graph, "builds-graph", "torch.no_grad()"),
    (ema_local_rebind, "wrong-values", "the EMA did not change"),
    (ema_swapped, "wrong-values", "swapped"),
    (ema_modifies_params, "params-changed", "parameters changed"),
    (ema_returns_list, "returns-value", "returned list"),
])
def test_ema_update_rejects_bug(solution: Callable, code: str, phrase: str) -> None:
    assert_check_fails("01-ema-update", solution, code=code, phrase=phrase)


# -------------------------------------------------------------------------------------------- 01-silu-function
class SiLUSaveInput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad_output * s * (1 + x * (1 - s))


class SiLUSaveSigmoid(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        s = torch.sigmoid(x)
        out = x * s
        ctx.save_for_backward(s, out)
        return out

    @staticmethod
    def backward(ctx, grad_output):
        s, out = ctx.saved_tensors
        return grad_output * (s + out * (1 - s))


class SiLUSigmoidOnlyGradient(SiLUSaveInput):
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * torch.sigmoid(x)


class SiLUIgnoresGradOutput(SiLUSaveInput):
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return s * (1 + x * (1 - s))


class SiLUWrongForward(SiLUSaveInput):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sigmoid(x)


class SiLUFloat32(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        x32 = x.float()
        return (x32 * torch.sigmoid(x32)).to(x.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x.float())
        return (grad_output.float() * s * (1 + x.float() * (1 - s))).to(x.dtype)


class SiLUInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x.clone())
        return x.mul_(torch.sigmoid(x)).clone()

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad_output * s * (1 + x * (1 - s))


@pytest.mark.parametrize("solution", [SiLUSaveInput, SiLUSaveSigmoid])
def test_silu_function_accepts_correct(solution: type, capsys) -> None:
    assert_check_passes("01-silu-function", solution, capsys=capsys)


@pytest.mark.parametrize("solution, code, phrase", [
    (SiLUSigmoidOnlyGradient, "wrong-backward", "product rule"),
    (SiLUIgnoresGradOutput, "ignores-grad-output", "chain rule"),
    (SiLUWrongForward, "wrong-forward", "x * sigmoid(x)"),
    (SiLUFloat32, "gradcheck-failed", "float32 conversion"),
    (SiLUInPlace, "input-modified", "in-place"),
    (torch.nn.functional.silu, "not-a-function", "subclass of torch.autograd.Function"),
])
def test_silu_function_rejects_bug(solution: Any, code: str, phrase: str) -> None:
    assert_check_fails("01-silu-function", solution, code=code, phrase=phrase)


def test_hints_exist_for_every_task(capsys) -> None:
    from harness.checks import hint

    for task in ("01-to-tokens", "01-pairwise-distances", "01-logsumexp", "01-per-loss-gradients",
                 "01-ema-update", "01-silu-function"):
        hint(task, 1)
        hint(task, 2)
    assert capsys.readouterr().out.count("Hint 2/2") == 6


@pytest.mark.parametrize("task, solution", [
    ("01-to-tokens", tokens_permute_reshape), ("01-pairwise-distances", distances_difference),
    ("01-logsumexp", lse_where), ("01-per-loss-gradients", grads_reset), ("01-ema-update", ema_no_grad),
    ("01-silu-function", SiLUSaveInput),
])
@pytest.mark.parametrize("hidden", [False, True])
def test_judges_refuse_truncated_observations(task: str, solution: Any, hidden: bool) -> None:
    case = Case(hidden=hidden)
    assert_forgeries_refused(task, solution, case=case)
