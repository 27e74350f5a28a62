"""The training history: one row per epoch, as a DataFrame, a CSV file and plain lists for checkpoints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from harness.checkpoint import atomic_write

TIMING_COLUMNS = ("epoch_seconds", "samples_per_second")


def history_frame(rows: list[dict[str, Any]], config: dict[str, Any]) -> pd.DataFrame:
    """The history DataFrame; the resolved configuration travels with it in `.attrs["config"]`."""
    frame = pd.DataFrame(rows)
    frame.attrs["config"] = dict(config)
    return frame


def rows_to_lists(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Column -> list of values: plain containers a weights_only checkpoint can hold (a DataFrame cannot)."""
    columns: dict[str, list[Any]] = {}
    for row in rows:
        for name in row:
            columns.setdefault(name, [])
    return {name: [row.get(name) for row in rows] for name in columns}


def lists_to_rows(columns: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Inverse of `rows_to_lists`."""
    length = len(next(iter(columns.values()), []))
    return [{name: values[i] for name, values in columns.items()} for i in range(length)]


def write_history(history: pd.DataFrame, directory: str | Path) -> Path:
    """Write `history.csv` and the run's `config.json` into `directory`; returns the CSV path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    csv_path = directory / "history.csv"
    config = json.dumps(history.attrs.get("config", {}), indent=2, default=str)
    for path, text in ((csv_path, history.to_csv(index=False)), (directory / "config.json", config)):
        atomic_write(path, lambda file, text=text: file.write(text.encode()))  # a reader never sees half a file
    return csv_path
