"""harness.train.fit under real DDP: `torchrun --standalone --nproc-per-node=2` with gloo on CPU.

Three launches, shared by the assertions (each costs several seconds): an uninterrupted 4-epoch run,
a run killed after epoch 2, and its resume. The model has dropout and the optimizer momentum, so an
exact resume needs every rank's RNG state and the optimizer state, not just the weights. Three more launches
are refused before the first step: ranks with unequal batch counts (twice: unequal datasets, and one dataset
sliced by hand), and a folder a live process holds.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from harness.distributed import get_rank
from harness.launch import LaunchError, launch, launch_forked
from harness.train import fit

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("torchrun")]  # serialized where xdist honours groups

EPOCHS = 4
KILLED_AFTER = 2
TIMING = ["epoch_seconds", "samples_per_second"]


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Dropout(0.2), nn.Linear(32, 2))


def validation_loss(state: dict, n_val: int = 64) -> float:
    """The mean validation loss of `state` over the whole validation set, in one process."""
    from harness.data import two_moons

    model = make_model()
    model.load_state_dict(state)
    model.eval()
    x, y = two_moons(n_val, seed=1).tensors
    with torch.no_grad():
        return float(nn.functional.cross_entropy(model(x), y))


def ddp_fit(checkpoint_dir: str | None, own_folder: str | None, resume: bool, kill_after: int | None,
            rank1_samples: int = 256) -> dict:
    """One rank of a DDP run of harness.fit (runs under torchrun: the launcher has joined the group)."""
    from harness.data import two_moons
    from harness.distributed import distributed_loader, get_rank
    from harness.metrics import accuracy
    from harness.train import fit

    if own_folder is not None:  # a relative checkpoint_dir lands in this rank's own folder: who wrote shows on disk
        folder = Path(own_folder) / f"rank{get_rank()}"
        folder.mkdir(parents=True, exist_ok=True)
        os.chdir(folder)
    torch.manual_seed(100 + get_rank())  # different dropout masks on each rank, as in a real run
    train_loader = distributed_loader(two_moons(256 if get_rank() == 0 else rank1_samples, seed=0), batch_size=16,
                                      seed=0)
    val_loader = distributed_loader(two_moons(64, seed=1), batch_size=16, shuffle=False)
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def kill(epoch: int, row: dict) -> None:
        if epoch == kill_after:
            os._exit(3)  # as abrupt as a killed job: no cleanup, no exception handling

    history = fit(model, train_loader, val_loader, loss_fn=nn.CrossEntropyLoss(), optimizer=optimizer,
                  epochs=EPOCHS, metrics={"accuracy": accuracy}, checkpoint_dir=checkpoint_dir, resume=resume,
                  progress=False, on_epoch_end=kill if kill_after else None)
    return {"state": model.state_dict(), "history": history}


def check_it_trains(history: pd.DataFrame) -> None:
    assert list(history["epoch"]) == list(range(1, EPOCHS + 1))
    assert history["train_loss"].iloc[-1] < 0.8 * history["train_loss"].iloc[0]
    assert history["val_accuracy"].iloc[-1] > 0.8


def check_ranks_identical(results: list[dict]) -> None:
    states = [result["state"] for result in results]
    for name, tensor in states[0].items():
        assert torch.equal(tensor, states[1][name]), f"{name} differs between the ranks"


def check_validation_averaged_over_ranks(results: list[dict]) -> None:
    rank0, rank1 = (result["history"] for result in results)
    pd.testing.assert_frame_equal(rank0.drop(columns=TIMING), rank1.drop(columns=TIMING))
    expected = validation_loss(results[0]["state"])  # the whole validation set, one process
    assert rank0["val_loss"].iloc[-1] == pytest.approx(expected, rel=1e-5)


def check_only_rank_0_wrote(folders: Path) -> None:
    written = {rank: sorted(p.name for p in (folders / f"rank{rank}").rglob("*") if p.is_file()) for rank in (0, 1)}
    assert {"last.pt", "best.pt", "history.csv"} <= set(written[0])
    assert written[1] == []


def check_resume_is_exact(uninterrupted: list[dict], shared: Path) -> None:
    with pytest.raises(LaunchError, match="exited with status"):
        launch(ddp_fit, 2, args=(str(shared), None, False, KILLED_AFTER), quiet=True)
    assert torch.load(shared / "last.pt", weights_only=True)["epoch"] == KILLED_AFTER

    resumed = launch(ddp_fit, 2, args=(str(shared), None, True, None), quiet=True).results
    for rank in (0, 1):
        expected, got = uninterrupted[rank], resumed[rank]
        for name, tensor in expected["state"].items():
            assert torch.equal(tensor, got["state"][name]), f"rank {rank}: {name} differs after resume"
        pd.testing.assert_frame_equal(expected["history"].drop(columns=TIMING), got["history"].drop(columns=TIMING))


def check_another_process_count_is_named_as_such(shared: Path) -> None:
    """The 2-process run resumed by one process: refused as a change of process count, not of batch size."""
    from harness.data import two_moons
    from harness.distributed import distributed_loader
    from harness.train import fit

    model = make_model()
    with pytest.raises(ValueError, match=r"written by a run of 2 process\(es\) and this one has 1: the process "
                                         r"count \(world size\) changed.*resume with 2 process"):
        fit(model, distributed_loader(two_moons(256, seed=0), batch_size=16, seed=0), loss_fn=nn.CrossEntropyLoss(),
            optimizer=torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), epochs=EPOCHS + 1,
            checkpoint_dir=shared, resume=True, progress=False)


def test_fit_under_ddp(tmp_path):
    """One test, three launches: pytest-xdist may split a module's tests (and a shared fixture) across workers,
    which would launch the reference run twice."""
    results = launch(ddp_fit, 2, args=("ckpt", str(tmp_path), False, None), quiet=True).results
    check_it_trains(results[0]["history"])
    check_ranks_identical(results)
    check_validation_averaged_over_ranks(results)
    check_only_rank_0_wrote(tmp_path)
    check_resume_is_exact(results, tmp_path / "shared")
    check_another_process_count_is_named_as_such(tmp_path / "shared")


def test_ranks_with_unequal_batch_counts_are_refused_before_the_first_step(tmp_path):
    with pytest.raises(LaunchError) as refused:
        launch(ddp_fit, 2, args=(str(tmp_path / "run"), None, False, None, 192), quiet=True, timeout_s=120)
    assert "every rank must train on the same number of batches per epoch" in str(refused.value)
    assert "rank 0 has 8 batches per epoch, rank 1 has 6: DDP would hang" in str(refused.value)
    assert not (tmp_path / "run" / "last.pt").exists()


def fit_on_data_split_by_hand(model: nn.Module, optimizer: torch.optim.Optimizer, inputs: torch.Tensor,
                              targets: torch.Tensor, rank0_samples: int) -> None:
    """One rank of a DDP fit on its own slice of the data, cut by hand instead of by a DistributedSampler (forked
    ranks: the arguments are this process's objects, copied by the fork)."""
    mine = slice(0, rank0_samples) if get_rank() == 0 else slice(rank0_samples, None)

    def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        print("a step ran")
        return nn.functional.cross_entropy(logits, labels)

    fit(model, DataLoader(TensorDataset(inputs[mine], targets[mine]), batch_size=4), loss_fn=loss_fn,
        optimizer=optimizer, epochs=1, progress=False)


def test_ranks_given_unequal_slices_by_hand_are_refused_with_each_ranks_count():
    """100 samples cut 52 + 48, in batches of 4: 13 and 12 batches, refused on every rank before any step."""
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    inputs, targets = torch.randn(100, 2), torch.randint(0, 2, (100,))
    with pytest.raises(LaunchError) as refused:
        launch_forked(fit_on_data_split_by_hand, 2, args=(model, optimizer, inputs, targets, 52), timeout_s=60)
    message = str(refused.value)
    assert refused.value.rank in (0, 1), message
    assert ("under DDP every rank must train on the same number of batches per epoch, but rank 0 has 13 batches "
            "per epoch, rank 1 has 12: DDP would hang at the first step one rank does not take") in message, message
    assert "DistributedSampler over the same whole dataset" in message
    assert "a step ran" not in refused.value.log


def test_a_folder_held_by_a_live_process_is_refused_under_ddp_naming_the_holder(tmp_path):
    from harness.run_lock import hold_run_folder

    folder = tmp_path / "run"
    folder.mkdir()
    with hold_run_folder(folder, "test"):  # this test's process is the live holder
        with pytest.raises(LaunchError) as refused:
            launch(ddp_fit, 2, args=(str(folder), None, False, None), quiet=True, timeout_s=120)
    assert f"in use by a running fit (pid {os.getpid()} on host {socket.gethostname()}" in str(refused.value)
    assert list(folder.iterdir()) == []
