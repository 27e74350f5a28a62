"""15-attention, the probe.

Call `attention` on each case's inputs (copies) with the torch calls recorded; record the outputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from harness.contract.case import Case
from harness.contract.forbidden import CallRecorder
from harness.contract.instruments import collect
from harness.contract.registry import register


def attention_calls(case: Case) -> list[tuple[str, torch.Tensor, torch.Tensor, torch.Tensor,
                                               torch.Tensor | None, bool]]:
    """(description, q, k, v, mask, causal) of each call: no mask (more keys than queries), padding mask,
    causal mask, both, and both again with bfloat16 q, k and v (an output computed in float32 must come back in q's
    dtype). Hidden: other sizes and head dimensions, and a padding mask with more keys than queries."""
    generator = torch.Generator().manual_seed(case.seeded(155 if case.hidden else 154))
    plan = ([(3, 2, 4, 7, 8, None, False), (2, 2, 6, 6, 8, [6, 2, 4], True), (2, 1, 5, 5, 16, [5, 3], False),
             (3, 2, 3, 6, 4, [6, 1, 3], False), (1, 3, 4, 4, 2, None, True), (2, 2, 5, 5, 8, [5, 2], True, "bf16")]
            if case.hidden else
            [(2, 2, 3, 5, 4, None, False), (2, 2, 5, 5, 4, [5, 3], False), (2, 2, 4, 4, 4, None, True),
             (2, 2, 4, 4, 4, [4, 2], True), (2, 2, 4, 4, 4, [4, 3], True, "bf16")])
    calls = []
    for batch, heads, queries, keys, dim, lengths, causal, *low in plan:
        q = torch.randn(batch, heads, queries, dim, generator=generator)
        k = torch.randn(batch, heads, keys, dim, generator=generator)
        v = torch.randn(batch, heads, keys, dim, generator=generator)
        if low:
            q, k, v = (t.to(torch.bfloat16) for t in (q, k, v))
        mask = None if lengths is None else torch.arange(keys) < torch.tensor(lengths[:batch])[:, None]
        text = f"q {tuple(q.shape)}, k {tuple(k.shape)}, mask={'None' if lengths is None else f'lengths {lengths}'}"
        text = f"bfloat16 {text}" if low else text
        calls.append((f"{text}, causal={causal}", q, k, v, mask, causal))
    return calls


@register("15-attention")
def probe_attention(attention: Callable[..., Any], *, case: Case) -> dict:
    """Call `attention` on each case's inputs (copies) with the torch calls recorded; record the outputs."""
    with CallRecorder() as calls:
        def record(item: tuple[str, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, bool]) -> Any:
            _, q, k, v, mask, causal = item
            return attention(q.clone(), k.clone(), v.clone(), mask=None if mask is None else mask.clone(),
                             causal=causal)

        results = collect(attention_calls(case), record)
    return {"results": results, "calls": calls.seen}
