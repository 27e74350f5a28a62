"""Lesson 01 checks: each rejects planted bugs with its code and message, and accepts different correct solutions."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from harness.checks.testing import Correct, Mistake, assert_forgeries_refused, solution_cell
from harness.contract.case import Case


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


def tokens_view_then_transpose(images: torch.Tensor) -> torch.Tensor:
    n, c, h, w = images.shape
    return images.view(n, c, h * w).transpose(1, 2)


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


def distances_cdist(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.cdist(x, y)


def distances_double_loop(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.shape[0], y.shape[0], dtype=x.dtype)
    for i in range(x.shape[0]):
        for j in range(y.shape[0]):
            out[i, j] = (x[i] - y[j]).norm()
    return out


def distances_row_loop(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.stack([(row - y).pow(2).sum(-1).sqrt() for row in x])


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


def lse_numpy(x: torch.Tensor, dim: int) -> np.ndarray:
    values = x.detach().numpy()
    m = values.max(axis=dim, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):  # the all -inf rows
        return (m + np.log(np.exp(values - m).sum(axis=dim, keepdims=True))).squeeze(dim)


def lse_tensor_method(x: torch.Tensor, dim: int) -> torch.Tensor:
    return x.logsumexp(dim)


def lse_special(x: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.special.logsumexp(x, dim)


def lse_torch_function_disabled(x: torch.Tensor, dim: int) -> torch.Tensor:
    with torch._C.DisableTorchFunction():
        return torch.logsumexp(x, dim)


def lse_logcumsumexp(x: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.logcumsumexp(x, dim).select(dim, -1)


def lse_from_softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    m = x.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    first = x.select(dim, 0).unsqueeze(dim)
    return (first - torch.log(torch.softmax(x, dim=dim).select(dim, 0).unsqueeze(dim))).squeeze(dim)


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


def grads_appended_without_reset(w: torch.Tensor, losses: list) -> list[torch.Tensor]:
    gradients = []
    for loss in losses:
        loss(w).backward()
        gradients.append(w.grad)
    w.grad = None
    return gradients


# ----------------------------------------------------------------------------------------------- 01-ema-update
def ema_no_grad(ema: list, params: list, decay: float) -> None:
    with torch.no_grad():
        for e, p in zip(ema, params, strict=True):
            e.mul_(decay).add_(p, alpha=1 - decay)


def ema_detach_copy(ema: list, params: list, decay: float) -> None:
    for e, p in zip(ema, params, strict=True):
        e.copy_(decay * e + (1 - decay) * p.detach())


def ema_lerp(ema: list, params: list, decay: float) -> None:
    with torch.no_grad():
        torch._foreach_lerp_(ema, params, 1 - decay)


def ema_replaces_entries(ema: list, params: list, decay: float) -> None:
    for i, p in enumerate(params):
        ema[i] = decay * ema[i] + (1 - decay) * p.detach()


def ema_records_graph(ema: list, params: list, decay: float) -> None:
    for e, p in zip(ema, params, strict=True):
        e.mul_(decay).add_(p, alpha=1 - decay)


def ema_local_rebind(ema: list, params: list, decay: float) -> None:
    for e, p in zip(ema, params, strict=True):
        e = decay * e + (1 - decay) * p.detach()  # noqa: F841 (the bug: a local name, the tensor is untouched)


def ema_swapped(ema: list, params: list, decay: float) -> None:
    with torch.no_grad():
        for e, p in zip(ema, params, strict=True):
            e.mul_(1 - decay).add_(p, alpha=decay)


def ema_modifies_params(ema: list, params: list, decay: float) -> None:
    with torch.no_grad():
        for e, p in zip(ema, params, strict=True):
            e.copy_(p.mul_(1 - decay).add_(e, alpha=decay))


def ema_returns_list(ema: list, params: list, decay: float) -> list:
    ema_no_grad(ema, params, decay)
    return ema


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


class SiLUCallsTorch(SiLUSaveInput):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.nn.functional.silu(x)


class SiLUCallsTorchUnseen(SiLUSaveInput):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        with torch._C.DisableTorchFunction():
            return torch.nn.functional.silu(x)


class SiLUReturnsList(SiLUSaveInput):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x * torch.sigmoid(x)).tolist()


MISTAKES = [
    Mistake("01-to-tokens", "view-on-non-contiguous", "use reshape()", (tokens_view_after_permute,),
            story="view() after permute: the error of the lesson's own demo"),
    Mistake("01-to-tokens", "view-on-non-contiguous", "view() only reinterprets", (tokens_view_then_transpose,),
            story="view first, transpose after: fails on a cropped (non-contiguous) batch"),
    Mistake("01-to-tokens", "wrong-order", "equals images.reshape", (tokens_reshape_only,),
            story="reshape without permute: right shape, scrambled tokens (the lesson's pitfall)"),
    Mistake("01-to-tokens", "wrong-order", "W before H",
            (lambda images: images.permute(0, 3, 2, 1).reshape(images.shape[0], -1, images.shape[1]),),
            story="permute(0, 3, 2, 1): the pixels merged column by column"),
    Mistake("01-to-tokens", "wrong-shape", "(N, H*W, C)", (tokens_channels_first,),
            story="flatten(2) alone: (N, C, H*W)"),
    Mistake("01-to-tokens", "input-modified", "transpose_", (tokens_in_place,),
            story="transpose_ to save memory: the caller's images change"),
    Mistake("01-to-tokens", "not-a-tensor", "ndarray", (tokens_numpy,), story="converts to NumPy"),
    Mistake("01-to-tokens", "wrong-order", "equals images.reshape", solution_cell(
        "def to_tokens(images):\n"
        "    n, c, h, w = images.shape\n"
        "    return images.reshape(n, h * w, c)  # the bug: no permute, pixels of one channel become a token\n",
        "to_tokens"),
        story="no permute, pixels of one channel become a token", planted=True),

    Mistake("01-pairwise-distances", "non-finite", "clamp", (distances_expansion_unclamped,),
            story="the |x|^2 - 2xy + |y|^2 expansion without clamping"),
    Mistake("01-pairwise-distances", "wrong-values", "squared distances", (distances_squared,),
            story="forgets the square root"),
    Mistake("01-pairwise-distances", "wrong-shape", "one distance per", (distances_transposed,),
            story="new axes swapped: (m, n)"),
    Mistake("01-pairwise-distances", "dtype-changed", "torch.float64 inputs gave a torch.float32", (distances_float32,),
            story="casts to float32"),
    Mistake("01-pairwise-distances", "not-a-tensor", "returned list", (distances_list,), story="returns .tolist()"),
    Mistake("01-pairwise-distances", "python-loop", "Python loop over the rows", (distances_double_loop,),
            story="the double loop the lesson replaces"),
    Mistake("01-pairwise-distances", "python-loop", "torch operations", (distances_row_loop,),
            story="a loop over the rows of x, broadcasting inside"),
    Mistake("01-pairwise-distances", "non-finite", "clamp", solution_cell(
        "def pairwise_distances(x, y):\n"
        "    squared = x.pow(2).sum(1, keepdim=True) - 2 * x @ y.T + y.pow(2).sum(1)\n"
        "    return squared.sqrt()  # the bug: rounding makes some squared distances negative -> nan\n",
        "pairwise_distances"),
        story="rounding makes some squared distances negative -> nan", planted=True),

    Mistake("01-logsumexp", "overflow", "subtract the max", (lse_naive,), story="log(sum(exp(x))) literally"),
    Mistake("01-logsumexp", "masked-row", "fully masked", (lse_unguarded,),
            story="subtracts the max without guarding an all -inf row"),
    Mistake("01-logsumexp", "wrong-values", "the max is not added back", (lse_forgot_max,),
            story="subtracts the max and forgets to add it back"),
    Mistake("01-logsumexp", "wrong-shape", "keepdim", (lse_keepdim,), story="keepdim=True left in the result"),
    Mistake("01-logsumexp", "no-gradient", "does not require grad", (lse_no_grad,),
            story="computes under torch.no_grad()"),
    Mistake("01-logsumexp", "wrong-gradient", "softmax", (lse_detached_sum,), story="detaches the log-sum"),
    Mistake("01-logsumexp", "not-a-tensor", "returned ndarray", (lse_numpy,),
            story="computes in NumPy (np.log(np.sum(np.exp(...)))) and returns the array"),
    Mistake("01-logsumexp", "forbidden-call", "Tensor.logsumexp", (lse_tensor_method,),
            story="calls the forbidden op as a tensor method (the issue's hole)"),
    Mistake("01-logsumexp", "forbidden-call", "special_logsumexp", (lse_special,),
            story="torch.special.logsumexp: the same op under another name"),
    Mistake("01-logsumexp", "forbidden-call", "return torch.logsumexp(x, dim)", (lse_torch_function_disabled,),
            story="calls torch.logsumexp under torch._C.DisableTorchFunction(), where __torch_function__ sees nothing"),
    Mistake("01-logsumexp", "forbidden-call", "aten::logcumsumexp", (lse_logcumsumexp,),
            story="a public synonym: the last entry of torch.logcumsumexp"),
    Mistake("01-logsumexp", "forbidden-call", "torch.softmax", (lse_from_softmax,),
            story="derives logsumexp from torch.softmax"),
    Mistake("01-logsumexp", "overflow", "subtract the max", solution_cell(
        "def logsumexp(x, dim):\n"
        "    return x.exp().sum(dim=dim).log()  # the bug: exp overflows for large inputs\n",
        "logsumexp"),
        story="exp overflows for large inputs", planted=True),

    Mistake("01-per-loss-gradients", "accumulated", "equals the sum of the gradients", (grads_accumulating,),
            story="clones w.grad but never resets it"),
    Mistake("01-per-loss-gradients", "aliased", "added into that same tensor", (grads_appended_without_reset,),
            story="appends w.grad itself and never resets it: not blamed on zero_()"),
    Mistake("01-per-loss-gradients", "aliased", "w.grad.zero_()", (grads_aliased,),
            story="appends w.grad then zero_(): every entry is the one tensor"),
    Mistake("01-per-loss-gradients", "grad-left-behind", "w.grad is not None", (grads_left_behind,),
            story="forgets the final reset"),
    Mistake("01-per-loss-gradients", "graph-kept", "create_graph", (grads_create_graph,),
            story="create_graph=True copied from a double-backward example"),
    Mistake("01-per-loss-gradients", "wrong-values", "another quantity", (grads_negated,),
            story="the gradient of the negated loss (an ascent sign slip)"),
    Mistake("01-per-loss-gradients", "wrong-count", "of length 1", (grads_total_only,),
            story="one gradient of the summed losses"),
    Mistake("01-per-loss-gradients", "not-a-tensor", "entry 0 returned list", (grads_as_lists,),
            story="converts each gradient to a list"),
    Mistake("01-per-loss-gradients", "accumulated", "equals the sum of the gradients", solution_cell(
        "def per_loss_gradients(w, losses):\n"
        "    gradients = []\n"
        "    for loss in losses:\n"
        "        loss(w).backward()  # the bug: .grad is never reset, so gradients accumulate\n"
        "        gradients.append(w.grad.clone())\n"
        "    w.grad = None\n"
        "    return gradients\n",
        "per_loss_gradients"),
        story=".grad is never reset, so gradients accumulate", planted=True),

    Mistake("01-ema-update", "not-in-place", "rebinds the list entry", (ema_replaces_entries,),
            story="ema[i] = ...: new tensors, the optimizer's references go stale"),
    Mistake("01-ema-update", "builds-graph", "torch.no_grad()", (ema_records_graph,),
            story="in place but without no_grad: the EMA joins the graph"),
    Mistake("01-ema-update", "wrong-values", "the EMA did not change", (ema_local_rebind,),
            story="e = ...: binds a local name, the EMA is untouched"),
    Mistake("01-ema-update", "wrong-values", "swapped", (ema_swapped,), story="decay and 1 - decay swapped"),
    Mistake("01-ema-update", "params-changed", "parameters changed", (ema_modifies_params,),
            story="an in-place method on the parameter"),
    Mistake("01-ema-update", "returns-value", "returned list", (ema_returns_list,),
            story="returns the EMA list for convenience"),
    Mistake("01-ema-update", "builds-graph", "torch.no_grad()", solution_cell(
        "def ema_update_(ema, params, decay):\n"
        "    for average, param in zip(ema, params):  # the bug: no torch.no_grad(), autograd records the update\n"
        "        average.mul_(decay).add_(param, alpha=1 - decay)\n",
        "ema_update_"),
        story="no torch.no_grad(), autograd records the update", planted=True),

    Mistake("01-silu-function", "wrong-backward", "product rule", (SiLUSigmoidOnlyGradient,),
            story="the derivative of x * sigmoid(x) taken as sigmoid(x)"),
    Mistake("01-silu-function", "ignores-grad-output", "chain rule", (SiLUIgnoresGradOutput,),
            story="returns the local derivative only"),
    Mistake("01-silu-function", "wrong-forward", "x * sigmoid(x)", (SiLUWrongForward,),
            story="forward returns sigmoid(x)"),
    Mistake("01-silu-function", "gradcheck-failed", "float32 conversion", (SiLUFloat32,),
            story="computes in float32 inside"),
    Mistake("01-silu-function", "input-modified", "in-place", (SiLUInPlace,), story="x.mul_ in forward"),
    Mistake("01-silu-function", "not-a-function", "subclass of torch.autograd.Function",
            (torch.nn.functional.silu,), story="passes F.silu itself"),
    Mistake("01-silu-function", "not-a-tensor", "returned list", (SiLUReturnsList,),
            story="forward returns .tolist()"),
    Mistake("01-silu-function", "forbidden-call", "F.silu", (SiLUCallsTorch,),
            story="forward calls F.silu, which the text forbids"),
    Mistake("01-silu-function", "forbidden-call", "return torch.nn.functional.silu(x)", (SiLUCallsTorchUnseen,),
            story="forward calls F.silu under torch._C.DisableTorchFunction()"),
    Mistake("01-silu-function", "wrong-backward", "product rule", solution_cell(
        "class SiLUFunction(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        ctx.save_for_backward(x)\n"
        "        return x * torch.sigmoid(x)\n"
        "\n"
        "    @staticmethod\n"
        "    def backward(ctx, grad_output):\n"
        "        (x,) = ctx.saved_tensors\n"
        "        return grad_output * torch.sigmoid(x)  # the bug: the product rule's second term is missing\n",
        "SiLUFunction"),
        story="the product rule's second term is missing", planted=True),
]

CORRECT = [
    Correct("01-to-tokens", (tokens_permute_reshape,), story="permute then reshape"),
    Correct("01-to-tokens", (tokens_flatten_transpose,), story="flatten then transpose"),
    Correct("01-to-tokens", (tokens_einsum,), story="einsum, contiguous, view"),
    Correct("01-to-tokens", (lambda images: images.transpose(1, 3).transpose(1, 2).flatten(1, 2),),
            story="two transposes, then flatten(1, 2)"),
    Correct("01-pairwise-distances", (distances_difference,), story="broadcast difference"),
    Correct("01-pairwise-distances", (distances_norm,), story="vector_norm of the difference"),
    Correct("01-pairwise-distances", (distances_expansion_clamped,), story="expansion, clamped"),
    Correct("01-pairwise-distances", (distances_cdist,), story="torch.cdist"),
    Correct("01-logsumexp", (lse_where,), story="amax and torch.where"),
    Correct("01-logsumexp", (lse_masked_fill,), story="max, detached, masked_fill"),
    Correct("01-per-loss-gradients", (grads_reset,), story="w.grad = None before each backward"),
    Correct("01-per-loss-gradients", (grads_autograd,), story="torch.autograd.grad"),
    Correct("01-per-loss-gradients", (grads_clone_and_zero,), story="clone, then zero_()"),
    Correct("01-ema-update", (ema_no_grad,), story="no_grad, mul_ and add_"),
    Correct("01-ema-update", (ema_detach_copy,), story="copy_ of a detached expression"),
    Correct("01-ema-update", (ema_lerp,), story="_foreach_lerp_"),
    Correct("01-silu-function", (SiLUSaveInput,), story="saves x"),
    Correct("01-silu-function", (SiLUSaveSigmoid,), story="saves sigmoid and the output"),
]


def test_hints_exist_for_every_task(capsys) -> None:
    from harness.checks import hint

    for task in ("01-to-tokens", "01-pairwise-distances", "01-logsumexp", "01-per-loss-gradients",
                 "01-ema-update", "01-silu-function"):
        for level in (1, 2, 3):
            hint(task, level)
    out = capsys.readouterr().out
    assert out.count("Hint 3/3") == 6 and out.count("Reread the section") == 6


@pytest.mark.parametrize("task, solution", [
    ("01-to-tokens", tokens_permute_reshape), ("01-pairwise-distances", distances_difference),
    ("01-logsumexp", lse_where), ("01-per-loss-gradients", grads_reset), ("01-ema-update", ema_no_grad),
    ("01-silu-function", SiLUSaveInput),
])
@pytest.mark.parametrize("hidden", [False, True])
def test_judges_refuse_truncated_observations(task: str, solution: Any, hidden: bool) -> None:
    case = Case(hidden=hidden)
    assert_forgeries_refused(task, solution, case=case)
