"""Reference models the course trains and benchmarks.

`capstone_cnn` is the one CNN for 3x32x32 images: the capstone lesson trains it, and the GPU benchmarks
(`benchmarks/gpu_precision.py`, `benchmarks/gpu_speedrun.py`) measure its speed, so the figures a student
reads in the capstone and the ones in `benchmarks/README.md` are about the same network.
"""

from __future__ import annotations

from torch import nn


def conv_block(channels_in: int, channels_out: int) -> nn.Sequential:
    """3x3 convolution, BatchNorm, ReLU, then 2x2 max pooling: halves height and width.

    The convolution has no bias: the BatchNorm right after it subtracts the mean, which would cancel one.
    """
    return nn.Sequential(
        nn.Conv2d(channels_in, channels_out, kernel_size=3, padding=1, bias=False),
        nn.BatchNorm2d(channels_out),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
    )


def capstone_cnn(classes: int = 5, width: int = 32) -> nn.Module:
    """The course's reference CNN for 3x32x32 images (the capstone's model and the GPU benchmarks' model).

    Four conv blocks double the channels while pooling halves the resolution (32 -> 16 -> 8 -> 4 -> 2),
    then a global average pool and a linear head. About 390k parameters at width 32 (100k at width 16);
    a training step on a batch of 256 takes about half a second on one CPU core at width 32.

    Args:
        classes: number of output classes (5 for `harness.data.shapes`, 10 for CIFAR-10).
        width: channels of the first block; the blocks have width, 2, 4 and 8 times width.

    Returns:
        An `nn.Sequential` mapping (N, 3, H, W) images (H, W at least 16) to (N, classes) logits.

    Raises:
        ValueError: classes or width below 1.
    """
    if classes < 1 or width < 1:
        raise ValueError(f"capstone_cnn(classes={classes}, width={width}): both must be at least 1.")
    return nn.Sequential(
        conv_block(3, width),            # (N, w, 16, 16)
        conv_block(width, 2 * width),    # (N, 2w, 8, 8)
        conv_block(2 * width, 4 * width),  # (N, 4w, 4, 4)
        conv_block(4 * width, 8 * width),  # (N, 8w, 2, 2)
        nn.AdaptiveAvgPool2d(1),         # (N, 8w, 1, 1)
        nn.Flatten(),                    # (N, 8w)
        nn.Linear(8 * width, classes),   # (N, classes)
    )
