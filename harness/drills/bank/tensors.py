"""Drills on tensors: numerics, broadcasting, views."""

from __future__ import annotations

import torch

from harness.checks.core import fail
from harness.drills.core import Drill, add
from harness.drills.support import assert_close, multiple_choice


def _check_logsumexp(ns: dict) -> str:
    logsumexp = ns["logsumexp"]
    for seed, shape, dim in ((0, (4, 7), 1), (1, (3, 5, 2), 0), (2, (6,), 0), (3, (2, 3, 4), -1)):
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(shape, generator=gen) * 5
        assert_close("logsumexp(x, dim)", logsumexp(x, dim), torch.logsumexp(x, dim), atol=1e-5, rtol=1e-5,
                     where="logsumexp", cause="the reduction or the max subtraction is off")
    extreme = torch.tensor([[1000.0, 1000.0, -1000.0], [-1000.0, -1000.0, -1000.0]])
    assert_close("logsumexp of ±1000", logsumexp(extreme, 1), torch.logsumexp(extreme, 1), atol=1e-4, rtol=1e-5,
                 where="logsumexp", cause="exp(1000) overflows: subtract the max before exp and add it back after")
    inf_row = torch.tensor([[-float("inf"), -float("inf")], [0.0, -float("inf")]])
    got = logsumexp(inf_row, 1)
    if not torch.equal(got, torch.logsumexp(inf_row, 1)):
        fail("all-inf-row", observed=f"logsumexp of a row of -inf gave {got.tolist()}", expected="[-inf, 0.0]",
             cause="max is -inf, and -inf - (-inf) is nan: replace a non-finite max by 0 before subtracting",
             where="the max you subtract")
    return "matches torch.logsumexp on random and extreme inputs, -inf rows included"


add(
    Drill(
        id="tensors-logsumexp",
        title="A numerically stable logsumexp",
        kind="write",
        topics=("tensors",),
        difficulty=2,
        prompt="Write logsumexp(x, dim) = log(sum(exp(x), dim)) without overflow for inputs like 1000, and "
        "correct for rows of -inf. Do not call torch.logsumexp.",
        entry="logsumexp",
        starter="import torch\n\n\ndef logsumexp(x: torch.Tensor, dim: int) -> torch.Tensor:\n"
        "    raise NotImplementedError\n",
        solution=(
            "import torch\n\n\ndef logsumexp(x: torch.Tensor, dim: int) -> torch.Tensor:\n"
            "    m = x.amax(dim=dim, keepdim=True)\n"
            "    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))\n"
            "    return (x - m).exp().sum(dim=dim).log() + m.squeeze(dim)\n"
        ),
        hints=("exp overflows for x > 88 in float32. What can you subtract from every element first?",
               "Subtract m = max along dim, compute log(sum(exp(x - m))) and add m back; guard m = -inf."),
        check=_check_logsumexp,
        wrong_answers=(
            "import torch\n\ndef logsumexp(x, dim):\n    return x.exp().sum(dim).log()\n",
            "import torch\n\ndef logsumexp(x, dim):\n    m = x.amax(dim, keepdim=True)\n"
            "    return (x - m).exp().sum(dim).log() + m.squeeze(dim)\n",
        ),
    )
)


def _check_pairwise(ns: dict) -> str:
    pairwise = ns["pairwise_sq_dists"]
    for seed, (n, m, d) in enumerate(((5, 3, 4), (1, 7, 2), (6, 6, 1), (4, 9, 16))):
        gen = torch.Generator().manual_seed(seed)
        a, b = torch.randn(n, d, generator=gen), torch.randn(m, d, generator=gen)
        assert_close("pairwise_sq_dists(a, b)", pairwise(a, b), torch.cdist(a, b) ** 2, atol=1e-4, rtol=1e-4,
                     where="pairwise_sq_dists", cause="broadcast a to (n, 1, d) and b to (1, m, d)")
    return "matches cdist² for several (n, m, d), without loops"


add(
    Drill(
        id="tensors-pairwise-distances",
        title="Pairwise squared distances by broadcasting",
        kind="write",
        topics=("tensors",),
        difficulty=1,
        prompt="Given a (n, d) and b (m, d), return the (n, m) matrix of squared Euclidean distances, "
        "with broadcasting and no Python loops.",
        entry="pairwise_sq_dists",
        starter="import torch\n\n\ndef pairwise_sq_dists(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:\n"
        "    raise NotImplementedError\n",
        solution="import torch\n\n\ndef pairwise_sq_dists(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:\n"
        "    return ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)\n",
        hints=("Make the shapes (n, 1, d) and (1, m, d); their difference broadcasts to (n, m, d).",
               "((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)"),
        check=_check_pairwise,
        wrong_answers=("import torch\n\ndef pairwise_sq_dists(a, b):\n    return ((a - b) ** 2).sum(-1)\n",
                       "import torch\n\ndef pairwise_sq_dists(a, b):\n"
                       "    return ((a[:, None] - b[None]) ** 2).sum(0)\n"),
    )
)


def _broadcast_experiment() -> None:
    a, b = torch.zeros(3, 1), torch.zeros(4)
    print(f"(3, 1) + (4,) -> {tuple((a + b).shape)}: shapes align from the right; size-1 dims stretch.")


add(
    multiple_choice(
        id="tensors-broadcast-shape",
        title="Predict a broadcast shape",
        topics=("tensors",),
        difficulty=1,
        prompt="x has shape (3, 1) and y has shape (4,). What is the shape of x + y?\n"
        "  a) an error   b) (3, 4)   c) (3, 1)   d) (4, 3)\n",
        correct="b",
        explanation="(3, 1) + (4,) broadcasts to (3, 4)",
        hints=("Align the shapes from the right: (3, 1) against (_, 4).",
               "A size-1 dimension stretches to match; a missing leading dimension is treated as 1."),
        wrong=("a", "d"),
        experiment=_broadcast_experiment,
    )
)
