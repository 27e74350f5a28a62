"""Observations as data: what a probe sends from the student's kernel to the judge, and nothing else.

A probe returns a dict of plain values (None, bool, int, float, str, lists, tuples, dicts with string keys,
torch tensors and dtypes). `encode` turns it into bytes: a JSON skeleton followed by the tensors in the
safetensors format. `decode` turns the bytes back into the same values without running any code of the
sender (no pickle), and refuses input larger than `MAX_BYTES` or nested deeper than `MAX_DEPTH`.

Anything else a probe passes (a student's object of an unexpected type) is sent as its type name and a short
repr, so the judge can say what came back without ever holding the object.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from typing import Any

import torch
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors

MAX_BYTES = 64 * 2**20
MAX_DEPTH = 32
_HEADER = struct.Struct("<Q")


class WireError(ValueError):
    """Bytes that are not an observation this module wrote (forged, truncated or too large)."""


@dataclass(frozen=True)
class Opaque:
    """A value the probe could not send as data: its type name and a short repr."""

    type_name: str
    text: str

    def __repr__(self) -> str:
        return f"<{self.type_name}: {self.text}>"


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _encode(value: Any, tensors: dict[str, torch.Tensor], depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise WireError(f"observation nested deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value if abs(value) < 2**53 else {"__float__": repr(float(value))}
    if isinstance(value, float):
        return value if math.isfinite(value) else {"__float__": repr(value)}
    if isinstance(value, torch.dtype):
        return {"__dtype__": _dtype_name(value)}
    if isinstance(value, torch.Tensor):
        key = str(len(tensors))
        data = value.detach()
        meta = {"__tensor__": key, "device": str(data.device), "requires_grad": bool(value.requires_grad)}
        if data.layout != torch.strided or data.is_complex():
            return {"__opaque__": "Tensor", "repr": f"a {data.layout} {data.dtype} tensor of shape {tuple(data.shape)}"}
        if data.device.type == "meta":  # shape and dtype only: a meta tensor has no values
            return {**meta, "__tensor__": None, "shape": list(data.shape), "dtype": _dtype_name(data.dtype)}
        tensors[key] = data.to("cpu").contiguous().clone()
        return meta
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v, tensors, depth + 1) for v in value]}
    if isinstance(value, list):
        return [_encode(v, tensors, depth + 1) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"__dict__": {k: _encode(v, tensors, depth + 1) for k, v in value.items()}}
    try:
        text = repr(value)[:200]
    except Exception:  # a student's __repr__ may raise
        text = "(repr failed)"
    return {"__opaque__": type(value).__name__, "repr": text}


def encode(observation: dict[str, Any]) -> bytes:
    """The observation as bytes: an 8-byte length, the JSON skeleton, then the tensors (safetensors)."""
    tensors: dict[str, torch.Tensor] = {}
    skeleton = json.dumps(_encode(observation, tensors, 0)).encode()
    blob = save_tensors(tensors) if tensors else b""
    data = _HEADER.pack(len(skeleton)) + skeleton + blob
    if len(data) > MAX_BYTES:
        raise WireError(f"observation of {len(data)} bytes exceeds the {MAX_BYTES}-byte limit")
    return data


def _decode(value: Any, tensors: dict[str, torch.Tensor], depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise WireError(f"observation nested deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [_decode(v, tensors, depth + 1) for v in value]
    if not isinstance(value, dict) or len(value) == 0:
        raise WireError(f"unexpected JSON value {str(value)[:80]}")
    if "__tensor__" in value and value["__tensor__"] is None:
        shape, dtype = value.get("shape"), getattr(torch, str(value.get("dtype")), None)
        shape_ok = isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)
        if not shape_ok or not isinstance(dtype, torch.dtype):
            raise WireError("malformed meta tensor")
        return torch.empty(shape, dtype=dtype, device="meta")
    if "__tensor__" in value:
        tensor = tensors.get(str(value["__tensor__"]))
        if tensor is None:
            raise WireError(f"tensor {value['__tensor__']!r} missing from the observation")
        if value.get("requires_grad") and tensor.is_floating_point():
            tensor = tensor.requires_grad_(True)
        return tensor
    if "__float__" in value:
        return float(value["__float__"])
    if "__dtype__" in value:
        dtype = getattr(torch, str(value["__dtype__"]), None)
        if not isinstance(dtype, torch.dtype):
            raise WireError(f"unknown dtype {value['__dtype__']!r}")
        return dtype
    if "__tuple__" in value:
        return tuple(_decode(v, tensors, depth + 1) for v in value["__tuple__"])
    if "__dict__" in value and isinstance(value["__dict__"], dict):
        return {str(k): _decode(v, tensors, depth + 1) for k, v in value["__dict__"].items()}
    if "__opaque__" in value:
        return Opaque(str(value["__opaque__"])[:100], str(value.get("repr", ""))[:200])
    raise WireError(f"unexpected JSON object with keys {sorted(value)[:5]}")


def decode(data: bytes) -> dict[str, Any]:
    """The observation `encode` wrote; WireError for anything else. Runs no code of the sender."""
    if not isinstance(data, (bytes, bytearray)) or len(data) > MAX_BYTES or len(data) < _HEADER.size:
        raise WireError("not an observation: wrong type or size")
    (length,) = _HEADER.unpack_from(data)
    if length > len(data) - _HEADER.size:
        raise WireError("truncated observation")
    try:
        skeleton = json.loads(data[_HEADER.size:_HEADER.size + length])
        blob = bytes(data[_HEADER.size + length:])
        tensors = load_tensors(blob) if blob else {}
    except Exception as error:  # json and safetensors raise several types for garbage
        raise WireError(f"unreadable observation ({type(error).__name__})") from None
    observation = _decode(skeleton, tensors, 0)
    if not isinstance(observation, dict):
        raise WireError("an observation is a dict")
    return observation


def type_name(value: Any) -> str:
    """The type of a value as the student's code produced it (an Opaque carries the original name)."""
    return value.type_name if isinstance(value, Opaque) else type(value).__name__


def describe(value: Any) -> str:
    """A short description of a value that came back, for failure messages (no device: tensors arrive on the CPU)."""
    if isinstance(value, Opaque):
        return f"{value.type_name} {value.text}"[:120]
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}, dtype {value.dtype}"
    return f"{type(value).__name__} {value!r}"[:120]
