"""An airbench94-class network for 3x32x32 images, and its training recipe's hyperparameters.

After KellerJordan/cifar10-airbench (airbench94: 94% on CIFAR-10 in about 3 seconds on an A100): a 2x2
convolution stem (optionally set to whiten the images' 2x2 patches and frozen), three conv groups of widths
64/256/256 (conv, max-pool, batch norm, GELU, conv, batch norm, GELU), a final max-pool and a linear head
whose logits are scaled down by 9. Trained with Nesterov SGD, label smoothing, batch 1024, and a triangular
learning-rate schedule stepped every step. Left out of the original: lookahead/EMA of the weights, the
stem's bias schedule, alternating flips, test-time augmentation, and the fp16 weights (the speed path
trains fp32 weights under bf16 autocast).

Typical use (see `benchmarks/gpu_speedrun.py`):

    hyp = AirbenchHyperparameters()
    net = to_device(airbench_net(classes=10), "cuda")
    whiten_stem(net, train_images[:5000])          # before the optimizer: it freezes the stem
    optimizer = airbench_optimizer(net, hyp)
    scheduler = airbench_schedule(optimizer, total_steps=hyp.epochs * len(train_loader), hyp=hyp)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class AirbenchHyperparameters:
    """airbench94's published hyperparameters, with the learning rate and weight decay in decoupled form:
    each can be tuned without re-tuning the others (see `airbench_optimizer`).

    Attributes:
        batch_size: samples per step.
        epochs: airbench94 trains 9.9 epochs; whole epochs here.
        lr: learning rate per 1024 examples, before the momentum correction.
        momentum: Nesterov momentum.
        weight_decay: decay per 1024 examples, independent of the learning rate.
        bias_scaler: batch-norm biases learn this many times faster (their weight decay is unchanged).
        label_smoothing: of the cross-entropy loss.
        flip: random horizontal flips.
        translate: random translation by up to this many pixels.
        widths: channels of the three conv groups.
        batchnorm_momentum: weight of the old running statistics (torch's momentum is 1 minus this).
        logit_scale: the logits are multiplied by it.
        lr_start, lr_peak_at, lr_end: the triangular schedule: lr_start at step 0, 1 at the fraction
            lr_peak_at of training, lr_end at the last step (multiples of the learning rate).
    """

    batch_size: int = 1024
    epochs: int = 10
    lr: float = 11.5
    momentum: float = 0.85
    weight_decay: float = 0.0153
    bias_scaler: float = 64.0
    label_smoothing: float = 0.2
    flip: bool = True
    translate: int = 2
    widths: tuple[int, int, int] = (64, 256, 256)
    batchnorm_momentum: float = 0.6
    logit_scale: float = 1 / 9
    lr_start: float = 0.2
    lr_peak_at: float = 0.23
    lr_end: float = 0.07


class Scale(nn.Module):
    """Multiplies its input by a constant."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale


def _batch_norm(channels: int, momentum: float) -> nn.BatchNorm2d:
    """Batch norm with its scale frozen at 1: only the bias (shift) learns."""
    norm = nn.BatchNorm2d(channels, eps=1e-12, momentum=1 - momentum)
    norm.weight.requires_grad_(False)
    return norm


def _conv(channels_in: int, channels_out: int) -> nn.Conv2d:
    """3x3 'same' convolution without bias, initialised as the identity on its first input channels: each
    group starts close to passing its input through (an implicit residual connection)."""
    conv = nn.Conv2d(channels_in, channels_out, kernel_size=3, padding="same", bias=False)
    with torch.no_grad():
        nn.init.dirac_(conv.weight[:channels_in])
    return conv


class ConvGroup(nn.Sequential):
    """conv, 2x2 max-pool, batch norm, GELU, conv, batch norm, GELU: halves the resolution."""

    def __init__(self, channels_in: int, channels_out: int, batchnorm_momentum: float) -> None:
        super().__init__(
            _conv(channels_in, channels_out), nn.MaxPool2d(2), _batch_norm(channels_out, batchnorm_momentum),
            nn.GELU(),
            _conv(channels_out, channels_out), _batch_norm(channels_out, batchnorm_momentum), nn.GELU(),
        )


def airbench_net(classes: int = 10, widths: Sequence[int] = (64, 256, 256), *, batchnorm_momentum: float = 0.6,
                 logit_scale: float = 1 / 9) -> nn.Sequential:
    """The airbench94 network for (N, 3, 32, 32) images -> (N, classes) logits.

    Spatial sizes: 32 -> stem (2x2, no padding) 31 -> groups 15, 7, 3 -> max-pool 1.
    """
    stem_width = 2 * 3 * 2 * 2  # a 2x2 patch has 12 values: one filter per whitened direction, and its negative
    return nn.Sequential(
        nn.Conv2d(3, stem_width, kernel_size=2, padding=0, bias=True),
        nn.GELU(),
        ConvGroup(stem_width, widths[0], batchnorm_momentum),
        ConvGroup(widths[0], widths[1], batchnorm_momentum),
        ConvGroup(widths[1], widths[2], batchnorm_momentum),
        nn.MaxPool2d(3),
        nn.Flatten(),
        nn.Linear(widths[2], classes, bias=False),
        Scale(logit_scale),
    )


@torch.no_grad()
def whiten_stem(net: nn.Sequential, images: torch.Tensor, eps: float = 5e-4) -> None:
    """Set the stem's filters to whiten the 2x2 patches of `images` (normalised training images), and freeze
    them. Each filter projects a patch on one eigenvector of the patches' covariance, divided by the square
    root of its eigenvalue; the other half of the filters are the negatives (GELU follows).

    Call it before building the optimizer, which must leave the frozen filters out.
    """
    stem = net[0]
    channels, (height, width) = images.shape[1], stem.kernel_size
    # every 2x2 patch as a row: (N, C, H', W', h, w) -> (N * H' * W', C * h * w)
    patches = images.float().unfold(2, height, 1).unfold(3, width, 1)
    patches = patches.permute(0, 2, 3, 1, 4, 5).reshape(-1, channels * height * width)
    covariance = patches.T @ patches / len(patches)
    eigenvalues, eigenvectors = torch.linalg.eigh(covariance)
    filters = (eigenvectors.T / torch.sqrt(eigenvalues + eps)[:, None]).reshape(-1, channels, height, width)
    stem.weight.copy_(torch.cat([filters, -filters]))
    stem.weight.requires_grad_(False)


def airbench_optimizer(net: nn.Module, hyp: AirbenchHyperparameters, *, fused: bool | None = None) -> torch.optim.SGD:
    """Nesterov SGD with airbench's decoupled learning rate and weight decay, for a loss averaged over the batch.

    With momentum m, steady gradients make steps 1 + 1/(1 - m) times the gradient: dividing by that (and
    by 1024 examples) makes `hyp.lr` a step size independent of the momentum. torch's SGD multiplies the
    weight decay by the learning rate, so each group's decay is divided by its rate: the decay per step is
    the same for every group and does not change when the rate does. Batch-norm biases get `bias_scaler`
    times the rate. Frozen parameters are left out.

    Args:
        net: the network, already on its device.
        hyp: the hyperparameters.
        fused: use the fused kernel (one launch for all parameters); None: on CUDA and CPU, where torch has one.
    """
    kilostep_scale = 1024 * (1 + 1 / (1 - hyp.momentum))
    lr = hyp.lr * hyp.batch_size / kilostep_scale  # the mean loss's gradient is 1/batch_size of the sum's
    decay = hyp.weight_decay * hyp.batch_size / kilostep_scale  # shrink factor per step, for every group
    norm_biases = [p for m in net.modules() if isinstance(m, nn.BatchNorm2d) for p in m.parameters() if p.requires_grad]
    others = [p for p in net.parameters() if p.requires_grad and all(p is not q for q in norm_biases)]
    bias_lr = lr * hyp.bias_scaler
    groups = [{"params": others, "lr": lr, "weight_decay": decay / lr},
              {"params": norm_biases, "lr": bias_lr, "weight_decay": decay / bias_lr}]
    if fused is None:
        fused = next(net.parameters()).device.type in ("cuda", "cpu")
    return torch.optim.SGD(groups, lr=lr, momentum=hyp.momentum, nesterov=True, fused=fused)


def airbench_schedule(optimizer: torch.optim.Optimizer, total_steps: int,
                      hyp: AirbenchHyperparameters) -> torch.optim.lr_scheduler.LambdaLR:
    """The triangular schedule, to step after every optimizer step: linear from `lr_start` to 1 at
    `lr_peak_at` of the steps, then linear to `lr_end` at `total_steps`."""
    peak = max(1, round(hyp.lr_peak_at * total_steps))

    def factor(step: int) -> float:
        if step < peak:
            return hyp.lr_start + (1 - hyp.lr_start) * step / peak
        return 1 + (hyp.lr_end - 1) * min(1.0, (step - peak) / max(1, total_steps - peak))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def airbench_loss(hyp: AirbenchHyperparameters) -> nn.CrossEntropyLoss:
    """Cross-entropy with the recipe's label smoothing, averaged over the batch."""
    return nn.CrossEntropyLoss(label_smoothing=hyp.label_smoothing)
