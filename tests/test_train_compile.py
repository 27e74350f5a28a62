"""`fit(compile=True)`: the compiled model trains like the eager one and checkpoints hold plain keys."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from harness.train import fit


def train(compile: bool, checkpoint_dir=None) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    data = TensorDataset(torch.randn(64, 4, generator=torch.Generator().manual_seed(0)), torch.arange(64) % 2)
    fit(model, DataLoader(data, batch_size=16), loss_fn=nn.CrossEntropyLoss(),
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1), epochs=2, compile=compile,
        checkpoint_dir=checkpoint_dir, progress=False)
    return model


@pytest.mark.slow
def test_compiled_training_matches_eager_and_saves_unwrapped_weights(tmp_path):
    eager, compiled = train(False), train(True, tmp_path)
    for a, b in zip(eager.parameters(), compiled.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)  # fused kernels may round differently
    saved = torch.load(tmp_path / "last.pt", weights_only=True)["model"]
    assert set(saved) == set(eager.state_dict())
