"""`harness showcase` (the end of `make course`) prints a line per epoch: never minutes without output."""

import pytest

from harness.showcase import run_showcase


@pytest.mark.slow
def test_showcase_prints_a_line_per_epoch_without_progress_bars(tmp_path, capsys):
    run_showcase(tmp_path, samples=400, epochs=2, width=4, device="cpu")
    captured = capsys.readouterr()
    lines = [line for line in captured.out.splitlines() if line.startswith("epoch ")]
    assert [line.split()[1] for line in lines] == ["1/2", "2/2"], captured.out
    assert all("val_accuracy" in line for line in lines)
    assert "it/s" not in captured.err  # no tqdm bar unless progress=True
