"""Checkpoints: complete state, unwrapped weights, strict and safe loading, atomic writes under SIGKILL."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from harness.checkpoint import CheckpointError, atomic_torch_save, load_checkpoint, save_checkpoint
from harness.repro import capture_rng_state


def trained_pieces(seed: int = 0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-2, total_steps=10)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    for _ in range(3):
        loss = model(torch.randn(5, 4)).pow(2).mean()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
    return model, optimizer, scheduler, scaler


def test_everything_saved_comes_back_through_weights_only_loading(tmp_path):
    model, optimizer, scheduler, scaler = trained_pieces()
    rng = capture_rng_state()
    save_checkpoint(tmp_path / "last.pt", model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler,
                    epoch=3, global_step=30, history={"epoch": [1, 2, 3], "val_loss": [0.9, 0.5, 0.4]}, rng=[rng],
                    config={"precision": "fp16", "max_grad_norm": None})

    fresh_model, fresh_optimizer, fresh_scheduler, fresh_scaler = trained_pieces(seed=1)
    state = load_checkpoint(tmp_path / "last.pt", model=fresh_model, optimizer=fresh_optimizer,
                            scheduler=fresh_scheduler, scaler=fresh_scaler)
    for a, b in zip(model.state_dict().values(), fresh_model.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    torch.testing.assert_close(fresh_optimizer.state_dict(), optimizer.state_dict())
    assert fresh_scheduler.state_dict() == scheduler.state_dict()
    assert fresh_scaler.state_dict() == scaler.state_dict()
    assert (state["epoch"], state["global_step"], state["history"]["val_loss"]) == (3, 30, [0.9, 0.5, 0.4])
    assert torch.equal(state["rng"][0]["torch"], rng["torch"])


def test_compiled_models_save_plain_keys_and_load_both_ways(tmp_path):
    model = trained_pieces()[0]
    compiled = torch.compile(model)  # compiles lazily: never called here, so this stays fast
    assert all(k.startswith("_orig_mod.") for k in compiled.state_dict())
    save_checkpoint(tmp_path / "c.pt", model=compiled)
    saved = torch.load(tmp_path / "c.pt", weights_only=True)["model"]
    assert set(saved) == set(model.state_dict())
    plain = trained_pieces(seed=1)[0]
    load_checkpoint(tmp_path / "c.pt", model=plain)
    load_checkpoint(tmp_path / "c.pt", model=torch.compile(plain))


def test_a_checkpoint_of_another_model_names_missing_and_unexpected_keys(tmp_path):
    save_checkpoint(tmp_path / "last.pt", model=nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)))
    other = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2), nn.BatchNorm1d(2))
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(tmp_path / "last.pt", model=other)
    message = str(caught.value)
    assert "2.running_mean" in message and "2.weight" in message  # missing (BatchNorm's) keys
    assert "unexpected keys" in message and "different model" in message
    wider = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    with pytest.raises(CheckpointError, match=r"0.weight: checkpoint \(8, 4\) vs model \(16, 4\)"):
        load_checkpoint(tmp_path / "last.pt", model=wider)


def test_a_truncated_file_is_a_clear_error_that_points_to_the_other_checkpoint(tmp_path):
    model = trained_pieces()[0]
    save_checkpoint(tmp_path / "best.pt", model=model)
    save_checkpoint(tmp_path / "last.pt", model=model)
    data = (tmp_path / "last.pt").read_bytes()
    (tmp_path / "last.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"last\.pt is corrupt or truncated.*best\.pt"):
        load_checkpoint(tmp_path / "last.pt", model=model)
    (tmp_path / "last.pt").write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match="corrupt"):
        load_checkpoint(tmp_path / "last.pt")


class NotPlain:
    """An object weights_only loading must refuse (unpickling arbitrary classes can run code)."""


def test_pickled_objects_are_refused(tmp_path):
    torch.save({"model": {}, "extra": NotPlain()}, tmp_path / "evil.pt")
    with pytest.raises(CheckpointError, match="weights_only loading refuses"):
        load_checkpoint(tmp_path / "evil.pt")


def test_non_finite_weights_are_never_saved_over_a_good_checkpoint(tmp_path):
    model = trained_pieces()[0]
    save_checkpoint(tmp_path / "last.pt", model=model)
    with torch.no_grad():
        model[0].weight[0, 0] = float("nan")
    with pytest.raises(CheckpointError, match=r"NaN or inf values in \['0.weight'\]"):
        save_checkpoint(tmp_path / "last.pt", model=model)
    assert torch.isfinite(load_checkpoint(tmp_path / "last.pt")["model"]["0.weight"]).all()


# --- atomic writes under a real SIGKILL -------------------------------------------------------------------

WRITER = textwrap.dedent(
    """
    import sys, time, torch
    import harness.checkpoint as ckpt

    path, marker, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    real_save = torch.save

    def half_then_hang(obj, file):
        # serialise for real, write half of the bytes, make them durable, then hang until killed
        import io
        buffer = io.BytesIO()
        real_save(obj, buffer)
        data = buffer.getvalue()
        file.write(data[: len(data) // 2])
        file.flush()
        open(marker, "w").close()
        time.sleep(60)

    version = 0
    while True:
        version += 1
        if mode == "hang" and version == 2:
            ckpt.torch.save = half_then_hang
        state = {"model": {"w": torch.full((2_000_000,), float(version))}, "version": version}
        ckpt.atomic_torch_save(state, path)
        if mode == "hang" or version == 1:
            open(marker + ".saved", "w").close()
    """
)


def _start_writer(tmp_path: Path, mode: str) -> tuple[subprocess.Popen, Path, Path]:
    script, path, marker = tmp_path / "writer.py", tmp_path / "last.pt", tmp_path / "marker"
    script.write_text(WRITER)
    process = subprocess.Popen([sys.executable, str(script), str(path), str(marker), mode])
    return process, path, marker


def _wait_for(path: Path, process: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, "the writer died on its own"
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def _assert_whole(path: Path) -> int:
    state = load_checkpoint(path)
    weights = state["model"]["w"]
    assert weights.numel() == 2_000_000 and bool((weights == state["version"]).all())
    return state["version"]


@pytest.mark.slow
def test_a_kill_in_the_middle_of_a_save_leaves_the_previous_checkpoint_loadable(tmp_path):
    process, path, marker = _start_writer(tmp_path, "hang")
    try:
        _wait_for(marker, process)  # version 2 is half written into the temporary file right now
        os.kill(process.pid, signal.SIGKILL)
        assert process.wait(timeout=30) == -signal.SIGKILL
    finally:
        process.kill()
    assert _assert_whole(path) == 1
    leftovers = list(tmp_path.glob(".last.pt.*.tmp"))
    assert len(leftovers) == 1 and leftovers[0].stat().st_size > 0  # the half-written version 2


@pytest.mark.slow
def test_kills_at_random_moments_of_a_save_loop_always_leave_a_whole_checkpoint(tmp_path):
    process, path, marker = _start_writer(tmp_path, "loop")
    try:
        _wait_for(Path(str(marker) + ".saved"), process)
        time.sleep(0.37)  # an arbitrary moment inside the loop of saves
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        process.kill()
    assert _assert_whole(path) >= 1


def test_atomic_save_cleans_up_its_temporary_file_on_failure(tmp_path):
    # a lambda cannot be pickled: AttributeError ("Can't pickle local object"), PicklingError from Python 3.14
    with pytest.raises((AttributeError, pickle.PicklingError)):
        atomic_torch_save({"f": lambda: 0}, tmp_path / "x.pt")
    assert list(tmp_path.iterdir()) == []
