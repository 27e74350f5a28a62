"""The training history: one row per epoch, as a DataFrame, a CSV file and plain lists for checkpoints."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

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
    _replace_atomically(csv_path, history.to_csv(index=False))
    _replace_atomically(directory / "config.json", json.dumps(history.attrs.get("config", {}), indent=2, default=str))
    return csv_path


def _replace_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)  # a reader never sees a half-written file
    except OSError as error:
        tmp.unlink(missing_ok=True)
        if error.errno != errno.ENOSPC:
            raise
        raise OSError(errno.ENOSPC, f"cannot write {path}: the disk is full; the previous {path.name} is intact. "
                                    "Free some space and resume: fit rewrites it from last.pt.") from error
