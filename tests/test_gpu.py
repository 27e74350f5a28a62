"""`fit` on a CUDA GPU as students run it there: fp16 with a GradScaler, bf16, and a checkpoint saved on the GPU
and resumed on the CPU. Skipped without a GPU; `benchmarks/gpu_verify.py` runs them when one is lent."""

import pytest
import torch
from torch import nn

from harness.checkpoint import load_checkpoint
from harness.data import make_loaders, two_moons
from harness.env import bf16_supported
from harness.train import fit

pytestmark = pytest.mark.gpu


def _train(precision: str, folder, epochs: int = 4):
    torch.manual_seed(0)
    cuda = torch.device("cuda")
    loaders = make_loaders(two_moons(1024, seed=0), batch_size=64, device=cuda)
    model = nn.Sequential(nn.Linear(2, 64), nn.ReLU(), nn.Linear(64, 2)).to(cuda)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    history = fit(model, loaders.train, loaders.val, loss_fn=nn.CrossEntropyLoss(), optimizer=optimizer,
                  epochs=epochs, precision=precision, max_grad_norm=1.0, checkpoint_dir=folder, progress=False)
    return model, history


def test_fp16_with_a_grad_scaler_trains_and_saves_the_scaler(tmp_path):
    _, history = _train("fp16", tmp_path)
    losses = history["train_loss"].tolist()
    assert losses[-1] < losses[0] and all(torch.isfinite(torch.tensor(losses)))
    scaler = torch.load(tmp_path / "last.pt", map_location="cpu", weights_only=True)["scaler"]
    assert scaler.get("scale", 0) > 0  # fp16 needs the scaler, and its state is in the checkpoint


@pytest.mark.skipif(not torch.cuda.is_available() or not bf16_supported(torch.device("cuda")),
                    reason="needs a GPU with native bf16")
def test_bf16_trains_without_a_scaler(tmp_path):
    _, history = _train("bf16", tmp_path)
    assert history["train_loss"].iloc[-1] < history["train_loss"].iloc[0]
    assert torch.load(tmp_path / "last.pt", map_location="cpu", weights_only=True)["scaler"] == {}  # no scaler in bf16


def test_a_checkpoint_saved_on_the_gpu_loads_on_the_cpu(tmp_path):
    model, _ = _train("fp32", tmp_path, epochs=1)
    on_cpu = nn.Sequential(nn.Linear(2, 64), nn.ReLU(), nn.Linear(64, 2))
    load_checkpoint(tmp_path / "last.pt", model=on_cpu, map_location="cpu")
    for (name, gpu_value), cpu_value in zip(model.state_dict().items(), on_cpu.state_dict().values(), strict=True):
        assert cpu_value.device.type == "cpu" and torch.equal(gpu_value.cpu(), cpu_value), name
