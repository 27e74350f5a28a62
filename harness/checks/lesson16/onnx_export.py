"""16-onnx-export, the probe.

Call `export_onnx(model, example, path)` on a model in training mode; record the mode of the forwards
the exporter traced, the file's input and output names and shapes, and what ONNX Runtime computes from it
at each of the case's batch sizes.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Callable
from typing import Any

import torch

from harness.checks.lesson16.common import _files, case_inputs, case_model
from harness.contract.case import Case
from harness.contract.errors import explain
from harness.contract.failure import CheckFailed
from harness.contract.registry import register

EXPORT_ROWS = 4  # the batch size of the example the exercise exports with


def _dynamic_shapes_refusal(error: BaseException) -> str | None:
    """torch.export's message when it refused the `dynamic_shapes` it was given (found along the exception's
    causes: the ONNX exporter wraps it in a TorchExportError that names only the step that failed); else None."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        text = str(current)
        if not isinstance(current, CheckFailed) and "`dynamic_shapes`" in text and not text.startswith("Failed to"):
            return text.partition("For more information")[0].strip()[:600]
        current = current.__cause__ or current.__context__
    return None


def onnx_batches(case: Case) -> list[int]:
    """The batch sizes the exported model is run with."""
    return [1, 33, 5] if case.hidden else [1, 17]


@register("16-onnx-export")
def probe_onnx_export(export_onnx: Callable[..., Any], *, case: Case) -> dict:
    """Call `export_onnx(model, example, path)` on a model in training mode; record the mode of the forwards
    the exporter traced, the file's input and output names and shapes, and what ONNX Runtime computes from it
    at each of the case's batch sizes."""
    from harness.export import onnx_session  # ONNX Runtime: imported only by this check

    model = case_model(case, salt=30)
    modes: list[bool] = []
    jit: list[bool] = []  # whether each forward ran under torch.jit tracing (the TorchScript exporter)

    def record(module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        modes.append(module.training)
        jit.append(torch.jit.is_tracing())

    handle = model.register_forward_pre_hook(record)
    seen: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="harness-16-") as folder:
        path = os.path.join(folder, "classifier.onnx")
        try:
            with warnings.catch_warnings(record=True) as caught:  # the exporter's warnings: data, not stderr
                warnings.simplefilter("always")
                returned = export_onnx(model, case_inputs(case, EXPORT_ROWS, salt=99), path)
        except Exception as error:  # the student's code raised: explained by the judge when torch.export refused
            refused = _dynamic_shapes_refusal(error)  # the dynamic_shapes given, else the usual [raised]
            if refused is None:
                raise
            return {"dynamic_shapes_refused": refused, "raised": explain(error)[:2000]}
        finally:
            handle.remove()
        seen.update(modes=modes, jit=jit, returned=type(returned).__name__,
                    warnings=[str(w.message)[:200] for w in caught][:5], written=os.path.isfile(path),
                    files=_files(folder))
        if not seen["written"]:
            return seen
        session = onnx_session(path)
        seen["inputs"] = [(i.name, [d if isinstance(d, (int, str)) else None for d in i.shape])
                          for i in session.get_inputs()]
        seen["outputs"] = [o.name for o in session.get_outputs()]
        runs = []
        for rows in onnx_batches(case):
            x = case_inputs(case, rows, salt=40)
            try:
                runs.append({"output": torch.from_numpy(session.run(None, {seen["inputs"][0][0]: x.numpy()})[0])})
            except Exception as error:  # ONNX Runtime refused these inputs: data for the judge
                runs.append({"error": f"{type(error).__name__}: {error}"[:300]})
        seen["runs"] = runs
    return seen
