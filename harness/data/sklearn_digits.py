"""The real 8x8 handwritten digits bundled with scikit-learn (UCI optical digits): offline, 1797 images."""

from __future__ import annotations

import torch

from harness.data.tensors import LabeledTensorDataset

_MAX_PIXEL = 16.0  # the bundled images store ink as integers 0..16


def digits() -> LabeledTensorDataset:
    """The scikit-learn digits as tensors.

    Returns:
        A dataset of X (1797, 1, 8, 8) float32 in [0, 1] and y (1797,) int64 in 0..9, classes "0".."9".
    """
    from sklearn.datasets import load_digits  # imported here: two seconds that code not reading digits never pays

    bunch = load_digits()
    images = torch.as_tensor(bunch.images, dtype=torch.float32).unsqueeze(1) / _MAX_PIXEL
    labels = torch.as_tensor(bunch.target, dtype=torch.int64)
    return LabeledTensorDataset(images, labels, classes=tuple(str(name) for name in bunch.target_names))
