"""The run report: one Markdown file that says what ran, where, how fast, and how well on held-out data.

Under mixed precision it also lists the operations that ran in fp32, observed for real: a
TorchDispatchMode sees every aten operation *after* autocast has chosen its dtype, so the list is what
autocast actually did (e.g. softmax, layer norm and the loss stay fp32 while matmuls run in bf16).
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from harness.amp import autocast
from harness.describe import describe_history

# Operations that move or reshape data without arithmetic: their dtype says nothing about precision.
_DATA_MOVEMENT = {
    "_to_copy", "view", "_unsafe_view", "t", "transpose", "expand", "reshape", "detach", "clone", "permute",
    "unsqueeze", "squeeze", "as_strided", "slice", "select", "copy_", "empty", "zeros", "lift_fresh", "alias",
    "contiguous", "_reshape_alias", "flatten", "split", "unbind", "new_empty", "zeros_like", "ones_like", "fill_",
}


class _DtypeRecorder(TorchDispatchMode):
    """Counts (operation, output dtype) pairs for every aten call under it."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[tuple[str, torch.dtype]] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        # the first floating output is the result; later ones are saved statistics (batch norm's mean...)
        result = next((t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.is_floating_point()), None)
        if result is not None:
            self.counts[(name, result.dtype)] += 1
        return out


def observe_op_dtypes(
    model: nn.Module,
    inputs: torch.Tensor,
    *,
    precision: str,
    targets: torch.Tensor | None = None,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> dict[str, list[str]]:
    """Run one forward pass (and the loss, when given) under `precision`'s autocast, in eval mode without
    gradients, and record the dtype each arithmetic operation produced.

    Returns:
        Operation name -> sorted dtype names it produced, e.g. {"addmm": ["bfloat16"], "_log_softmax": ["float32"]}.
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    recorder = _DtypeRecorder()
    try:
        with torch.no_grad(), autocast(device, precision), recorder:
            outputs = model(inputs.to(device))
            if loss_fn is not None and targets is not None:
                loss_fn(outputs, targets.to(device))
    finally:
        model.train(was_training)
    found: dict[str, set[str]] = {}
    for (name, dtype), _ in recorder.counts.items():
        if name not in _DATA_MOVEMENT:
            found.setdefault(name, set()).add(str(dtype).removeprefix("torch."))
    return {name: sorted(dtypes) for name, dtypes in sorted(found.items())}


def fp32_operations(op_dtypes: dict[str, list[str]]) -> list[str]:
    """The operations of `observe_op_dtypes`'s result that produced float32."""
    return [name for name, dtypes in op_dtypes.items() if "float32" in dtypes]


def write_run_report(
    path: str | Path,
    history: pd.DataFrame,
    *,
    test_metrics: dict[str, float] | None = None,
    best_checkpoint: str | Path | None = None,
    op_dtypes: dict[str, list[str]] | None = None,
    environment: dict[str, Any] | None = None,
    curves: str | Path | None = None,
    title: str = "Training run",
) -> Path:
    """Write the Markdown run report.

    Args:
        path: the .md file to write (parent folders are created).
        history: `fit`'s history; its `attrs["config"]` gives device, precision and the configuration.
        test_metrics: metrics on held-out test data (e.g. `harness.train.evaluate` on the test loader);
            never pass training-data metrics here.
        best_checkpoint: path of best.pt.
        op_dtypes: `observe_op_dtypes(...)` under the run's precision.
        environment: `harness.env.environment_report()` (computed here when None).
        curves: the curves image (`harness.plots.plot_history(history, curves)`), shown in the report
            through a link relative to the report's folder, with `describe_history(history)` as its alt text.

    Returns:
        The path written.
    """
    if environment is None:
        from harness.env import environment_report

        environment = environment_report(history.attrs.get("config", {}).get("device"))
    config = history.attrs.get("config", {})
    path = Path(path)
    sections = [
        f"# {title}",
        _setup_section(config, environment),
        _results_section(history, config, test_metrics, best_checkpoint),
        "## History\n\n" + markdown_table(history),
    ]
    if curves is not None:
        link = Path(os.path.relpath(Path(curves).resolve(), path.parent.resolve())).as_posix()
        sections.append(f"## Curves\n\n![{describe_history(history)}]({link})")
    if op_dtypes is not None:
        sections.append(_precision_section(config.get("precision", "fp32"), op_dtypes))
    sections.append("## Configuration\n\n" + "\n".join(f"- {k}: `{v}`" for k, v in config.items()))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n\n".join(sections) + "\n")
    return path


def markdown_table(frame: pd.DataFrame, cell: Callable[[Any], str] | None = None) -> str:
    """A DataFrame as a Markdown table; `cell` formats each value (default: 4 significant digits for floats)."""
    cell = cell or _cell
    header = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "---|" * len(frame.columns)
    rows = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *rows])


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def _setup_section(config: dict[str, Any], env: dict[str, Any]) -> str:
    lines = [
        f"- device: {env.get('device', config.get('device'))} ({env.get('device_name', 'unknown')})",
        f"- precision: {config.get('precision', 'fp32')}",
        f"- processes: {config.get('world_size', 1)}",
        f"- versions: python {env.get('python')}, torch {env.get('torch')}, torchvision {env.get('torchvision')}",
    ]
    return "## Setup\n\n" + "\n".join(lines)


def _results_section(history: pd.DataFrame, config: dict[str, Any], test_metrics: dict[str, float] | None,
                     best_checkpoint: str | Path | None) -> str:
    train_seconds = history["epoch_seconds"].sum()
    throughput = history["samples_per_second"].median()
    lines = [f"- epochs run: {len(history)} of {config.get('epochs', len(history))}",
             f"- total time: {train_seconds:.1f} s; median throughput {throughput:,.0f} training samples/s"]
    monitor = config.get("monitor")
    if monitor in history:
        best = history[monitor].idxmax() if config.get("monitor_mode") == "max" else history[monitor].idxmin()
        lines.append(f"- best epoch: {int(history.loc[best, 'epoch'])} ({monitor} {history.loc[best, monitor]:.4g})")
    if best_checkpoint is not None:
        lines.append(f"- best checkpoint: `{best_checkpoint}`")
    if test_metrics:
        lines.append("- held-out test set: " + ", ".join(f"{k} {v:.4g}" for k, v in test_metrics.items()))
    else:
        lines.append("- held-out test set: not evaluated")
    return "## Results\n\n" + "\n".join(lines)


def _precision_section(precision: str, op_dtypes: dict[str, list[str]]) -> str:
    fp32 = fp32_operations(op_dtypes)
    low = [name for name, dtypes in op_dtypes.items() if any(d in ("bfloat16", "float16") for d in dtypes)]
    how = "in fp32 (no autocast)" if precision == "fp32" else f"under {precision} autocast"
    text = [f"## Precision\n\nObserved in one forward pass {how} (aten operations):",
            f"- in reduced precision: {', '.join(f'`{n}`' for n in low) or 'none'}",
            f"- in fp32: {', '.join(f'`{n}`' for n in fp32) or 'none'}"]
    return "\n".join(text)


__all__ = ["fp32_operations", "markdown_table", "observe_op_dtypes", "write_run_report"]
