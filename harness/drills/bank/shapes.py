"""Drills on shapes that run without an error and compute the wrong thing: reshaping attention heads without the
transpose (and view after a transpose, which raises), and a loss whose (B,) predictions broadcast against (B, 1)
targets into a (B, B) matrix."""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn

from harness.contract.case import Case
from harness.drills.core import Drill, add
from harness.drills.support import explain

# --- split and merge attention heads (bug hunt) ------------------------------------------------------------------

B, T, H, D = 2, 5, 3, 4


def heads_inputs(case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens (B, T, H * D) for split_heads, per-head outputs (B, H, T, D) for merge_heads (probe and judge alike)."""
    gen = torch.Generator().manual_seed(case.seeded(30))
    return torch.randn(B, T, H * D, generator=gen), torch.randn(B, H, T, D, generator=gen)


def _probe_heads(answer: dict, *, case: Case) -> dict:
    tokens, per_head = heads_inputs(case)
    return {"split": answer["split_heads"](tokens.clone(), H), "merge": answer["merge_heads"](per_head.clone())}


HEADS_STARTER = '''import torch


def split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """(B, T, H * D) -> (B, H, T, D): head h gets features h * D to (h + 1) * D - 1 of every token."""
    b, t, e = x.shape
    return x.view(b, heads, t, e // heads)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, T, D) -> (B, T, H * D): the inverse of split_heads."""
    b, h, t, d = x.shape
    return x.reshape(b, t, h * d)
'''


add(
    Drill(
        id="tensors-split-merge-heads",
        title="Bug hunt: attention heads that mix tokens",
        kind="bughunt",
        topics=("tensors", "sequences"),
        difficulty=2,
        prompt="A multi-head attention layer uses split_heads and merge_heads. Their unit test, "
        "merge_heads(split_heads(x, h)) == x, passes, and every shape is right, yet the model learns no better "
        "than one that ignores which token is which. Fix the two functions (their docstrings are right).",
        entry="merge_heads",
        starter=HEADS_STARTER,
        hints=("The round trip passing proves only that the two functions undo each other. Print split_heads of a "
               "tensor whose features say which token they came from.",
               "A view keeps memory order: (B, T, H * D) can be viewed as (B, T, H, D), and only then may the "
               "T and H dimensions swap (transpose). merge_heads undoes it in reverse."),
        probe=_probe_heads,
    )
)


# --- view after a transpose (explain) ---------------------------------------------------------------------------

def _view_after_transpose_experiment() -> None:
    x = torch.arange(6).view(2, 3)
    y = x.t()
    print(f"x.stride() = {x.stride()}, y = x.t(): y.stride() = {y.stride()}, contiguous: {y.is_contiguous()}")
    try:
        y.view(6)
    except RuntimeError as error:
        print(f"y.view(6) raises RuntimeError: {str(error)[:90]}...")
    z = y.reshape(6)
    print(f"y.reshape(6) = {z.tolist()}, a copy: {z.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()}")


add(
    explain(
        id="tensors-view-after-transpose",
        title="view after a transpose",
        topics=("tensors",),
        difficulty=1,
        question="x = torch.arange(6).view(2, 3) and y = x.t(). What does y.view(6) do?",
        hints=("A view is the same memory with new shape and strides. Print y.stride().",
               "Can one stride step through 0, 3, 1, 4, 2, 5 in memory that holds 0, 1, 2, 3, 4, 5?"),
        experiment=_view_after_transpose_experiment,
    )
)


# --- a loss that broadcasts (B,) against (B, 1) -----------------------------------------------------------------

BROADCAST_BATCHES = (8, 5)


def broadcast_loss_inputs(case: Case, base: int, batch: int) -> tuple[nn.Linear, torch.Tensor, torch.Tensor]:
    """A linear model, inputs (batch, 3) and targets (batch, 1) from a linear relation (probe and judge alike)."""
    gen = torch.Generator().manual_seed(case.seeded(40 + base))
    model = nn.Linear(3, 1)
    with torch.no_grad():
        model.weight.copy_(torch.randn(1, 3, generator=gen))
        model.bias.copy_(torch.randn(1, generator=gen))
    x = torch.randn(batch, 3, generator=gen)
    y = x @ torch.tensor([[1.5], [-2.0], [0.5]]) + 0.3 + 0.1 * torch.randn(batch, 1, generator=gen)
    return model, x, y


def _probe_loss(answer: dict, *, case: Case) -> dict:
    results = []
    for base, batch in enumerate(BROADCAST_BATCHES):
        model, x, y = broadcast_loss_inputs(case, base, batch)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loss = answer["regression_loss"](model, x, y)
        graph = isinstance(loss, torch.Tensor) and loss.requires_grad and loss.numel() == 1
        if graph:
            loss.backward()
        results.append({"loss": loss, "graph": graph, "grads": [model.weight.grad, model.bias.grad]})
    return {"results": results}


LOSS_STARTER = '''import torch.nn.functional as F


def regression_loss(model, x, y):
    """Mean squared error of model(x), shape (B, 1), against the targets y, shape (B, 1)."""
    pred = model(x).squeeze(-1)
    return F.mse_loss(pred, y)
'''

add(
    Drill(
        id="loop-loss-broadcasting",
        title="Bug hunt: every prediction drifts to the mean",
        kind="bughunt",
        topics=("loop", "debugging"),
        difficulty=1,
        prompt="A regression model trained with regression_loss stalls at a loss near the variance of the targets, "
        "and all its predictions drift towards the mean target, whatever the input. Nothing raises. Fix "
        "regression_loss.",
        entry="regression_loss",
        starter=LOSS_STARTER,
        hints=("Print pred.shape, y.shape and the shape of (pred - y).",
               "(B,) against (B, 1) broadcasts to (B, B): compare tensors of the same shape."),
        probe=_probe_loss,
    )
)


def _broadcast_loss_experiment() -> None:
    pred, target = torch.arange(8.0), torch.arange(8.0).unsqueeze(1)  # perfect predictions
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loss = F.mse_loss(pred, target)
    print(f"(pred - target).shape = {tuple((pred - target).shape)}; F.mse_loss(pred, target) = {loss.item():.3f} "
          f"for perfect predictions; F.mse_loss(pred, target.squeeze(1)) = {F.mse_loss(pred, target.squeeze(1))}")
    print("warnings:", [str(w.message)[:80] for w in caught])


add(
    explain(
        id="loop-loss-broadcast-shape",
        title="MSE of (B,) against (B, 1)",
        topics=("loop", "tensors"),
        difficulty=1,
        question="pred has shape (8,) and target has shape (8, 1). What does F.mse_loss(pred, target) return?",
        hints=("Align the shapes from the right: (8,) against (8, 1).",
               "What is the shape of pred - target, and what does the default reduction do with it?"),
        experiment=_broadcast_loss_experiment,
    )
)
