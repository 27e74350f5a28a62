"""harness.export: parity reports, latency, sizes, and ONNX Runtime sessions, on real exports (no mocks)."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

from harness.export import (
    LatencyReport,
    ParityReport,
    file_size,
    latency,
    onnx_runner,
    onnx_session,
    parity,
    state_dict_bytes,
)


def small_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 12), nn.BatchNorm1d(12), nn.ReLU(), nn.Linear(12, 3)).eval()


def rows(count: int) -> torch.Tensor:
    return torch.randn(count, 6, generator=torch.Generator().manual_seed(count))


# ---------------------------------------------------------------- parity
def test_parity_of_a_function_with_itself_is_exact():
    model = small_model()
    report = parity(model, model, [rows(1), rows(5)])
    assert isinstance(report, ParityReport)
    assert report.ok and report.max_abs == 0.0 and report.per_input == (0.0, 0.0)
    assert "within" in str(report)


def test_parity_measures_the_largest_difference_and_applies_the_tolerance():
    x = torch.tensor([[1.0, -2.0, 0.0]])
    shifted = parity(lambda t: t, lambda t: t + torch.tensor([0.0, 0.01, 0.0]), [x], atol=1e-3, rtol=0.0)
    assert not shifted.ok and shifted.max_abs == pytest.approx(0.01, rel=1e-6)
    assert shifted.max_rel == pytest.approx(0.005, rel=1e-4)  # 0.01 / |-2|, the zero entry skipped
    assert "OUTSIDE" in str(shifted)
    # the same difference passes under a relative tolerance that covers it (allclose's rule)
    assert parity(lambda t: t, lambda t: t + torch.tensor([0.0, 0.01, 0.0]), [x], atol=0.0, rtol=0.01).ok


def test_parity_fails_on_a_shape_mismatch_and_accepts_numpy_outputs():
    x = rows(4)
    report = parity(lambda t: t, lambda t: t[:2], [x])
    assert not report.ok and report.max_abs == float("inf")
    assert parity(lambda t: t, lambda t: t.numpy(), [x]).ok


def test_parity_needs_inputs():
    with pytest.raises(ValueError, match="at least one input"):
        parity(lambda t: t, lambda t: t, [])


# ---------------------------------------------------------------- latency
def test_latency_times_each_repeat_after_the_warmup():
    calls = []

    def sleepy() -> None:
        calls.append(1)
        time.sleep(0.002)

    report = latency(sleepy, repeats=5, warmup=2)
    assert isinstance(report, LatencyReport)
    assert len(calls) == 7 and len(report.times) == 5
    assert 0.0015 < report.median < 0.05 and report.q1 <= report.median <= report.q3
    assert "ms median" in str(report)


def test_latency_passes_arguments_and_handles_one_repeat():
    seen = []
    report = latency(lambda a, b: seen.append((a, b)), 1, 2, repeats=1, warmup=0)
    assert seen == [(1, 2)] and report.q1 == report.median == report.q3


@pytest.mark.parametrize(("repeats", "warmup"), [(0, 1), (3, -1)])
def test_latency_rejects_impossible_counts(repeats, warmup):
    with pytest.raises(ValueError, match="repeats"):
        latency(lambda: None, repeats=repeats, warmup=warmup)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_latency_synchronises_a_cuda_device():
    x = torch.randn(512, 512, device="cuda")
    report = latency(lambda: x @ x, repeats=3, warmup=1, device="cuda")
    assert report.median > 0


# ---------------------------------------------------------------- sizes
def test_state_dict_bytes_counts_parameters_and_buffers(tmp_path):
    model = small_model()
    params = sum(p.numel() * 4 for p in model.parameters())
    buffers = 12 * 4 * 2 + 8  # running mean and var (float32), num_batches_tracked (int64)
    assert state_dict_bytes(model) == params + buffers == state_dict_bytes(model.state_dict())
    path = tmp_path / "weights.pt"
    torch.save(model.state_dict(), path)
    assert file_size(path) == path.stat().st_size > state_dict_bytes(model)


# ---------------------------------------------------------------- ONNX Runtime, on real exports
@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory):
    model = small_model()
    path = tmp_path_factory.mktemp("onnx") / "model.onnx"
    torch.onnx.export(model, (rows(4),), str(path), dynamo=True, verbose=False, input_names=["features"],
                      output_names=["logits"], dynamic_shapes=({0: torch.export.Dim("batch")},))
    return model, path


def test_an_onnx_export_runs_in_onnx_runtime_at_other_batch_sizes(exported):
    model, path = exported
    session = onnx_session(path)
    assert [i.name for i in session.get_inputs()] == ["features"]
    assert session.get_inputs()[0].shape == ["batch", 6]
    assert session.get_providers() == ["CPUExecutionProvider"]
    run = onnx_runner(session)
    out = run(rows(17))
    assert isinstance(out, torch.Tensor) and out.shape == (17, 3) and out.dtype == torch.float32
    with torch.inference_mode():
        report = parity(model, run, [rows(1), rows(17)], atol=1e-5, rtol=1e-4)
    assert report.ok, report


def test_parity_catches_a_program_exported_in_training_mode():
    """torch.export records BatchNorm as it ran: in training mode, with batch statistics."""
    model = small_model().train()
    program = torch.export.export(model, (rows(4),), dynamic_shapes=({0: torch.export.Dim("batch")},)).module()
    report = parity(model.eval(), program, [rows(8)])
    assert not report.ok and report.max_abs > 1e-3


def test_the_onnx_exporter_warns_about_training_mode(tmp_path):
    with pytest.warns(UserWarning, match="training mode"):
        torch.onnx.export(small_model().train(), (rows(4),), str(tmp_path / "train.onnx"), dynamo=True,
                          verbose=False, dynamic_shapes=({0: torch.export.Dim("batch")},))


def test_onnx_runner_feeds_the_first_input_by_name(exported):
    _, path = exported
    session = onnx_session(path, threads=2)
    assert onnx_runner(session)(rows(3).double()).shape == (3, 3)  # float64 is converted to the graph's float32
