"""The run report, and the observation of which operations ran in fp32 under autocast."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from harness.metrics import accuracy
from harness.report import fp32_operations, observe_op_dtypes, write_run_report
from harness.train import evaluate, fit


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))


def test_autocast_observation_sees_matmuls_in_bf16_and_the_loss_in_fp32():
    net = model()
    inputs, targets = torch.randn(8, 4), torch.randint(0, 3, (8,))
    op_dtypes = observe_op_dtypes(net, inputs, precision="bf16", targets=targets, loss_fn=nn.CrossEntropyLoss())
    assert op_dtypes["addmm"] == ["bfloat16"]
    assert {"_log_softmax", "nll_loss_forward"} <= set(fp32_operations(op_dtypes))
    assert "addmm" not in fp32_operations(op_dtypes)
    assert observe_op_dtypes(net, inputs, precision="fp32")["addmm"] == ["float32"]
    assert net.training  # the observation restores the model's mode


def test_run_report_holds_setup_history_test_metrics_and_precision(tmp_path):
    net = model()
    data = TensorDataset(torch.randn(48, 4), torch.randint(0, 3, (48,)))
    train = DataLoader(data, batch_size=16)
    test = DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 3, (16,))), batch_size=8)
    history = fit(net, train, train, loss_fn=nn.CrossEntropyLoss(), optimizer=torch.optim.SGD(net.parameters(), lr=0.1),
                  epochs=2, precision="bf16", metrics={"accuracy": accuracy}, checkpoint_dir=tmp_path / "ckpt",
                  progress=False)
    scores = evaluate(net, test, loss_fn=nn.CrossEntropyLoss(), metrics={"accuracy": accuracy}, precision="bf16")
    op_dtypes = observe_op_dtypes(net, torch.randn(2, 4), precision="bf16")
    path = write_run_report(tmp_path / "out" / "report.md", history, test_metrics=scores,
                            best_checkpoint=tmp_path / "ckpt" / "best.pt", op_dtypes=op_dtypes)
    text = path.read_text()
    assert "- precision: bf16" in text and "torch " + torch.__version__ in text
    assert "| epoch | train_loss | val_loss | val_accuracy | lr |" in text
    assert f"accuracy {scores['accuracy']:.4g}" in text and "best.pt" in text
    assert "## Precision" in text and "`addmm`" in text
    assert "- best epoch:" in text and "training samples/s" in text


def test_report_says_when_no_test_set_was_evaluated(tmp_path):
    net = model()
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 3, (16,))), batch_size=8)
    history = fit(net, loader, loss_fn=nn.CrossEntropyLoss(), optimizer=torch.optim.SGD(net.parameters(), lr=0.1),
                  epochs=1, progress=False)
    text = write_run_report(tmp_path / "r.md", history).read_text()
    assert "held-out test set: not evaluated" in text and "## Precision" not in text



def test_report_links_the_curves_relative_to_its_folder(tmp_path):
    from harness.describe import describe_history
    from harness.plots import plot_history

    net = model()
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 3, (16,))), batch_size=8)
    history = fit(net, loader, loader, loss_fn=nn.CrossEntropyLoss(),
                  optimizer=torch.optim.SGD(net.parameters(), lr=0.1), epochs=2, progress=False)
    curves = tmp_path / "figures" / "curves.png"
    plot_history(history, curves)
    report = write_run_report(tmp_path / "report" / "report.md", history, curves=curves)
    # the image's alt text is the curves in words (harness.describe), the same as the notebook shows
    assert f"## Curves\n\n![{describe_history(history)}](../figures/curves.png)" in report.read_text()
    assert (report.parent / "../figures/curves.png").is_file()
    assert "## Curves" not in write_run_report(tmp_path / "plain.md", history).read_text()

@pytest.mark.slow
def test_showcase_trains_to_a_sensible_accuracy_and_writes_its_files(tmp_path):
    from harness.showcase import run_showcase

    result = run_showcase(tmp_path, device="cpu")
    for key in ("report", "curves", "history", "best_checkpoint"):
        assert result[key].is_file(), key
    assert result["test_metrics"]["accuracy"] > 0.8
    assert "Showcase" in result["report"].read_text()
