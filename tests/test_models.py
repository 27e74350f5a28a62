"""`harness.models.capstone_cnn`: output shapes, size, memory formats and argument checks."""

from __future__ import annotations

import pytest
import torch

from harness.models import capstone_cnn


@pytest.mark.parametrize(("classes", "width", "size"), [(5, 32, 32), (10, 16, 32), (3, 8, 16)])
def test_output_shape(classes, width, size):
    model = capstone_cnn(classes=classes, width=width).eval()
    assert model(torch.randn(2, 3, size, size)).shape == (2, classes)


def test_parameter_count_is_a_few_hundred_thousand_at_width_32():
    count = sum(p.numel() for p in capstone_cnn().parameters())
    assert 200_000 < count < 600_000


def test_channels_last_gives_the_same_logits():
    torch.manual_seed(0)
    model, x = capstone_cnn(width=8).eval(), torch.randn(4, 3, 32, 32)
    expected = model(x)
    last = model.to(memory_format=torch.channels_last)(x.contiguous(memory_format=torch.channels_last))
    torch.testing.assert_close(last, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("classes", "width"), [(0, 32), (5, 0)])
def test_rejects_empty_layers(classes, width):
    with pytest.raises(ValueError, match="at least 1"):
        capstone_cnn(classes=classes, width=width)
