"""A judge's reference, recorded on the visible case: the student tree's judges answer with data, not code.

Some references a judge recomputes are the exercise's answer (`to_tokens`'s one line, the AMP step). The student
tree ships the judges so that local checks run, but never those bodies: `@recorded` marks such a reference, and
`harness release --student` (`harness.grading.references`) runs each affected exercise's visible check on the
solution while `recording()`, stores every marked call's result under a digest of its arguments
(`harness/judges/recorded.json`: each result in the wire format, decoded without running code) and ships the
marked functions with their bodies removed. As otter's public tests and okpy's recorded values do, the tree's local
check then judges the visible case against what the reference returned on it; any other input is `Unrecorded`, and
the hidden cases are judged by the grader, whose tree holds the references.

In the instructor's tree (no table) a marked function is called as it is. A judge calls a marked reference only on
its case's inputs (never on values it read from an observation), so the solution's run records every call a local
check can make.

A held drill's reference (`harness.judges.drills.recorded`) is filed the same way (`digest`, `encoded`, `lookup`):
only its table is its own, because its code leaves the graded tree with the held answers' package rather than as a
stripped body, and its visible calls are listed by its judge rather than recorded from a notebook's check.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import functools
import hashlib
import json
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import nn

from harness.contract import wire

# Where the student tree keeps the recorded results: with the judges, which a graded kernel never mounts.
TABLE = Path(__file__).resolve().parents[1] / "judges" / "recorded.json"
MARK = "__recorded__"  # set on every wrapper `recorded` returns: the name its results are filed under

Function = TypeVar("Function", bound=Callable[..., Any])
_recording: dict[str, dict[str, Any]] | None = None
_loaded: dict[str, dict[str, Any]] | None = None


class Unrecorded(LookupError):
    """A withheld reference was called on an input its table does not hold (not the visible case's)."""


def _feed(value: Any, into: Any, weights: bool = True) -> None:
    """Add `value` to the hash `into`: its type, and its content as bytes (a module's parameter and buffer values
    only with `weights`)."""
    def put(tag: str, data: bytes = b"") -> None:
        into.update(tag.encode() + b"\0" + struct.pack("<Q", len(data)) + data)

    if isinstance(value, torch.Tensor):
        flat = value.detach().cpu().contiguous().reshape(-1)
        put(f"tensor {value.dtype} {tuple(value.shape)}", flat.view(torch.uint8).numpy().tobytes())
    elif isinstance(value, nn.Module):
        # the architecture (each submodule by name and type: not repr(value), which changes between torch versions,
        # LayerNorm's gaining bias=True, while the tree's digest must match the release's on the student's torch),
        # each submodule's mode, each parameter's value, dtype, requires_grad and which earlier parameter it is (a
        # tied weight), and the buffers: what a reference on a module reads
        put(f"module {type(value).__module__}.{type(value).__qualname__}",
            "\n".join(f"{name}: {type(module).__module__}.{type(module).__qualname__}"
                      for name, module in value.named_modules()).encode())
        put("modes", bytes(module.training for module in value.modules()))
        first: dict[int, str] = {}
        for name, parameter in value.named_parameters(remove_duplicate=False):
            put(f"parameter {name} {parameter.requires_grad} {first.setdefault(id(parameter), name)}")
            _feed(parameter if weights else parameter.new_empty((0,)), into)
            put(f"shape {tuple(parameter.shape)}")
        for name, buffer in value.named_buffers():
            put(f"buffer {name} {tuple(buffer.shape)}")
            _feed(buffer if weights else buffer.new_empty((0,)), into)
    elif value is None or isinstance(value, (bool, int, float, complex, str, torch.dtype, torch.device)):
        put(f"{type(value).__name__}", repr(value).encode())
    elif isinstance(value, (list, tuple)):
        put(f"{type(value).__name__} {len(value)}")
        for item in value:
            _feed(item, into, weights)
    elif isinstance(value, dict):
        put(f"dict {len(value)}")
        for key, item in sorted(value.items(), key=lambda pair: repr(pair[0])):
            _feed(key, into, weights)
            _feed(item, into, weights)
    else:
        raise TypeError(f"a recorded reference cannot take a {type(value).__name__}: its digest is not defined")


def digest(args: tuple[Any, ...], kwargs: dict[str, Any], weights: bool = True) -> str:
    """The key of a call: a SHA-256 of its arguments' types and contents (tensors by dtype, shape and bytes; a
    module by its type, architecture, modes, parameters and buffers: their values only with `weights`)."""
    into = hashlib.sha256()
    _feed(args, into, weights)
    _feed(kwargs, into, weights)
    return into.hexdigest()


def _kept(value: Any) -> Any:
    """A copy of a result that later changes to the judge's objects cannot reach (tensors detached and cloned)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_kept(item) for item in value)
    if isinstance(value, dict):
        return {key: _kept(item) for key, item in value.items()}
    return copy.deepcopy(value)


def encoded(table: dict[str, dict[str, Any]]) -> dict[str, dict[str, str]]:
    """`table` ({reference name: {digest: result}}) as JSON data: each result in the wire format, base64."""
    return {name: {key: base64.b64encode(wire.encode({"result": result})).decode()
                   for key, result in sorted(results.items())}
            for name, results in sorted(table.items())}


def decoded(stored: dict[str, dict[str, str]]) -> dict[str, dict[str, Any]]:
    """The table `encoded` gave (wire.WireError for anything else): data only, no code runs."""
    return {str(name): {str(key): wire.decode(base64.b64decode(text))["result"] for key, text in results.items()}
            for name, results in stored.items()}


def save(table: dict[str, dict[str, Any]], path: Path) -> None:
    """Write `table` ({reference name: {digest: result}}) to `path` as JSON, each result in the wire format."""
    path.write_text(json.dumps(encoded(table), indent=0), encoding="utf-8")


def load(path: Path) -> dict[str, dict[str, Any]]:
    """The table `save` wrote (wire.WireError for anything else): data only, no code runs."""
    return decoded(json.loads(path.read_text(encoding="utf-8")))


def lookup(table: dict[str, dict[str, Any]], name: str, args: tuple[Any, ...], kwargs: dict[str, Any],
           weights: bool = True) -> Any:
    """What the reference `name` returned on these arguments, as `table` holds it (a copy).

    Raises:
        Unrecorded: the table holds no such call (not one of the visible case's).
    """
    key = digest(args, kwargs, weights)
    if key not in table.get(name, {}):
        raise Unrecorded(
            f"{name} is a reference that answers an exercise: it stays with the instructor, and the student "
            "course holds only what it returned on the visible case of its check. This call's inputs are not "
            "the visible case's (a hidden case, or the reference called directly): the hidden cases are judged "
            "by the grader.")
    return _kept(table[name][key])


def _table() -> dict[str, dict[str, Any]] | None:
    """The student tree's recorded results (None in the instructor's tree, which has no table)."""
    global _loaded
    if _loaded is None and TABLE.is_file():
        _loaded = load(TABLE)
    return _loaded


def recorded(function: Function | None = None, *, weights: bool = True) -> Any:
    """Mark `function` as a reference the student tree withholds: it answers there from the recorded table.

    Its results must be data the wire format carries (tensors, numbers, strings, dtypes, and lists, tuples and
    string-keyed dicts of them); its arguments anything `digest` takes. `@recorded(weights=False)`: a reference
    that reads a module's structure, never its parameters' values (the case builds the module without a seed),
    files its calls without those values.
    """
    if function is None:
        return functools.partial(recorded, weights=weights)
    name = f"{function.__module__}.{function.__qualname__}"

    @functools.wraps(function)
    def reference(*args: Any, **kwargs: Any) -> Any:
        table = None if _recording is not None else _table()
        if table is None:
            result = function(*args, **kwargs)
            if _recording is not None:
                _recording.setdefault(name, {})[digest(args, kwargs, weights)] = _kept(result)
            return result
        return lookup(table, name, args, kwargs, weights)

    setattr(reference, MARK, name)
    return reference  # type: ignore[return-value]


@contextlib.contextmanager
def recording() -> Iterator[dict[str, dict[str, Any]]]:
    """Within it, every marked reference runs and its results are filed in the dict it yields:
    {reference name: {digest of the arguments: result}}."""
    global _recording
    previous, _recording = _recording, {}
    try:
        yield _recording
    finally:
        _recording = previous
