"""Exact resume: a run killed (SIGKILL) after epoch k and resumed in a fresh process ends with the same
weights and history, bit for bit, as a run that was never interrupted (CPU, fp32 and bf16), with dropout,
shuffling, a per-step scheduler and early stopping in play, loading in this process or in DataLoader workers
(persistent or not). `test_resume_torture.py` kills at random moments instead of between epochs."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import torch

from harness.history import TIMING_COLUMNS

SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
    from harness.metrics import accuracy
    from harness.train import EarlyStopping, fit

    checkpoint_dir, precision, kill_after, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    workers, persistent = int(sys.argv[5]), sys.argv[6] == "persistent"
    torch.set_num_threads(1)
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(208, 8, generator=generator)
    targets = (inputs[:, :2].sum(dim=1) + 0.5 * torch.randn(208, generator=generator) > 0).long()
    options = dict(batch_size=16, num_workers=workers, persistent_workers=persistent)
    train = DataLoader(TensorDataset(inputs[:176], targets[:176]), shuffle=True,
                       generator=torch.Generator().manual_seed(2), **options)
    val = DataLoader(TensorDataset(inputs[176:], targets[176:]), **options)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-2)
    warmup_then_decay = lambda step: min(1.0, (step + 1) / 10) * 0.97 ** step
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_then_decay)

    def die_after(epoch, row):
        if epoch == kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    history = fit(model, train, val, loss_fn=nn.CrossEntropyLoss(), optimizer=optimizer, epochs=7,
                  precision=precision, max_grad_norm=1.0, scheduler=scheduler, scheduler_interval="step",
                  metrics={"accuracy": accuracy}, early_stopping=EarlyStopping("val_loss", patience=2, min_delta=0.01),
                  checkpoint_dir=checkpoint_dir, resume=True, on_epoch_end=die_after, progress=False)
    torch.save(model.state_dict(), out)
    history.to_pickle(out + ".history.pkl")
    """
)


def _train(tmp_path: Path, name: str, precision: str, kill_after: int, loading: str) -> subprocess.CompletedProcess:
    script = tmp_path / "train_script.py"
    script.write_text(SCRIPT)
    out = tmp_path / f"{name}.pt"
    workers, persistent = ("0", "-") if loading == "in-process" else ("2", loading)
    args = [sys.executable, str(script), str(tmp_path / name), precision, str(kill_after), str(out), workers,
            persistent]
    return subprocess.run(args, capture_output=True, text=True, timeout=300)


def _results(tmp_path: Path, name: str) -> tuple[dict[str, torch.Tensor], pd.DataFrame]:
    weights = torch.load(tmp_path / f"{name}.pt", weights_only=True)
    history = pd.read_pickle(tmp_path / f"{name}.pt.history.pkl")
    return weights, history.drop(columns=list(TIMING_COLUMNS))


@pytest.mark.slow
@pytest.mark.parametrize(("precision", "loading"), [("fp32", "in-process"), ("bf16", "in-process"),
                                                   ("fp32", "persistent"), ("bf16", "workers")])
def test_killed_and_resumed_run_equals_the_uninterrupted_run(tmp_path, precision, loading):
    whole = _train(tmp_path, "whole", precision, kill_after=0, loading=loading)
    assert whole.returncode == 0, whole.stderr

    killed = _train(tmp_path, "resumed", precision, kill_after=3, loading=loading)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert torch.load(tmp_path / "resumed" / "last.pt", weights_only=True)["epoch"] == 3
    resumed = _train(tmp_path, "resumed", precision, kill_after=0, loading=loading)
    assert resumed.returncode == 0, resumed.stderr

    whole_weights, whole_history = _results(tmp_path, "whole")
    resumed_weights, resumed_history = _results(tmp_path, "resumed")
    assert len(whole_history) >= 4  # the run went past the kill point
    for name, tensor in whole_weights.items():
        assert torch.equal(tensor, resumed_weights[name]), name
    pd.testing.assert_frame_equal(whole_history, resumed_history, check_exact=True)
    best = torch.load(tmp_path / "resumed" / "best.pt", weights_only=True)
    last = torch.load(tmp_path / "resumed" / "last.pt", weights_only=True)
    assert best["epoch"] == last["early_stopping"]["best_epoch"]
