"""Drills on mixed precision and gradient clipping (CPU bf16 autocast and the CPU GradScaler)."""

from __future__ import annotations

import torch
from torch import nn

from harness.checks.core import fail
from harness.checks.probes import StepRecorder
from harness.drills.core import Drill, add
from harness.drills.support import multiple_choice


class _RecordingScaler(torch.amp.GradScaler):
    """A real CPU GradScaler that also records which of its methods ran, in order."""

    def __init__(self, init_scale: float = 2.0**10) -> None:
        super().__init__("cpu", init_scale=init_scale)
        self.calls: list[str] = []

    def scale(self, outputs):  # type: ignore[override]
        self.calls.append("scale")
        return super().scale(outputs)

    def unscale_(self, optimizer):  # type: ignore[override]
        self.calls.append("unscale_")
        return super().unscale_(optimizer)

    def step(self, optimizer, *args, **kwargs):  # type: ignore[override]
        self.calls.append("step")
        return super().step(optimizer, *args, **kwargs)

    def update(self, new_scale=None):  # type: ignore[override]
        self.calls.append("update")
        return super().update(new_scale)


class _AutocastProbe(nn.Module):
    """Linear model whose backward records whether autocast was on while gradients were computed."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 1)
        self.backward_autocast: list[bool] = []
        self.forward_autocast: list[bool] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.forward_autocast.append(torch.is_autocast_enabled("cpu"))
        out = self.linear(x)
        if out.requires_grad:
            out.register_hook(self._on_grad)
        return out

    def _on_grad(self, grad: torch.Tensor) -> None:
        self.backward_autocast.append(torch.is_autocast_enabled("cpu"))


def _data(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(16, 8, generator=gen)
    return x, x[:, :1] * 2.0


def _check_amp_step(ns: dict) -> str:
    amp_step = ns["amp_step"]
    torch.manual_seed(0)
    model = _AutocastProbe()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = _RecordingScaler()
    amp_step(model, _data(0), nn.MSELoss(), optimizer, scaler, 1.0)
    if not model.forward_autocast or not all(model.forward_autocast):
        fail("no-autocast", observed="the forward pass ran without autocast", expected="forward and loss under "
             "torch.autocast('cpu', dtype=torch.bfloat16)", cause="no autocast context",
             where="around model(x) and loss_fn")
    if any(model.backward_autocast):
        fail("backward-inside-autocast", observed="gradients were computed with autocast still enabled",
             expected="backward outside the autocast block",
             cause="loss.backward() indented inside `with torch.autocast`",
             where="dedent the backward call")
    expected = ["scale", "unscale_", "step", "update"]
    if scaler.calls != expected:
        missing = [c for c in expected if c not in scaler.calls]
        before_step = scaler.calls[: scaler.calls.index("step")] if "step" in scaler.calls else scaler.calls
        code = ("missing-update" if "update" in missing
                else "missing-unscale" if "unscale_" not in before_step else "scaler-order")  # step() unscales itself
        fail(code, observed=f"scaler calls: {scaler.calls}", expected=f"{expected}",
             cause="without update() the scale never adapts; without unscale_() clipping sees scaled gradients; "
             "optimizer.step() instead of scaler.step() applies scaled (and possibly inf) gradients",
             where="scaler.scale(loss).backward(); scaler.unscale_(opt); clip; scaler.step(opt); scaler.update()")
    # a step whose gradients are inf must be skipped, and the scale must back off
    model2 = _AutocastProbe()
    model2.linear.weight.register_hook(lambda g: torch.full_like(g, float("inf")))
    opt2 = torch.optim.SGD(model2.parameters(), lr=0.01)
    scaler2 = _RecordingScaler()
    before = model2.linear.weight.detach().clone()
    with StepRecorder(opt2) as steps:
        amp_step(model2, _data(1), nn.MSELoss(), opt2, scaler2, 1.0)
    if steps.records or not torch.equal(before, model2.linear.weight):
        fail("inf-step-applied", observed="an optimizer step ran on infinite gradients", expected="the step skipped",
             cause="optimizer.step() called directly instead of scaler.step()", where="scaler.step(optimizer)")
    if scaler2.get_scale() >= 2.0**10:
        fail("missing-update", observed="the scale did not back off after an inf gradient", expected="scale halved",
             cause="scaler.update() not called", where="after scaler.step")
    return "autocast around forward+loss, backward outside, scale/unscale_/step/update in order, inf steps skipped"


_AMP_SOLUTION = '''import torch


def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    x, y = batch
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()
'''

add(
    Drill(
        id="amp-train-step",
        title="An AMP training step with a GradScaler and clipping",
        kind="write",
        topics=("amp", "clipping"),
        difficulty=2,
        prompt="Write amp_step(model, batch, loss_fn, optimizer, scaler, max_norm): one training step with "
        "bf16 autocast on the CPU (torch.autocast('cpu', dtype=torch.bfloat16)), a GradScaler, and gradient "
        "clipping to max_norm. It must skip steps whose gradients are not finite.",
        entry="amp_step",
        starter="import torch\n\n\ndef amp_step(model, batch, loss_fn, optimizer, scaler, max_norm):\n"
        "    raise NotImplementedError\n",
        solution=_AMP_SOLUTION,
        hints=("Autocast covers forward and loss only; the scaler wraps backward, step and update.",
               "zero_grad; autocast(forward, loss); scaler.scale(loss).backward(); scaler.unscale_(opt); "
               "clip_grad_norm_; scaler.step(opt); scaler.update()"),
        check=_check_amp_step,
        wrong_answers=(
            _AMP_SOLUTION.replace("    scaler.update()\n", ""),
            _AMP_SOLUTION.replace("        loss = loss_fn(model(x), y)\n    scaler.scale(loss).backward()\n",
                                  "        loss = loss_fn(model(x), y)\n        scaler.scale(loss).backward()\n"),
            _AMP_SOLUTION.replace("    scaler.unscale_(optimizer)\n", ""),
        ),
    )
)


def _check_clip_after_unscale(ns: dict) -> str:
    amp_step = ns["amp_step"]
    torch.manual_seed(3)
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: only observe the gradients
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12)
    x, y = _data(4)
    with StepRecorder(optimizer) as steps:
        amp_step(model, (x * 50, y * 50), nn.MSELoss(), optimizer, scaler, 1.0)
    if not steps.records:
        fail("no-step", observed="the optimizer never stepped", expected="one step", cause="scaler.step missing",
             where="scaler.step(optimizer)")
    norm = steps.records[0].grad_norm
    if norm > 1.0 + 1e-3:
        fail("not-clipped", observed=f"the optimizer saw a gradient norm of {norm:.3g}", expected="at most 1.0",
             cause="clipping skipped, or done before unscale_ (then the scaler's division shrinks the clipped "
             "gradients further: the effective threshold is max_norm / scale)", where="unscale_ then clip")
    if norm < 0.5:
        fail("clip-before-unscale", observed=f"the optimizer saw a gradient norm of {norm:.3g}",
             expected="exactly max_norm = 1.0 for these large gradients",
             cause="clip_grad_norm_ ran on scaled gradients: they were clipped to 1.0 and then divided by the scale",
             where="call scaler.unscale_(optimizer) before clip_grad_norm_")
    return f"the optimizer sees gradients clipped to max_norm (norm {norm:.3f})"


add(
    Drill(
        id="clipping-under-amp",
        title="Bug hunt: clipping under AMP has no effect on the threshold you asked for",
        kind="bughunt",
        topics=("clipping", "amp"),
        difficulty=2,
        prompt="With max_norm=1.0 this AMP step leaves the optimizer seeing gradient norms of about 1/4096 on "
        "exploding batches. Fix amp_step so the optimizer sees gradients clipped to exactly max_norm.",
        entry="amp_step",
        starter=_AMP_SOLUTION.replace("    scaler.unscale_(optimizer)\n", "").replace(
            "    scaler.step(optimizer)\n", "    scaler.unscale_(optimizer)\n    scaler.step(optimizer)\n"),
        solution=_AMP_SOLUTION,
        hints=("What are the gradients multiplied by when clip_grad_norm_ sees them?",
               "The scaler multiplies the loss by the scale: unscale_ first, then clip."),
        check=_check_clip_after_unscale,
        wrong_answers=(_AMP_SOLUTION.replace("    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n", ""),
                       _AMP_SOLUTION.replace("clip_grad_norm_(model.parameters(), max_norm)",
                                             "clip_grad_value_(model.parameters(), max_norm)")),
    )
)


def _check_accumulated_clip(ns: dict) -> str:
    accumulate = ns["accumulate_and_clip"]
    x, y = _data(6)
    # scale 30 with max_norm 1: clipping decides; max_norm 1e6: the loss division decides
    for scale, max_norm in ((30.0, 1.0), (1.0, 1e6)):
        torch.manual_seed(5)
        model = nn.Linear(8, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: only observe the gradients
        micro = list(zip((x * scale).split(4), (y * scale).split(4), strict=True))
        with StepRecorder(optimizer) as steps:
            accumulate(model, micro, nn.MSELoss(), optimizer, max_norm)
        if len(steps.records) != 1:
            fail("step-count",
                 observed=f"{len(steps.records)} optimizer steps for one group of {len(micro)} micro-batches",
                 expected="1", cause="stepping per micro-batch", where="step once after the last micro-batch")
        reference = nn.Linear(8, 1)
        reference.load_state_dict({"weight": steps.records[0].params[0], "bias": steps.records[0].params[1]})
        for xb, yb in micro:
            (nn.MSELoss()(reference(xb), yb) / len(micro)).backward()
        nn.utils.clip_grad_norm_(reference.parameters(), max_norm)
        if not torch.allclose(steps.records[0].grads[0], reference.weight.grad, rtol=1e-4, atol=1e-6):
            fail("wrong-accumulated-gradient",
                 observed=f"the optimizer saw a gradient of norm {steps.records[0].grad_norm:.3g}; the clipped mean "
                 f"gradient of the group has norm {float(reference.weight.grad.norm()):.3g} (max_norm={max_norm:g})",
                 expected="the mean gradient of the group, clipped once",
                 cause="clipping each micro-batch, or not dividing each loss by the number of micro-batches",
                 where="divide each loss by the group size; clip once, just before optimizer.step()")
    return "loss divided by the group size, one clip and one step per group"


_ACC_SOLUTION = '''import torch


def accumulate_and_clip(model, micro_batches, loss_fn, optimizer, max_norm):
    optimizer.zero_grad(set_to_none=True)
    for x, y in micro_batches:
        loss = loss_fn(model(x), y) / len(micro_batches)
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
'''

add(
    Drill(
        id="clipping-with-accumulation",
        title="Clipping with gradient accumulation",
        kind="write",
        topics=("clipping", "loop"),
        difficulty=2,
        prompt="Write accumulate_and_clip(model, micro_batches, loss_fn, optimizer, max_norm): one optimizer step "
        "from a list of micro-batches, equivalent to one big batch (mean loss), with the gradient norm clipped to "
        "max_norm.",
        entry="accumulate_and_clip",
        starter="import torch\n\n\ndef accumulate_and_clip(model, micro_batches, loss_fn, optimizer, max_norm):\n"
        "    raise NotImplementedError\n",
        solution=_ACC_SOLUTION,
        hints=("The clip threshold applies to the gradient the optimizer steps with: the whole group's.",
               "Divide each micro-batch loss by len(micro_batches), backward each, then clip once and step once."),
        check=_check_accumulated_clip,
        wrong_answers=(
            _ACC_SOLUTION.replace("        loss.backward()\n"
                                  "    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n",
                                  "        loss.backward()\n"
                                  "        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n"),
            _ACC_SOLUTION.replace(" / len(micro_batches)", ""),
        ),
    )
)


def _why_scaler_experiment() -> None:
    for dtype in (torch.float16, torch.bfloat16):
        info = torch.finfo(dtype)
        tiny = torch.tensor(1e-8).to(dtype).item()
        print(f"{str(dtype):15s} max {info.max:.3g}, smallest normal {info.tiny:.3g}, 1e-8 becomes {tiny:.3g}")
    print("fp16's narrow range flushes small gradients to zero: the scaler multiplies the loss to keep them. "
          "bf16 has fp32's range, so it needs no scaler.")


add(
    multiple_choice(
        id="amp-why-scaler",
        title="When does mixed precision need a GradScaler?",
        topics=("amp",),
        difficulty=2,
        prompt="Which precision needs a GradScaler?\n  a) bf16 only   b) fp16 only   c) both   d) neither\n",
        correct="b",
        explanation="fp16's range is narrow: small gradients underflow without scaling",
        hints=("Compare the exponent bits of fp16 and bf16.",
               "fp16 underflows below ~6e-8; bf16 has fp32's exponent range."),
        wrong=("c", "a"),
        experiment=_why_scaler_experiment,
    )
)


def _why_clip_rnn_experiment() -> None:
    torch.manual_seed(0)
    rnn = nn.RNN(1, 32, batch_first=True)
    with torch.no_grad():
        rnn.weight_hh_l0.mul_(3.0)
    x = torch.randn(4, 100, 1)
    out, _ = rnn(x)
    out[:, -1].sum().backward()
    print(f"gradient norm of a 100-step RNN with a large recurrent matrix: {rnn.weight_hh_l0.grad.norm():.3g}")
    print("the gradient is a product of 100 Jacobians: it explodes (or vanishes) geometrically with length.")


add(
    multiple_choice(
        id="clipping-why-rnn",
        title="Why clip gradients in sequence models?",
        topics=("clipping",),
        difficulty=1,
        prompt="Why are recurrent models trained with gradient clipping?\n  a) to save memory\n"
        "  b) backpropagation through time multiplies many Jacobians, so gradients can grow exponentially with "
        "sequence length and one step can wreck the weights\n  c) to make training deterministic\n"
        "  d) clipping speeds up the forward pass\n",
        correct="b",
        explanation="BPTT multiplies Jacobians: gradients explode geometrically",
        hints=("Think about what the chain rule does over 100 time steps.",
               "Repeated multiplication by a matrix with norm > 1."),
        wrong=("a", "c"),
        experiment=_why_clip_rnn_experiment,
    )
)
