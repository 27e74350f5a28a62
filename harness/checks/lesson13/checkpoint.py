"""13-checkpoint, the probe.

Run the student's forward under a seed; record the output, what was saved outside the checkpoints, the
output's grad_fn, the parameters' gradients after a seeded backward, and the order in which the blocks ran
and got their gradients (a block checkpointed on its own is run again in backward right before its
gradient; one checkpoint around several blocks runs them all again before the first of their gradients).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from harness.contract.case import Case
from harness.contract.instruments import collect
from harness.contract.registry import register


def _blocks(seed: int, width: int, depth: int) -> nn.ModuleList:
    """`depth` blocks Linear -> GELU -> Dropout(0.25), seeded, in training mode (dropout active)."""
    generator = torch.Generator().manual_seed(seed)
    blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.Dropout(0.25)) for _ in range(depth))
    with torch.no_grad():
        for p in blocks.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) / width**0.5)
    return blocks.train()


def checkpoint_cases(case: Case) -> list[tuple[int, int, int, int]]:
    """(seed, batch, width, depth) of each call."""
    if case.hidden:
        return [(case.seeded(141), 5, 12, 3), (case.seeded(142), 7, 6, 1)]
    return [(case.seeded(140), 6, 16, 4)]


def checkpoint_inputs(seed: int, batch: int, width: int, depth: int) -> tuple[nn.ModuleList, torch.Tensor,
                                                                             torch.Tensor]:
    """The blocks, input and upstream gradient of one checkpointing case."""
    blocks = _blocks(seed, width, depth)
    generator = torch.Generator().manual_seed(seed + 1000)
    x = torch.randn(batch, width, generator=generator)  # data: it does not require grad
    upstream = torch.randn(batch, width, generator=generator)
    return blocks, x, upstream


@register("13-checkpoint")
def probe_checkpoint(checkpointed_forward: Callable[[nn.ModuleList, torch.Tensor], torch.Tensor], *,
                     case: Case) -> dict:
    """Run the student's forward under a seed; record the output, what was saved outside the checkpoints, the
    output's grad_fn, the parameters' gradients after a seeded backward, and the blocks' runs and gradients in
    the order they happened."""
    def record(item: tuple[int, int, int, int]) -> dict:
        seed, batch, width, depth = item
        blocks, x, upstream = checkpoint_inputs(seed, batch, width, depth)
        events: list[list[str | int]] = []  # ["run", i]: block i's forward began; ["grad", i]: its weight's gradient
        for index, block in enumerate(blocks):
            block.register_forward_pre_hook(lambda module, args, index=index: events.append(["run", index]))
            block[0].weight.register_hook(lambda grad, index=index: events.append(["grad", index]))
        saved: list[tuple[list[int], str]] = []
        excluded = {p.untyped_storage().data_ptr() for p in blocks.parameters()}

        def pack(tensor: torch.Tensor) -> torch.Tensor:
            if tensor.untyped_storage().data_ptr() not in excluded:
                saved.append(list(tensor.shape))
            return tensor

        torch.manual_seed(seed)  # dropout draws from the global generator, as in training
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            out = checkpointed_forward(blocks, x)
        grads, forward_runs = None, len(events)
        if isinstance(out, torch.Tensor) and out.requires_grad:
            out.backward(upstream)
            grads = [None if p.grad is None else p.grad.clone() for p in blocks.parameters()]
        grad_fn = type(out.grad_fn).__name__ if isinstance(out, torch.Tensor) and out.grad_fn is not None else None
        return {"out": out.detach() if isinstance(out, torch.Tensor) else out, "saved": saved,
                "grad_fn": grad_fn, "grads": grads, "forward": events[:forward_runs],
                "backward": events[forward_runs:]}

    return {"results": collect(checkpoint_cases(case), record)}
