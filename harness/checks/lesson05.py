"""Checks of lesson 05, mixed precision: dtype choice, rounding, autocast dtypes, the scaler, the AMP step.

Every check runs the student's code on small seeded models on the CPU (bf16 and fp16 autocast and the CPU
GradScaler all exist there) and observes it: output dtypes, the autocast state seen by gradient hooks
during backward, a GradScaler subclass that records its calls, and optimizer step pre-hooks.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from harness.checks.core import fail, register
from harness.checks.probes import ForwardRecorder

_REDUCED = (torch.bfloat16, torch.float16)
_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def _name(dtype: object) -> str:
    return _NAMES.get(dtype, repr(dtype))  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------------
# 05-choose-precision
# --------------------------------------------------------------------------------------------------
def reference_choose_precision(device_type: str, bf16_supported: bool) -> tuple[torch.dtype, bool]:
    """bf16 where the device has it (fp32's range: no scaler needed), else fp16 with a GradScaler."""
    if device_type not in ("cpu", "cuda", "mps", "xpu"):
        raise ValueError(f"unknown device type {device_type!r}: expected cpu, cuda, mps or xpu")
    return (torch.bfloat16, False) if bf16_supported else (torch.float16, True)


def _expect_value_error(choose: Callable[..., Any], device_type: str) -> None:
    try:
        got = choose(device_type, True)
    except ValueError:
        return
    fail(
        "unknown-device-accepted",
        observed=f"choose_precision({device_type!r}, True) returned {got!r}",
        expected="a ValueError that names the unknown device type",
        cause="the function answers for any string instead of rejecting device types it does not know",
        where="the first lines of choose_precision: validate device_type before choosing",
    )


@register(
    "05-choose-precision",
    hints=(
        "Which of the two 16-bit formats keeps float32's exponent range? Only the other one needs loss scaling.",
        "Return (torch.bfloat16, False) when bf16_supported, otherwise (torch.float16, True); raise ValueError "
        "for a device type outside cpu, cuda, mps, xpu.",
    ),
)
def check_choose_precision(choose: Callable[[str, bool], tuple[torch.dtype, bool]], *, hidden: bool) -> str:
    device_types = ("cpu", "cuda", "mps", "xpu") if hidden else ("cpu", "cuda")
    for device_type in device_types:
        for bf16 in (True, False):
            got = choose(device_type, bf16)
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
            if bool(use_scaler) != want_scaler:
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
    for unknown in ("tpu", "gpu", "") if hidden else ("tpu",):
        _expect_value_error(choose, unknown)
    return f"right dtype and scaler choice for {', '.join(device_types)}, and unknown devices rejected"


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


@register(
    "05-cast-report",
    hints=(
        "Cast to the 16-bit dtype, then back to float32 before comparing: differences computed in 16 bits are "
        "rounded too. torch.isinf, torch.isfinite and boolean masks do the counting.",
        "y = x.to(dtype).float(); overflow = (isfinite(x) & isinf(y)).sum(); underflow = ((x != 0) & (y == 0)).sum(); "
        "relative error = |y - x| / |x| over entries where x and y are finite and nonzero, then its max.",
    ),
)
def check_cast_report(report: Callable[[torch.Tensor, torch.dtype], dict], *, hidden: bool) -> str:
    for seed in (11, 12) if hidden else (0,):
        for x in _cast_inputs(seed, hidden):
            for dtype in _REDUCED:
                original = x.clone()
                got = report(x, dtype)
                want = reference_cast_report(original, dtype)
                _compare_cast_report(got, want, x, original, dtype)
    return "overflow and underflow counts and the worst relative rounding error match, for bf16 and fp16"


def _compare_cast_report(got: Any, want: dict, x: torch.Tensor, original: torch.Tensor, dtype: torch.dtype) -> None:
    if not torch.equal(x, original):
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
            observed=f"returned {type(got).__name__} with keys {sorted(got) if isinstance(got, dict) else '-'}",
            expected="a dict with keys 'overflow', 'underflow' and 'max_rel_error'",
            cause="a key is misspelt or missing",
            where="the dict cast_report returns",
        )
    for key, code, why in (
        ("overflow", "wrong-overflow", "count finite inputs that become +-inf (fp16's largest value is 65504)"),
        ("underflow", "wrong-underflow", "count nonzero inputs that become exactly 0 (inputs that were 0 do not count)"),
    ):
        if int(got[key]) != want[key]:
            fail(
                code,
                observed=f"{key} = {got[key]} for {_name(dtype)} on a tensor of {x.numel()} values",
                expected=f"{key} = {want[key]}",
                cause=why,
                where=f"the '{key}' computation in cast_report",
            )
    observed = float(got["max_rel_error"])
    if not abs(observed - want["max_rel_error"]) <= 1e-3 * want["max_rel_error"] + 1e-9:
        fail(
            "wrong-rel-error",
            observed=f"max_rel_error = {observed:.3g} for {_name(dtype)}",
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


def reference_output_dtypes(model: nn.Module, x: torch.Tensor, device_type: str, dtype: torch.dtype) -> dict[str, torch.dtype]:
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


def _dtype_models(hidden: bool) -> list[tuple[nn.Module, torch.Tensor]]:
    torch.manual_seed(5 if hidden else 4)
    mlp = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.ReLU(), nn.Linear(16, 4), _Upcast())
    cases = [(mlp, torch.randn(6, 8))]
    if hidden:
        cnn = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.GELU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
        cases.append((cnn.eval(), torch.randn(2, 3, 8, 8)))

        class Recurrent(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.rnn = nn.GRU(2, 8, batch_first=True)
                self.head = nn.Sequential(nn.Linear(8, 1))

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                out, _ = self.rnn(x)
                return self.head(out[:, -1])

        cases.append((Recurrent(), torch.randn(3, 5, 2)))
    return cases


def _hook_count(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


@register(
    "05-output-dtypes",
    hints=(
        "A forward hook (module.register_forward_hook) sees each module's output; register one on every leaf "
        "module (a module without children), run one forward inside torch.autocast, then remove the hooks.",
        "for name, m in model.named_modules(): if not any(m.children()): handles.append(m.register_forward_hook("
        "lambda mod, inp, out, name=name: dtypes.__setitem__(name, out.dtype))); run the forward under "
        "torch.no_grad() and torch.autocast(device_type, dtype=dtype); finally: remove every handle.",
    ),
)
def check_output_dtypes(output_dtypes: Callable[..., dict], *, hidden: bool) -> str:
    dtypes = _REDUCED if hidden else (torch.bfloat16,)
    for model, x in _dtype_models(hidden):
        for dtype in dtypes:
            hooks_before = _hook_count(model)
            got = output_dtypes(model, x, "cpu", dtype)
            want = reference_output_dtypes(model, x, "cpu", dtype)
            _compare_dtypes(got, want, dtype)
            if _hook_count(model) != hooks_before:
                fail(
                    "hooks-left",
                    observed=f"the model has {_hook_count(model) - hooks_before} more hooks after the call",
                    expected="every hook removed before returning",
                    cause="the handles returned by register_forward_hook were not removed; every later forward "
                    "would keep running them",
                    where="the end of output_dtypes: call handle.remove() on each handle (in a finally block)",
                )
    return "one autocast forward recorded: the dtype of every leaf module's output matches, hooks removed"


def _compare_dtypes(got: Any, want: dict[str, torch.dtype], dtype: torch.dtype) -> None:
    if not isinstance(got, dict) or set(got) != set(want):
        keys = sorted(got) if isinstance(got, dict) else type(got).__name__
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
            cause="the dtype was recorded from the input rather than the output, or before autocast applied",
            where="the forward hook: it receives (module, inputs, output); record output.dtype",
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
        "cpu", init_scale=init_scale, growth_factor=growth_factor, backoff_factor=backoff_factor, growth_interval=growth_interval
    )
    trace = []
    for overflow in overflows:
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(weight.sum() * (float("inf") if overflow else 1.0)).backward()
        scaler.step(optimizer)
        scaler.update()
        trace.append(float(scaler.get_scale()))
    return trace


def _trace_without_reset(overflows: Sequence[bool], init_scale: float, growth: float, backoff: float, interval: int) -> list[float]:
    scale, tracker, trace = init_scale, 0, []
    for overflow in overflows:
        if overflow:
            scale *= backoff
        else:
            tracker += 1
            if tracker == interval:
                scale, tracker = scale * growth, 0
        trace.append(scale)
    return trace


def _scale_cases(hidden: bool) -> list[tuple[list[bool], dict[str, Any]]]:
    F, T = False, True
    cases = [
        ([F, F, F, T, F, F, F, F, F], dict(init_scale=1024.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=3)),
        ([F, F, T, F, T, T, F], dict(init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2)),
    ]
    if hidden:
        rng = random.Random(505)
        for _ in range(4):
            flags = [rng.random() < 0.3 for _ in range(rng.randint(10, 40))]
            cases.append(
                (flags, dict(init_scale=float(2 ** rng.randint(4, 20)), growth_factor=rng.choice([2.0, 4.0, 1.5]),
                             backoff_factor=rng.choice([0.5, 0.25]), growth_interval=rng.randint(1, 5)))
            )
        cases.append(([], dict(init_scale=8.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=2)))
    return cases


@register(
    "05-scale-trace",
    hints=(
        "Keep two numbers: the scale and a count of finite steps in a row. An overflow multiplies the scale by "
        "backoff_factor and restarts the count; growth_interval finite steps in a row multiply it by growth_factor.",
        "for overflow in overflows: if overflow: scale *= backoff_factor; tracker = 0  else: tracker += 1; "
        "if tracker == growth_interval: scale *= growth_factor; tracker = 0 -- append scale after every step.",
    ),
)
def check_scale_trace(scale_trace: Callable[..., list[float]], *, hidden: bool) -> str:
    for overflows, settings in _scale_cases(hidden):
        got = [float(s) for s in scale_trace(list(overflows), **settings)]
        want = real_scale_trace(overflows, **settings)
        if len(got) != len(want):
            fail(
                "wrong-length",
                observed=f"{len(got)} scales for {len(overflows)} steps",
                expected="one scale per step: the value after that step's update()",
                cause="the initial scale is included, or a step is not appended",
                where="where scale_trace appends to its list",
            )
        if got == want:
            continue
        step = next(i for i, (g, w) in enumerate(zip(got, want)) if g != w)
        situation = f"with {settings} and overflows={[int(o) for o in overflows]}, after step {step}"
        if overflows[step] and got[step] >= (got[step - 1] if step else settings["init_scale"]):
            code, cause = "no-backoff", "an overflowing step must multiply the scale by backoff_factor"
        elif got == _trace_without_reset(overflows, *settings.values()):
            code, cause = "tracker-not-reset", "an overflow must restart the count of finite steps at zero"
        else:
            code, cause = "wrong-growth", (
                "the scale grows by growth_factor exactly when growth_interval finite steps have passed in a row "
                "since the last growth or overflow"
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
class RecordingScaler(torch.amp.GradScaler):
    """A GradScaler that logs its calls (scale, unscale_, step, update), so a check can see the sequence.

    `in_step` is True while `step()` runs: an optimizer step pre-hook reads it to tell a step taken by the
    scaler from a direct `optimizer.step()` that bypasses the overflow check.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[str] = []
        self.in_step = False

    def scale(self, outputs: Any) -> Any:
        self.calls.append("scale")
        return super().scale(outputs)

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        self.calls.append("unscale_")
        super().unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("step")
        self.in_step = True
        try:
            return super().step(optimizer, *args, **kwargs)
        finally:
            self.in_step = False

    def update(self, new_scale: Any = None) -> None:
        self.calls.append("update")
        super().update(new_scale)


@dataclass
class AmpTrace:
    """What one instrumented call of an AMP training step did."""

    forward_autocast: list[bool] = field(default_factory=list)
    loss_autocast: list[bool] = field(default_factory=list)
    backward_autocast: list[bool] = field(default_factory=list)
    direct_steps: int = 0
    steps_taken: int = 0
    calls: list[str] = field(default_factory=list)
    returned: Any = None
    error: BaseException | None = None


def make_mlp(seed: int, width: int = 16, inputs: int = 6, outputs: int = 3) -> nn.Module:
    """A small seeded MLP for the checks."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(inputs, width), nn.ReLU(), nn.Linear(width, outputs))


def make_batch(seed: int, n: int = 12, inputs: int = 6, outputs: int = 3, scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded (inputs, targets) regression batch; `scale` enlarges inputs (and so gradients)."""
    generator = torch.Generator().manual_seed(seed + 1000)
    return scale * torch.randn(n, inputs, generator=generator), torch.randn(n, outputs, generator=generator)


def instrument(model: nn.Module, optimizer: torch.optim.Optimizer, scaler: RecordingScaler | None, device_type: str, trace: AmpTrace) -> list[Any]:
    """Hooks that fill `trace`: backward's autocast state, and steps taken inside or outside scaler.step."""

    def on_grad(grad: torch.Tensor) -> None:
        trace.backward_autocast.append(torch.is_autocast_enabled(device_type))

    def on_step(_optimizer: torch.optim.Optimizer, _args: Any, _kwargs: Any) -> None:
        trace.steps_taken += 1
        if scaler is not None and not scaler.in_step:
            trace.direct_steps += 1

    first = next(model.parameters())
    return [first.register_hook(on_grad), optimizer.register_step_pre_hook(on_step)]


def recording_loss(loss_fn: Callable[..., torch.Tensor], device_type: str, trace: AmpTrace) -> Callable[..., torch.Tensor]:
    """`loss_fn`, recording whether autocast was on when it was called."""

    def wrapped(*args: Any, **kwargs: Any) -> torch.Tensor:
        trace.loss_autocast.append(torch.is_autocast_enabled(device_type))
        return loss_fn(*args, **kwargs)

    return wrapped


def inject_inf(model: nn.Module) -> Any:
    """Make the first parameter's gradient inf, as an fp16 overflow would (a hook on the parameter)."""
    return next(model.parameters()).register_hook(lambda grad: torch.full_like(grad, float("inf")))


def run_amp_step(step_fn: Callable[..., Any], model: nn.Module, batch: Any, optimizer: torch.optim.Optimizer, scaler: RecordingScaler,
                 dtype: torch.dtype, extra: Sequence[Any] = ()) -> AmpTrace:
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
    except Exception as error:  # reported after the observations, see check_amp_step
        trace.error = error
    finally:
        for handle in handles:
            handle.remove()
    trace.forward_autocast = [r.autocast for r in forwards.records]
    trace.calls = list(scaler.calls)
    scaler.calls.clear()
    return trace


def reference_amp_step(model: nn.Module, batch: Any, loss_fn: Callable[..., torch.Tensor], optimizer: torch.optim.Optimizer,
                       scaler: torch.amp.GradScaler, device_type: str, dtype: torch.dtype) -> torch.Tensor:
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
    """Fail on autocast scope errors: forward, loss and backward.

    What did happen is reported even when the student's code raised later; what did not happen is reported
    only when it ran to the end (after an exception, the missing calls are just the ones never reached).
    """
    if not trace.forward_autocast and trace.error is None:
        fail("no-forward", observed="the model was never called", expected="one forward of the model on the batch",
             cause="the step does not run model(inputs)", where="the forward pass of your training step")
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
            cause="`scaler.scale(loss).backward()` is indented inside the autocast block; backward ops already run "
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
    """Fail on scaler misuse: a direct optimizer.step, a missing scale, step or update."""
    if trace.direct_steps:
        fail(
            "step-bypasses-scaler",
            observed=f"optimizer.step() was called directly {trace.direct_steps} time(s)",
            expected="scaler.step(optimizer), which unscales the gradients and skips the step when they hold inf/NaN",
            cause="optimizer.step() applies still-scaled gradients (65536 times too large) and steps on overflows",
            where="the line that steps the optimizer",
        )
    order = ("scale", "step", "update")
    for call, code, why in (
        ("scale", "missing-scale", "without scaler.scale(loss) small fp16 gradients underflow, and scaler.step divides "
                                   "unscaled gradients by the scale"),
        ("step", "missing-step", "the parameters are never updated through the scaler"),
        ("update", "missing-update", "the scale never adapts: after an overflow every later step is skipped again, "
                                     "and it never grows back after finite steps"),
    ):
        later_reached = any(c in trace.calls for c in order[order.index(call) + 1:])
        if call not in trace.calls and (trace.error is None or later_reached):
            fail(
                code,
                observed=f"scaler calls: {trace.calls}",
                expected="scale -> step -> update, once per training step",
                cause=f"scaler.{call}() is never called: {why}",
                where=f"add scaler.{call}(...) in its place in your training step",
            )


def _skip_failures(step_fn: Callable[..., Any], seed: int, dtype: torch.dtype) -> None:
    """Inject an inf gradient: the step must be skipped, the scale halved, the parameters unchanged."""
    model, optimizer, scaler = _amp_setup(seed, init_scale=1024.0)
    before = [p.detach().clone() for p in model.parameters()]
    handle = inject_inf(model)
    trace = run_amp_step(step_fn, model, make_batch(seed), optimizer, scaler, dtype)
    handle.remove()
    scope_failures(trace)
    scaler_failures(trace)
    if trace.error is not None:
        raise trace.error
    unchanged = all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    if trace.steps_taken or not unchanged:
        fail(
            "inf-step-not-skipped",
            observed=f"with an inf gradient the optimizer stepped {trace.steps_taken} time(s); parameters "
            f"{'unchanged' if unchanged else 'changed (now inf/NaN)'}",
            expected="the step skipped (scaler.step sees the inf and does not call optimizer.step), parameters unchanged",
            cause="the gradients reach the optimizer without the scaler's inf check",
            where="the optimizer step: it must go through scaler.step(optimizer)",
        )
    if scaler.get_scale() != 512.0:
        fail(
            "scale-not-reduced",
            observed=f"scale after an overflowing step: {scaler.get_scale():g}",
            expected="512 (1024 times the backoff factor 0.5)",
            cause="scaler.update() is not called after scaler.step, so the overflow does not lower the scale",
            where="scaler.update() at the end of the step",
        )


def _result_failures(step_fn: Callable[..., Any], seed: int, dtype: torch.dtype) -> None:
    """Two steps from the same start must match the reference step's parameters and losses."""
    batches = [make_batch(seed), make_batch(seed + 1)]
    results = []
    for fn in (step_fn, reference_amp_step):
        # a small scale: stale gradients left from step 1 are divided by it in step 2 and must stay visible
        model, optimizer, scaler = _amp_setup(seed, init_scale=2.0)
        traces = [run_amp_step(fn, model, batch, optimizer, scaler, dtype) for batch in batches]
        results.append((model, traces))
    (model, traces), (ref_model, ref_traces) = results
    for trace in traces:
        if trace.error is not None:
            raise trace.error
    for i, (trace, ref) in enumerate(zip(traces, ref_traces)):
        got = trace.returned
        if isinstance(got, torch.Tensor) and got.requires_grad:
            fail(
                "returns-graph",
                observed="the returned loss still requires grad",
                expected="loss.detach(): a value to log, not the graph",
                cause="returning the loss itself keeps the whole step's autograd graph alive",
                where="the return statement of amp_train_step",
            )
        if not isinstance(got, (torch.Tensor, float)) or abs(float(got) - float(ref.returned)) > 1e-3 * (1 + abs(float(ref.returned))):
            fail(
                "wrong-return",
                observed=f"step {i} returned {got!r}",
                expected=f"the batch's loss before the update, about {float(ref.returned):.4f} (a detached tensor)",
                cause="the scaled loss is returned (scaler.scale(loss)), or nothing is returned",
                where="the return statement of amp_train_step",
            )
    with torch.no_grad():
        drift = max(float((a - b).abs().max()) for a, b in zip(model.parameters(), ref_model.parameters()))
    if drift > 1e-5:
        fail(
            "missing-zero-grad" if _accumulates(step_fn, seed, dtype) else "wrong-update",
            observed=f"after two steps the parameters differ from the reference by up to {drift:.3g}",
            expected="the same parameters as the canonical step (zero_grad, autocast forward+loss, scaled backward, "
            "scaler.step, scaler.update)",
            cause="gradients from the previous step are still in .grad (no optimizer.zero_grad(set_to_none=True)), "
            "or the update applies something other than the unscaled gradient",
            where="the start of amp_train_step, and the order of the scaler calls",
        )


def _accumulates(step_fn: Callable[..., Any], seed: int, dtype: torch.dtype) -> bool:
    """True when the step leaves a stale gradient in place (no zero_grad at the start or end of the step)."""
    model, optimizer, scaler = _amp_setup(seed, init_scale=1.0)
    for p in model.parameters():
        p.grad = torch.full_like(p, 1e3)  # a stale gradient: 50 per parameter at lr 0.05 if it is not cleared
    before = [p.detach().clone() for p in model.parameters()]
    run_amp_step(step_fn, model, make_batch(seed), optimizer, scaler, dtype)
    with torch.no_grad():
        moved = max(float((a - b).abs().max()) for a, b in zip(before, model.parameters()))
    return moved > 1.0


@register(
    "05-amp-step",
    hints=(
        "The order is: zero the gradients; forward and loss inside torch.autocast; backward on the scaled loss "
        "outside autocast; let the scaler step the optimizer; update the scale.",
        "optimizer.zero_grad(set_to_none=True); with torch.autocast(device_type, dtype=dtype): loss = "
        "loss_fn(model(x), y)  -- then, outside the block: scaler.scale(loss).backward(); scaler.step(optimizer); "
        "scaler.update(); return loss.detach()",
    ),
)
def check_amp_step(amp_train_step: Callable[..., Any], *, hidden: bool) -> str:
    cases = ((7, torch.bfloat16), (8, torch.float16)) if hidden else ((3, torch.bfloat16),)
    for seed, dtype in cases:
        model, optimizer, scaler = _amp_setup(seed, init_scale=256.0)
        trace = run_amp_step(amp_train_step, model, make_batch(seed), optimizer, scaler, dtype)
        scope_failures(trace)
        scaler_failures(trace)
        if trace.error is not None:
            raise trace.error
        _skip_failures(amp_train_step, seed, dtype)
        _result_failures(amp_train_step, seed, dtype)
    kinds = " and ".join(_name(d) for _, d in cases)
    return (f"{kinds}: forward and loss under autocast, backward outside, scale/step/update used, an inf gradient "
            "skips the step and halves the scale, two steps match the reference")
