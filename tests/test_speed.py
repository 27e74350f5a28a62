"""`harness.speed`: throughput fields, precision comparison, saved-activation bytes, FLOP counts against hand
counts, MFU, the benchmark reports, and the GPU precision benchmark's --quick smoke run (no timing asserts)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch import nn

from harness.models import capstone_cnn
from harness.report import markdown_table
from harness.speed import (
    PEAK_FLOPS,
    Throughput,
    benchmark_cell,
    compare_precisions,
    machine_record,
    model_flops_utilization,
    peak_flops,
    report_results,
    supported_precision_names,
    training_flops,
    training_throughput,
)

REPO = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")


def batch(n: int = 16, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(n, 3, 32, 32, generator=generator), torch.randint(0, 5, (n,), generator=generator)


def tiny_cnn() -> nn.Module:
    torch.manual_seed(0)
    return capstone_cnn(width=4)


def test_throughput_fields_are_consistent_on_cpu():
    model, (x, y) = tiny_cnn(), batch()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = training_throughput(model, x, y, warmup=1, steps=2, repeats=3)
    assert isinstance(result, Throughput) and result.label == "fp32"
    assert 0 < result.images_per_s_q1 <= result.images_per_s <= result.images_per_s_q3
    # An odd number of repeats: the median step time and the median throughput come from the same repeat.
    assert result.images_per_s * result.ms_per_step / 1e3 == pytest.approx(len(x))
    assert result.peak_memory_bytes is None  # CUDA only
    assert result.activation_bytes > x.numel() * 4  # at least the first block's activations
    for name, value in model.state_dict().items():  # a copy was trained, not the caller's model
        assert torch.equal(value, before[name]), name


def test_throughput_slices_a_resident_data_set_and_labels_the_settings():
    x, y = batch(20)
    result = training_throughput(tiny_cnn(), x, y, batch_size=8, channels_last=True, precision="bf16",
                                 warmup=0, steps=3, repeats=1)
    assert result.label == "bf16 channels_last"
    assert result.images_per_s_q1 == result.images_per_s == result.images_per_s_q3  # one repeat
    assert result.images_per_s * result.ms_per_step / 1e3 == pytest.approx(8)  # steps of 8 images


def test_tf32_setting_is_restored_after_the_measurement():
    settings = (torch.backends.cuda.matmul, torch.backends.cudnn.conv, torch.backends.cudnn.rnn)
    before = [s.fp32_precision for s in settings]
    training_throughput(tiny_cnn(), *batch(4), tf32=True, warmup=0, steps=1, repeats=1)
    assert [s.fp32_precision for s in settings] == before


@pytest.mark.parametrize(
    ("kwargs", "phrase"),
    [({"steps": 0}, "steps >= 1"), ({"precision": "fp8"}, "fp8"), ({"batch_size": 99}, "batch_size=99")],
)
def test_throughput_rejects_bad_settings(kwargs, phrase):
    with pytest.raises(ValueError, match=phrase):
        training_throughput(tiny_cnn(), *batch(4), **kwargs)


def test_throughput_rejects_a_model_on_another_device_and_flat_inputs_for_channels_last():
    with pytest.raises(ValueError, match="model is on meta"):
        training_throughput(tiny_cnn().to("meta"), *batch(4))
    with pytest.raises(ValueError, match="4-D"):
        training_throughput(nn.Linear(8, 5), torch.randn(4, 8), torch.zeros(4, dtype=torch.long), channels_last=True)


def test_compare_precisions_gives_one_row_per_supported_precision():
    frame = compare_precisions(tiny_cnn, *batch(), warmup=1, steps=1, repeats=1)
    assert list(frame["precision"]) == supported_precision_names(CPU)
    assert {"label", "images_per_s", "images_per_s_q1", "images_per_s_q3", "ms_per_step", "peak_memory_bytes",
            "activation_bytes", "speedup"} <= set(frame.columns)
    assert frame.set_index("precision").loc["fp32", "speedup"] == 1.0
    assert (frame["images_per_s"] > 0).all()
    if "bf16" in frame["precision"].values:
        by_precision = frame.set_index("precision")["activation_bytes"]
        # 16-bit activations: conv inputs and ReLU outputs halve; max-pool indices (int64) do not.
        assert by_precision["bf16"] < 0.75 * by_precision["fp32"]


def test_compare_precisions_without_fp32_has_no_speedup_and_rejects_unsupported():
    if "bf16" not in supported_precision_names(CPU):
        pytest.skip("this CPU has no bf16 autocast")
    frame = compare_precisions(tiny_cnn, *batch(4), precisions=["bf16"], warmup=0, steps=1, repeats=1)
    assert math.isnan(frame["speedup"].iloc[0])
    with pytest.raises(ValueError, match="fp8"):
        compare_precisions(tiny_cnn, *batch(4), precisions=["fp32", "fp8"])


def test_flops_of_a_linear_layer_match_a_hand_count():
    x, y = torch.randn(4, 10), torch.randint(0, 20, (4,))
    # Forward 2*B*in*out; backward computes the weight gradient (the same again) but no input gradient:
    # the input does not require one.
    assert training_flops(nn.Linear(10, 20), x, y) == 2 * (2 * 4 * 10 * 20)
    # A second layer also passes the gradient back to the first one's output: three matmuls.
    two_layers = nn.Sequential(nn.Linear(10, 20), nn.Linear(20, 5))
    assert training_flops(two_layers, x, y % 5) == 2 * (2 * 4 * 10 * 20) + 3 * (2 * 4 * 20 * 5)


def test_flops_of_a_conv_layer_match_a_hand_count():
    conv = nn.Conv2d(3, 8, kernel_size=3, padding=1)
    x, y = torch.randn(2, 3, 8, 8), torch.randint(0, 8, (2, 8, 8))  # per-pixel classes: (N, C, H, W) logits
    per_output_value = 2 * 3 * 3 * 3  # a multiply and an add per input channel and kernel position
    forward = 2 * 8 * 8 * 8 * per_output_value
    assert training_flops(conv, x, y) == 2 * forward  # forward and the weight gradient
    assert conv.weight.grad is None  # counted on a copy


def test_mfu_is_not_reported_on_cpu():
    assert peak_flops(CPU, "bf16") is None
    assert model_flops_utilization(1e4, 1e9, CPU, "bf16") is None


@pytest.mark.parametrize(
    ("name", "precision", "tf32", "peak"),
    [("NVIDIA H100 80GB HBM3", "bf16", False, 989e12), ("NVIDIA H100 80GB HBM3", "fp32", True, 495e12),
     ("NVIDIA H200", "fp32", False, 67e12), ("NVIDIA A100-SXM4-40GB", "fp16", False, 312e12),
     ("NVIDIA A100 80GB PCIe", "fp32", True, 156e12), ("NVIDIA H100 PCIe", "bf16", False, None),
     ("NVIDIA H100 NVL", "bf16", False, None), ("Tesla T4", "fp16", False, None)],
)
def test_peak_flops_by_gpu_name(monkeypatch, name, precision, tf32, peak):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    cuda = torch.device("cuda")
    assert peak_flops(cuda, precision, tf32) == peak
    utilization = model_flops_utilization(1e5, 1e9, cuda, precision, tf32)
    assert utilization == (None if peak is None else pytest.approx(1e14 / peak))


def test_peak_table_lists_every_precision_for_every_gpu():
    assert all(set(peaks) == {"bf16", "fp16", "tf32", "fp32"} for peaks in PEAK_FLOPS.values())


def test_report_writes_the_table_and_the_machine(tmp_path, capsys):
    frame = pd.DataFrame({"setting": ["a", "b"], "images_per_s": [1234.5, 0.01234], "peak": [None, 2.5]})
    path = report_results(frame, "demo", machine_record("cpu"), tmp_path, title="Demo")
    printed = capsys.readouterr().out
    assert "## Demo" in printed and "| a | 1,234 |  |" in printed and "| b | 0.0123 | 2.50 |" in printed
    written = pd.read_csv(path)
    assert list(written["setting"]) == ["a", "b"] and written["torch"].iloc[0] == torch.__version__
    machine = json.loads((tmp_path / "demo.machine.json").read_text())
    assert machine["device"] == "cpu" and len(machine["load_average"]) == 3 and machine["cpu_name"]


def test_benchmark_cells_round_by_size_and_leave_missing_values_blank():
    frame = pd.DataFrame({"x": [1234.5, 2.5, 0.01234, None], "y": ["p", "q", "r", "s"]})
    lines = markdown_table(frame, cell=benchmark_cell).splitlines()
    assert lines == ["| x | y |", "|---|---|", "| 1,234 | p |", "| 2.50 | q |", "| 0.0123 | r |", "|  | s |"]


@pytest.mark.slow
def test_gpu_precision_benchmark_quick_run_on_cpu_writes_its_csv(tmp_path):
    command = [sys.executable, "benchmarks/gpu_precision.py", "--quick", "--device", "cpu", "--out", str(tmp_path)]
    subprocess.run(command, cwd=REPO, check=True, capture_output=True, text=True, timeout=300)
    frame = pd.read_csv(tmp_path / "gpu_precision.csv")
    assert sorted(set(frame["precision"])) == sorted(supported_precision_names(CPU))
    assert set(frame["channels_last"]) == {True, False} and not frame["compile"].any()  # compile: CUDA only
    assert (frame["images_per_s"] > 0).all() and frame["mfu"].isna().all()
    assert (frame.loc[(frame.precision == "fp32"), "speedup_vs_fp32"] == 1.0).all()
    assert json.loads((tmp_path / "gpu_precision.machine.json").read_text())["device"] == "cpu"


@pytest.mark.gpu
def test_cuda_throughput_reports_peak_memory_and_mfu():
    cuda = torch.device("cuda")
    x, y = (t.to(cuda) for t in batch(64))
    model = tiny_cnn().to(cuda)
    frame = compare_precisions(lambda: tiny_cnn().to(cuda), x, y, warmup=2, steps=2, repeats=3, tf32=False)
    assert (frame["peak_memory_bytes"] > x.numel() * 4).all()
    flops = training_flops(model, x, y) / len(x)
    for row in frame.itertuples():
        utilization = model_flops_utilization(row.images_per_s, flops, cuda, row.precision)
        assert utilization is None or 0 < utilization < 1


@pytest.mark.gpu
def test_cuda_compiled_channels_last_runs():
    cuda = torch.device("cuda")
    x, y = (t.to(cuda) for t in batch(64))
    result = training_throughput(tiny_cnn().to(cuda), x, y, precision="bf16", compile=True, channels_last=True,
                                 warmup=3, steps=2, repeats=2)
    assert result.label == "bf16 compiled channels_last" and result.images_per_s > 0
