"""harness.data.shapes: deterministic, colour says nothing about the class, and a tiny CNN learns it."""

from __future__ import annotations

import pytest
import torch
from sklearn.linear_model import LogisticRegression
from torch import nn

from harness.data import SHAPE_CLASSES, make_loaders, shapes


def test_images_labels_and_classes() -> None:
    dataset = shapes(600, seed=0)
    images, labels = dataset.tensors
    assert images.shape == (600, 3, 32, 32) and images.dtype == torch.float32
    assert images.min() >= 0 and images.max() <= 1
    assert labels.dtype == torch.int64
    assert len(SHAPE_CLASSES) >= 4 and dataset.classes == SHAPE_CLASSES
    counts = torch.bincount(labels, minlength=len(SHAPE_CLASSES))
    assert counts.min() > 0.6 * 600 / len(SHAPE_CLASSES)


def test_same_seed_same_images_other_seed_other_images() -> None:
    first, again, other = shapes(50, seed=3), shapes(50, seed=3), shapes(50, seed=4)
    assert torch.equal(first.tensors[0], again.tensors[0]) and torch.equal(first.tensors[1], again.tensors[1])
    assert not torch.equal(first.tensors[0], other.tensors[0])


def test_other_sizes() -> None:
    images, _ = shapes(10, size=48).tensors
    assert images.shape == (10, 3, 48, 48)


def test_mean_colour_does_not_give_the_class_away() -> None:
    train_images, train_labels = shapes(2000, seed=0).tensors
    test_images, test_labels = shapes(1000, seed=1).tensors
    features = train_images.mean(dim=(2, 3)), test_images.mean(dim=(2, 3))
    accuracy = LogisticRegression(max_iter=1000).fit(features[0], train_labels).score(features[1], test_labels)
    assert accuracy < 1.5 / len(SHAPE_CLASSES)  # chance is 1 / classes


def tiny_cnn(classes: int) -> nn.Module:
    def block(inputs: int, outputs: int) -> list[nn.Module]:
        return [nn.Conv2d(inputs, outputs, 3, padding=1, bias=False), nn.BatchNorm2d(outputs), nn.ReLU()]

    return nn.Sequential(
        *block(3, 16), nn.MaxPool2d(2),  # 16x16
        *block(16, 32), nn.MaxPool2d(2),  # 8x8
        *block(32, 32), nn.AdaptiveMaxPool2d(1), nn.Flatten(),  # "is the shape anywhere": position invariant
        nn.Linear(32, classes),
    )


def validation_accuracy(model: nn.Module, loader) -> float:
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for images, labels in loader:
            correct += (model(images).argmax(dim=1) == labels).sum()
            total += len(labels)
    return float(correct) / total


def test_a_tiny_cnn_learns_the_shapes() -> None:
    torch.manual_seed(0)
    loaders = make_loaders(shapes(2500, seed=0), batch_size=32, val_fraction=0.2, test_fraction=0.0, device="cpu")
    model = tiny_cnn(len(SHAPE_CLASSES))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    accuracies = []
    for _ in range(8):  # usually above 90% after 5 epochs; stop as soon as it is
        model.train()
        for images, labels in loaders.train:
            loss = nn.functional.cross_entropy(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        accuracies.append(validation_accuracy(model, loaders.val))
        if accuracies[-1] >= 0.9:
            break
    assert accuracies[-1] >= 0.9, f"validation accuracy per epoch: {accuracies}"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n": 0}, "at least 1"),
        ({"n": 5, "size": 8}, "smaller than 16"),
        ({"n": 5, "scale": (0.2, 0.5)}, "fits inside the image"),
        ({"n": 5, "noise": (0.2, 0.1)}, "low <= high"),
    ],
)
def test_bad_arguments_are_rejected(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        shapes(**kwargs)
