"""Checks of lesson 05, mixed precision: dtype choice, rounding, autocast dtypes, the scaler, the AMP step.

Every probe runs the student's code on small seeded models on the CPU (bf16 and fp16 autocast and the CPU
GradScaler all exist there) and records what it observes: returned values, output dtypes, optimizer steps
taken, the scale after a step, and the parameters. Each judge rebuilds the inputs from the case, recomputes
the reference (a real GradScaler, one autocast forward, the canonical AMP step) and compares. What only the
kernel can see (the autocast state during forward, loss and backward, the order of the scaler calls, a
direct optimizer.step) the probe reports itself, as a failure: it can cost the task, never pass it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

import torch
from torch import nn

from harness.contract.case import Case
from harness.contract.compare import fail_raised, judged, matching_tensors, type_name
from harness.contract.compare import number as _number
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.instruments import ForwardRecorder, RecordingScaler, collect, snapshot
from harness.contract.registry import judges, register
from harness.contract.wire import Opaque, WireError

T = TypeVar("T")
_REDUCED = (torch.bfloat16, torch.float16)
_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def _name(dtype: object) -> str:
    return _NAMES.get(dtype, repr(dtype))  # type: ignore[arg-type]


def _outcome(call: Callable[..., Any], *args: Any) -> dict[str, Any]:
    """What `call(*args)` did, as data: {"returned": value} or {"raised": "Type: text", "value_error": bool}."""
    try:
        return {"returned": call(*args)}
    except Exception as error:  # the student's code raised: recorded, judged in the order of the calls
        return {"raised": f"{type(error).__name__}: {error}"[:500], "value_error": isinstance(error, ValueError)}


# --------------------------------------------------------------------------------------------------
# 05-choose-precision
# --------------------------------------------------------------------------------------------------
def reference_choose_precision(device_type: str, bf16_supported: bool) -> tuple[torch.dtype, bool]:
    """bf16 where the device has it (fp32's range: no scaler needed), else fp16 with a GradScaler."""
    if device_type not in ("cpu", "cuda", "mps", "xpu"):
        raise ValueError(f"unknown device type {device_type!r}: expected cpu, cuda, mps or xpu")
    return (torch.bfloat16, False) if bf16_supported else (torch.float16, True)


def _precision_calls(case: Case) -> tuple[list[tuple[str, bool]], tuple[str, ...]]:
    """The (device_type, bf16_supported) calls to check, and the unknown device types to reject."""
    device_types = ("xpu", "mps", "cuda", "cpu") if case.hidden else ("cpu", "cuda", "mps", "xpu")
    unknown = ("", "gpu", "tpu") if case.hidden else ("tpu", "gpu", "")
    return [(d, bf16) for d in device_types for bf16 in (True, False)], unknown


@register(
    "05-choose-precision",
    hints=Hints(
        nudge="Which of the two 16-bit formats keeps float32's exponent range? Only the other one needs loss "
        "scaling.",
        concept="bf16 has float32's 8 exponent bits: gradients do not underflow, no scaler. fp16 has 5: small "
        "gradients underflow unless the loss is scaled. Prefer bf16 where the device has it.",
        solution="if device_type not in ('cpu', 'cuda', 'mps', 'xpu'): raise ValueError(f'unknown device type "
        "{device_type!r}')\nreturn (torch.bfloat16, False) if bf16_supported else (torch.float16, True)",
        section="2. Choosing the precision for a device",
    ),
    requires={
        "not-a-pair": Requirement("returns a tuple (dtype, use_scaler)",
                                  hint="Print what your function returns: is it a pair, in that order?"),
        "fp32-chosen": Requirement("chooses a 16-bit format on every device type",
                                   hint="Every device type of the exercise runs autocast in 16 bits: which two "
                                   "formats are there to choose from?"),
        "bf16-not-preferred": Requirement("prefers bf16 where the device supports it",
                                          hint="When bf16_supported is True, which format needs no loss scaling?"),
        "bf16-without-support": Requirement("falls back to fp16 where bf16 is not supported",
                                            hint="When bf16_supported is False, which 16-bit format is left?"),
        "fp16-without-scaler": Requirement("asks for a GradScaler with fp16",
                                           hint="What happens to a gradient of 1e-8 in fp16? What prevents it?"),
        "needless-scaler": Requirement("asks for no GradScaler with bf16",
                                       hint="Does bf16's range let small gradients underflow any sooner than "
                                       "float32's?"),
        "unknown-device-accepted": Requirement("raises ValueError for a device type outside cpu, cuda, mps, xpu",
                                               hint="What does your function do with choose_precision('tpu', True)?"),
        "error-unnamed": Requirement("the ValueError names the device type",
                                     hint="Read your error message as a user who typed 'tpu': does it say which "
                                     "value was wrong?"),
    },
)
def probe_choose_precision(choose: Callable[[str, bool], tuple[torch.dtype, bool]], *, case: Case) -> dict:
    """Call `choose` for each known device type and bf16 support, then with unknown device types."""
    calls, unknown = _precision_calls(case)
    return {"choices": collect(calls, lambda call: {"returned": choose(*call)}),
            "unknown": [_outcome(choose, d, True) for d in unknown]}


@judges("05-choose-precision")
def judge_choose_precision(seen: dict, *, case: Case) -> str:
    """bf16 without a scaler where supported, fp16 with one otherwise; ValueError for unknown devices."""
    calls, unknown = _precision_calls(case)
    for (device_type, bf16), result in judged(calls, seen["choices"]):
        _judge_choice(device_type, bf16, result["returned"])
    for device_type, result in zip(unknown, seen["unknown"], strict=True):
        if "raised" in result and result["value_error"] is not True:
            fail_raised(str(result["raised"]))
        if "raised" not in result:
            fail(
                "unknown-device-accepted",
                observed=f"choose_precision({device_type!r}, True) returned {result['returned']!r}",
                expected="a ValueError that names the unknown device type",
                cause="the function answers for any string instead of rejecting device types it does not know",
                where="the first lines of choose_precision: validate device_type before choosing",
            )
        message = str(result["raised"]).split(": ", 1)[-1]
        if device_type and device_type not in message:
            fail(
                "error-unnamed",
                observed=f"choose_precision({device_type!r}, True) raised {result['raised']}",
                expected=f"a ValueError whose message names the device type ({device_type!r})",
                cause="the message does not include the value it rejects",
                where="the raise ValueError(...) line: put device_type in its message",
            )
    device_types = ", ".join(dict.fromkeys(d for d, _ in calls))
    return f"right dtype and scaler choice for {device_types}, and unknown devices rejected"


def _judge_choice(device_type: str, bf16: bool, got: Any) -> None:
    """Fail unless `got` is the reference (dtype, use_scaler) pair for this device and bf16 support."""
    if not (isinstance(got, tuple) and len(got) == 2):
        fail(
            "not-a-pair",
            observed=f"choose_precision({device_type!r}, {bf16}) returned {got!r}",
            expected="a tuple (dtype, use_scaler), for example (torch.bfloat16, False)",
            cause="the function returns only the dtype, or a list/dict",
            where="the return statement of choose_precision",
        )
    dtype, use_scaler = got
    want_dtype, want_scaler = reference_choose_precision(device_type, bf16)
    situation = f"choose_precision({device_type!r}, bf16_supported={bf16})"
    if dtype == torch.float32:
        fail(
            "fp32-chosen",
            observed=f"{situation} chose float32",
            expected=f"{_name(want_dtype)}: every device type here runs autocast in a 16-bit format",
            cause="falling back to full precision instead of the 16-bit format the device has",
            where="the branch that handles this device type",
        )
    if dtype != want_dtype:
        fail(
            "bf16-not-preferred" if bf16 else "bf16-without-support",
            observed=f"{situation} chose {_name(dtype)}",
            expected=f"{_name(want_dtype)}",
            cause=(
                "bf16 has float32's exponent range, so it needs no loss scaling: prefer it when supported"
                if bf16
                else "the device cannot run bf16, so fp16 is the 16-bit format left"
            ),
            where="the condition on bf16_supported",
        )
    if isinstance(use_scaler, Opaque) or bool(use_scaler) != want_scaler:
        fail(
            "fp16-without-scaler" if want_scaler else "needless-scaler",
            observed=f"{situation} returned use_scaler={use_scaler!r} with {_name(dtype)}",
            expected=f"use_scaler={want_scaler}",
            cause=(
                "fp16's smallest normal number is about 6e-5: small gradients underflow to zero unless "
                "the loss is scaled up first"
                if want_scaler
                else "bf16 gradients do not underflow any sooner than float32's, so scaling buys nothing"
            ),
            where="the second element of the returned tuple",
        )


# --------------------------------------------------------------------------------------------------
# 05-cast-report
# --------------------------------------------------------------------------------------------------
def reference_cast_report(x: torch.Tensor, dtype: torch.dtype) -> dict[str, float | int]:
    """What casting float32 `x` to `dtype` loses: overflows, underflows, worst relative rounding error."""
    y = x.to(dtype).float()
    overflow = torch.isfinite(x) & torch.isinf(y)
    underflow = (x != 0) & (y == 0)
    kept = torch.isfinite(y) & (y != 0) & (x != 0)
    rel = ((y[kept] - x[kept]).abs() / x[kept].abs()).max() if kept.any() else torch.tensor(0.0)
    return {"overflow": int(overflow.sum()), "underflow": int(underflow.sum()), "max_rel_error": float(rel)}


def _cast_inputs(seed: int, hidden: bool) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    low, high = (-12.0, 12.0) if hidden else (-10.0, 10.0)
    shape = (3, 4, 25) if hidden else (300,)
    exponents = torch.empty(shape).uniform_(low, high, generator=generator)
    signs = torch.where(torch.rand(shape, generator=generator) < 0.5, -1.0, 1.0)
    x = signs * 10.0**exponents
    inputs = [x, torch.randn(shape, generator=generator)]
    if hidden:
        with_zeros = x.clone()
        with_zeros.view(-1)[::7] = 0.0
        inputs.append(with_zeros)
    return inputs


def _cast_cases(case: Case) -> list[tuple[torch.Tensor, torch.dtype]]:
    """Every (float32 input, 16-bit dtype) pair of the case. Both families hold zeros, a 3-D input and an input
    where no value stays finite and nonzero (max_rel_error 0.0), visible and hidden alike."""
    seeds = (11, 12) if case.hidden else (0,)
    lost = torch.tensor([0.0, 1e-42, -1e-42, 0.0])  # zero, or underflowing in both formats
    inputs = [x for seed in seeds for x in _cast_inputs(case.seeded(seed), True)] + [lost]
    return [(x, dtype) for x in inputs for dtype in _REDUCED]


@register(
    "05-cast-report",
    hints=Hints(
        nudge="Cast to the 16-bit dtype, then back to float32 before comparing: differences computed in 16 bits "
        "are rounded too. torch.isinf, torch.isfinite and boolean masks do the counting.",
        concept="Overflow: finite before, inf after. Underflow: nonzero before, exactly 0 after (zeros do not "
        "count). The relative error is taken only where both values are finite and nonzero.",
        solution="y = x.to(dtype).float(); overflow = (isfinite(x) & isinf(y)).sum(); underflow = ((x != 0) & "
        "(y == 0)).sum(); kept = isfinite(y) & (y != 0) & (x != 0); max of |y - x| / |x| over kept, or 0.0",
        section="1. Three formats, one trade-off",
    ),
    requires={
        "input-modified": Requirement("leaves x unchanged",
                                      hint="Which operation of yours writes into x (a method ending in _, an "
                                      "assignment x[...] = ...)?"),
        "missing-key": Requirement("returns a dict with 'overflow', 'underflow' and 'max_rel_error'",
                                   hint="Print the keys of the dict you return and compare their spelling with the "
                                   "exercise's."),
        "wrong-overflow": Requirement("counts the finite values that became +-inf",
                                      hint="Which values count: those that are inf after the cast, or those that "
                                      "became inf because of it?"),
        "wrong-underflow": Requirement("counts the nonzero values that became exactly 0",
                                       hint="Does a value that was already 0 before the cast count as underflow?"),
        "wrong-rel-error": Requirement("reports the largest relative error, in float32, over the values finite "
                                       "and nonzero before and after, or 0.0 when there are none",
                                       hint="In which dtype do you subtract? And which entries do you leave out?"),
    },
)
def probe_cast_report(report: Callable[[torch.Tensor, torch.dtype], dict], *, case: Case) -> dict:
    """Call `report` on each input and dtype; record what it returned and the input as the call left it."""
    def record(item: tuple[torch.Tensor, torch.dtype]) -> dict:
        x, dtype = item
        got = report(x, dtype)
        return {"returned": got, "input_after": x.detach().clone()}

    return {"results": collect(_cast_cases(case), record)}


@judges("05-cast-report")
def judge_cast_report(seen: dict, *, case: Case) -> str:
    """Overflow and underflow counts and the worst relative error equal the reference's; the input is kept."""
    for (x, dtype), result in judged(_cast_cases(case), seen["results"]):
        _compare_cast_report(result["returned"], reference_cast_report(x, dtype), result["input_after"], x, dtype)
    return "overflow and underflow counts and the worst relative rounding error match, for bf16 and fp16"


def _compare_cast_report(got: Any, want: dict, x: Any, original: torch.Tensor, dtype: torch.dtype) -> None:
    if not (isinstance(x, torch.Tensor) and x.shape == original.shape and torch.equal(x, original)):
        fail(
            "input-modified",
            observed="the tensor passed in was changed by the call",
            expected="the input left as it was",
            cause="an in-place operation on x (x.copy_, x[...] = ..., x.abs_())",
            where="the operations applied to x inside cast_report",
        )
    if not isinstance(got, dict) or set(want) - set(got):
        fail(
            "missing-key",
            observed=f"returned {type_name(got)} with keys {sorted(got) if isinstance(got, dict) else '-'}",
            expected="a dict with keys 'overflow', 'underflow' and 'max_rel_error'",
            cause="a key is misspelt or missing",
            where="the dict cast_report returns",
        )
    for key, code, why in (
        ("overflow", "wrong-overflow", "count finite inputs that become +-inf (fp16's largest value is 65504)"),
        ("underflow", "wrong-underflow",
         "count nonzero inputs that become exactly 0 (inputs that were 0 do not count)"),
    ):
        if _number(got[key]) != want[key]:
            fail(
                code,
                observed=f"{key} = {got[key]} for {_name(dtype)} on a tensor of {original.numel()} values",
                expected=f"{key} = {want[key]}",
                cause=why,
                where=f"the '{key}' computation in cast_report",
            )
    observed = _number(got["max_rel_error"])
    if observed is None or not abs(observed - want["max_rel_error"]) <= 1e-3 * want["max_rel_error"] + 1e-9:
        fail(
            "wrong-rel-error",
            observed=f"max_rel_error = {observed:.3g} for {_name(dtype)}" if observed is not None
            else f"max_rel_error = {got['max_rel_error']!r}, not a number",
            expected=f"max_rel_error = {want['max_rel_error']:.3g}",
            cause=(
                "the difference is computed in 16 bits (cast back with .float() first), or entries that "
                "overflowed, underflowed or were 0 are included"
            ),
            where="the relative-error line of cast_report",
        )


# --------------------------------------------------------------------------------------------------
# 05-output-dtypes
# --------------------------------------------------------------------------------------------------
def _first_tensor(output: Any) -> torch.Tensor:
    while isinstance(output, (tuple, list)):
        output = output[0]
    return output


def reference_output_dtypes(model: nn.Module, x: torch.Tensor, device_type: str,
                            dtype: torch.dtype) -> dict[str, torch.dtype]:
    """Output dtype of each leaf module during one autocast forward (first tensor of tuple outputs)."""
    seen: dict[str, torch.dtype] = {}
    handles = [
        module.register_forward_hook(lambda _m, _i, out, name=name: seen.__setitem__(name, _first_tensor(out).dtype))
        for name, module in model.named_modules()
        if not any(module.children())
    ]
    try:
        with torch.no_grad(), torch.autocast(device_type, dtype=dtype):
            model(x)
    finally:
        for handle in handles:
            handle.remove()
    return seen


class _Upcast(nn.Module):
    """A module that leaves autocast's choice: its output is float32 whatever autocast does."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.float().softmax(dim=-1)


class _Recurrent(nn.Module):
    """A GRU whose last output feeds a linear head: tuple outputs inside the model."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.GRU(2, 8, batch_first=True)
        self.head = nn.Sequential(nn.Linear(8, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


def _dtype_models(case: Case) -> list[tuple[nn.Module, torch.Tensor]]:
    """Seeded (model, input) pairs, visible and hidden alike: an MLP, a CNN in eval mode, and a GRU model (tuple
    outputs inside a nested module)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(case.seeded(5 if case.hidden else 4))
        mlp = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.ReLU(), nn.Linear(16, 4), _Upcast())
        cnn = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.GELU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
        return [(mlp, torch.randn(6, 8)), (cnn.eval(), torch.randn(2, 3, 8, 8)), (_Recurrent(), torch.randn(3, 5, 2))]


def _dtype_calls(case: Case) -> list[tuple[nn.Module, torch.Tensor, torch.dtype]]:
    """Every (model, input, autocast dtype) call of the case."""
    dtypes = _REDUCED if case.hidden else (torch.float16, torch.bfloat16)
    return [(model, x, dtype) for model, x in _dtype_models(case) for dtype in dtypes]


def _hook_count(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


@register(
    "05-output-dtypes",
    hints=Hints(
        nudge="A forward hook (module.register_forward_hook) sees each module's output; register one on every leaf "
        "module (a module without children), run one forward inside torch.autocast, then remove the hooks.",
        concept="Autocast picks a dtype per operation; a forward hook receives (module, inputs, output) after the "
        "module ran, so output.dtype is what autocast chose. Hooks stay until their handle is removed.",
        solution="for name, m in model.named_modules(): if not any(m.children()): handles.append(m.register_forward_"
        "hook(lambda mod, inp, out, name=name: dtypes.__setitem__(name, out.dtype))); run the forward under "
        "torch.no_grad() and torch.autocast(device_type, dtype=dtype); finally: remove every handle.",
        section="3. What autocast does, seen from a running model",
    ),
    requires={
        "wrong-modules": Requirement("one entry per leaf module, named as in model.named_modules()",
                                     hint="Print the names you record next to list(model.named_modules()): which "
                                     "of them have children?"),
        "no-autocast": Requirement("runs the forward under torch.autocast(device_type, dtype=dtype)",
                                   hint="Every output you recorded is float32: was autocast on, for this device "
                                   "type, during the forward?"),
        "wrong-dtype": Requirement("records each module's output dtype (the first tensor of a tuple output)",
                                   hint="Which argument of the hook holds what the module returned, and what does "
                                   "a GRU return?"),
        "hooks-left": Requirement("removes every hook it adds",
                                  hint="What does register_forward_hook return, and what do you do with it after "
                                  "the forward?"),
        "builds-graph": Requirement("runs the forward without building a graph",
                                    hint="Nothing will call backward on this forward: which context manager tells "
                                    "autograd not to record it?"),
    },
)
def probe_output_dtypes(output_dtypes: Callable[..., dict], *, case: Case) -> dict:
    """Call `output_dtypes` on each model and dtype; record what it returned and the hooks left behind."""
    def record(call: tuple[nn.Module, torch.Tensor, torch.dtype]) -> dict:
        model, x, dtype = call
        first_leaf = next(m for m in model.modules() if not any(m.children()))  # runs in every forward
        with ForwardRecorder(first_leaf) as forwards:
            hooks_before = _hook_count(model)
            got = output_dtypes(model, x, "cpu", dtype)
            added = _hook_count(model) - hooks_before
        return {"returned": got, "hooks_added": added, "grad_enabled": [r.grad_enabled for r in forwards.records]}

    return {"results": collect(_dtype_calls(case), record)}


@judges("05-output-dtypes")
def judge_output_dtypes(seen: dict, *, case: Case) -> str:
    """The recorded dtypes equal those of one autocast forward, one per leaf module; no hook is left."""
    for (model, x, dtype), result in judged(_dtype_calls(case), seen["results"]):
        _compare_dtypes(result["returned"], reference_output_dtypes(model, x, "cpu", dtype), dtype)
        grad_enabled = result["grad_enabled"]
        if not isinstance(grad_enabled, list) or not grad_enabled or not all(isinstance(g, bool) for g in grad_enabled):
            raise WireError("malformed observation: grad_enabled is not a nonempty list of booleans")
        if any(grad_enabled):
            fail(
                "builds-graph",
                observed="the forward ran with gradient recording on",
                expected="the forward under torch.no_grad() (or torch.inference_mode()): no graph is needed",
                cause="the forward is not wrapped in torch.no_grad(), so autograd records a graph nobody uses",
                where="the with-statement around the forward in output_dtypes",
            )
        added = result["hooks_added"]
        if added != 0:
            fail(
                "hooks-left",
                observed=f"the model has {added} more hooks after the call",
                expected="every hook removed before returning",
                cause="the handles returned by register_forward_hook were not removed; every later forward "
                "would keep running them",
                where="the end of output_dtypes: call handle.remove() on each handle (in a finally block)",
            )
    return "one autocast forward without a graph: the dtype of every leaf module's output matches (fp16 and " \
        "bf16; an MLP, a CNN in eval mode, a GRU), hooks removed"


def _compare_dtypes(got: Any, want: dict[str, torch.dtype], dtype: torch.dtype) -> None:
    if not isinstance(got, dict) or set(got) != set(want):
        keys = sorted(got) if isinstance(got, dict) else type_name(got)
        fail(
            "wrong-modules",
            observed=f"entries for {keys}",
            expected=f"one entry per leaf module, named as in model.named_modules(): {sorted(want)}",
            cause="containers (the model itself, named '') are included, or leaf modules are missing",
            where="the loop over model.named_modules() and its test for children",
        )
    if all(d == torch.float32 for d in got.values()) and any(d in _REDUCED for d in want.values()):
        fail(
            "no-autocast",
            observed="every output is float32",
            expected=f"layers such as Linear output {_name(dtype)}",
            cause="the forward ran outside torch.autocast, or autocast was given another device type or dtype",
            where="the `with torch.autocast(device_type, dtype=dtype):` around the forward",
        )
    wrong = {name: (_name(got[name]), _name(want[name])) for name in want if got[name] != want[name]}
    if wrong:
        fail(
            "wrong-dtype",
            observed=f"(recorded, actual) dtypes differ for {wrong}",
            expected=f"{ {name: _name(d) for name, d in want.items()} }",
            cause="the dtype was recorded from the module's input rather than its output, from another element of "
            "a tuple output than the first, or autocast was given another dtype than `dtype`",
            where="the forward hook: it receives (module, inputs, output); record the output's dtype",
        )


# --------------------------------------------------------------------------------------------------
# 05-scale-trace
# --------------------------------------------------------------------------------------------------
def real_scale_trace(
    overflows: Sequence[bool], *, init_scale: float, growth_factor: float, backoff_factor: float, growth_interval: int
) -> list[float]:
    """The scale a real torch.amp.GradScaler holds after each update, driven with real inf gradients."""
    weight = nn.Parameter(torch.ones(1))
    optimizer = torch.optim.SGD([weight], lr=0.0)
    scaler = torch.amp.GradScaler(
        "cpu", init_scale=init_scale, growth_factor=growth_factor, backoff_factor=backoff_factor,
        growth_interval=growth_interval,
    )
    trace = []
    for overflow in overflows:
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(weight.sum() * (float("inf") if overflow else 1.0)).backward()
        scaler.step(optimizer)
        scaler.update()
        trace.append(float(scaler.get_scale()))
    return trace


def _trace_without_reset(overflows: Sequence[bool], *, init_scale: float, growth_factor: float, backoff_factor: float,
                         growth_interval: int) -> list[float]:
    scale, tracker, trace = init_scale, 0, []
    for overflow in overflows:
        if overflow:
            scale *= backoff_factor
        else:
            tracker += 1
            if tracker == growth_interval:
                scale, tracker = scale * growth_factor, 0
        trace.append(scale)
    return trace


def _scale_cases(case: Case) -> list[tuple[list[bool], dict[str, Any]]]:
    F, T = False, True
    cases = [
        ([F, F, F, T, F, F, F, F, F],
         dict(init_scale=1024.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=3)),
        ([F, F, T, F, T, T, F], dict(init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2)),
        ([F, T, F, F, T, F], dict(init_scale=64.0, growth_factor=4.0, backoff_factor=0.25, growth_interval=1)),
        ([], dict(init_scale=8.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=2)),
    ]
    if case.hidden:
        rng = random.Random(case.seeded(505))
        for _ in range(4):
            flags = [rng.random() < 0.3 for _ in range(rng.randint(10, 40))]
            cases.append(
                (flags, dict(init_scale=float(2 ** rng.randint(4, 20)), growth_factor=rng.choice([2.0, 4.0, 1.5]),
                             backoff_factor=rng.choice([0.5, 0.25]), growth_interval=rng.randint(1, 5)))
            )
    return cases


def _floats(value: Any) -> list[float] | None:
    """A returned trace as a list of floats (a list, a tuple or a 1-D tensor of numbers); None otherwise."""
    if isinstance(value, torch.Tensor) and value.dim() == 1 and value.is_floating_point():
        return [float(v) for v in value]
    if not isinstance(value, (list, tuple)):
        return None
    numbers = [_number(v) for v in value]
    return None if any(n is None for n in numbers) else numbers  # type: ignore[return-value]


def _same_trace(a: Sequence[float], b: Sequence[float]) -> bool:
    """Equal step for step, up to float32 rounding (the real scaler holds its scale in float32)."""
    return len(a) == len(b) and all(math.isclose(x, y, rel_tol=1e-6) for x, y in zip(a, b, strict=True))


@register(
    "05-scale-trace",
    hints=Hints(
        nudge="Keep two numbers: the scale and a count of finite steps in a row. An overflow multiplies the scale by "
        "backoff_factor and restarts the count; growth_interval finite steps in a row multiply it by "
        "growth_factor.",
        concept="scaler.update() after each step: on an overflow, scale *= backoff_factor and the count of clean "
        "steps restarts; after growth_interval clean steps in a row, scale *= growth_factor and the count restarts.",
        solution="for overflow in overflows: if overflow: scale *= backoff_factor; tracker = 0  else: tracker += 1; "
        "if tracker == growth_interval: scale *= growth_factor; tracker = 0 -- append scale after every step.",
        section="4. The GradScaler",
    ),
    requires={
        "not-a-list": Requirement("returns a list of scales",
                                  hint="Print what your function returns for three steps: a list of three numbers?"),
        "wrong-length": Requirement("returns one scale per step (the value after that step's update)",
                                    hint="For overflows=[] what should come back? For [False]? Is the initial "
                                    "scale in your list?"),
        "no-backoff": Requirement("an overflow lowers the scale",
                                  hint="What must happen to the scale on a step whose gradients overflowed?"),
        "wrong-backoff": Requirement("an overflow multiplies the scale by backoff_factor",
                                     hint="Which factor does your code use on an overflow: the argument, or a "
                                     "number of your own?"),
        "tracker-not-reset": Requirement("an overflow restarts the count of clean steps",
                                         hint="After an overflow, how many clean steps in a row have there been?"),
        "wrong-growth": Requirement("the scale grows by growth_factor after growth_interval clean steps in a row",
                                    hint="Trace [False] * 4 with growth_interval=2 by hand: at which steps must the "
                                    "scale grow, and by which factor?"),
    },
)
def probe_scale_trace(scale_trace: Callable[..., list[float]], *, case: Case) -> dict:
    """Call `scale_trace` on each overflow sequence and scaler setting of the case; record the traces."""
    return {"traces": collect(_scale_cases(case), lambda c: {"returned": scale_trace(list(c[0]), **c[1])})}


@judges("05-scale-trace")
def judge_scale_trace(seen: dict, *, case: Case) -> str:
    """Each trace equals the scales a real GradScaler holds after each step."""
    for (overflows, settings), result in judged(_scale_cases(case), seen["traces"]):
        returned = result["returned"]
        got = _floats(returned)
        if got is None:
            fail(
                "not-a-list",
                observed=f"scale_trace returned {type_name(returned)} {returned!r}"[:200],
                expected="a list of floats, one scale per step",
                cause="the function returns something other than the list of scales",
                where="the return statement of scale_trace",
            )
        want = real_scale_trace(overflows, **settings)
        if len(got) != len(want):
            fail(
                "wrong-length",
                observed=f"{len(got)} scales for {len(overflows)} steps",
                expected="one scale per step: the value after that step's update()",
                cause="the initial scale is included, or a step is not appended",
                where="where scale_trace appends to its list",
            )
        if _same_trace(got, want):
            continue
        step = next(i for i, (g, w) in enumerate(zip(got, want, strict=True)) if not math.isclose(g, w, rel_tol=1e-6))
        situation = f"with {settings} and overflows={[int(o) for o in overflows]}, after step {step}"
        before = got[step - 1] if step else settings["init_scale"]
        if overflows[step] and got[step] >= before:
            code, cause = "no-backoff", "an overflowing step must multiply the scale by backoff_factor"
        elif overflows[step]:
            factor, wanted = got[step] / before, settings["backoff_factor"]
            code, cause = "wrong-backoff", (f"the scale went from {before:g} to {got[step]:g}, a factor of {factor:g}, "
                                            f"not backoff_factor={wanted:g}")
        elif _same_trace(got, _trace_without_reset(overflows, **settings)):
            code, cause = "tracker-not-reset", "an overflow must restart the count of finite steps at zero"
        else:
            code, cause = "wrong-growth", (
                "the scale must grow by growth_factor (the argument), exactly when growth_interval finite steps have "
                "passed in a row since the last growth or overflow: another factor, an off-by-one in the count, or "
                "a count not restarted after a growth"
            )
        fail(
            code,
            observed=f"{situation} your scale is {got[step]:g}",
            expected=f"{want[step]:g}, what torch.amp.GradScaler holds (whole trace: {want})",
            cause=cause,
            where="the update rule inside the loop of scale_trace",
        )
    return "the traced scales equal a real GradScaler's, step for step (backoff, growth, counter reset)"


# --------------------------------------------------------------------------------------------------
# 05-amp-step
# --------------------------------------------------------------------------------------------------
@dataclass
class AmpTrace:
    """What one instrumented call of an AMP training step did."""

    forward_autocast: list[bool] = field(default_factory=list)
    forward_training: list[bool] = field(default_factory=list)
    loss_autocast: list[bool] = field(default_factory=list)
    backward_autocast: list[bool] = field(default_factory=list)
    direct_steps: int = 0
    steps_taken: int = 0
    calls: list[str] = field(default_factory=list)
    returned: Any = None
    error: BaseException | None = None


def make_mlp(seed: int, width: int = 16, inputs: int = 6, outputs: int = 3) -> nn.Module:
    """A small seeded MLP for the checks (the global RNG is left as it was)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(inputs, width), nn.ReLU(), nn.Linear(width, outputs))


def make_batch(seed: int, n: int = 12, inputs: int = 6, outputs: int = 3,
               scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded (inputs, targets) regression batch; `scale` enlarges inputs (and so gradients)."""
    generator = torch.Generator().manual_seed(seed + 1000)
    return scale * torch.randn(n, inputs, generator=generator), torch.randn(n, outputs, generator=generator)


def instrument(model: nn.Module, optimizer: torch.optim.Optimizer, scaler: RecordingScaler | None, device_type: str,
               trace: AmpTrace) -> list[Any]:
    """Hooks that fill `trace`: backward's autocast state, and steps taken inside or outside scaler.step."""

    def on_grad(grad: torch.Tensor) -> None:
        trace.backward_autocast.append(torch.is_autocast_enabled(device_type))

    def on_step(_optimizer: torch.optim.Optimizer, _args: Any, _kwargs: Any) -> None:
        trace.steps_taken += 1
        if scaler is not None and not scaler.in_step:
            trace.direct_steps += 1

    first = next(model.parameters())
    return [first.register_hook(on_grad), optimizer.register_step_pre_hook(on_step)]


def recording_loss(loss_fn: Callable[..., torch.Tensor], device_type: str,
                   trace: AmpTrace) -> Callable[..., torch.Tensor]:
    """`loss_fn`, recording whether autocast was on when it was called."""

    def wrapped(*args: Any, **kwargs: Any) -> torch.Tensor:
        trace.loss_autocast.append(torch.is_autocast_enabled(device_type))
        return loss_fn(*args, **kwargs)

    return wrapped


def inject_inf(model: nn.Module) -> Any:
    """Make the first parameter's gradient inf, as an fp16 overflow would (a hook on the parameter)."""
    return next(model.parameters()).register_hook(lambda grad: torch.full_like(grad, float("inf")))


def run_amp_step(step_fn: Callable[..., Any], model: nn.Module, batch: Any, optimizer: torch.optim.Optimizer,
                 scaler: RecordingScaler, dtype: torch.dtype, extra: Sequence[Any] = ()) -> AmpTrace:
    """Call `step_fn(model, batch, loss_fn, optimizer, scaler, *extra, "cpu", dtype)` with every probe attached.

    An exception from the student's code is kept in `trace.error`, so that what was observed before it
    (a direct optimizer.step, a missing call) can be reported first.
    """
    trace = AmpTrace()
    handles = instrument(model, optimizer, scaler, "cpu", trace)
    loss_fn = recording_loss(nn.functional.mse_loss, "cpu", trace)
    try:
        with ForwardRecorder(model) as forwards:
            trace.returned = step_fn(model, batch, loss_fn, optimizer, scaler, *extra, "cpu", dtype)
    except Exception as error:  # reported after the observations, see fail_on_trace
        trace.error = error
    finally:
        for handle in handles:
            handle.remove()
    trace.forward_autocast = [r.autocast for r in forwards.records]
    trace.forward_training = [r.training for r in forwards.records]
    trace.calls = list(scaler.calls)
    scaler.calls.clear()
    return trace


def reference_amp_step(model: nn.Module, batch: Any, loss_fn: Callable[..., torch.Tensor],
                       optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler, device_type: str,
                       dtype: torch.dtype) -> torch.Tensor:
    """The canonical AMP step (the lesson's solution)."""
    inputs, targets = batch
    model.train()
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(inputs), targets)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


def _amp_setup(seed: int, init_scale: float) -> tuple[nn.Module, torch.optim.Optimizer, RecordingScaler]:
    model = make_mlp(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return model, optimizer, RecordingScaler("cpu", init_scale=init_scale, growth_interval=1)


def scope_failures(trace: AmpTrace) -> None:
    """Fail on autocast scope errors: forward, loss and backward (probe side: only the kernel sees them).

    What did happen is reported even when the student's code raised later; what did not happen is reported
    only when it ran to the end (after an exception, the missing calls are just the ones never reached).
    """
    if not trace.forward_autocast and trace.error is None:
        fail("no-forward", observed="the model was never called as model(inputs)",
             expected="one forward of the model on the batch, model(inputs)",
             cause="the step does not call the model, or calls model.forward(inputs) directly, which skips the "
             "module's hooks (autocast checks, and every hook a library adds)",
             where="the forward pass of your training step")
    if trace.forward_autocast and not all(trace.forward_autocast):
        fail(
            "no-autocast",
            observed="the model's forward ran with autocast off",
            expected="the forward inside `with torch.autocast(device_type, dtype=dtype):`",
            cause="autocast is missing, or it was given another device type than the model runs on",
            where="the forward pass of your training step",
        )
    if trace.backward_autocast and any(trace.backward_autocast):
        fail(
            "backward-in-autocast",
            observed="gradients were computed while autocast was still on",
            expected="backward() called after the `with torch.autocast(...)` block has closed",
            cause="the backward line is indented inside the autocast block; backward ops already run "
            "in the dtype their forward ops chose, and autocast around them is not supported",
            where="the indentation of the backward line",
        )
    if trace.loss_autocast and not all(trace.loss_autocast):
        fail(
            "loss-outside-autocast",
            observed="the loss function ran with autocast off",
            expected="the loss computed inside the autocast block, right after the forward",
            cause="autocast picks float32 for losses that need it (mse, cross-entropy); computing the loss outside "
            "it mixes a 16-bit output into a float32 graph by hand",
            where="move `loss = loss_fn(...)` into the autocast block",
        )


def scaler_failures(trace: AmpTrace) -> None:
    """Fail on scaler misuse: a direct optimizer.step, a missing scale, step or update (probe side)."""
    if trace.direct_steps:
        fail(
            "step-bypasses-scaler",
            observed=f"optimizer.step() was called directly {trace.direct_steps} time(s)",
            expected="scaler.step(optimizer), which unscales the gradients and skips the step when they hold inf/NaN",
            cause="optimizer.step() applies still-scaled gradients (65536 times too large) and steps on overflows",
            where="the line that steps the optimizer",
        )
    later = {"scale": ("unscale_", "step", "update"), "step": ("update",), "update": ()}  # calls that come after
    for call, code, why in (
        ("scale", "missing-scale", "without scaler.scale(loss) small fp16 gradients underflow, and scaler.step divides "
                                   "unscaled gradients by the scale"),
        ("step", "missing-step", "the parameters are never updated through the scaler"),
        ("update", "missing-update", "the scale never adapts: after an overflow every later step is skipped again, "
                                     "and it never grows back after finite steps"),
    ):
        later_reached = any(c in trace.calls for c in later[call])
        if call not in trace.calls and (trace.error is None or later_reached):
            fail(
                code,
                observed=f"scaler calls: {trace.calls}",
                expected="scale -> step -> update, once per training step",
                cause=f"scaler.{call}() is never called: {why}",
                where=f"add scaler.{call}(...) in its place in your training step",
            )


# The requirements `scope_failures` and `scaler_failures` enforce, for the tables of every AMP step exercise.
AMP_SCOPE_REQUIREMENTS = {
    "no-forward": Requirement("runs the model's forward as model(inputs)",
                              hint="How does your step call the model? Calling model.forward(...) skips its hooks."),
    "no-autocast": Requirement("runs the forward under torch.autocast(device_type, dtype=dtype)",
                               hint="Was autocast on, for the device type you were given, when the model ran?"),
    "backward-in-autocast": Requirement("runs backward outside the autocast block",
                                        hint="Look at the indentation of your backward line: is it still inside "
                                        "the with-block?"),
    "loss-outside-autocast": Requirement("computes the loss inside the autocast block",
                                         hint="Where is loss_fn called: inside the with-block, with the forward, or "
                                         "after it?"),
}
AMP_SCALER_REQUIREMENTS = {
    "step-bypasses-scaler": Requirement("steps the optimizer only through scaler.step(optimizer)",
                                        hint="Who calls optimizer.step() in your code: you, or the scaler (which "
                                        "skips steps with inf gradients)?"),
    "missing-scale": Requirement("runs backward on scaler.scale(loss)",
                                 hint="Which tensor do you call backward() on: the loss, or the scaled loss?"),
    "missing-step": Requirement("steps through scaler.step(optimizer)",
                                hint="Which line updates the parameters in your step?"),
    "missing-update": Requirement("calls scaler.update() after scaler.step",
                                  hint="After an overflow the scale must drop: which scaler call adapts it?"),
}


def fail_on_trace(trace: AmpTrace) -> None:
    """Probe side: fail on autocast scope and scaler misuse, then re-raise the student's exception if any."""
    scope_failures(trace)
    scaler_failures(trace)
    if trace.error is not None:
        raise trace.error


def _amp_cases(case: Case) -> tuple[tuple[int, torch.dtype], ...]:
    """(seed, autocast dtype) of each AMP step case."""
    if case.hidden:
        return (case.seeded(7), torch.bfloat16), (case.seeded(8), torch.float16)
    return (case.seeded(3), torch.bfloat16), (case.seeded(4), torch.float16)


def _two_batches(seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [make_batch(seed), make_batch(seed + 1)]


# A small initial scale for the two-step run: stale gradients left from step 1 are divided by it in step 2
# and must stay visible.
_TWO_STEP_SCALE = 2.0


def _amp_parts(case: Case) -> list[tuple[int, torch.dtype, str]]:
    """The probe's units, in the order a check stopping at the first difference sees them."""
    return [(seed, dtype, part) for seed, dtype in _amp_cases(case) for part in ("skip", "two_steps")]


def _probe_skip(step_fn: Callable[..., Any], seed: int, dtype: torch.dtype) -> dict:
    """A plain step (its autocast scopes and scaler calls checked here), then one with an injected inf gradient.

    Records the optimizer steps taken, the parameters and the scale after the inf step.
    """
    model, optimizer, scaler = _amp_setup(seed, init_scale=256.0)
    model.eval()  # the step must switch it to training mode itself
    trace = run_amp_step(step_fn, model, make_batch(seed), optimizer, scaler, dtype)
    fail_on_trace(trace)
    if not all(trace.forward_training):
        fail("eval-mode", observed="the model ran its forward in eval mode (the check hands the step a model in "
             "eval mode)", expected="model.train() before the forward: dropout and batch norm behave differently "
             "in training", cause="amp_train_step does not put the model in training mode",
             where="the first lines of amp_train_step")
    model, optimizer, scaler = _amp_setup(seed, init_scale=1024.0)
    handle = inject_inf(model)
    trace = run_amp_step(step_fn, model, make_batch(seed), optimizer, scaler, dtype)
    handle.remove()
    fail_on_trace(trace)
    return {"steps_taken": trace.steps_taken, "params": snapshot(model), "scale": float(scaler.get_scale())}


def _probe_two_steps(step_fn: Callable[..., Any], seed: int, dtype: torch.dtype) -> dict:
    """Two steps from the seeded start: what each returned, and the parameters after both."""
    model, optimizer, scaler = _amp_setup(seed, init_scale=_TWO_STEP_SCALE)
    traces = [run_amp_step(step_fn, model, batch, optimizer, scaler, dtype) for batch in _two_batches(seed)]
    for trace in traces:
        if trace.error is not None:
            raise trace.error
    return {"returned": [trace.returned for trace in traces], "params": snapshot(model)}


def _probe_stale(step_fn: Callable[..., Any], seed: int, dtype: torch.dtype) -> list[torch.Tensor]:
    """The parameters after one step that starts with a stale gradient of 1e3 on every parameter."""
    model, optimizer, scaler = _amp_setup(seed, init_scale=1.0)
    for p in model.parameters():
        p.grad = torch.full_like(p, 1e3)  # a stale gradient: 50 per parameter at lr 0.05 if it is not cleared
    run_amp_step(step_fn, model, make_batch(seed), optimizer, scaler, dtype)  # an exception here changes nothing
    return snapshot(model)


@register(
    "05-amp-step", nonfinite=('runs/[02468]/params/*',),
    hints=Hints(
        nudge="The order is: training mode; zero the gradients; forward and loss inside torch.autocast; backward on "
        "the scaled loss outside autocast; let the scaler step the optimizer; update the scale.",
        concept="autocast wraps forward and loss only; scaler.scale(loss).backward() outside it; scaler.step "
        "unscales and skips steps with inf/NaN; scaler.update adapts the scale. Return a detached tensor: "
        ".item() would wait for the device every step.",
        solution="model.train(); optimizer.zero_grad(set_to_none=True); with torch.autocast(device_type, "
        "dtype=dtype): loss = loss_fn(model(x), y)  -- then, outside the block: scaler.scale(loss).backward(); "
        "scaler.step(optimizer); scaler.update(); return loss.detach()",
        section="5. The AMP training step",
    ),
    requires={
        "eval-mode": Requirement("puts the model in training mode",
                                 hint="The check hands your step a model in eval mode. Which call switches it to "
                                 "training behaviour?"),
        **AMP_SCOPE_REQUIREMENTS,
        **AMP_SCALER_REQUIREMENTS,
        "inf-step-not-skipped": Requirement("a step whose gradients hold inf leaves the parameters unchanged",
                                            hint="Does anything of yours change the parameters outside "
                                            "scaler.step(optimizer)?"),
        "scale-not-reduced": Requirement("an overflow halves the scale (scaler.update() after scaler.step)",
                                         hint="What is scaler.get_scale() after your step with an inf gradient, and "
                                         "what sets it afterwards?"),
        "returns-graph": Requirement("returns the loss detached",
                                     hint="Does the tensor you return still have a grad_fn?"),
        "not-a-tensor": Requirement("returns a tensor, not a Python number (no .item())",
                                    hint="Print type() of what your step returns: which call turned it into a "
                                    "number, and why does that cost a device sync every step?"),
        "wrong-return": Requirement("returns this batch's loss, computed before the update",
                                    hint="Which value do you return: the loss itself, or something derived from it "
                                    "(the scaled loss, a loss recomputed after the step)?"),
        "missing-zero-grad": Requirement("clears the gradients before backward",
                                         hint="backward() adds into .grad. What clears the previous step's "
                                         "gradients?"),
        "wrong-autocast-dtype": Requirement("runs autocast in the dtype it is given",
                                            hint="Which dtype does your autocast use: the argument, or one you "
                                            "wrote yourself?"),
        "wrong-update": Requirement("the update is the canonical one (the unscaled gradient of this batch's loss)",
                                    hint="Between backward and scaler.step, does anything of yours change the "
                                    "gradients?"),
    },
)
def probe_amp_step(amp_train_step: Callable[..., Any], *, case: Case) -> dict:
    """Run the student's step instrumented: a plain step, a step with an inf gradient, two steps, a stale start.

    Fails here on what only the kernel sees (autocast state, scaler calls, a direct optimizer.step);
    records the rest (steps taken, scale, parameters, returned losses) for the judge.
    """
    def record(part: tuple[int, torch.dtype, str]) -> dict:
        seed, dtype, name = part
        if name == "skip":
            return _probe_skip(amp_train_step, seed, dtype)
        return {**_probe_two_steps(amp_train_step, seed, dtype), "stale": _probe_stale(amp_train_step, seed, dtype)}

    return {"runs": collect(_amp_parts(case), record)}


@judges("05-amp-step")
def judge_amp_step(seen: dict, *, case: Case) -> str:
    """An inf gradient skips the step and halves the scale; two steps match the reference's losses and weights."""
    for (seed, dtype, part), run in judged(_amp_parts(case), seen["runs"]):
        start = snapshot(make_mlp(seed))
        if part == "skip":
            _judge_skip(run, start)
        else:
            _judge_two_steps(run, start, seed, dtype)
    kinds = " and ".join(_name(d) for _, d in _amp_cases(case))
    return (f"{kinds}: forward and loss under autocast, backward outside, scale/step/update used, an inf gradient "
            "skips the step and halves the scale, two steps match the reference")


def _judge_skip(skip: dict, start: list[torch.Tensor]) -> None:
    """With an inf gradient: no optimizer step, the parameters as they started, the scale 1024 -> 512."""
    steps_taken, scale = skip["steps_taken"], skip["scale"]
    if not isinstance(steps_taken, int) or not isinstance(scale, float):
        raise WireError("malformed observation: steps_taken or scale")
    skipped = matching_tensors(skip["params"], start, "params")
    unchanged = all(torch.equal(a, b) for a, b in zip(start, skipped, strict=True))
    if steps_taken or not unchanged:
        fail(
            "inf-step-not-skipped",
            observed=f"with an inf gradient the optimizer stepped {steps_taken} time(s); parameters "
            f"{'unchanged' if unchanged else 'changed'}",
            expected="the step skipped (scaler.step sees the inf and does not call optimizer.step), "
            "parameters unchanged",
            cause="the parameters were changed outside scaler.step (an update written by hand), which no inf check "
            "protects" if steps_taken == 0 else "the optimizer stepped although a gradient held inf: the gradients "
            "were replaced or cleared before scaler.step could see the inf",
            where="every line between backward and scaler.step(optimizer)",
        )
    if scale != 512.0:
        fail(
            "scale-not-reduced",
            observed=f"scale after an overflowing step: {scale:g}",
            expected="512 (1024 times the backoff factor 0.5)",
            cause="scaler.update() runs before scaler.step (it then sees no overflow yet), or the scale is set by "
            "hand (scaler.update(new_scale) or a second update)",
            where="the scaler.update() line: once, after scaler.step(optimizer), without an argument",
        )


def _reference_two_steps(seed: int, dtype: torch.dtype) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The canonical step run twice from the seeded start: its losses and the parameters after both."""
    model, optimizer, scaler = _amp_setup(seed, init_scale=_TWO_STEP_SCALE)
    losses = [reference_amp_step(model, batch, nn.functional.mse_loss, optimizer, scaler, "cpu", dtype)
              for batch in _two_batches(seed)]
    return losses, snapshot(model)


def _judge_two_steps(two_steps: dict, start: list[torch.Tensor], seed: int, dtype: torch.dtype) -> None:
    """Each returned loss is the batch's detached loss; the parameters after two steps are the reference's.

    The second step's loss depends on the first update, so it is compared only once the update is verified.
    """
    ref_losses, ref_params = _reference_two_steps(seed, dtype)
    returned = two_steps["returned"]
    if not isinstance(returned, list) or len(returned) != len(ref_losses):
        raise WireError("malformed observation: not one returned value per step")
    for i, got in enumerate(returned):
        _judge_returned_type(i, got)
    _judge_autocast_dtype(returned[0], ref_losses[0], seed, dtype)
    _judge_returned_loss(0, returned[0], ref_losses[0])
    params = matching_tensors(two_steps["params"], ref_params, "params")
    stale = matching_tensors(two_steps["stale"], start, "stale")
    drift = max(float((a - b).abs().max()) for a, b in zip(params, ref_params, strict=True))
    if not drift <= 1e-5:
        moved = max(float((a - b).abs().max()) for a, b in zip(stale, start, strict=True))
        stale_kept = moved > 1.0
        fail(
            "missing-zero-grad" if stale_kept else "wrong-update",
            observed=f"after two steps the parameters differ from the reference by up to {drift:.3g}"
            + ("; a step that starts with stale gradients moved the parameters by up to "
               f"{moved:.3g}: the stale gradients were used" if stale_kept else ""),
            expected="the same parameters as the canonical step (zero_grad, autocast forward+loss, scaled backward, "
            "scaler.step, scaler.update)",
            cause="gradients left in .grad from before the step are added to this batch's: optimizer.zero_grad("
            "set_to_none=True) is missing before backward" if stale_kept
            else "the gradients the optimizer applies are not this batch's unscaled gradients: they were changed "
            "between backward and scaler.step (clipped while still scaled, divided, replaced), or backward ran on "
            "another loss",
            where="the start of amp_train_step" if stale_kept else "the lines between backward and scaler.step",
        )
    _judge_returned_loss(1, returned[1], ref_losses[1])


def other_dtype(dtype: torch.dtype) -> torch.dtype:
    """The other 16-bit autocast dtype: what a step that hard-codes one runs when asked for the other."""
    return torch.float16 if dtype == torch.bfloat16 else torch.bfloat16


def fail_autocast_dtype(dtype: torch.dtype, what: str) -> NoReturn:
    """Fail with [wrong-autocast-dtype]: the step's numbers are those of an autocast in the other 16-bit dtype."""
    fail(
        "wrong-autocast-dtype",
        observed=f"asked for {_name(dtype)}, the step computed exactly what autocast in {_name(other_dtype(dtype))} "
        "computes",
        expected=f"the forward and loss under torch.autocast(device_type, dtype=dtype), here {_name(dtype)}",
        cause=f"the autocast dtype is written in the code ({_name(other_dtype(dtype))}) instead of the dtype argument",
        where=f"the `with torch.autocast(...)` line of {what}",
    )


def _judge_autocast_dtype(got: Any, ref: torch.Tensor, seed: int, dtype: torch.dtype) -> None:
    """Fail when the first returned loss is that of an autocast forward in the other 16-bit dtype, not `dtype`'s."""
    value, inputs, targets = _number(got), *make_batch(seed)
    with torch.no_grad(), torch.autocast("cpu", dtype=other_dtype(dtype)):
        other = float(nn.functional.mse_loss(make_mlp(seed)(inputs), targets))
    def close(a: float, b: float) -> bool:
        return abs(a - b) <= 1e-6 * (1 + abs(b))
    if value is not None and close(value, other) and not close(value, float(ref)):
        fail_autocast_dtype(dtype, "amp_train_step")


def _judge_returned_type(i: int, got: Any) -> None:
    """Fail unless step `i` returned a tensor without a graph."""
    if isinstance(got, torch.Tensor) and got.requires_grad:
        fail(
            "returns-graph",
            observed="the returned loss still requires grad",
            expected="loss.detach(): a value to log, not the graph",
            cause="returning the loss itself keeps the whole step's autograd graph alive",
            where="the return statement of amp_train_step",
        )
    if not isinstance(got, torch.Tensor):
        fail(
            "not-a-tensor",
            observed=f"step {i} returned {type_name(got)} {got!r}"[:200],
            expected="the loss as a detached tensor: `return loss.detach()`",
            cause="nothing is returned (a missing return statement)" if got is None
            else "the loss was turned into a Python number (.item() or float()), which waits for the device "
            "at every step" if isinstance(got, (int, float)) else "something other than the loss is returned",
            where="the return statement of amp_train_step",
        )


def _judge_returned_loss(i: int, got: torch.Tensor, ref: torch.Tensor) -> None:
    """Fail unless step `i` returned the batch's loss `ref` (before the update)."""
    value = _number(got)
    if value is None or not abs(value - float(ref)) <= 1e-3 * (1 + abs(float(ref))):
        scaled = value is not None and abs(value - float(ref) * _TWO_STEP_SCALE) <= 1e-3 * (1 + abs(float(ref)))
        fail(
            "wrong-return",
            observed=f"step {i} returned {value:.6g}" if value is not None
            else f"step {i} returned a tensor of shape {tuple(got.shape)}",
            expected=f"the batch's loss before the update, about {float(ref):.4f} (a detached tensor)",
            cause=f"the scaled loss (the loss times the scale, {_TWO_STEP_SCALE:g}) is returned" if scaled
            else "another value than this batch's loss: a loss recomputed after the step, a sum instead of the "
            "mean, or another tensor",
            where="the return statement of amp_train_step",
        )
