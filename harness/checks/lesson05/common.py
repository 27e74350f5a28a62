"""Lesson 05: what several of its tasks share on the probe side (inputs, instruments, models)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from harness.contract.failure import fail
from harness.contract.instruments import ForwardRecorder, RecordingScaler

REDUCED = (torch.bfloat16, torch.float16)


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


def fail_on_trace(trace: AmpTrace) -> None:
    """Probe side: fail on autocast scope and scaler misuse, then re-raise the student's exception if any."""
    scope_failures(trace)
    scaler_failures(trace)
    if trace.error is not None:
        raise trace.error
