"""One live run per checkpoint folder (`harness.run_lock`), proven with real concurrent processes.

A child process runs `fit` and, after its first epoch, writes `ready` and waits for `go` (at most a minute):
while it waits it holds the folder, so every refusal below meets a live holder. Kills are real SIGKILLs.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from harness.checkpoint import load_checkpoint
from harness.run_lock import LOCK_NAME
from harness.train import RunFolderBusyError, fit

pytestmark = pytest.mark.slow  # starts processes

HOLDER = r"""
import sys, time
from pathlib import Path
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from harness.train import fit

folder, signals, epochs = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])


def pause(epoch, row):
    if epoch == 1:
        (signals / f"ready-{__import__('os').getpid()}").touch()
        deadline = time.monotonic() + 60
        while not (signals / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.05)


generator = torch.Generator().manual_seed(0)
inputs = torch.randn(64, 6, generator=generator)
loader = DataLoader(TensorDataset(inputs, (inputs[:, 0] > 0).long()), batch_size=8)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2))
history = fit(model, loader, loss_fn=nn.CrossEntropyLoss(), optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
              epochs=epochs, checkpoint_dir=folder, progress=False, on_epoch_end=pause)
print("epochs", len(history))
"""


def start_holder(tmp_path: Path, folder: Path, epochs: int = 3) -> subprocess.Popen:
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    (tmp_path / "signals").mkdir(exist_ok=True)
    return subprocess.Popen([sys.executable, str(script), str(folder), str(tmp_path / "signals"), str(epochs)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})


def wait_until_ready(tmp_path: Path, *children: subprocess.Popen) -> subprocess.Popen:
    """The child that reached its pause (it holds the folder), once any has; fails if none does."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for child in children:
            if (tmp_path / "signals" / f"ready-{child.pid}").exists():
                return child
        if all(child.poll() is not None for child in children):
            break
        time.sleep(0.05)
    raise AssertionError(f"no child reached its pause: {[c.communicate() for c in children]}")


def finish(tmp_path: Path, child: subprocess.Popen) -> tuple[int, str, str]:
    (tmp_path / "signals" / "go").touch()
    out, err = child.communicate(timeout=120)
    return child.returncode, out, err


def make_loader() -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(64, 6, generator=generator)
    return DataLoader(TensorDataset(inputs, (inputs[:, 0] > 0).long()), batch_size=8)


def run(folder: Path, epochs: int = 3, **options) -> pd.DataFrame:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2))
    return fit(model, make_loader(), loss_fn=nn.CrossEntropyLoss(),
               optimizer=torch.optim.SGD(model.parameters(), lr=0.05), epochs=epochs, checkpoint_dir=folder,
               progress=False, **options)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def holder_named(pid: int) -> str:
    return rf"in use by a running fit \(pid {pid} on host {socket.gethostname()}"


def test_a_new_run_an_overwrite_and_a_resume_are_refused_beside_a_live_run_which_a_kill_then_frees(tmp_path):
    folder = tmp_path / "run"
    holder = start_holder(tmp_path, folder)
    wait_until_ready(tmp_path, holder)
    before = snapshot(folder)
    assert LOCK_NAME in before and str(holder.pid).encode() in before[LOCK_NAME]
    stale = folder / ".last.pt.abc.tmp"  # what a save in flight looks like: a resume must not delete it
    stale.write_bytes(b"in flight")
    for options, action in (({}, "a second run would write"), ({"overwrite": True}, "overwrite=True would delete"),
                            ({"resume": True}, "resume=True would continue it")):
        with pytest.raises(RunFolderBusyError, match=holder_named(holder.pid) + rf".*\): {action}"):
            run(folder, **options)
    assert stale.read_bytes() == b"in flight"
    stale.unlink()
    assert snapshot(folder) == before  # nothing of the live run was touched

    holder.send_signal(signal.SIGKILL)  # the kernel frees the lock: the killed run never blocks its own resume
    holder.communicate(timeout=60)
    assert (folder / LOCK_NAME).exists()  # left behind by the kill, but no longer locked
    assert list(run(folder, resume=True)["epoch"]) == [1, 2, 3]
    assert not (folder / LOCK_NAME).exists()  # removed when the run ended


def test_two_fits_started_together_on_one_folder_one_runs_and_the_other_is_refused(tmp_path):
    folder = tmp_path / "run"
    first, second = start_holder(tmp_path, folder, epochs=2), start_holder(tmp_path, folder, epochs=3)
    winner = wait_until_ready(tmp_path, first, second)
    loser = second if winner is first else first
    _, err = loser.communicate(timeout=120)  # refused at once, while the winner waits
    assert loser.returncode != 0
    assert "RunFolderBusyError" in err and f"pid {winner.pid} on host {socket.gethostname()}" in err, err

    returncode, out, err = finish(tmp_path, winner)
    assert returncode == 0, err
    epochs = 2 if winner is first else 3
    assert f"epochs {epochs}" in out
    assert list(pd.read_csv(folder / "history.csv")["epoch"]) == list(range(1, epochs + 1))  # all the winner's
    assert load_checkpoint(folder / "last.pt")["epoch"] == epochs


def test_the_lock_is_freed_when_fit_raises_and_never_left_behind(tmp_path):
    folder = tmp_path / "run"
    run(folder, epochs=1)
    assert sorted(p.name for p in folder.iterdir()) == ["best.pt", "config.json", "history.csv", "last.pt"]

    def fail(epoch, row):
        raise KeyboardInterrupt  # the interrupt button, mid-run

    with pytest.raises(KeyboardInterrupt):
        run(folder, epochs=3, resume=True, on_epoch_end=fail)
    assert not (folder / LOCK_NAME).exists()
    assert list(run(folder, epochs=3, resume=True)["epoch"]) == [1, 2, 3]  # the same process takes it again
