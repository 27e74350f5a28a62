"""`harness showcase` (the end of `make course`) prints a line per epoch: never minutes without output; it warms up
then decays in lesson 07's convention, from torch's own schedulers."""

import csv
import math

import pytest

from harness.showcase import run_showcase


@pytest.mark.slow
def test_showcase_prints_a_line_per_epoch_without_progress_bars(tmp_path, capsys):
    result = run_showcase(tmp_path, samples=400, epochs=2, width=4, device="cpu")
    captured = capsys.readouterr()
    lines = [line for line in captured.out.splitlines() if line.startswith("epoch ")]
    assert [line.split()[1] for line in lines] == ["1/2", "2/2"], captured.out
    assert all("val_accuracy" in line for line in lines)
    assert "it/s" not in captured.err  # no tqdm bar unless progress=True
    # 320 training images in batches of 64: 5 steps an epoch, 10 in all, a warm-up of 1; the history keeps the rate
    # of each epoch's last step (steps 4 and 9), lr 1e-2 times (step + 1) / warmup, then the cosine to 0 at 10
    with open(result["history"], newline="") as history:
        rates = [float(row["lr"]) for row in csv.DictReader(history)]
    expected = [1e-2 * 0.5 * (1 + math.cos(math.pi * (step - 1) / 9)) for step in (4, 9)]
    assert rates == pytest.approx(expected, rel=1e-9), rates
