"""The dataset type every `harness.data` loader returns: a TensorDataset that knows its class names."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch.utils.data import TensorDataset


class LabeledTensorDataset(TensorDataset):
    """A `TensorDataset` of (input, target) with class names and an optional per-sample input transform.

    Keeping the whole set in two tensors makes statistics and splits one tensor operation each; the
    transform (e.g. a torchvision.transforms.v2 augmentation) runs per sample, on the input only.

    Args:
        inputs: float32 inputs, one row per sample.
        targets: targets, one row per sample.
        classes: class names, index i naming target i (empty for regression).
        transform: applied to each input when it is read.
    """

    def __init__(
        self,
        inputs: torch.Tensor,
        targets: torch.Tensor,
        *,
        classes: Sequence[str] = (),
        transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        super().__init__(inputs, targets)
        self.classes = tuple(classes)
        self.transform = transform

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        inputs, target = super().__getitem__(index)
        if self.transform is not None:
            inputs = self.transform(inputs)
        return inputs, target
