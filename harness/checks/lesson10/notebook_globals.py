"""Lesson 10: the notebook's data that a student's function reads from the notebook's globals instead of its
arguments (issue 43, item 6).

A `train_capstone` that validates on the global `val_set`, or a `write_capstone_report` that evaluates the global
`test_set`, runs in the notebook and gives the notebook's numbers; the check's own inputs never reach it. Read
from the function's code before it runs: each name it (or a function, lambda or comprehension inside it, or a
notebook function it calls) loads as a global, resolved in its `__globals__` as Python would. Only values that
are data count: a dataset, a data loader, a tensor, a model, a history table, or a dict holding one of them (a
run). Modules, builtins, functions and classes (the harness's helpers, the notebook's own), constants, paths
and devices are what a function may read from its notebook.
"""

from __future__ import annotations

import dis
import functools
import types
from typing import Any

import pandas as pd
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

_DATA_KINDS: tuple[tuple[type, str], ...] = (
    (Dataset, "a dataset"),
    (DataLoader, "a data loader"),
    (torch.Tensor, "a tensor"),
    (nn.Module, "a model"),
    (pd.DataFrame, "a history table"),
)


def _globals_loaded(code: types.CodeType) -> list[str]:
    """The names `code` and the code objects inside it load as globals (LOAD_GLOBAL, LOAD_NAME), in order of
    first appearance; attribute names, parameters and locals are not globals."""
    names = [ins.argval for ins in dis.get_instructions(code) if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME")]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += _globals_loaded(const)
    return list(dict.fromkeys(names))


def _data_kind(value: Any) -> str | None:
    """What kind of notebook data `value` is ('a dataset', ...), or None for anything a function may read: a module
    without parameters (a loss function such as a global `nn.CrossEntropyLoss()`) and a small tensor (a constant such
    as normalisation statistics or class weights, under 100 rows) are not data."""
    if isinstance(value, nn.Module) and next(value.parameters(), None) is None:
        return None
    if isinstance(value, torch.Tensor) and (value.dim() == 0 or value.shape[0] < 100):
        return None
    for kind, name in _DATA_KINDS:
        if isinstance(value, kind):
            return name
    if isinstance(value, dict) and any(_data_kind(item) for item in list(value.values())[:64]
                                       if not isinstance(item, dict)):
        return "a dict holding a model or data (a run)"
    return None


def _plain_function(function: Any) -> types.FunctionType | None:
    """The Python function behind `function` (a partial's, a bound method's), or None for anything else."""
    while isinstance(function, functools.partial):
        function = function.func
    function = getattr(function, "__func__", function)
    return function if isinstance(function, types.FunctionType) else None


def notebook_data_read(function: Any) -> dict[str, str] | None:
    """The first notebook data `function` reads as a global: {"function", "name", "kind"}, where "function" is the
    function whose code reads it (`function` itself or a notebook function it calls); None when it reads none."""
    queue, visited = [_plain_function(function)], set()
    while queue:
        current = queue.pop(0)
        if current is None or current.__code__ in visited:
            continue
        visited.add(current.__code__)
        namespace = current.__globals__
        for name in _globals_loaded(current.__code__):
            if name not in namespace:
                continue  # a builtin, or a name the function would fail to find
            value = namespace[name]
            kind = _data_kind(value)
            if kind is not None:
                return {"function": current.__qualname__, "name": name, "kind": kind}
            called = _plain_function(value)
            if called is not None and called.__globals__ is namespace:  # a function of the same notebook
                queue.append(called)
    return None
