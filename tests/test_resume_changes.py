"""A resume states what changed since `last.pt` (`harness.resume_policy`): a longer run on a rebuilt schedule
is applied (the new schedule from the checkpoint's step on) and recorded; a schedule too short for the longer
run, another batch size or fewer epochs are refused before anything is restored, and config.json is never
rewritten to hide a change. Tiny models on the CPU.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from harness.checkpoint import load_checkpoint
from harness.train import fit

BATCHES = 4  # per epoch


def make_loader(batch_size: int = 8) -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(32, 6, generator=generator)
    return DataLoader(TensorDataset(inputs, (inputs[:, 0] > 0).long()), batch_size=batch_size)


def one_cycle(optimizer, epochs: int):
    return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=epochs * BATCHES)


def cosine(optimizer, epochs: int):
    return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs * BATCHES)


def train(folder: Path | None, epochs: int, schedule_epochs: int, make_scheduler=one_cycle, batch_size: int = 8,
          **options) -> pd.DataFrame:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return fit(model, make_loader(batch_size), loss_fn=nn.CrossEntropyLoss(), optimizer=optimizer,
               scheduler=make_scheduler(optimizer, schedule_epochs), scheduler_interval="step", epochs=epochs,
               checkpoint_dir=folder, progress=False, **options)


@pytest.mark.parametrize("make_scheduler", [one_cycle, cosine], ids=["OneCycleLR", "CosineAnnealingLR"])
def test_a_longer_run_on_a_rebuilt_schedule_continues_on_the_new_schedule_and_says_so(tmp_path, capsys,
                                                                                         make_scheduler):
    train(tmp_path, epochs=2, schedule_epochs=2, make_scheduler=make_scheduler)  # finished: the lr reached its end
    resumed = train(tmp_path, epochs=4, schedule_epochs=4, make_scheduler=make_scheduler, resume=True)
    planned = train(None, epochs=4, schedule_epochs=4, make_scheduler=make_scheduler)  # long from the start

    # the lr of each resumed epoch's last step is the long schedule's, never the short one's restarting or crashing
    assert resumed["lr"].iloc[2:].tolist() == pytest.approx(planned["lr"].iloc[2:].tolist(), rel=1e-6)
    assert resumed["lr"].iloc[2] > resumed["lr"].iloc[3]  # the second half of the long schedule: decaying
    said = capsys.readouterr().out
    name = make_scheduler(torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1), 1).__class__.__name__
    key = "total_steps" if name == "OneCycleLR" else "T_max"
    assert f"after epoch 2 with changes: epochs 2 -> 4; {name} {key} 8 -> 16" in said
    record = json.loads((tmp_path / "config.json").read_text())["resumed_with_changes"]
    assert record == [{"after_epoch": 2, "epochs": [2, 4], name: {key: [8, 16]}}]
    assert load_checkpoint(tmp_path / "last.pt")["config"]["resumed_with_changes"] == record


def test_a_longer_run_on_the_old_one_cycle_schedule_is_refused_before_training(tmp_path):
    train(tmp_path, epochs=2, schedule_epochs=2)
    before = (tmp_path / "last.pt").read_bytes()
    with pytest.raises(ValueError, match=r"total_steps=8, but this run takes 16 optimizer steps.*total_steps=16.*"
                                         r"continues on the schedule you pass"):
        train(tmp_path, epochs=4, schedule_epochs=2, resume=True)
    assert (tmp_path / "last.pt").read_bytes() == before


def test_another_batch_size_is_refused_naming_it_and_config_json_is_not_rewritten(tmp_path):
    train(tmp_path, epochs=1, schedule_epochs=2, make_scheduler=cosine)
    config = (tmp_path / "config.json").read_text()
    with pytest.raises(ValueError, match=r"the batch size changed \(batch_size=8 in last.pt, 16 now\)"):
        train(tmp_path, epochs=2, schedule_epochs=1, make_scheduler=cosine, batch_size=16, resume=True)
    assert (tmp_path / "config.json").read_text() == config
    assert json.loads(config)["batch_size"] == 8


def test_fewer_epochs_than_last_pt_holds_is_refused(tmp_path):
    train(tmp_path, epochs=3, schedule_epochs=3)
    with pytest.raises(ValueError, match=r"epochs=2, but .*last.pt already holds 3 epochs: pass epochs=3"):
        train(tmp_path, epochs=2, schedule_epochs=3, resume=True)
    assert len(train(tmp_path, epochs=3, schedule_epochs=3, resume=True)) == 3  # the same count: nothing to train


def test_the_same_schedule_resumed_is_not_reported_as_a_change(tmp_path, capsys):
    def stop(epoch, row):
        if epoch == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(tmp_path, epochs=3, schedule_epochs=3, on_epoch_end=stop)
    history = train(tmp_path, epochs=3, schedule_epochs=3, resume=True)
    assert "with changes" not in capsys.readouterr().out
    assert "resumed_with_changes" not in history.attrs["config"]
    assert math.isclose(history["lr"].iloc[-1], train(None, epochs=3, schedule_epochs=3)["lr"].iloc[-1])
