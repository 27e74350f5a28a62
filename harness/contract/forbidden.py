""""Do not use X" rules: the probe records the torch calls the student's code makes, the judge names a forbidden
one and the student's line that made it.

The probe side is `CallRecorder`, a `TorchFunctionMode`: every torch function, `torch.nn.functional` function
and tensor method called while it is active is recorded by name, with the student's line of its first call.
An operator counts as its method: `a * b` is `mul`, `a + b` is `add`. Calls that torch makes inside a
recorded call are not recorded (the mode is off while a call runs), so `F.cross_entropy` calling
`log_softmax` inside never counts as the student's `log_softmax`.
A function and the tensor method of the same name are one name: `torch.logsumexp(x, 1)` and
`x.logsumexp(1)` are both `logsumexp`.

Below `__torch_function__` (which `torch._C.DisableTorchFunction()` switches off) the recorder also keeps what
`harness.contract.kernels` observes: the student's own calls by name (a profile hook), every call into
torch.optim (`torch.optim`), and every aten operator run (`aten::<name>`). A rule's name also matches the aten
operators that only it produces (`kernels.KERNELS`: `logsumexp` is also `aten::logsumexp` and
`aten::logcumsumexp`).

The judge side is `forbid`, which fails with [forbidden-call] on the recorded calls (data only).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torch.overrides import TorchFunctionMode

from harness.contract.errors import caller_line
from harness.contract.failure import fail
from harness.contract.kernels import KERNELS, CallProfile, KernelRecorder, kernel_key
from harness.contract.wire import WireError

# How a PASS line qualifies what it says of the calls: they were recorded inside the answer's own process, which
# can rewrite the record (the README's "What a drill verdict rests on"), so it is never a claim of fact
SELF_CHECKED = "self-checked: the calls were recorded inside your answer's own process"


def call_name(func: Callable[..., Any]) -> str:
    """The name a rule matches: `logsumexp` for torch.logsumexp and Tensor.logsumexp alike, `__add__` for `+`,
    `add_` for the in-place method."""
    return getattr(func, "__name__", None) or type(func).__name__


def written_as(func: Callable[..., Any]) -> str:
    """How the call reads in the student's code: `torch.logsumexp`, `Tensor.logsumexp`, `F.softmax`."""
    qualname = getattr(func, "__qualname__", getattr(func, "__name__", "?"))
    if qualname.startswith(("TensorBase.", "Tensor.", "_TensorBase.")):
        return "Tensor." + qualname.split(".", 1)[1]
    if qualname.startswith("_VariableFunctionsClass."):
        return "torch." + qualname.split(".", 1)[1]
    module = getattr(func, "__module__", None) or "torch"
    namespace = module.removeprefix("torch._C._")  # torch.special.logsumexp is torch._C._special.special_logsumexp
    if namespace != module and qualname.startswith(f"{namespace}_"):
        return f"torch.{namespace}.{qualname.removeprefix(namespace + '_')}"
    prefix = "F" if module == "torch.nn.functional" else "torch" if module.startswith("torch._") else module
    return f"{prefix}.{qualname}"


class CallRecorder(TorchFunctionMode):
    """Records the torch calls made in a block: `with CallRecorder() as calls: ...; calls.seen`.

    `seen` maps each call's name (`call_name`) to how it was written and the student's line of its first
    call: `{"logsumexp": "Tensor.logsumexp, in lse, line 3: return x.logsumexp(dim)"}`, and holds what the
    observers below `__torch_function__` saw (`aten::logsumexp`, `torch.optim`). It travels in an
    observation as it is (strings only). `count` is the number of `__torch_function__` calls in all (a Python
    loop multiplies it).
    """

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, str] = {}
        self.count = 0
        self._below = (CallProfile(self.seen, written_as), KernelRecorder(self.seen))

    def __enter__(self) -> CallRecorder:
        for observer in self._below:
            observer.__enter__()
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        for observer in reversed(self._below):
            observer.__exit__(*exc)

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        self.count += 1
        name = call_name(func)
        if name not in self.seen:
            line = caller_line()
            self.seen[name] = written_as(func) + (f", {line}" if line else "")
        return func(*args, **(kwargs or {}))


def forbid(seen: Any, forbidden: Mapping[str, str], *, where: str) -> None:
    """Fail with [forbidden-call] when the recorded calls `seen` (`CallRecorder.seen`) include a forbidden name
    or an aten operator that only a forbidden name produces (`kernels.KERNELS`).

    Args:
        seen: the recorded calls, from the observation.
        forbidden: name -> why the exercise forbids it ("the exercise asks you to build it from amax, exp,
            sum and log").
        where: the exercise's place that states the rule ("the text of exercise 3").

    Raises:
        WireError: `seen` is not a recorder's data.
    """
    if not isinstance(seen, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in seen.items()):
        raise WireError("malformed observation: the recorded calls are not a dict of strings")
    # The calls first, so that a call is named as it was written; then the kernels only forbidden names run.
    used = [(name, name) for name in forbidden if name in seen] + [
        (name, kernel_key(op)) for name in forbidden for op in KERNELS.get(name, ()) if kernel_key(op) in seen]
    if used:
        name, key = used[0]
        verb = "ran the kernel" if key.startswith(kernel_key("")) else "called"
        fail(
            "forbidden-call",
            observed=f"your code {verb} {seen[key]}",
            expected=f"no call of {name}: {forbidden[name]}",
            cause=f"{name} is what the exercise asks you to write yourself ({where} forbids it)",
            where=seen[key].split(", ", 1)[-1] if ", " in seen[key] else "your function",
        )
