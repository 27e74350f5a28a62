"""What several fine-tuning drill groups share: which parameters moved, and the recorded optimizer steps."""

from __future__ import annotations

import torch

from harness.contract.compare import close_values, malformed
from harness.contract.failure import fail


def changed_entries(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor], prefix: str,
                    keys: tuple[str, ...] = ("weight", "bias")) -> list[str]:
    """Names under `prefix` whose `after` value differs from `before` (or is missing / misshapen)."""
    out = []
    for name, want in before.items():
        if not name.startswith(prefix) or name.rsplit(".", 1)[-1] not in keys:
            continue
        if not close_values(after.get(name), want, atol=1e-7, rtol=0, dtype=False):
            out.append(name)
    return out


def counted_steps(seen: dict, n: int, where: str) -> list[dict]:
    """The recorded optimizer steps, checked to be `n` (fail [wrong-step-count] otherwise)."""
    steps = seen.get("steps")
    if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
        malformed("the step records are not a list of dicts")
    if len(steps) != n:
        fail("wrong-step-count", observed=f"optimizer.step() ran {len(steps)} times",
             expected=f"{n} steps, one per batch", cause="a loop that skips or repeats batches, or no optimizer",
             where=where)
    return steps
