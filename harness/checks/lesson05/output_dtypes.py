"""05-output-dtypes, the probe.

Call `output_dtypes` on each model and dtype; record what it returned and the hooks left behind.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from harness.checks.lesson05.common import REDUCED
from harness.contract.case import Case
from harness.contract.instruments import ForwardRecorder, collect
from harness.contract.registry import register


class _Upcast(nn.Module):
    """A module that leaves autocast's choice: its output is float32 whatever autocast does."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.float().softmax(dim=-1)


class _Recurrent(nn.Module):
    """A GRU whose last output feeds a linear head: tuple outputs inside the model."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.GRU(2, 8, batch_first=True)
        self.head = nn.Sequential(nn.Linear(8, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


def _dtype_models(case: Case) -> list[tuple[nn.Module, torch.Tensor]]:
    """Seeded (model, input) pairs, visible and hidden alike: an MLP, a CNN in eval mode, and a GRU model (tuple
    outputs inside a nested module)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(case.seeded(5 if case.hidden else 4))
        mlp = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.ReLU(), nn.Linear(16, 4), _Upcast())
        cnn = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.GELU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
        return [(mlp, torch.randn(6, 8)), (cnn.eval(), torch.randn(2, 3, 8, 8)), (_Recurrent(), torch.randn(3, 5, 2))]


def dtype_calls(case: Case) -> list[tuple[nn.Module, torch.Tensor, torch.dtype]]:
    """Every (model, input, autocast dtype) call of the case."""
    dtypes = REDUCED if case.hidden else (torch.float16, torch.bfloat16)
    return [(model, x, dtype) for model, x in _dtype_models(case) for dtype in dtypes]


def _hook_count(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


@register("05-output-dtypes")
def probe_output_dtypes(output_dtypes: Callable[..., dict], *, case: Case) -> dict:
    """Call `output_dtypes` on each model and dtype; record what it returned and the hooks left behind."""
    def record(call: tuple[nn.Module, torch.Tensor, torch.dtype]) -> dict:
        model, x, dtype = call
        first_leaf = next(m for m in model.modules() if not any(m.children()))  # runs in every forward
        with ForwardRecorder(first_leaf) as forwards:
            hooks_before = _hook_count(model)
            got = output_dtypes(model, x, "cpu", dtype)
            added = _hook_count(model) - hooks_before
        return {"returned": got, "hooks_added": added, "grad_enabled": [r.grad_enabled for r in forwards.records]}

    return {"results": collect(dtype_calls(case), record)}
