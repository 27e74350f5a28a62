"""Fine-tuning support for lesson 14: the course's own pretrained backbone, and small helpers around it.

Nothing can be downloaded while the course runs, so the "pretrained model" is one the course trains itself:
a small CNN (`TransferNet`: a `backbone` of conv blocks and a linear `head`) trained on three of the five
procedural shapes (`harness.data.shapes` at 16x16 pixels: circle, square, triangle). Its weights ship as
`harness/pretrained/shapes_backbone.safetensors` (safetensors: plain tensors, never pickle), and
`pretrain_backbone` reproduces them in seconds on a CPU:

    model = pretrain_backbone()                 # about 10 s on two CPU cores
    save_pretrained(model, PRETRAINED_PATH)     # what the shipped file is

The transfer task of the lesson is all five shapes (the cross and the ring are new) from a few labels each.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from harness.data import shapes
from harness.models import conv_block

# Where the shipped weights live (package data: pyproject's `**/*.safetensors`).
PRETRAINED_PATH = Path(__file__).parent / "pretrained" / "shapes_backbone.safetensors"
# The image size, width and classes (indices into SHAPE_CLASSES) the shipped backbone was trained at.
IMAGE_SIZE = 16
WIDTH = 16
PRETRAIN_CLASSES: tuple[int, ...] = (0, 1, 2)  # circle, square, triangle
# The accuracy the shipped weights reach on held-out shapes of their classes
# (`shape_subset(2000, seed=PRETRAIN_TEST_SEED)`); tests/test_finetune.py holds them to it.
PRETRAINED_MIN_ACCURACY = 0.88
PRETRAIN_TEST_SEED = 12345


class TransferNet(nn.Module):
    """A CNN in two named parts, as fine-tuning sees a model: `backbone` (features) and `head` (classifier).

    The backbone is three conv blocks (conv 3x3 without bias, BatchNorm, ReLU, 2x2 max pool: 16 -> 8 -> 4 -> 2),
    a global average pool and a flatten, giving `features` numbers per image; the head is one linear layer.
    State-dict keys start with "backbone." or "head.".
    """

    def __init__(self, classes: int = len(PRETRAIN_CLASSES), width: int = WIDTH) -> None:
        """Args:
            classes: outputs of the head.
            width: channels of the first conv block (then 2x and 4x).

        Raises:
            ValueError: classes or width below 1.
        """
        super().__init__()
        if classes < 1 or width < 1:
            raise ValueError(f"TransferNet(classes={classes}, width={width}): both must be at least 1.")
        self.features = 4 * width
        self.backbone = nn.Sequential(
            conv_block(3, width),              # (N, w, H/2, W/2)
            conv_block(width, 2 * width),      # (N, 2w, H/4, W/4)
            conv_block(2 * width, 4 * width),  # (N, 4w, H/8, W/8)
            nn.AdaptiveAvgPool2d(1),           # (N, 4w, 1, 1)
            nn.Flatten(),                      # (N, 4w)
        )
        self.head = nn.Linear(self.features, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(N, 3, H, W) images -> (N, classes) logits."""
        return self.head(self.backbone(x))


def count_parameters(model: nn.Module, *, trainable_only: bool = True) -> int:
    """The number of parameter entries of `model` (only those that require grad, by default).

    Args:
        model: any module.
        trainable_only: count only parameters with requires_grad True.

    Returns:
        The total number of scalars.
    """
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def save_pretrained(model: nn.Module, path: str | Path = PRETRAINED_PATH) -> Path:
    """Save `model`'s state dict (parameters and buffers) as safetensors at `path`.

    Returns:
        The path written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}, str(path))
    return path


def pretrained_state_dict(path: str | Path = PRETRAINED_PATH) -> dict[str, torch.Tensor]:
    """The shipped checkpoint as a fresh dict of CPU tensors: "backbone.*" and the shapes "head.*" keys.

    Raises:
        FileNotFoundError: no file at `path` (rebuild it with `pretrain_backbone` and `save_pretrained`).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: rebuild it with save_pretrained(pretrain_backbone(), path).")
    return load_file(str(path))


def pretrained_backbone(path: str | Path = PRETRAINED_PATH) -> TransferNet:
    """The shipped `TransferNet`, pretrained on circles, squares and triangles, loaded strictly, in eval mode, on
    the CPU.

    Raises:
        FileNotFoundError: the weights file is missing.
        RuntimeError: the file does not match the architecture (missing, unexpected or mis-shaped keys).
    """
    model = TransferNet()
    model.load_state_dict(pretrained_state_dict(path), strict=True)
    return model.eval()


def shape_subset(n: int, *, seed: int, classes: tuple[int, ...] = PRETRAIN_CLASSES,
                 size: int = IMAGE_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """The images of `classes` among `harness.data.shapes(n, seed=seed, size=size)`.

    Labels keep their index in `SHAPE_CLASSES`, so with the default classes (0, 1, 2) they are the pretrained
    head's outputs.

    Returns:
        X (m, 3, size, size) float32 and y (m,) int64, m <= n: about n * len(classes) / 5 images.
    """
    inputs, labels = shapes(n, seed=seed, size=size).tensors
    keep = torch.isin(labels, torch.tensor(classes))
    return inputs[keep], labels[keep]


@torch.no_grad()
def accuracy(model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor, *, batch_size: int = 512) -> float:
    """Top-1 accuracy of `model` on (inputs, labels), in eval mode (restores the model's mode afterwards).

    Inputs are moved to the model's device batch by batch; one host sync at the end.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    correct = torch.zeros((), dtype=torch.int64, device=device)
    for start in range(0, len(inputs), batch_size):
        x = inputs[start:start + batch_size].to(device)
        y = labels[start:start + batch_size].to(device)
        correct += (model(x).argmax(1) == y).sum()
    model.train(was_training)
    return correct.item() / max(len(inputs), 1)


def pretrain_backbone(*, seed: int = 0, n: int = 8000, epochs: int = 10, batch_size: int = 128, lr: float = 5e-3,
                      device: str | torch.device = "cpu") -> TransferNet:
    """Train a `TransferNet` on circles, squares and triangles from scratch: how the shipped weights were made.

    AdamW with a one-cycle schedule on `shape_subset(n, seed=seed)`, batches drawn from a seeded generator.
    With the defaults, about 10 s on two CPU cores, reaching at least `PRETRAINED_MIN_ACCURACY` on
    `shape_subset(2000, seed=PRETRAIN_TEST_SEED)`.

    Args:
        seed: seeds the data, the initialisation and the batch order.
        n: shapes drawn; the images of `PRETRAIN_CLASSES` among them (about 3/5) are the training set.
        epochs: passes over them.
        batch_size: images per step.
        lr: the peak learning rate.
        device: where to train.

    Returns:
        The trained model, in eval mode, on the CPU.
    """
    generator = torch.Generator().manual_seed(seed)
    inputs, labels = shape_subset(n, seed=seed)
    with torch.random.fork_rng(devices=[]):  # the initialisation draws from the global RNG: seed it, then restore
        torch.manual_seed(seed)
        model = TransferNet()
    model = model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    steps_per_epoch = len(inputs) // batch_size
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=epochs * steps_per_epoch)
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(inputs), generator=generator)
        for step in range(steps_per_epoch):
            index = order[step * batch_size:(step + 1) * batch_size]
            x, y = inputs[index].to(device), labels[index].to(device)
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
    return model.cpu().eval()
