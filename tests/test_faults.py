"""Faults of `fit` and its checkpoints: each a clear message saying what happened and what to do, losing nothing.

Kills are real: a child process trains and SIGKILLs itself at the exact point under test (armed from
`on_epoch_end`, so the first epoch completes normally), then the parent inspects and resumes the folder.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from harness.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from harness.history import history_frame, write_history
from harness.train import OffDeviceError, fit

FEATURES, CLASSES = 6, 3


def make_loader(n: int = 64, batch_size: int = 8, *, bad_index: int | None = None) -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(n, FEATURES, generator=generator)
    targets = (inputs[:, 0] > 0).long() + (inputs[:, 1] > 0.5).long()
    if bad_index is not None:
        inputs[bad_index] = float("nan")
    return DataLoader(TensorDataset(inputs, targets), batch_size=batch_size)


def make_model(*, batch_norm: bool = False) -> nn.Module:
    torch.manual_seed(0)
    norm = [nn.BatchNorm1d(16)] if batch_norm else []
    return nn.Sequential(nn.Linear(FEATURES, 16), *norm, nn.ReLU(), nn.Linear(16, CLASSES))


def run(directory: Path | None, *, epochs: int = 2, model: nn.Module | None = None, optimizer_cls=torch.optim.SGD,
        train: object = None, **options) -> pd.DataFrame:
    model = model or make_model()
    optimizer = optimizer_cls(model.parameters(), lr=0.05)
    train = make_loader() if train is None else train
    return fit(model, train, make_loader(32), loss_fn=nn.CrossEntropyLoss(), optimizer=optimizer, epochs=epochs,
               checkpoint_dir=directory, progress=False, **options)


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


# --- a run is never overwritten without being told --------------------------------------------------------

def test_a_new_run_refuses_a_folder_holding_a_run_and_leaves_it_untouched(tmp_path):
    run(tmp_path)
    before = snapshot(tmp_path)
    with pytest.raises(FileExistsError, match=r"already holds a run \(last.pt, best.pt, history.csv\).*resume=True"
                                              r".*overwrite=True"):
        run(tmp_path)
    assert snapshot(tmp_path) == before


def test_overwrite_true_deletes_the_old_run_and_starts_a_new_one(tmp_path):
    run(tmp_path, epochs=3)
    history = run(tmp_path, epochs=1, overwrite=True)
    assert list(history["epoch"]) == [1]
    assert list(pd.read_csv(tmp_path / "history.csv")["epoch"]) == [1]
    assert load_checkpoint(tmp_path / "best.pt")["epoch"] == 1
    with pytest.raises(ValueError, match="cannot go with resume=True"):
        run(tmp_path, resume=True, overwrite=True)


def test_resume_without_last_pt_refuses_instead_of_overwriting_best_pt(tmp_path):
    run(tmp_path)
    (tmp_path / "last.pt").unlink()
    before = snapshot(tmp_path)
    with pytest.raises(FileNotFoundError,
                       match=r"no last.pt to resume from, only best.pt, history.csv.*overwrite=True"):
        run(tmp_path, resume=True)
    assert snapshot(tmp_path) == before


def test_resume_true_in_an_empty_folder_starts_a_new_run(tmp_path):
    assert list(run(tmp_path / "new", resume=True)["epoch"]) == [1, 2]


# --- the files of one epoch stay consistent after a kill at any point ---------------------------------------

CHILD = r"""
import os, signal, sys
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
import harness.checkpoint, harness.run_files
from harness.train import OffDeviceError, fit

directory, point = sys.argv[1], sys.argv[2]


def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)


def arm(epoch, row):
    # after epoch 1's files are complete, the next write of the kind under test kills the process
    if point == "before-best":
        harness.run_files.atomic_copy = die  # last.pt of epoch 2 written, best.pt not yet
    elif point == "before-history":
        harness.run_files.write_history = die  # last.pt and best.pt of epoch 2 written, history.csv not yet
    elif point == "inside-save":
        os.fsync = die  # the temporary file of epoch 2's last.pt written, not yet renamed


generator = torch.Generator().manual_seed(0)
inputs = torch.randn(64, 6, generator=generator)
targets = (inputs[:, 0] > 0).long() + (inputs[:, 1] > 0.5).long()
loader = DataLoader(TensorDataset(inputs, targets), batch_size=8)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
fit(model, loader, loader, loss_fn=nn.CrossEntropyLoss(), optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
    epochs=3, checkpoint_dir=directory, progress=False, on_epoch_end=arm)
"""


def killed_run(tmp_path: Path, point: str) -> Path:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    directory = tmp_path / "run"
    done = subprocess.run([sys.executable, str(script), str(directory), point], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == -signal.SIGKILL, done.stderr
    return directory


def resume_files(directory: Path) -> None:
    """Resume the killed run without training further: what the files hold once fit has seen them."""
    loader = make_loader()  # the child's data
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    fit(model, loader, loader, loss_fn=nn.CrossEntropyLoss(), optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
        epochs=2, checkpoint_dir=directory, resume=True, progress=False)


def test_a_kill_between_last_pt_and_best_pt_never_leaves_best_pt_stale(tmp_path):
    directory = killed_run(tmp_path, "before-best")
    last = load_checkpoint(directory / "last.pt")
    assert last["epoch"] == 2 and last["early_stopping"]["best_epoch"] == 2  # epoch 2 was the best...
    assert load_checkpoint(directory / "best.pt")["epoch"] == 1  # ...and the kill came before best.pt
    assert list(pd.read_csv(directory / "history.csv")["epoch"]) == [1]  # history no further than best.pt

    resume_files(directory)
    assert load_checkpoint(directory / "best.pt")["epoch"] == 2
    assert (directory / "best.pt").read_bytes() == (directory / "last.pt").read_bytes()
    assert list(pd.read_csv(directory / "history.csv")["epoch"]) == [1, 2]


def test_a_kill_before_history_csv_leaves_no_row_missing_after_resume(tmp_path):
    directory = killed_run(tmp_path, "before-history")
    assert list(pd.read_csv(directory / "history.csv")["epoch"]) == [1]
    resume_files(directory)
    assert list(pd.read_csv(directory / "history.csv")["epoch"]) == [1, 2]
    assert (directory / "config.json").is_file()


def test_temporary_files_of_a_killed_save_are_removed_at_the_next_start(tmp_path):
    directory = killed_run(tmp_path, "inside-save")
    assert list(directory.glob(".last.pt.*.tmp"))  # the killed save's partial file
    assert load_checkpoint(directory / "last.pt")["epoch"] == 1  # the previous checkpoint is whole
    resume_files(directory)
    assert not [p.name for p in directory.iterdir() if p.name.startswith(".")]
    assert load_checkpoint(directory / "last.pt")["epoch"] == 2


# --- checked before training ---------------------------------------------------------------------------------

class CountingLoss(nn.CrossEntropyLoss):
    calls = 0

    def forward(self, outputs, targets):
        CountingLoss.calls += 1
        return super().forward(outputs, targets)


def test_a_checkpoint_dir_that_is_a_file_is_refused_before_training(tmp_path):
    target = tmp_path / "runs"
    target.write_text("not a folder")
    model = make_model()
    CountingLoss.calls = 0
    with pytest.raises(CheckpointError, match="is a file, not a folder"):
        fit(model, make_loader(), loss_fn=CountingLoss(), optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
            checkpoint_dir=target, progress=False)
    assert CountingLoss.calls == 0


def test_a_read_only_checkpoint_dir_is_refused_before_training(tmp_path):
    folder = tmp_path / "read-only"
    folder.mkdir()
    if os.geteuid() == 0:  # root writes into any folder: a read-only filesystem stops it
        mounted = mount_tmpfs(folder, "ro,size=1m")
    else:
        folder.chmod(0o555)
    try:
        with pytest.raises(CheckpointError, match="cannot write checkpoints into .*Nothing was trained"):
            run(folder)
    finally:
        if os.geteuid() == 0:
            unmount(mounted)
        folder.chmod(0o755)


class Unsized(IterableDataset):
    def __iter__(self):
        yield from make_loader().dataset


def test_a_loader_whose_len_is_positive_but_yields_nothing_is_a_clear_error():
    class Hollow:
        def __len__(self) -> int:
            return 3

        def __iter__(self):
            return iter(())

    with pytest.raises(ValueError, match=r"yielded no batches at epoch 1 although its len\(\) is 3"):
        run(None, train=Hollow())


def test_an_iterable_dataset_without_len_is_a_clear_error():
    with pytest.raises(ValueError, match=r"train_loader has no len\(\).*__len__"):
        run(None, train=DataLoader(Unsized(), batch_size=8))


def test_a_plain_list_of_batches_trains():
    history = run(None, train=list(make_loader()))
    assert list(history["epoch"]) == [1, 2]


# --- resuming with something different ------------------------------------------------------------------------

def test_resuming_with_another_optimizer_names_it(tmp_path):
    run(tmp_path, epochs=1)
    with pytest.raises(ValueError, match=r"different settings.*'optimizer': \('SGD', 'Adam'\)"):
        run(tmp_path, resume=True, optimizer_cls=torch.optim.Adam)


def test_an_optimizer_state_that_does_not_fit_is_a_checkpoint_error(tmp_path):
    model = make_model()
    save_checkpoint(tmp_path / "c.pt", model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    other = torch.optim.SGD([next(model.parameters())], lr=0.1)  # one parameter group of another size
    with pytest.raises(CheckpointError, match="optimizer state does not fit the SGD given.*same optimizer"):
        load_checkpoint(tmp_path / "c.pt", model=model, optimizer=other)


def test_resuming_a_checkpoint_not_written_by_fit_says_so(tmp_path):
    save_checkpoint(tmp_path / "last.pt", model=make_model())
    with pytest.raises(CheckpointError, match=r"not written by fit.*load_checkpoint\(path, model=model\)"):
        run(tmp_path, resume=True)


def test_resuming_a_per_step_schedule_with_another_batch_size_is_refused(tmp_path):
    def one_cycle(batch_size: int, resume: bool):
        model = make_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        loader = make_loader(batch_size=batch_size)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=2 * len(loader))
        fit(model, loader, loss_fn=nn.CrossEntropyLoss(), optimizer=optimizer, scheduler=scheduler,
            epochs=2 - (not resume), checkpoint_dir=tmp_path, resume=resume, progress=False)

    one_cycle(8, resume=False)
    with pytest.raises(ValueError, match="written with 8 batches per epoch, this train loader has 16.*same dataset and "
                                         "batch size"):
        one_cycle(4, resume=True)


# --- training faults -------------------------------------------------------------------------------------------

def test_a_skipped_batch_leaves_batch_norm_statistics_untouched():
    model = make_model(batch_norm=True)
    history = run(None, model=model, train=make_loader(bad_index=9), epochs=2, on_nonfinite="skip")
    assert list(history["skipped_steps"]) == [1, 1]
    assert history["val_loss"].notna().all()
    norm = model[1]
    assert torch.isfinite(norm.running_mean).all() and torch.isfinite(norm.running_var).all()
    assert int(norm.num_batches_tracked) == 2 * 7  # the skipped batches are not counted either


def mount_tmpfs(folder: Path, options: str) -> Path:
    """Mount a real tmpfs (e.g. tiny or read-only) on `folder`, or skip where mounting is not allowed."""
    if os.name != "posix" or shutil.which("mount") is None or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    return folder


def unmount(folder: Path) -> None:
    subprocess.run(["umount", str(folder)], check=True)


@pytest.fixture
def small_disk(tmp_path):
    """A real 1 MiB filesystem."""
    folder = tmp_path / "disk"
    folder.mkdir()
    yield mount_tmpfs(folder, "size=1m")
    unmount(folder)


def test_a_full_disk_says_so_and_keeps_the_previous_checkpoint(small_disk):
    path = small_disk / "last.pt"
    save_checkpoint(path, model=nn.Linear(4, 4), epoch=1)
    with pytest.raises(CheckpointError, match="the disk is full; the previous last.pt is intact. Free some space"):
        save_checkpoint(path, model=nn.Linear(1000, 1000), epoch=2)  # 4 MB on a 1 MiB disk
    assert load_checkpoint(path)["epoch"] == 1
    assert [p.name for p in small_disk.iterdir()] == ["last.pt"]  # no partial file left behind


def test_a_full_disk_while_writing_the_history_says_so_and_keeps_the_previous_one(small_disk):
    write_history(history_frame([{"epoch": 1, "train_loss": 0.5}], {}), small_disk)
    with open(small_disk / "filler", "wb", buffering=0) as filler, contextlib.suppress(OSError):
        while True:  # take every free byte
            filler.write(b"\0" * 4096)
    rows = [{"epoch": epoch, "train_loss": 0.5} for epoch in range(1, 5000)]
    with pytest.raises(CheckpointError, match="the disk is full; the previous history.csv is intact"):
        write_history(history_frame(rows, {}), small_disk)
    assert list(pd.read_csv(small_disk / "history.csv")["epoch"]) == [1]
    assert not list(small_disk.glob(".*.tmp"))


def test_a_model_partly_off_the_device_names_the_tensor_left_behind():
    model = make_model(batch_norm=True)
    model[1].running_mean = model[1].running_mean.to("meta")  # a buffer left on another device
    with pytest.raises(OffDeviceError, match=r"fit runs on cpu but 1.running_mean is on meta\. Call model.to") as error:
        run(None, model=model)
    assert (error.value.name, str(error.value.found)) == ("1.running_mean", "meta")
