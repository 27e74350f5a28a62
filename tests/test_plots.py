"""Curves: the history plot, the learning-rate preview, and the per-epoch line printed outside notebooks."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from harness.plots import lr_schedule, plot_history, plot_lr_schedule
from harness.train import fit


def history() -> pd.DataFrame:
    frame = pd.DataFrame({
        "epoch": [1, 2, 3, 4], "train_loss": [1.0, 0.7, 0.5, 0.4], "val_loss": [1.1, 0.8, 0.9, 1.0],
        "val_accuracy": [0.5, 0.7, 0.72, 0.71], "lr": [0.1, 0.1, 0.05, 0.05], "grad_norm": [1.0] * 4,
    })
    frame.attrs["config"] = {"monitor": "val_loss", "monitor_mode": "min"}
    return frame


def test_plot_history_draws_losses_metrics_and_lr_and_marks_the_best_epoch(tmp_path):
    figure = plot_history(history(), tmp_path / "curves" / "run.png")
    assert (tmp_path / "curves" / "run.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    loss_ax, metric_ax, lr_ax = figure.axes
    assert [line.get_label() for line in loss_ax.get_lines()] == ["train", "validation", "best (epoch 2)"]
    assert [line.get_label() for line in metric_ax.get_lines()] == ["accuracy", "best (epoch 2)"]
    assert list(lr_ax.get_lines()[0].get_ydata()) == [0.1, 0.1, 0.05, 0.05]


def test_plot_history_follows_a_max_mode_monitor():
    frame = history()
    frame.attrs["config"] = {"monitor": "val_accuracy", "monitor_mode": "max"}
    labels = [line.get_label() for line in plot_history(frame).axes[0].get_lines()]
    assert "best (epoch 3)" in labels


def test_plot_history_refuses_an_empty_history():
    with pytest.raises(ValueError, match="empty history"):
        plot_history(pd.DataFrame())


def test_lr_schedule_matches_the_scheduler_stepped_by_hand_and_plots_it(tmp_path):
    def factory(optimizer):
        return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.5, total_steps=20)

    rates = lr_schedule(factory, 20)
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = factory(optimizer)
    expected = []
    for _ in range(20):
        expected.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert rates == expected and max(rates) == pytest.approx(0.5)
    figure = plot_lr_schedule(factory, 20, tmp_path / "lr.png")
    assert list(figure.axes[0].get_lines()[0].get_ydata()) == expected
    assert (tmp_path / "lr.png").stat().st_size > 0


def test_lr_schedule_refuses_reduce_on_plateau():
    with pytest.raises(ValueError, match="no schedule to preview"):
        lr_schedule(lambda opt: torch.optim.lr_scheduler.ReduceLROnPlateau(opt), 5)


def test_live_plot_outside_a_notebook_prints_one_line_per_epoch_to_stdout(capsys):
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    loader = DataLoader(TensorDataset(torch.randn(16, 3), torch.randint(0, 2, (16,))), batch_size=8)
    fit(model, loader, loader, loss_fn=nn.CrossEntropyLoss(), optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        epochs=2, progress=False, live_plot=True)
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert len(lines) == 2 and lines[0].startswith("epoch 1/2  train_loss ") and "val_loss" in lines[0]
    assert err == ""


def test_progress_is_off_and_silent_while_grading(capsys, monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    monkeypatch.delenv("HARNESS_BUDGET", raising=False)
    model = nn.Linear(3, 2)
    loader = DataLoader(TensorDataset(torch.randn(16, 3), torch.randint(0, 2, (16,))), batch_size=8)
    fit(model, loader, loss_fn=nn.CrossEntropyLoss(), optimizer=torch.optim.SGD(model.parameters(), lr=0.1), epochs=2)
    assert capsys.readouterr() == ("", "")


@pytest.mark.slow
def test_in_a_notebook_the_live_plot_updates_in_place_and_nothing_reaches_stderr():
    import nbformat
    from nbclient import NotebookClient

    source = """
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from harness.train import fit
torch.manual_seed(0)
model = nn.Linear(3, 2)
loader = DataLoader(TensorDataset(torch.randn(32, 3), torch.randint(0, 2, (32,))), batch_size=8)
history = fit(model, loader, loader, loss_fn=nn.CrossEntropyLoss(),
              optimizer=torch.optim.SGD(model.parameters(), lr=0.1), epochs=3, progress=True, live_plot=True)
"""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    NotebookClient(notebook, timeout=300, kernel_name="python3").execute()
    outputs = notebook.cells[0].outputs
    assert not [o for o in outputs if o.get("name") == "stderr" or o["output_type"] == "error"], outputs
    # the live plot is one display slot whose content each update replaced: one PNG, not one per epoch
    plots = [o for o in outputs if o["output_type"] == "display_data" and "image/png" in o.get("data", {})]
    assert len(plots) == 1
    assert any(o.get("name") == "stdout" and "epoch 3/3" in o.get("text", "") for o in outputs)
