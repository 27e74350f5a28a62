"""Curves: the history plot, the learning-rate preview, and the per-epoch line printed outside notebooks."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from harness.describe import (
    describe_distribution,
    describe_figure,
    describe_history,
    describe_lr_schedule,
    describe_series,
)
from harness.figures import figure_html
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


NAN = float("nan")


@pytest.mark.parametrize(("values", "expected"), [
    ([2.1, 1.4, 0.9, 0.61, 0.42], "validation loss falls from 2.1 to 0.42 by epoch 5"),
    ([2.1, 1.2, 0.8, 0.6, 0.5, 0.45, 0.42, 0.47, 0.55],
     "validation loss falls from 2.1 to 0.42 by epoch 7, then rises to 0.55 by epoch 9"),
    ([0.5, 0.7, 0.72, 0.71], "validation loss rises from 0.5 to 0.72 by epoch 3, then falls to 0.71 by epoch 4"),
    ([1.0, 0.7, NAN, 0.4], "validation loss falls from 1 to 0.4 by epoch 4 (not finite at epoch 3)"),
    ([NAN, 0.7, float("inf"), 0.4],
     "validation loss falls from 0.7 to 0.4 by epoch 4 (not finite at epochs 1 and 3)"),
    ([0.52], "validation loss is 0.52 at epoch 1"),
    ([0.25, 0.25, 0.25], "validation loss stays at 0.25 from epoch 1 to epoch 3"),
    ([0.69315, 0.69309, 0.69312], "validation loss stays at 0.693 from epoch 1 to epoch 3"),  # flat as read off
    ([0.1, 0.1, 0.05, 0.05], "validation loss falls from 0.1 to 0.05 by epoch 3, then stays at 0.05 until epoch 4"),
    ([NAN, NAN], "validation loss has no finite value"),
])
def test_a_curve_is_told_by_its_ends_and_extremes(values, expected):
    assert describe_series("validation loss", list(range(1, len(values) + 1)), values) == expected


def test_the_history_plot_carries_its_data_in_words():
    frame = history()
    expected = (
        "Training curves over epochs 1 to 4. Train loss falls from 1 to 0.4 by epoch 4. Validation loss falls "
        "from 1.1 to 0.8 by epoch 2, then rises to 1 by epoch 4. Validation accuracy rises from 0.5 to 0.72 by "
        "epoch 3, then falls to 0.71 by epoch 4. Learning rate falls from 0.1 to 0.05 by epoch 3, then stays at "
        "0.05 until epoch 4. Best epoch: 2, with the lowest validation loss (0.8).")
    assert describe_history(frame) == expected
    assert plot_history(frame).alt_text == expected
    frame.attrs["config"] = {"monitor": "val_accuracy", "monitor_mode": "max"}
    assert describe_history(frame).endswith(" Best epoch: 3, with the highest validation accuracy (0.72).")


def test_a_history_of_one_epoch_with_a_nan_loss_is_told_as_it_is():
    frame = pd.DataFrame({"epoch": [1], "train_loss": [NAN], "val_loss": [NAN], "lr": [0.01]})
    assert describe_history(frame) == (
        "Training curves over one epoch (epoch 1). Train loss has no finite value. "
        "Validation loss has no finite value. Learning rate is 0.01 at epoch 1. "
        "No best epoch: the monitored column has no value.")


def test_the_lr_preview_and_any_figure_are_told_from_what_they_draw():
    def factory(optimizer):
        return torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)

    text = ("Learning-rate schedule over 6 scheduler steps: the learning rate falls from 1 to 0.5 by step 3, then "
            "stays at 0.5 until step 5.")
    assert describe_lr_schedule(lr_schedule(factory, 6)) == text
    assert plot_lr_schedule(factory, 6).alt_text == text

    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2)
    left.semilogy([1, 2, 3], [1.0, 0.1, 0.01], label="sigmoid")
    left.axhline(0.5, label="threshold")
    left.set(title="Gradient norms", xlabel="layer", ylabel="norm")
    right.imshow([[0.0, 1.0], [2.0, 3.0]])
    right.bar(["a", "b"], [2, 5])
    plt.close(figure)
    assert describe_figure(figure) == (
        "A figure with 2 panels. Gradient norms (norm against layer, log scale): sigmoid falls from 1 to 0.01 by "
        "layer 3; threshold: a horizontal line at 0.5. Panel 2: an image of 2 by 2 values from 0 to 3; "
        "2 bars from 2 to 5 high.")


def test_a_figure_is_shown_as_an_image_with_its_alt_text():
    figure = plot_history(history())
    html, metadata = figure_html(figure)
    assert metadata == {"alt": figure.alt_text}
    assert html.startswith('<img src="data:image/png;base64,') and html.endswith(f'alt="{figure.alt_text}">')


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

    # harness imported before the inline backend is set up, as in a lesson (which clears Figure's formatters)
    source = """
from harness.train import fit
%matplotlib inline
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
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
    # shown with its text alternative (harness.figures): JupyterLab renders the text/html, an <img> with alt
    alt = plots[0]["metadata"]["text/html"]["alt"]
    assert alt.startswith("Training curves over epochs 1 to 3. Train loss ") and "Best epoch: " in alt
    assert plots[0]["data"]["text/html"].startswith('<img src="data:image/png;base64,')
    assert any(o.get("name") == "stdout" and "epoch 3/3" in o.get("text", "") for o in outputs)


def test_the_grade_distribution_is_described_from_its_totals():
    assert describe_distribution([0, 3, 5, 5, 5, 4], 5) == (
        "Grade distribution of 6 students: totals from 0 to 5 of 5 points, median 4.5; the most common total is 5 "
        "(3 students).")
    assert describe_distribution([1, 4, 1, 4], 5) == (
        "Grade distribution of 4 students: totals from 1 to 4 of 5 points, median 2.5; the most common totals are "
        "1 and 4 (2 students each).")
    assert describe_distribution([1, 2, 3], 14) == (
        "Grade distribution of 3 students: totals from 1 to 3 of 14 points, median 2.")
    assert describe_distribution([2.5], 5) == "Grade distribution of 1 student: a total of 2.5 of 5 points."
    assert describe_distribution([], 5) == "Grade distribution: no students (out of 5 points)."
