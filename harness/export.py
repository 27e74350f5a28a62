"""Serving helpers for lesson 16: output parity between two implementations, honest latency, artefact sizes, and
ONNX Runtime sessions that stay quiet.

`parity` runs a reference (eager PyTorch) and a candidate (an exported program, an ONNX Runtime session, a
quantised model) on the same inputs and reports the largest difference against a stated tolerance. `latency`
times a call the way benchmarks should: warm-up first, the device synchronised around each call, the median
of many repeats with its spread. `file_size` and `state_dict_bytes` say how big an artefact is.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class ParityReport:
    """How far a candidate's outputs are from the reference's, input by input.

    Attributes:
        max_abs: the largest |candidate - reference| over all inputs.
        max_rel: the largest |candidate - reference| / |reference| (entries where the reference is 0 are skipped).
        per_input: the largest absolute difference of each input, in order.
        atol: the absolute tolerance the verdict used.
        rtol: the relative tolerance the verdict used.
        ok: every entry satisfies |candidate - reference| <= atol + rtol * |reference| (torch.allclose's rule),
            and every pair of outputs has the same shape.
    """

    max_abs: float
    max_rel: float
    per_input: tuple[float, ...]
    atol: float
    rtol: float
    ok: bool

    def __str__(self) -> str:
        verdict = "within" if self.ok else "OUTSIDE"
        return (f"max |diff| {self.max_abs:.2e}, max relative {self.max_rel:.2e} over {len(self.per_input)} inputs: "
                f"{verdict} atol={self.atol:g}, rtol={self.rtol:g}")


def parity(reference: Callable[[torch.Tensor], Any], candidate: Callable[[torch.Tensor], Any],
           inputs: Sequence[torch.Tensor], *, atol: float = 1e-5, rtol: float = 1e-4) -> ParityReport:
    """Compare `candidate(x)` with `reference(x)` for each `x` of `inputs`.

    Both functions may return a tensor or a NumPy array; the comparison is done in float64 on the CPU, so
    the report measures the candidate, not the comparison.

    Args:
        reference: the trusted implementation (usually the eager model in eval mode, under inference_mode).
        candidate: the implementation under test (an exported program, an ONNX Runtime session's runner).
        inputs: the inputs to run, for example the same rows at several batch sizes.
        atol: absolute tolerance.
        rtol: relative tolerance.

    Returns:
        A ParityReport; `ok` is False as soon as one output differs in shape or by more than the tolerance.

    Raises:
        ValueError: `inputs` is empty.
    """
    if not inputs:
        raise ValueError("parity needs at least one input")
    worst_abs, worst_rel, per_input, ok = 0.0, 0.0, [], True
    for x in inputs:
        want = torch.as_tensor(reference(x)).detach().cpu().double()
        got = torch.as_tensor(candidate(x)).detach().cpu().double()
        if got.shape != want.shape:
            per_input.append(float("inf"))
            worst_abs, ok = float("inf"), False
            continue
        diff = (got - want).abs()
        largest = float(diff.max()) if diff.numel() else 0.0
        nonzero = want != 0
        relative = float((diff[nonzero] / want[nonzero].abs()).max()) if bool(nonzero.any()) else 0.0
        ok = ok and bool((diff <= atol + rtol * want.abs()).all())
        per_input.append(largest)
        worst_abs, worst_rel = max(worst_abs, largest), max(worst_rel, relative)
    return ParityReport(worst_abs, worst_rel, tuple(per_input), atol, rtol, ok)


@dataclass(frozen=True)
class LatencyReport:
    """Wall-clock seconds per call, over `len(times)` timed repeats after the warm-up.

    Attributes:
        median: the median time of one call, in seconds (the figure to quote).
        q1: the first quartile (with q3, the spread).
        q3: the third quartile.
        times: every timed repeat, in order.
    """

    median: float
    q1: float
    q3: float
    times: tuple[float, ...]

    def __str__(self) -> str:
        return (f"{self.median * 1e3:.3f} ms median (IQR {self.q1 * 1e3:.3f}-{self.q3 * 1e3:.3f} ms, "
                f"{len(self.times)} runs)")


def latency(fn: Callable[..., Any], *args: Any, repeats: int = 30, warmup: int = 5,
            device: torch.device | str | None = None) -> LatencyReport:
    """Time `fn(*args)`: `warmup` untimed calls first, then `repeats` timed ones with `time.perf_counter`.

    On a CUDA device, the device is synchronised before starting the clock and before reading it: kernels run
    asynchronously, and without the synchronisation the clock measures only how long it took to queue them.

    Args:
        fn: what to time (a model under inference_mode, an ONNX Runtime run, ...).
        *args: its arguments, the same at every call.
        repeats: timed calls (at least 1).
        warmup: untimed calls first (lazy initialisation, caches, allocator, CUDA kernels' first launch).
        device: the device `fn` runs on; a CUDA device is synchronised around each timed call.

    Returns:
        A LatencyReport (median and quartiles of the timed calls).

    Raises:
        ValueError: `repeats` < 1 or `warmup` < 0.
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"latency needs repeats >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}")
    cuda = device is not None and torch.device(device).type == "cuda"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    for _ in range(warmup):
        fn(*args)
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn(*args)
        sync()
        times.append(time.perf_counter() - start)
    if len(times) > 1:
        q1, _, q3 = statistics.quantiles(times, n=4)
    else:
        q1 = q3 = times[0]
    return LatencyReport(statistics.median(times), q1, q3, tuple(times))


def file_size(path: str | os.PathLike[str]) -> int:
    """The size of the file at `path`, in bytes (what you ship, download and keep in memory to load)."""
    return os.path.getsize(path)


def state_dict_bytes(state: nn.Module | Mapping[str, Any]) -> int:
    """The bytes held by the tensors of a module's state_dict (or of a state_dict), buffers included.

    Tensors that share storage are counted once per tensor (a state_dict rarely has any).
    """
    items = state.state_dict() if isinstance(state, nn.Module) else state
    return sum(v.numel() * v.element_size() for v in items.values() if isinstance(v, torch.Tensor))


EXPORT_EXTRA = ("onnx", "onnxruntime", "onnxscript")


def require_export_extra() -> None:
    """Raise a clear error when the export extra (ONNX, ONNX Runtime, onnxscript) is not installed.

    Raises:
        ModuleNotFoundError: naming the missing packages and the command that installs them.
    """
    import importlib.util

    missing = [name for name in EXPORT_EXTRA if importlib.util.find_spec(name) is None]
    if missing:
        raise ModuleNotFoundError(
            f"Lesson 16 needs the export extra, and {', '.join(missing)} is not installed (nothing is wrong with "
            "your code). Install it: `pip install onnx onnxruntime onnxscript` (or run harness/install.py from the "
            "course folder), then run this cell again.", name=missing[0])


def onnx_session(path: str | os.PathLike[str], *, threads: int = 1) -> Any:
    """An ONNX Runtime session for the model at `path`, on the CPU, that logs only errors.

    Args:
        path: the .onnx file.
        threads: intra-op threads (1: reproducible timings on a shared machine; 0 lets ONNX Runtime choose).

    Returns:
        An `onnxruntime.InferenceSession` using the CPUExecutionProvider.
    """
    require_export_extra()
    import onnxruntime as ort  # imported here: code that never serves ONNX never pays for it

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only: warnings would reach stderr
    return ort.InferenceSession(os.fspath(path), sess_options=options, providers=["CPUExecutionProvider"])


def onnx_runner(session: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    """A function x -> output for a session with one input and (at least) one output: feeds `x` as float32
    NumPy under the session's input name and returns the first output as a tensor."""
    name = session.get_inputs()[0].name

    def run(x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(session.run(None, {name: x.detach().cpu().float().numpy()})[0])

    return run
