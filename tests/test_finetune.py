"""harness.finetune: the shipped pretrained backbone loads strictly and does its own task; pretrain_backbone
trains one; the helpers count, save, load and measure what they say."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from harness.finetune import (
    IMAGE_SIZE,
    PRETRAIN_CLASSES,
    PRETRAIN_TEST_SEED,
    PRETRAINED_MIN_ACCURACY,
    PRETRAINED_PATH,
    TransferNet,
    accuracy,
    count_parameters,
    pretrain_backbone,
    pretrained_backbone,
    pretrained_state_dict,
    save_pretrained,
    shape_subset,
)


def test_the_shipped_weights_load_strictly_and_reach_the_stated_accuracy():
    on_disk = load_file(str(PRETRAINED_PATH))
    expected = TransferNet().state_dict()
    assert list(sorted(on_disk)) == sorted(expected)
    assert all(on_disk[k].shape == expected[k].shape for k in expected)
    model = pretrained_backbone()  # load_state_dict(strict=True) inside
    assert not model.training
    inputs, labels = shape_subset(2000, seed=PRETRAIN_TEST_SEED)
    assert accuracy(model, inputs, labels) >= PRETRAINED_MIN_ACCURACY


def test_pretrain_backbone_trains_is_seeded_and_leaves_the_global_rng_alone():
    """A tiny run (the full one, with the defaults, made the shipped file that the test above holds to its
    accuracy): it updates the weights, repeats exactly, and leaves the caller's random stream as it was."""
    torch.manual_seed(123)
    state = torch.get_rng_state()
    model = pretrain_backbone(n=500, epochs=2, batch_size=64)
    assert torch.equal(torch.get_rng_state(), state)
    assert isinstance(model, TransferNet) and not model.training
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        initial = TransferNet()
    assert not torch.equal(model.head.weight, initial.head.weight)
    assert int(model.backbone[0][1].num_batches_tracked) == 2 * (len(shape_subset(500, seed=0)[0]) // 64)
    again = pretrain_backbone(n=500, epochs=2, batch_size=64)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values(),
                                                 strict=True))


def test_shape_subset_keeps_only_the_classes_asked_for():
    inputs, labels = shape_subset(300, seed=1)
    assert set(labels.tolist()) == set(PRETRAIN_CLASSES)
    assert inputs.shape[1:] == (3, IMAGE_SIZE, IMAGE_SIZE) and len(inputs) == len(labels) < 300
    _, others = shape_subset(300, seed=1, classes=(3, 4))
    assert set(others.tolist()) == {3, 4}


def test_transfer_net_has_a_backbone_and_a_head():
    model = TransferNet(classes=7, width=4)
    assert model(torch.rand(2, 3, 16, 16)).shape == (2, 7)
    assert {k.split(".")[0] for k in model.state_dict()} == {"backbone", "head"}
    assert model.backbone(torch.rand(2, 3, 32, 32)).shape == (2, model.features)
    with pytest.raises(ValueError):
        TransferNet(classes=0)


def test_count_parameters_counts_trainable_ones_by_default():
    model = TransferNet(classes=2, width=4)
    total = sum(p.numel() for p in model.parameters())
    assert count_parameters(model) == total
    model.backbone.requires_grad_(False)
    assert count_parameters(model) == 4 * 4 * 2 + 2
    assert count_parameters(model, trainable_only=False) == total


def test_save_and_load_round_trip_and_strict_loading(tmp_path):
    model = TransferNet(width=4)
    path = save_pretrained(model, tmp_path / "sub" / "weights.safetensors")
    loaded = pretrained_state_dict(path)
    assert all(torch.equal(loaded[k], v) for k, v in model.state_dict().items())
    broken = dict(pretrained_state_dict())
    del broken["backbone.0.1.running_var"]
    save_file(broken, str(tmp_path / "broken.safetensors"))
    with pytest.raises(RuntimeError, match="running_var"):
        pretrained_backbone(tmp_path / "broken.safetensors")
    with pytest.raises(FileNotFoundError, match="pretrain_backbone"):
        pretrained_state_dict(tmp_path / "absent.safetensors")


def test_accuracy_measures_in_eval_mode_and_restores_the_mode():
    class Threshold(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = nn.Parameter(torch.ones(()))
            self.dropout = nn.Dropout(0.9)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.dropout(x) * self.scale  # eval mode: no dropout, so the answer is exact
            return torch.stack([-x, x], dim=1)

    model = Threshold().train()
    inputs = torch.tensor([-2.0, -1.0, 1.0, 3.0])
    assert accuracy(model, inputs, torch.tensor([0, 0, 1, 0]), batch_size=3) == 0.75
    assert model.training
