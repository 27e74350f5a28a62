"""What the student's code reached below `__torch_function__`, for "do not use X" rules that
`torch._C.DisableTorchFunction()` cannot hide.

Two observers, both active inside `harness.contract.forbidden.CallRecorder`:

- `KernelRecorder`, a `TorchDispatchMode`: every aten operator the block runs, by its overload packet's name
  (`logsumexp`, `native_layer_norm`, `_fused_adamw_`) under the key `aten::<name>`, with the student's line of
  its first run. It sees the operators torch's own code runs too (`F.cross_entropy` runs `_log_softmax` and
  `nll_loss_forward`), so a rule names only the operators that nothing but the forbidden thing produces:
  `KERNELS`.
- `CallProfile`, a `sys.setprofile` hook: the torch functions the student's own lines call, by name, whatever
  disables `__torch_function__` (`torch.logsumexp`, `x.logsumexp`, `F.layer_norm`), and every call into
  torch.optim's modules under the key `torch.optim` (`torch.optim.adamw.adamw`, `torch.optim._functional.adam`),
  whoever calls them.
"""

from __future__ import annotations

import functools
import sys
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from harness.contract.errors import caller_line, is_students

# Rule name -> the aten operators that only it produces, so that no correct answer of a rule that forbids
# the name runs them. `exp`, `sum`, `amax`, `log`, `mean`, `var` and the like never belong here.
KERNELS: Mapping[str, tuple[str, ...]] = {
    "logsumexp": ("logsumexp", "logcumsumexp"),  # logcumsumexp(x, d).select(d, -1) is logsumexp
    "special_logsumexp": ("logsumexp", "logcumsumexp"),
    "softmax": ("_softmax",),
    "special_softmax": ("_softmax",),
    "log_softmax": ("_log_softmax",),
    "layer_norm": ("native_layer_norm",),
    "native_layer_norm": ("native_layer_norm",),
    "group_norm": ("native_group_norm",),
    "cross_entropy": ("nll_loss_forward", "nll_loss2d_forward"),  # class-index targets, smoothed or not
    "nll_loss": ("nll_loss_forward", "nll_loss2d_forward"),
    "silu": ("silu",),
    "scaled_dot_product_attention": ("_scaled_dot_product_flash_attention_for_cpu",
                                     "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                                     "_scaled_dot_product_cudnn_attention"),
    "multi_head_attention_forward": ("_native_multi_head_attention",),
    "torch.optim": ("_fused_adamw_", "_fused_adam_", "_fused_sgd_", "_fused_adagrad_"),
}

OPTIM = "torch.optim"


def _folders(package: types.ModuleType) -> tuple[str, ...]:
    """A package's folder as code objects may name it: as imported and with links resolved."""
    folder = Path(package.__file__ or "").parent
    return tuple({f"{folder}/", f"{folder.resolve()}/"})


_OPTIM_FOLDERS = _folders(torch.optim)
_TORCH_FOLDERS = _folders(torch)


def kernel_key(name: str) -> str:
    """The key under which `KernelRecorder` records the aten operator `name`: `aten::logsumexp`."""
    return f"aten::{name}"


def _noted(seen: dict[str, str], key: str, written: str) -> None:
    """Record `key` as `written` with the student's running line, unless it was recorded before."""
    if key not in seen:
        line = caller_line()
        seen[key] = written + (f", {line}" if line else "")


class KernelRecorder(TorchDispatchMode):
    """Records into `seen` each aten operator run in the block: `{"aten::logsumexp": "aten::logsumexp, in lse,
    line 3: return torch.logsumexp(x, 1)"}`."""

    def __init__(self, seen: dict[str, str]) -> None:
        super().__init__()
        self.seen = seen

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """False: torch would wrap `__torch_dispatch__` in torch._dynamo.disable, whose first call imports
        torch._dynamo: 2 to 5 s of a kernel's first check, in every notebook that builds no optimizer (lesson 00's
        first check, and each of its graded kernels). The recorder only runs eagerly, around the student's calls."""
        return False

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        key = kernel_key(func.overloadpacket.__name__)
        _noted(self.seen, key, key)
        return func(*args, **(kwargs or {}))


@functools.lru_cache(maxsize=1024)
def _students(filename: str) -> bool:
    return is_students(filename)


def _torch_builtin(func: Any) -> bool:
    """Whether `func`, a C function, is torch's: a function of a torch._C module or a tensor's method."""
    owner = getattr(func, "__self__", None)
    return isinstance(owner, torch.Tensor) or (getattr(func, "__module__", None) or "").startswith("torch") or (
        isinstance(owner, types.ModuleType | type) and getattr(owner, "__name__", "").startswith("torch"))


class CallProfile:
    """A `sys.setprofile` hook over a block that records into `seen` the torch functions the student's lines call
    (by `__name__`, as `CallRecorder` names them, written as `written_as` says) and, as `torch.optim`, any call
    into torch.optim's modules. The hook that was set before is restored on exit."""

    def __init__(self, seen: dict[str, str], written_as: Callable[[Any], str]) -> None:
        self.seen = seen
        self.written_as = written_as
        self._before: Callable[..., Any] | None = None

    def __enter__(self) -> CallProfile:
        self._before = sys.getprofile()
        sys.setprofile(self._hook)
        return self

    def __exit__(self, *_: object) -> None:
        sys.setprofile(self._before)

    def _hook(self, frame: types.FrameType, event: str, arg: Any) -> None:
        if event == "call":
            filename = frame.f_code.co_filename
            if filename.startswith(_OPTIM_FOLDERS):
                module = frame.f_globals.get("__name__", "torch.optim")
                _noted(self.seen, OPTIM, f"{module}.{frame.f_code.co_qualname}")
            elif (filename.startswith(_TORCH_FOLDERS) and frame.f_back is not None
                  and _students(frame.f_back.f_code.co_filename)):
                module = frame.f_globals.get("__name__", "torch")
                if "._" in module:  # torch's machinery (a dispatch mode's rules), not a function the student calls
                    return
                prefix = "F" if module == "torch.nn.functional" else module
                _noted(self.seen, frame.f_code.co_name, f"{prefix}.{frame.f_code.co_qualname}")
        elif event == "c_call" and _students(frame.f_code.co_filename) and _torch_builtin(arg):
            _noted(self.seen, arg.__name__, self.written_as(arg))
