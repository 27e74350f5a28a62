"""What the AMP and clipping drill groups share: the clipping line of the reference step, and the check of a
recorded weight and bias."""

from __future__ import annotations

import torch

from harness.contract.compare import malformed

CLIP = "    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n"


def two_params(tensors: object) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate a recorded [weight (1, 8), bias (1,)] pair."""
    if (not isinstance(tensors, list) or len(tensors) != 2 or not all(isinstance(t, torch.Tensor) for t in tensors)
            or tuple(tensors[0].shape) != (1, 8) or tuple(tensors[1].shape) != (1,)):
        malformed("a recorded [weight, bias] pair is malformed")
    return tensors[0].float(), tensors[1].float()
