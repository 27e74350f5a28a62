"""Values in and out of the ranks: only what `torch.load(weights_only=True)` reads back travels.

Arguments go to the ranks and return values come back as files written with `torch.save`; tensors are
moved to the CPU, a pandas DataFrame travels as a tagged dict of columns, and a module is refused (its
state_dict travels instead). Loading with `weights_only=True` means a file never runs code when it is read.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

_DATAFRAME_TAG = "__harness_dataframe__"


def _to_portable(value: Any) -> Any:
    pandas = sys.modules.get("pandas")  # only present (and only needed) when a DataFrame can be returned
    if pandas is not None and isinstance(value, pandas.DataFrame):
        return {_DATAFRAME_TAG: value.to_dict(orient="list")}
    if isinstance(value, torch.nn.Module):
        raise TypeError(
            "a launched function returned a module: return its state_dict() instead "
            "(of the unwrapped model: ddp_model.module.state_dict())."
        )
    if isinstance(value, dict):
        return {key: _to_portable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_portable(item) for item in value)
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    return value


def _from_portable(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {_DATAFRAME_TAG}:
            import pandas

            return pandas.DataFrame(value[_DATAFRAME_TAG])
        return {key: _from_portable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_from_portable(item) for item in value)
    return value


def save_portable(value: Any, path: Path, what: str) -> None:
    """Save `value` to `path` in a form another process loads safely.

    Args:
        what: how the error names `value` ("the arguments", "rank 1's return value").

    Raises:
        TypeError: `value` is a module, or holds something `torch.load(weights_only=True)` refuses.
    """
    torch.save(_to_portable(value), path)
    try:
        torch.load(path, weights_only=True)
    except Exception as error:
        raise TypeError(
            f"{what} cannot travel between processes safely ({type(error).__name__}: "
            f"{str(error).splitlines()[0]}). "
            "Use tensors, numbers, strings, and lists, tuples and dicts of these (state_dicts are fine)."
        ) from None


def load_portable(path: Path) -> Any:
    """Load a value `save_portable` wrote (DataFrames rebuilt)."""
    return _from_portable(torch.load(path, weights_only=True))
