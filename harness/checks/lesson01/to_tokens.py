"""01-to-tokens, the probe: Tokenise each input; record the tokens and the input as left, stopping at a view() error."""

from __future__ import annotations

from typing import Callable

import torch

from harness.checks.lesson01.common import _randn
from harness.contract.case import Case
from harness.contract.registry import register


def token_inputs(case: Case) -> list[torch.Tensor]:
    """Images to tokenise in every memory layout: contiguous, cropped, channels-last and strided (other
    shapes hidden, single pixels and single channels among them)."""
    shapes = ([(2, 3, 4, 5), (1, 4, 2, 2), (1, 1, 3, 1)] if not case.hidden
              else [(3, 8, 2, 7), (1, 1, 1, 1), (2, 5, 3, 1)])
    inputs = []
    for index, shape in enumerate(shapes):
        images = _randn(*shape, seed=case.seeded(index + (100 if case.hidden else 0)))
        # A crop of wider images: rows no longer back to back in memory.
        inputs += [images, _randn(*shape[:3], shape[3] + 3, seed=case.seeded(index + 7))[..., : shape[3]],
                   images.contiguous(memory_format=torch.channels_last),
                   _randn(*shape[:2], 2 * shape[2], shape[3], seed=case.seeded(9))[:, :, ::2]]
    return inputs


@register("01-to-tokens")
def probe_to_tokens(to_tokens: Callable[[torch.Tensor], torch.Tensor], *, case: Case) -> dict:
    """Tokenise each input; record the tokens and the input as left, stopping at a view() error."""
    results: list[dict] = []
    for x in token_inputs(case):
        try:
            tokens = to_tokens(x)
        except RuntimeError as error:
            if "view" not in str(error):
                raise
            results.append({"view_error": str(error)[:500]})
            break
        results.append({"tokens": tokens, "input_after": x})
    return {"results": results}
