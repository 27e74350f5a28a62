"""Drills on mixed precision and gradient clipping (CPU bf16 autocast and the CPU GradScaler).

Every probe runs the answer on a model and batches drawn from the case, records what the optimizer saw at each
step (`StepRecorder`: the parameters before the step and the gradients it stepped with) and what the scaler and
autocast did; every judge rebuilds the same batches and, from the recorded parameters, recomputes the gradient
the optimizer should have seen (bf16 autocast forward, backward outside it, unscaled, clipped).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from harness.contract.case import Case
from harness.contract.failure import fail
from harness.contract.instruments import AutocastProbe, ForwardRecorder, HostSyncCounter, RecordingScaler, StepRecorder
from harness.contract.wire import WireError, describe
from harness.drills.core import Drill, add
from harness.drills.support import assert_close, case_generator, multiple_choice, with_fixes

_INIT_SCALE = 2.0**10


def _init_linear(layer: nn.Linear, case: Case, base: int) -> nn.Linear:
    """Weights drawn from the case (probe and judge draw the same)."""
    gen = case_generator(case, base)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(layer.weight.shape, generator=gen) * 0.3)
        layer.bias.copy_(torch.randn(layer.bias.shape, generator=gen) * 0.1)
    return layer


def _probe_model(case: Case, base: int) -> AutocastProbe:
    model = AutocastProbe()
    _init_linear(model.linear, case, base)
    return model


def _batch(case: Case, base: int, rows: int = 16, scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = case_generator(case, base)
    x = torch.randn(rows, 8, generator=gen) * scale
    return x, x[:, :1] * 2.0 + torch.randn(rows, 1, generator=gen) * scale


def _regression_data(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A small regression batch (kept for notebook 11's checks)."""
    return _batch(Case(seed=seed), 0)


def _case_max_norm(case: Case, base: int = 50) -> float:
    return round(0.5 + float(torch.rand((), generator=case_generator(case, base))) * 1.5, 3)


def _amp_reference(params: list, batch: tuple[torch.Tensor, torch.Tensor], max_norm: float | None,
                   ) -> tuple[list[torch.Tensor], torch.Tensor]:
    """(gradients the optimizer should see, loss) for a Linear(8, 1) at `params`: bf16 autocast forward and
    loss, backward outside autocast, clipped to max_norm (None: not clipped)."""
    weight, bias = _two_params(params)
    layer = nn.Linear(8, 1)
    with torch.no_grad():
        layer.weight.copy_(weight)
        layer.bias.copy_(bias)
    x, y = batch
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = nn.functional.mse_loss(layer(x), y)
    loss.backward()
    if max_norm is not None:
        nn.utils.clip_grad_norm_(layer.parameters(), max_norm)
    return [layer.weight.grad, layer.bias.grad], loss.detach()


def _two_params(tensors: object) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate a recorded [weight (1, 8), bias (1,)] pair."""
    if (not isinstance(tensors, list) or len(tensors) != 2 or not all(isinstance(t, torch.Tensor) for t in tensors)
            or tuple(tensors[0].shape) != (1, 8) or tuple(tensors[1].shape) != (1,)):
        raise WireError("a recorded [weight, bias] pair is malformed")
    return tensors[0].float(), tensors[1].float()


def _step_dicts(records: list) -> list[dict]:
    return [{"grads": r.grads, "params": r.params, "lrs": r.lrs} for r in records]


def _judge_clipped_gradient(step: object, batch: tuple[torch.Tensor, torch.Tensor], max_norm: float,
                            where: str, label: str = "the step") -> None:
    """Fail unless the gradient the optimizer stepped with is the unscaled gradient, clipped to max_norm."""
    if not isinstance(step, dict):
        raise WireError("a recorded step is not a dict")
    params = _two_params(step.get("params"))
    grads = step.get("grads")
    if not isinstance(grads, list) or any(g is None for g in grads):
        fail("missing-gradient", observed=f"at {label} some parameter had no gradient",
             expected="a gradient on every parameter", cause="backward not called, or grads cleared before the step",
             where=where)
    seen = _two_params(grads)
    want, _ = _amp_reference(list(params), batch, max_norm)
    raw, _ = _amp_reference(list(params), batch, None)
    norm = float(torch.linalg.vector_norm(torch.cat([g.flatten() for g in seen])))
    raw_norm = float(torch.linalg.vector_norm(torch.cat([g.flatten() for g in raw])))
    biggest = max(float(g.abs().max()) for g in seen)
    if norm > max_norm * (1 + 1e-3):
        if biggest <= max_norm * (1 + 1e-3) and raw_norm > max_norm:
            fail("clipped-by-value", observed=f"at {label} the optimizer saw a gradient of norm {norm:.4g} whose "
                 f"largest element is {biggest:.4g} (max_norm={max_norm})",
                 expected=f"the whole gradient scaled down to norm {max_norm}",
                 cause="clip_grad_value_ caps each element at max_norm: the norm stays above it and the gradient "
                 "changes direction", where="use torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)")
        fail("not-clipped", observed=f"at {label} the optimizer saw a gradient of norm {norm:.4g} "
             f"(max_norm={max_norm})", expected=f"at most {max_norm}",
             cause="clip_grad_norm_ is missing, or runs after scaler.step()", where=where)
    if norm < 0.5 * min(max_norm, raw_norm):
        fail("clip-before-unscale", observed=f"at {label} the optimizer saw a gradient of norm {norm:.3g}; the "
             f"unscaled gradient has norm {raw_norm:.3g} (max_norm={max_norm})",
             expected=f"norm {min(max_norm, raw_norm):.4g}",
             cause="clip_grad_norm_ ran on scaled gradients (multiplied by the scale): they were clipped to "
             "max_norm, then divided by the scale, so the effective threshold is max_norm / scale",
             where="scaler.unscale_(optimizer) first, then clip_grad_norm_, then scaler.step(optimizer)")
    for name, got, ref in zip(("weight", "bias"), seen, want, strict=True):
        assert_close(f"the {name} gradient at {label}", got, ref, atol=1e-5, rtol=2e-3, where=where,
                     cause="the gradient is not the bf16-autocast gradient of this batch's loss, unscaled and "
                     "clipped to max_norm")


# ---------------------------------------------------------------------------------------------------------------
# amp-train-step and clipping-under-amp: one step, the scaler's calls, the gradient stepped with, an inf step


def _probe_amp_step(answer: dict, *, case: Case) -> dict:
    amp_step = answer["amp_step"]
    model = _probe_model(case, 0)
    gen = case_generator(case, 9)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=gen)  # what the previous step left behind
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = RecordingScaler()
    model.eval()  # as an evaluation between epochs leaves it: the step must switch training mode back on
    with StepRecorder(optimizer) as steps, ForwardRecorder(model) as forwards:
        loss = amp_step(model, _batch(case, 1, scale=20.0), nn.MSELoss(), optimizer, scaler, _case_max_norm(case))
    # a step whose gradients are not finite must be skipped, and the scale must back off
    inf_model = _probe_model(case, 2)
    inf_model.linear.weight.register_hook(lambda g: torch.full_like(g, float("inf")))
    inf_optimizer = torch.optim.SGD(inf_model.parameters(), lr=0.05)
    inf_scaler = RecordingScaler()
    with StepRecorder(inf_optimizer) as inf_steps:
        amp_step(inf_model, _batch(case, 3), nn.MSELoss(), inf_optimizer, inf_scaler, _case_max_norm(case))
    return {"forward_autocast": model.forward_autocast, "backward_autocast": model.backward_autocast,
            "fresh": model.fresh_at_backward, "calls": scaler.calls, "steps": _step_dicts(steps.records), "loss": loss,
            "training": [r.training for r in forwards.records],
            "inf_steps": len(inf_steps.records), "inf_weight": inf_model.linear.weight.detach(),
            "inf_scale": float(inf_scaler.get_scale())}


_SCALER_ORDER = ["scale", "unscale_", "step", "update"]
_AMP_WHERE = "scaler.scale(loss).backward(); scaler.unscale_(opt); clip_grad_norm_; scaler.step(opt); scaler.update()"


def _judge_autocast(seen: dict) -> None:
    forward, backward = seen.get("forward_autocast"), seen.get("backward_autocast")
    if not isinstance(forward, list) or not isinstance(backward, list):
        raise WireError("autocast records missing")
    if not forward or not all(v is True for v in forward):
        fail("no-autocast", observed="the forward pass ran without autocast",
             expected="forward and loss under torch.autocast('cpu', dtype=torch.bfloat16)",
             cause="no autocast context, or one that ends before model(x)", where="around model(x) and loss_fn")
    if any(v is not False for v in backward):
        fail("backward-inside-autocast", observed="gradients were computed with autocast still enabled",
             expected="backward outside the autocast block",
             cause="the backward call is indented inside `with torch.autocast(...)`: autocast is meant for the "
             "forward pass; backward already runs each op in the dtype its forward used",
             where="dedent the backward call out of the with block")


def _judge_scaler_calls(calls: object) -> None:
    if not isinstance(calls, list) or not all(isinstance(c, str) for c in calls):
        raise WireError("scaler calls malformed")
    if calls == _SCALER_ORDER:
        return
    if "step" not in calls:
        code, cause = "optimizer-step-direct", ("optimizer.step() called instead of scaler.step(optimizer): it "
                                                "steps even when the gradients are inf or nan")
    elif "update" not in calls:
        code, cause = "missing-update", "without scaler.update() the scale never adapts (it never backs off after inf)"
    elif "unscale_" not in calls[:calls.index("step")]:
        code, cause = "missing-unscale", ("no scaler.unscale_(optimizer) before clipping: clip_grad_norm_ sees "
                                          "gradients multiplied by the scale")
    else:
        code, cause = "scaler-order", "the scaler's calls run in the wrong order, or more than once"
    fail(code, observed=f"scaler calls: {calls}", expected=f"{_SCALER_ORDER}", cause=cause, where=_AMP_WHERE)


def _judge_amp_step(seen: dict, *, case: Case) -> str:
    _judge_autocast(seen)
    fresh = seen.get("fresh")
    if not isinstance(fresh, list):
        raise WireError("gradient records missing")
    if not all(f is True for f in fresh):
        fail("stale-gradients", observed="backward added to the gradients the previous step left in .grad",
             expected="gradients cleared before backward", cause="no optimizer.zero_grad(set_to_none=True): "
             "backward accumulates into .grad", where="optimizer.zero_grad(set_to_none=True) at the start of the step")
    _judge_scaler_calls(seen.get("calls"))
    steps = seen.get("steps")
    if not isinstance(steps, list):
        raise WireError("steps missing")
    if len(steps) != 1:
        fail("step-count", observed=f"{len(steps)} optimizer steps for one call", expected="1",
             cause="scaler.step called more than once, or never", where="scaler.step(optimizer)")
    batch, max_norm = _batch(case, 1, scale=20.0), _case_max_norm(case)
    _judge_clipped_gradient(steps[0], batch, max_norm, where=_AMP_WHERE)
    _, want_loss = _amp_reference(list(_two_params(steps[0]["params"])), batch, None)
    loss = seen.get("loss")
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.is_floating_point():
        fail("wrong-loss", observed=f"amp_step returned {describe(loss)}", expected="the loss, as a 0-d float tensor",
             cause="returning loss.item() (a host sync each step) or nothing", where="return loss.detach()")
    returned = loss.detach().reshape(()).float()
    if math.isclose(float(returned), float(want_loss) * _INIT_SCALE, rel_tol=1e-3):
        fail("wrong-value", observed=f"amp_step returned {float(returned):.6g}, exactly {_INIT_SCALE:g} (the scale) "
             f"times the batch's loss {float(want_loss):.6g}", expected=f"{float(want_loss):.6g}, the unscaled loss",
             cause="the scaled loss (scaler.scale(loss)) was returned", where="return loss.detach()")
    assert_close("the returned loss", returned, want_loss, atol=1e-4, rtol=1e-3,
                 where="return loss.detach()", cause="the loss returned is not this batch's (unscaled) loss")
    init = _probe_model(case, 2).linear.weight.detach()
    weight = seen.get("inf_weight")
    if not isinstance(weight, torch.Tensor) or weight.shape != init.shape:
        raise WireError("inf_weight malformed")
    if seen.get("inf_steps") != 0 or not torch.equal(weight, init):
        fail("inf-step-applied", observed="an optimizer step ran on infinite gradients", expected="the step skipped",
             cause="optimizer.step() called directly instead of scaler.step()", where="scaler.step(optimizer)")
    scale = seen.get("inf_scale")
    if not isinstance(scale, float) or scale != _INIT_SCALE * 0.5:  # one backoff by 0.5: exact in binary
        fail("missing-update", observed=f"the scale stayed at {scale} after an inf gradient" if scale == _INIT_SCALE
             else f"the scale is {scale!r} after one inf gradient", expected=f"{_INIT_SCALE * 0.5:g}",
             cause="scaler.update() not called" if scale == _INIT_SCALE else "the scale was changed by other calls "
             "than one scaler.update()", where="after scaler.step")
    training = seen.get("training")
    if not isinstance(training, list) or not training:
        raise WireError("forward modes missing")
    if not all(mode is True for mode in training):
        fail("not-train-mode", observed="the forward ran in eval mode (the model was handed over after an "
             "evaluation)", expected="model.train() before the forward", cause="amp_step relies on the mode the "
             "model happens to be in: after an evaluation, dropout stays off and batch norm uses its running "
             "statistics", where="the first line of amp_step")
    return ("training mode, autocast around forward+loss, backward outside, unscale_ then clip, scale/step/update, "
            "inf steps skipped")


_AMP_SOLUTION = '''import torch


def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    x, y = batch
    model.train()
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
_CLIP = "    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n"
_UNSCALE = "    scaler.unscale_(optimizer)\n"
_CLIP_BEFORE_UNSCALE = _AMP_SOLUTION.replace(_UNSCALE + _CLIP, _CLIP + _UNSCALE)

add(
    Drill(
        id="amp-train-step",
        title="An AMP training step with a GradScaler and clipping",
        kind="write",
        topics=("amp", "clipping"),
        difficulty=2,
        prompt="Write amp_step(model, batch, loss_fn, optimizer, scaler, max_norm): one training step with "
        "bf16 autocast on the CPU (torch.autocast('cpu', dtype=torch.bfloat16)), a GradScaler, and gradient "
        "clipping to max_norm. It must skip steps whose gradients are not finite, and return the loss as a "
        "detached tensor. The model's .grad may still hold the previous step's gradients, and the model may "
        "arrive in eval mode (after an evaluation): the step runs in training mode.",
        entry="amp_step",
        starter="import torch\n\n\ndef amp_step(model, batch, loss_fn, optimizer, scaler, max_norm):\n"
        "    raise NotImplementedError\n",
        solution=_AMP_SOLUTION,
        hints=("Autocast covers forward and loss only; the scaler wraps backward, step and update.",
               "model.train(); zero_grad; autocast(forward, loss); scaler.scale(loss).backward(); "
               "scaler.unscale_(opt); clip_grad_norm_; scaler.step(opt); scaler.update()"),
        probe=_probe_amp_step,
        judge=_judge_amp_step,
        nonfinite=("inf_weight",),  # a step applied on infinite gradients leaves NaN weights: the judge names it
        wrong_answers=(
            (_AMP_SOLUTION.replace("    scaler.update()\n", ""), "missing-update"),
            (_AMP_SOLUTION.replace("    optimizer.zero_grad(set_to_none=True)\n", ""), "stale-gradients"),
            (_AMP_SOLUTION.replace("        loss = loss_fn(model(x), y)\n    scaler.scale(loss).backward()\n",
                                   "        loss = loss_fn(model(x), y)\n        scaler.scale(loss).backward()\n"),
             "backward-inside-autocast"),
            (_AMP_SOLUTION.replace(_UNSCALE, ""), "missing-unscale"),
            (_CLIP_BEFORE_UNSCALE, "clip-before-unscale"),
            (_AMP_SOLUTION.replace(_CLIP, ""), "not-clipped"),
            (_AMP_SOLUTION.replace("    scaler.step(optimizer)\n", "    optimizer.step()\n"), "optimizer-step-direct"),
            (_AMP_SOLUTION.replace('    with torch.autocast("cpu", dtype=torch.bfloat16):\n'
                                   "        loss = loss_fn(model(x), y)\n", "    loss = loss_fn(model(x), y)\n"),
             "no-autocast"),
            (_AMP_SOLUTION.replace("    model.train()\n", ""), "not-train-mode"),
        ),
    )
)


def _probe_clip_under_amp(answer: dict, *, case: Case) -> dict:
    amp_step = answer["amp_step"]
    model = _probe_model(case, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: only observe the gradients
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12)
    with StepRecorder(optimizer) as steps:
        amp_step(model, _batch(case, 5, scale=50.0), nn.MSELoss(), optimizer, scaler, _case_max_norm(case))
    return {"steps": _step_dicts(steps.records)}


def _judge_clip_under_amp(seen: dict, *, case: Case) -> str:
    steps = seen.get("steps")
    if not isinstance(steps, list):
        raise WireError("steps missing")
    if len(steps) != 1:
        fail("step-count", observed=f"{len(steps)} optimizer steps", expected="one step",
             cause="scaler.step missing, or called twice", where="scaler.step(optimizer)")
    max_norm = _case_max_norm(case)
    _judge_clipped_gradient(steps[0], _batch(case, 5, scale=50.0), max_norm, where="unscale_, then clip")
    return f"the optimizer sees the unscaled gradient clipped to max_norm={max_norm}"


add(
    Drill(
        id="clipping-under-amp",
        unjudged=("steps/*/params/*",),  # the weights the judge recomputes the gradients from
        title="Bug hunt: clipping under AMP has no effect on the threshold you asked for",
        kind="bughunt",
        topics=("clipping", "amp"),
        difficulty=2,
        prompt="With max_norm=1.0 this AMP step leaves the optimizer seeing gradient norms of about 1/4096 on "
        "exploding batches. Fix amp_step so the optimizer sees gradients clipped to exactly max_norm.",
        entry="amp_step",
        starter=_CLIP_BEFORE_UNSCALE,
        solution=_AMP_SOLUTION,
        hints=("What are the gradients multiplied by when clip_grad_norm_ sees them?",
               "The scaler multiplies the loss by the scale: unscale_ first, then clip."),
        probe=_probe_clip_under_amp,
        judge=_judge_clip_under_amp,
        wrong_answers=(
            (_AMP_SOLUTION.replace(_CLIP, ""), "not-clipped"),
            (_AMP_SOLUTION.replace("clip_grad_norm_(model.parameters(), max_norm)",
                                   "clip_grad_value_(model.parameters(), max_norm)"), "clipped-by-value"),
            (_AMP_SOLUTION.replace(_UNSCALE, ""), "clip-before-unscale"),
        ),
    )
)


# ---------------------------------------------------------------------------------------------------------------
# clipping-with-accumulation


_ACC_SETTINGS = ((30.0, 1.0), (1.0, 1e6))  # (input scale, max_norm): clipping decides; the loss division decides


def _clipping_micro_batches(case: Case, scale: float) -> list[tuple[torch.Tensor, torch.Tensor]]:
    x, y = _batch(case, 6, rows=12)
    return list(zip((x * scale).split(4), (y * scale).split(4), strict=True))


def _stale_grads(case: Case) -> list[torch.Tensor]:
    gen = case_generator(case, 7)
    return [torch.randn(1, 8, generator=gen) * 3, torch.randn(1, generator=gen) * 3]


def _probe_accumulate(answer: dict, *, case: Case) -> dict:
    accumulate = answer["accumulate_and_clip"]
    runs = []
    for scale, max_norm in _ACC_SETTINGS:
        model = _init_linear(nn.Linear(8, 1), case, 8)
        for p, stale in zip(model.parameters(), _stale_grads(case), strict=True):
            p.grad = stale.clone()  # what the previous step left behind
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: only observe the gradients
        with StepRecorder(optimizer) as steps:
            accumulate(model, _clipping_micro_batches(case, scale), nn.MSELoss(), optimizer, max_norm)
        runs.append(_step_dicts(steps.records))
    return {"runs": runs}


def _accumulated(params: tuple[torch.Tensor, torch.Tensor], micro: list, max_norm: float, *, divide: bool = True,
                 clip_each: bool = False, stale: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
    """The gradient one group of micro-batches gives (the reference, or a known mistake)."""
    layer = nn.Linear(8, 1)
    with torch.no_grad():
        layer.weight.copy_(params[0])
        layer.bias.copy_(params[1])
    if stale is not None:
        for p, g in zip(layer.parameters(), stale, strict=True):
            p.grad = g.clone()
    for x, y in micro:
        (nn.functional.mse_loss(layer(x), y) / (len(micro) if divide else 1)).backward()
        if clip_each:
            nn.utils.clip_grad_norm_(layer.parameters(), max_norm)
    nn.utils.clip_grad_norm_(layer.parameters(), max_norm)
    return [layer.weight.grad, layer.bias.grad]


def _judge_accumulate(seen: dict, *, case: Case) -> str:
    runs = seen.get("runs")
    if not isinstance(runs, list) or len(runs) != len(_ACC_SETTINGS):
        raise WireError("runs missing")
    for (scale, max_norm), steps in zip(_ACC_SETTINGS, runs, strict=True):
        micro = _clipping_micro_batches(case, scale)
        if not isinstance(steps, list) or len(steps) != 1:
            fail("step-count", observed=f"{len(steps) if isinstance(steps, list) else steps} optimizer steps for one "
                 f"group of {len(micro)} micro-batches", expected="1", cause="stepping per micro-batch",
                 where="step once, after the last micro-batch")
        step = steps[0]
        if not isinstance(step, dict) or not isinstance(step.get("grads"), list) or None in step["grads"]:
            raise WireError("recorded step malformed")
        params, grads = _two_params(step.get("params")), _two_params(step["grads"])
        want = _accumulated(params, micro, max_norm)
        if all(torch.allclose(g, w, rtol=1e-4, atol=1e-6) for g, w in zip(grads, want, strict=True)):
            continue
        mistakes = (
            ("stale-gradients", dict(stale=_stale_grads(case)), "the gradients left by the previous step were not "
             "cleared: backward adds to .grad", "optimizer.zero_grad(set_to_none=True) before the first micro-batch"),
            ("clipped-per-micro-batch", dict(clip_each=True), "clipping each micro-batch's running sum: the "
             "threshold applies to the whole group's gradient, the one the optimizer steps with",
             "clip once, after the last backward, just before optimizer.step()"),
            ("loss-not-averaged", dict(divide=False), "each micro-batch loss was not divided by the number of "
             "micro-batches: the accumulated gradient is the sum, not the mean", "loss / len(micro_batches)"),
        )
        norm = float(torch.linalg.vector_norm(torch.cat([g.flatten() for g in grads])))
        want_norm = float(torch.linalg.vector_norm(torch.cat([g.flatten() for g in want])))
        for code, how, cause, where in mistakes:
            other = _accumulated(params, micro, max_norm, **how)
            if all(torch.allclose(g, o, rtol=1e-4, atol=1e-6) for g, o in zip(grads, other, strict=True)):
                fail(code, observed=f"the optimizer stepped with a gradient of norm {norm:.4g} (max_norm={max_norm:g})",
                     expected=f"the mean gradient of the group, clipped once: norm {want_norm:.4g}", cause=cause,
                     where=where)
        fail("wrong-accumulated-gradient",
             observed=f"the optimizer stepped with a gradient of norm {norm:.4g} (max_norm={max_norm:g})",
             expected=f"the mean gradient of the group, clipped once: norm {want_norm:.4g}",
             cause="the accumulated gradient is not the mean over micro-batches of fresh gradients",
             where="zero_grad; loss / len(micro_batches) for each; clip once; step once")
    return "grads cleared, loss divided by the group size, one clip and one step per group"


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
        "max_norm. The model's .grad may hold the previous step's gradients when it is called.",
        entry="accumulate_and_clip",
        starter="import torch\n\n\ndef accumulate_and_clip(model, micro_batches, loss_fn, optimizer, max_norm):\n"
        "    raise NotImplementedError\n",
        solution=_ACC_SOLUTION,
        hints=("The clip threshold applies to the gradient the optimizer steps with: the whole group's.",
               "zero_grad first; divide each micro-batch loss by len(micro_batches), backward each, then clip once "
               "and step once."),
        probe=_probe_accumulate,
        judge=_judge_accumulate,
        wrong_answers=(
            (_ACC_SOLUTION.replace("        loss.backward()\n" + _CLIP, "        loss.backward()\n    " + _CLIP),
             "clipped-per-micro-batch"),
            (_ACC_SOLUTION.replace(" / len(micro_batches)", ""), "loss-not-averaged"),
            (_ACC_SOLUTION.replace("    optimizer.zero_grad(set_to_none=True)\n", ""), "stale-gradients"),
            (_ACC_SOLUTION.replace("        loss.backward()\n" + _CLIP + "    optimizer.step()\n",
                                   "        loss.backward()\n    " + _CLIP + "        optimizer.step()\n"),
             "step-count"),
        ),
    )
)


# ---------------------------------------------------------------------------------------------------------------
# amp-skipped-steps: report whether the scaler skipped the step


_SKIP_BATCHES = 8


def _skip_plan(case: Case) -> list[bool]:
    """Which batches overflow once scaled (two of batches 2..7; 0 and 1 are fine, so the scale grows after them)."""
    picks = torch.randperm(_SKIP_BATCHES - 2, generator=case_generator(case, 20))[:2] + 2
    return [i in picks.tolist() for i in range(_SKIP_BATCHES)]


def _skip_batches(case: Case) -> list[tuple[torch.Tensor, torch.Tensor]]:
    batches = []
    for i, huge in enumerate(_skip_plan(case)):
        x, y = _batch(case, 21 + i, rows=8)
        # a loss near 1e36: finite in float32, infinite once multiplied by the scale
        batches.append((x * 1e18, y) if huge else (x, y))
    return batches


def _probe_skipped(answer: dict, *, case: Case) -> dict:
    amp_step = answer["amp_step"]
    model = _init_linear(nn.Linear(8, 1), case, 22)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16, growth_interval=2)
    returned, stepped = [], []
    with StepRecorder(optimizer) as steps:
        for batch in _skip_batches(case):
            before = len(steps.records)
            returned.append(amp_step(model, batch, nn.MSELoss(), optimizer, scaler))
            stepped.append(len(steps.records) - before)
    return {"returned": returned, "stepped": stepped}


def _judge_skipped(seen: dict, *, case: Case) -> str:
    returned, stepped = seen.get("returned"), seen.get("stepped")
    plan = _skip_plan(case)
    if not isinstance(stepped, list) or len(stepped) != len(plan) or not isinstance(returned, list):
        raise WireError("steps or results missing")
    for i, (huge, count) in enumerate(zip(plan, stepped, strict=True)):
        if count != (0 if huge else 1):
            fail("inf-step-applied" if huge else "step-missing",
                 observed=f"batch {i}: {count} optimizer step(s); its scaled gradients are "
                 f"{'infinite' if huge else 'finite'}", expected="0 steps" if huge else "1 step",
                 cause="optimizer.step() called directly, or the scaler's step not called",
                 where="scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()")
    if len(returned) != len(plan) or not all(isinstance(r, bool) for r in returned):
        fail("not-a-bool", observed=f"amp_step returned {[type(r).__name__ for r in returned]}",
             expected="a Python bool per call", cause="returning a tensor or None", where="the return statement")
    for i, (huge, got) in enumerate(zip(plan, returned, strict=True)):
        if got == huge:
            fail("skip-not-detected" if huge else "taken-reported-skipped",
                 observed=f"batch {i}: amp_step returned {got}, but the scaler "
                 f"{'skipped' if huge else 'took'} that step", expected=f"{not huge}",
                 cause="a finite loss does not mean finite scaled gradients; and the scale also changes when it "
                 "GROWS after growth_interval good steps: a skip is the scale going DOWN"
                 if huge else "the scale also changes when it grows after growth_interval good steps: only a "
                 "decrease means a skipped step",
                 where="scale = scaler.get_scale() before scaler.update(); skipped = scaler.get_scale() < scale")
    return "reports exactly the steps the scaler skipped (and not the ones where the scale grew)"


_SKIP_SOLUTION = '''import torch


def amp_step(model, batch, loss_fn, optimizer, scaler):
    x, y = batch
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scale = scaler.get_scale()
    scaler.update()
    return not scaler.get_scale() < scale  # update() lowers the scale only after a skipped step
'''

add(
    Drill(
        id="amp-skipped-steps",
        title="Did the GradScaler skip this step?",
        kind="write",
        topics=("amp",),
        difficulty=2,
        prompt="Write amp_step(model, batch, loss_fn, optimizer, scaler) -> bool: one bf16-autocast training step "
        "with a GradScaler (no clipping) that returns True when the optimizer step was applied and False when the "
        "scaler skipped it because the scaled gradients were not finite (a scheduler is then not stepped). The "
        "scaler may grow its scale after a run of good steps (growth_interval).",
        entry="amp_step",
        starter="import torch\n\n\ndef amp_step(model, batch, loss_fn, optimizer, scaler):\n"
        "    raise NotImplementedError\n",
        solution=_SKIP_SOLUTION,
        hints=("scaler.step(optimizer) skips silently; what does scaler.update() do to the scale after a skip?",
               "Read scaler.get_scale() before update(); after a skip update() multiplies it by backoff_factor "
               "(0.5), after growth_interval good steps by growth_factor (2)."),
        probe=_probe_skipped,
        judge=_judge_skipped,
        wrong_answers=(
            (_SKIP_SOLUTION.replace("    return not scaler.get_scale() < scale  # update() lowers the scale only "
                                    "after a skipped step\n", "    return True\n"), "skip-not-detected"),
            (_SKIP_SOLUTION.replace("not scaler.get_scale() < scale", "scaler.get_scale() == scale"),
             "taken-reported-skipped"),
            (_SKIP_SOLUTION.replace("    return not scaler.get_scale() < scale  # update() lowers the scale only "
                                    "after a skipped step\n", "    return bool(torch.isfinite(loss))\n"),
             "skip-not-detected"),
        ),
    )
)


# ---------------------------------------------------------------------------------------------------------------
# amp-loss-in-fp32: a hand-written loss must not run in bf16


_SMOOTHING = 0.1


_LOSS_BATCHES = 3  # three batches: a bf16 loss that lands near the float32 one by chance cannot do it three times


def _fp32_loss_classifier(case: Case, i: int) -> nn.Linear:
    gen = case_generator(case, 30 + 2 * i)
    layer = nn.Linear(16, 10)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(10, 16, generator=gen))
        layer.bias.copy_(torch.randn(10, generator=gen))
    return layer


def _class_batch(case: Case, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = case_generator(case, 31 + 2 * i)
    return torch.randn(64, 16, generator=gen), torch.randint(0, 10, (64,), generator=gen)


def _probe_loss_fp32(answer: dict, *, case: Case) -> dict:
    losses, autocast = [], []
    for i in range(_LOSS_BATCHES):
        model = _fp32_loss_classifier(case, i)
        x, y = _class_batch(case, i)
        with ForwardRecorder(model) as forwards:
            losses.append(answer["smoothed_loss"](model, x, y))
        autocast += [r.autocast for r in forwards.records]
    return {"losses": losses, "autocast": autocast}


def _judge_loss_fp32(seen: dict, *, case: Case) -> str:
    autocast, losses = seen.get("autocast"), seen.get("losses")
    if not isinstance(autocast, list) or not isinstance(losses, list) or len(losses) != _LOSS_BATCHES:
        raise WireError("records missing")
    if not autocast or not all(a is True for a in autocast):
        fail("no-autocast", observed="the model's forward ran outside autocast", expected="the forward under "
             "torch.autocast('cpu', dtype=torch.bfloat16)", cause="the fix removed autocast altogether: the matmuls "
             "then run in float32 and lose the bf16 speed-up", where="keep model(x) inside the with block")
    for i, loss in enumerate(losses):
        model, (x, y) = _fp32_loss_classifier(case, i), _class_batch(case, i)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(x)
        with torch.no_grad():
            want = nn.functional.cross_entropy(logits.float(), y, label_smoothing=_SMOOTHING)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            fail("not-a-tensor", observed=f"smoothed_loss returned {type(loss).__name__}", expected="a 0-d tensor",
                 cause="returning loss.item() or a list", where="the return statement")
        loss = loss.detach()
        if loss.dtype != torch.float32:
            fail("loss-not-fp32", observed=f"the loss is {loss.dtype}", expected="torch.float32",
                 cause="log_softmax, exp and sum run in the dtype of their input under CPU autocast: on bf16 logits "
                 "they keep 8 significant bits", where="compute the loss from logits.float(), outside autocast")
        if not torch.allclose(loss.reshape(()).double(), want.double(), rtol=2e-5, atol=1e-6):
            fail("loss-computed-in-bf16", observed=f"batch {i}: loss {float(loss):.6f}", expected=f"{float(want):.6f} "
                 "(the smoothed cross-entropy of the bf16 logits, computed in float32)",
                 cause="the loss was computed in bf16 and only its result converted (.float() at the end): the "
                 "rounding already happened in log_softmax", where="upcast the logits, not the loss")
    return "forward in bf16, loss computed in float32 from the upcast logits"


_LOSS_STARTER = '''import torch


def smoothed_loss(model, x, targets, smoothing=0.1):
    """Symptom: this loss differs from the float32 one by ~1e-2 and training on it stalls early."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(x)
        log_probs = logits.log_softmax(dim=-1)
        nll = -log_probs.gather(1, targets[:, None]).squeeze(1)
        uniform = -log_probs.mean(dim=-1)
        loss = ((1 - smoothing) * nll + smoothing * uniform).mean()
    return loss
'''
_LOSS_SOLUTION = _LOSS_STARTER.replace(
    "        logits = model(x)\n        log_probs = logits.log_softmax(dim=-1)\n",
    "        logits = model(x)\n    log_probs = logits.float().log_softmax(dim=-1)  # the loss in float32\n").replace(
    "        nll = -log_probs", "    nll = -log_probs").replace("        uniform =", "    uniform =").replace(
    "        loss = ((1", "    loss = ((1")

add(
    Drill(
        id="amp-loss-in-fp32",
        title="Bug hunt: a hand-written loss under bf16 autocast",
        kind="bughunt",
        topics=("amp",),
        difficulty=2,
        prompt="This label-smoothed cross-entropy runs under bf16 autocast and its value is off by about 1e-2 "
        "from the float32 one. Keep the forward pass in bf16 and make the loss exact in float32.",
        entry="smoothed_loss",
        starter=_LOSS_STARTER,
        solution=_LOSS_SOLUTION,
        hints=("Under CPU autocast, which dtype do log_softmax and mean produce on bf16 logits?",
               "End the autocast block after model(x) and compute the loss from logits.float()."),
        probe=_probe_loss_fp32,
        judge=_judge_loss_fp32,
        wrong_answers=(
            (_LOSS_STARTER.replace("    return loss\n", "    return loss.float()\n"), "loss-computed-in-bf16"),
            (_LOSS_SOLUTION.replace('    with torch.autocast("cpu", dtype=torch.bfloat16):\n'
                                    '        logits = model(x)\n', "    logits = model(x)\n"), "no-autocast"),
        ),
    )
)


# ---------------------------------------------------------------------------------------------------------------
# amp-loop-three-bugs (difficulty 3)


_LOOP_EPOCHS, _LOOP_BATCHES, _LOOP_MAX_LR = 3, 4, 0.05


def _loop_batches(case: Case) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [_batch(case, 40 + i, rows=8, scale=10.0) for i in range(_LOOP_BATCHES)]


def _onecycle(optimizer: torch.optim.Optimizer, total: int) -> torch.optim.lr_scheduler.OneCycleLR:
    return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=_LOOP_MAX_LR, total_steps=total)


def _onecycle_lrs(total: int) -> list[float]:
    """The LR OneCycleLR gives each of `total` optimizer steps, stepped once per batch."""
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=_LOOP_MAX_LR, momentum=0.9)
    scheduler = _onecycle(optimizer, total)
    lrs = []
    for _ in range(total):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return lrs


def _probe_amp_loop(answer: dict, *, case: Case) -> dict:
    model = _probe_model(case, 41)
    optimizer = torch.optim.SGD(model.parameters(), lr=_LOOP_MAX_LR, momentum=0.9)
    scheduler = _onecycle(optimizer, _LOOP_EPOCHS * _LOOP_BATCHES)
    scaler = RecordingScaler()
    with StepRecorder(optimizer) as steps:
        losses = answer["train"](model, _loop_batches(case), optimizer, scheduler, scaler, nn.MSELoss(),
                                 _LOOP_EPOCHS, _case_max_norm(case))
    return {"forward_autocast": model.forward_autocast, "backward_autocast": model.backward_autocast,
            "steps": _step_dicts(steps.records), "losses": losses}


def _judge_loop(seen: dict, *, case: Case) -> str:
    _judge_autocast(seen)
    steps, total = seen.get("steps"), _LOOP_EPOCHS * _LOOP_BATCHES
    if not isinstance(steps, list):
        raise WireError("steps missing")
    if len(steps) != total:
        fail("step-count", observed=f"{len(steps)} optimizer steps", expected=f"{total} ({_LOOP_EPOCHS} epochs of "
             f"{_LOOP_BATCHES} batches; no gradient here is infinite)", cause="steps skipped or repeated",
             where="one scaler.step(optimizer) per batch")
    batches, max_norm = _loop_batches(case), _case_max_norm(case)
    for i, step in enumerate(steps):
        _judge_clipped_gradient(step, batches[i % _LOOP_BATCHES], max_norm, where=_AMP_WHERE,
                                label=f"step {i} (epoch {i // _LOOP_BATCHES}, batch {i % _LOOP_BATCHES})")
    lrs = [s.get("lrs") for s in steps]
    if not all(isinstance(lr, list) and len(lr) == 1 and isinstance(lr[0], float) for lr in lrs):
        raise WireError("recorded learning rates malformed")
    got, want = [lr[0] for lr in lrs], _onecycle_lrs(total)
    if not all(math.isclose(g, w, rel_tol=1e-6, abs_tol=1e-12) for g, w in zip(got, want, strict=True)):
        per_epoch = [want[e] for e in range(_LOOP_EPOCHS) for _ in range(_LOOP_BATCHES)]
        per_epoch_seen = all(math.isclose(g, w, rel_tol=1e-6) for g, w in zip(got, per_epoch, strict=True))
        fail("scheduler-per-epoch" if per_epoch_seen else "wrong-schedule",
             observed=f"learning rate at each step: {[round(v, 5) for v in got]}",
             expected=f"{[round(v, 5) for v in want]}",
             cause="OneCycleLR was built with total_steps = epochs * len(batches): it expects one step per batch; "
             "stepped once per epoch, it stays in its warm-up for the whole run",
             where="scheduler.step() right after scaler.step(optimizer), inside the batch loop")
    losses = seen.get("losses")
    if not isinstance(losses, torch.Tensor) or losses.shape != (total,):
        fail("wrong-losses", observed=f"train returned {type(losses).__name__} "
             f"{tuple(losses.shape) if isinstance(losses, torch.Tensor) else ''}", expected=f"a tensor of {total} "
             "losses", cause="the losses are not collected per step", where="losses.append(loss.detach())")
    for i, step in enumerate(steps):
        _, want_loss = _amp_reference(list(_two_params(step["params"])), batches[i % _LOOP_BATCHES], None)
        assert_close(f"the loss of step {i}", losses[i].detach().float(), want_loss, atol=1e-4, rtol=1e-3,
                     where="losses.append(loss.detach())", cause="the recorded loss is not the step's batch loss")
    return "backward outside autocast, unscale_ before clipping, OneCycleLR stepped per batch"


_LOOP_STARTER = '''import torch


def train(model, batches, optimizer, scheduler, scaler, loss_fn, epochs, max_norm):
    """Mixed-precision training: bf16 autocast on the CPU, a GradScaler, gradient clipping to max_norm.

    scheduler is a OneCycleLR built with total_steps = epochs * len(batches).
    Returns the loss of every step, as one tensor.
    Symptoms: the loss barely moves, the learning rate hardly leaves its starting value,
    and the gradient norms the optimizer sees are far below max_norm.
    """
    losses = []
    for epoch in range(epochs):
        model.train()
        for x, y in batches:
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                output = model(x)
                loss = loss_fn(output, y)
                scaler.scale(loss).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.unscale_(optimizer)
            scaler.step(optimizer)
            scaler.update()
            losses.append(loss.detach())
        scheduler.step()
    return torch.stack(losses)
'''
_BUG_BACKWARD = ("                loss = loss_fn(output, y)\n                scaler.scale(loss).backward()\n",
                 "                loss = loss_fn(output, y)\n            scaler.scale(loss).backward()\n")
_BUG_CLIP = ("            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n"
             "            scaler.unscale_(optimizer)\n",
             "            scaler.unscale_(optimizer)\n"
             "            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n")
_BUG_SCHEDULER = ("            scaler.update()\n            losses.append(loss.detach())\n"
                  "        scheduler.step()\n",
                  "            scaler.update()\n            scheduler.step()\n"
                  "            losses.append(loss.detach())\n")


def _amp_loop_fixed(*bugs: tuple[str, str]) -> str:
    return with_fixes(_LOOP_STARTER, *bugs)


add(
    Drill(
        id="amp-loop-three-bugs",
        title="Bug hunt: an AMP training loop with three bugs",
        kind="bughunt",
        topics=("amp", "clipping", "schedulers"),
        difficulty=3,
        prompt="train(model, batches, optimizer, scheduler, scaler, loss_fn, epochs, max_norm) trains with bf16 "
        "autocast on the CPU, a GradScaler, gradient clipping to max_norm and a OneCycleLR built with "
        "total_steps = epochs * len(batches). The run goes wrong in three ways: the logged learning rate hardly "
        "leaves its starting value for the whole run, the gradient norms the optimizer steps with stay far below "
        "max_norm even on batches whose true gradient norm is larger, and a backward hook finds autocast still "
        "enabled while the gradients are computed. Three bugs cause this; fix all three (the check reports the "
        "first problem it observes).",
        entry="train",
        starter=_LOOP_STARTER,
        solution=_amp_loop_fixed(_BUG_BACKWARD, _BUG_CLIP, _BUG_SCHEDULER),
        hints=("One bug is about where backward runs, one about what clip_grad_norm_ sees, one about how often "
               "the scheduler steps.",
               "backward outside the with block; unscale_ before clip_grad_norm_; OneCycleLR's total_steps counts "
               "batches, so step it after every optimizer step."),
        probe=_probe_amp_loop,
        judge=_judge_loop,
        wrong_answers=(
            (_amp_loop_fixed(_BUG_BACKWARD, _BUG_CLIP), "scheduler-per-epoch"),
            (_amp_loop_fixed(_BUG_BACKWARD, _BUG_SCHEDULER), "clip-before-unscale"),
            (_amp_loop_fixed(_BUG_CLIP, _BUG_SCHEDULER), "backward-inside-autocast"),
            (_amp_loop_fixed(_BUG_BACKWARD, _BUG_SCHEDULER).replace(_BUG_CLIP[0],
                                                                     "            scaler.unscale_(optimizer)\n"),
             "not-clipped"),
        ),
    )
)


# ---------------------------------------------------------------------------------------------------------------
# clipping-total-norm: log the norm clip_grad_norm_ returns


def _norm_model(case: Case) -> nn.Sequential:
    model = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
    gen = case_generator(case, 60)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=gen) * 2
    return model


def _probe_total_norm(answer: dict, *, case: Case) -> dict:
    model, max_norm = _norm_model(case), _case_max_norm(case, 61)
    with HostSyncCounter() as syncs:
        norm = answer["clip_and_norm"](model, max_norm)
    return {"norm": norm, "grads": [p.grad for p in model.parameters()], "syncs": syncs.calls}


def _judge_total_norm(seen: dict, *, case: Case) -> str:
    model, max_norm = _norm_model(case), _case_max_norm(case, 61)
    grads = [p.grad.clone() for p in model.parameters()]
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    syncs = seen.get("syncs")
    if not isinstance(syncs, list):
        raise WireError("sync records missing")
    if syncs:
        fail("host-sync", observed=f"clip_and_norm synced with the host ({', '.join(map(str, syncs[:3]))})",
             expected="the norm returned as a tensor, read later (every N steps) by the logger",
             cause="calling .item() or float() on the norm each step makes the CPU wait for the GPU",
             where="return the tensor clip_grad_norm_ returns")
    norm = seen.get("norm")
    if not isinstance(norm, torch.Tensor) or norm.numel() != 1:
        fail("not-a-tensor", observed=f"clip_and_norm returned {type(norm).__name__}", expected="a 0-d tensor",
             cause="returning a Python number or nothing", where="return the tensor clip_grad_norm_ returns")
    norm = norm.detach()
    value = float(norm)
    if math.isclose(value, max_norm, rel_tol=1e-4) or value < float(total) * 0.999 and value <= max_norm * 1.0001:
        fail("norm-after-clip", observed=f"returned norm {value:.5g} (max_norm={max_norm})",
             expected=f"{float(total):.5g}, the norm before clipping",
             cause="the norm was measured after clipping: it is min(norm, max_norm) and hides every explosion",
             where="clip_grad_norm_ returns the total norm before clipping: keep its return value")
    sum_of_norms = float(sum(torch.linalg.vector_norm(g) for g in grads))
    if math.isclose(value, sum_of_norms, rel_tol=1e-4):
        fail("wrong-norm", observed=f"returned norm {value:.5g}", expected=f"{float(total):.5g}",
             cause="the sum of per-parameter norms is not the total norm: the total is the norm of all gradients "
             "concatenated, sqrt(sum of squared norms)", where="torch.linalg.vector_norm of the per-parameter norms")
    assert_close("the returned norm", norm.reshape(()).float(), total, atol=1e-5, rtol=1e-4, where="the return value",
                 cause="the total L2 norm over all parameters' gradients, before clipping")
    got = seen.get("grads")
    if not isinstance(got, list) or len(got) != len(grads):
        raise WireError("grads missing")
    for i, (g, p) in enumerate(zip(got, model.parameters(), strict=True)):
        assert_close(f"gradient {i} after the call", g, p.grad, atol=1e-6, rtol=1e-4,
                     where="torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)",
                     cause="the gradients are not clipped in place to max_norm")
    return "clips in place and returns the pre-clip total norm as a tensor, without a host sync"


_NORM_SOLUTION = '''import torch


def clip_and_norm(model, max_norm):
    return torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
'''

add(
    Drill(
        id="clipping-total-norm",
        title="Log the gradient norm you clip",
        kind="write",
        topics=("clipping", "debugging"),
        difficulty=1,
        prompt="Write clip_and_norm(model, max_norm): clip the model's gradients in place to a total L2 norm of "
        "max_norm and return the total norm BEFORE clipping, as a tensor (the logger reads it every 100 steps: no "
        "host sync here).",
        entry="clip_and_norm",
        starter="import torch\n\n\ndef clip_and_norm(model, max_norm):\n    raise NotImplementedError\n",
        solution=_NORM_SOLUTION,
        hints=("Read the documentation of torch.nn.utils.clip_grad_norm_: what does it return?",
               "return torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)"),
        probe=_probe_total_norm,
        judge=_judge_total_norm,
        wrong_answers=(
            ("import torch\n\ndef clip_and_norm(model, max_norm):\n"
             "    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n"
             "    return torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))\n",
             "norm-after-clip"),
            ("import torch\n\ndef clip_and_norm(model, max_norm):\n"
             "    norm = sum(p.grad.norm() for p in model.parameters())\n"
             "    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    return norm\n", "wrong-norm"),
            ("import torch\n\ndef clip_and_norm(model, max_norm):\n"
             "    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n"
             "    return torch.tensor(norm.item())\n", "host-sync"),
        ),
    )
)


# ---------------------------------------------------------------------------------------------------------------
# clipping-per-group


def _per_group_model(case: Case) -> nn.Sequential:
    model = nn.Sequential(nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 2))
    gen = case_generator(case, 70)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=gen) * 3
    return model


def _group_optimizer(model: nn.Sequential, case: Case) -> torch.optim.Optimizer:
    small = round(0.2 + float(torch.rand((), generator=case_generator(case, 71))) * 0.5, 3)
    return torch.optim.SGD([
        {"params": list(model[0].parameters()), "lr": 0.01, "max_norm": small},
        {"params": list(model[2].parameters()), "lr": 0.1, "max_norm": small * 4},
    ])


def _probe_per_group(answer: dict, *, case: Case) -> dict:
    model = _per_group_model(case)
    optimizer = _group_optimizer(model, case)
    norms = answer["clip_per_group"](optimizer)
    return {"norms": norms, "grads": [p.grad for p in model.parameters()]}


def _judge_per_group(seen: dict, *, case: Case) -> str:
    def clipped(how: str) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        model = _per_group_model(case)
        groups = _group_optimizer(model, case).param_groups
        if how == "together":
            norms = [nn.utils.clip_grad_norm_(model.parameters(), groups[0]["max_norm"])]
        elif how == "per-parameter":
            norms = [nn.utils.clip_grad_norm_([p], g["max_norm"]) for g in groups for p in g["params"]]
        else:
            norms = [nn.utils.clip_grad_norm_(g["params"], g["max_norm"]) for g in groups]
        return norms, [p.grad for p in model.parameters()]

    want_norms, want = clipped("per-group")
    got = seen.get("grads")
    if not isinstance(got, list) or len(got) != len(want) or not all(isinstance(g, torch.Tensor) for g in got):
        raise WireError("grads missing")
    if any(g.shape != w.shape for g, w in zip(got, want, strict=True)):
        raise WireError("grads of the wrong shapes")
    if not all(torch.allclose(g, w, rtol=1e-4, atol=1e-6) for g, w in zip(got, want, strict=True)):
        for how, code, cause in (
            ("together", "clipped-together", "all parameters were clipped as one vector with one threshold: each "
             "group has its own max_norm and its own norm"),
            ("per-parameter", "clipped-per-parameter", "each parameter tensor was clipped on its own: the norm to "
             "clip is the group's total norm, over all its parameters"),
        ):
            if all(torch.allclose(g, o, rtol=1e-4, atol=1e-6) for g, o in zip(got, clipped(how)[1], strict=True)):
                fail(code, observed="the gradients match clipping " + how.replace("-", " "),
                     expected="each group's gradients clipped to that group's max_norm", cause=cause,
                     where="for group in optimizer.param_groups: clip_grad_norm_(group['params'], group['max_norm'])")
        fail("wrong-gradient", observed="the gradients after the call are not clipped per group",
             expected="each group's gradients scaled to at most that group's max_norm",
             cause="a threshold or a norm taken from the wrong group", where="group['params'], group['max_norm']")
    norms = seen.get("norms")
    if not isinstance(norms, list) or len(norms) != len(want_norms):
        fail("wrong-norms", observed=f"clip_per_group returned {type(norms).__name__}",
             expected=f"a list of {len(want_norms)} norms, one per group", cause="the norms are not collected",
             where="norms.append(clip_grad_norm_(...))")
    for i, (n, w) in enumerate(zip(norms, want_norms, strict=True)):
        if isinstance(n, torch.Tensor) and n.numel() == 1 and math.isclose(float(n.detach()), float(w), rel_tol=1e-4):
            continue
        fail("wrong-norms", observed=f"the norm returned for group {i} is {n!r}",
             expected=f"{float(w):.5g} (its total norm before clipping, as a tensor)",
             cause="measuring the norm after clipping, or a number instead of clip_grad_norm_'s tensor",
             where="keep what clip_grad_norm_ returns for each group")
    return "each parameter group clipped to its own max_norm, pre-clip norms returned"


_GROUP_SOLUTION = '''import torch


def clip_per_group(optimizer):
    norms = []
    for group in optimizer.param_groups:
        norms.append(torch.nn.utils.clip_grad_norm_(group["params"], group["max_norm"]))
    return norms
'''

add(
    Drill(
        id="clipping-per-group",
        title="Clip each parameter group to its own threshold",
        kind="write",
        topics=("clipping", "finetuning"),
        difficulty=2,
        prompt="When fine-tuning, the backbone and the new head live in separate optimizer param groups, and each "
        "group carries its own threshold under the key 'max_norm'. Write clip_per_group(optimizer): clip each "
        "group's gradients (in place) to its own max_norm, and return the list of the groups' total norms "
        "before clipping (tensors).",
        entry="clip_per_group",
        starter="import torch\n\n\ndef clip_per_group(optimizer):\n    raise NotImplementedError\n",
        solution=_GROUP_SOLUTION,
        hints=("optimizer.param_groups is a list of dicts; extra keys you add to a group stay there.",
               "for group in optimizer.param_groups: clip_grad_norm_(group['params'], group['max_norm'])"),
        probe=_probe_per_group,
        judge=_judge_per_group,
        wrong_answers=(
            ("import torch\n\ndef clip_per_group(optimizer):\n"
             "    params = [p for g in optimizer.param_groups for p in g['params']]\n"
             "    return [torch.nn.utils.clip_grad_norm_(params, optimizer.param_groups[0]['max_norm'])]\n",
             "clipped-together"),
            ("import torch\n\ndef clip_per_group(optimizer):\n    norms = []\n"
             "    for group in optimizer.param_groups:\n        for p in group['params']:\n"
             "            norms.append(torch.nn.utils.clip_grad_norm_([p], group['max_norm']))\n    return norms\n",
             "clipped-per-parameter"),
            (_GROUP_SOLUTION.replace(
                '        norms.append(torch.nn.utils.clip_grad_norm_(group["params"], group["max_norm"]))\n',
                '        torch.nn.utils.clip_grad_norm_(group["params"], group["max_norm"])\n'
                '        norms.append(torch.linalg.vector_norm(\n'
                '            torch.stack([p.grad.norm() for p in group["params"]])))\n'),
             "wrong-norms"),
        ),
    )
)


# ---------------------------------------------------------------------------------------------------------------
# explain drills


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
        question="Which mixed-precision recipe needs a GradScaler to train reliably?",
        options=(
            ("bf16 only: its short mantissa loses small gradients",
             "bf16's 8 bits of mantissa cost precision, not range: a scale factor cannot restore lost digits"),
            ("both bf16 and fp16: any 16-bit gradient needs it",
             "bf16 has fp32's 8 exponent bits, so small gradients do not underflow: scaling adds nothing"),
            ("fp16 only: its narrow range flushes small gradients",
             "right: fp16's smallest normal is ~6e-5 (subnormal ~6e-8); scaling the loss moves gradients into range"),
            ("neither: autocast keeps the gradients in fp32 already",
             "parameters' .grad are fp32, but the backward of fp16 ops computes fp16 intermediates that underflow"),
        ),
        key="c",
        hints=("Compare the exponent bits of fp16 and bf16.",
               "fp16 underflows below ~6e-8; bf16 has fp32's exponent range."),
        experiment=_why_scaler_experiment,
    )
)


def _why_clip_rnn_experiment() -> None:
    gen = torch.Generator().manual_seed(0)
    rnn = nn.RNN(1, 32, batch_first=True)
    with torch.no_grad():
        rnn.weight_hh_l0.mul_(3.0)
    x = torch.randn(4, 100, 1, generator=gen)
    out, _ = rnn(x)
    out[:, -1].sum().backward()
    print(f"gradient norm of a 100-step RNN with a large recurrent matrix: {rnn.weight_hh_l0.grad.norm():.3g}")
    print("the gradient is a product of 100 Jacobians: it explodes (or vanishes) geometrically with length.")


add(
    multiple_choice(
        id="clipping-why-rnn",
        title="Why clip gradients in sequence models?",
        topics=("clipping", "sequences"),
        difficulty=1,
        question="Why are recurrent models usually trained with gradient clipping?",
        options=(
            ("to save memory: clipped gradients take fewer bytes",
             "clipping rescales values in place; a tensor's size does not depend on its values"),
            ("to make training deterministic from run to run",
             "determinism comes from seeds and deterministic kernels; clipping changes no source of randomness"),
            ("clipping speeds up the forward pass of the recurrent layers",
             "clipping touches gradients after backward; the forward pass is unchanged"),
            ("BPTT multiplies many Jacobians, so gradients can explode",
             "right: over T steps the gradient is a product of T Jacobians and grows geometrically; one step can "
             "wreck the weights unless its norm is capped"),
        ),
        key="d",
        hints=("Think about what the chain rule does over 100 time steps.",
               "Repeated multiplication by a matrix with norm > 1."),
        experiment=_why_clip_rnn_experiment,
    )
)


def _autocast_dtypes_experiment() -> None:
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(4, 8, generator=gen), torch.randn(8, 8, generator=gen)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ w
        z = y + x
        print(f"inside autocast: y = x @ w is {y.dtype}; z = y + x is {z.dtype}")
    print("matmul is on autocast's lower-precision list; add is not: it follows type promotion (bf16 + fp32 -> fp32)")


add(
    multiple_choice(
        id="amp-autocast-op-dtypes",
        title="Which dtype does each op produce under autocast?",
        topics=("amp",),
        difficulty=2,
        question="x and w are float32. Inside torch.autocast('cpu', dtype=torch.bfloat16) you compute y = x @ w "
        "and then z = y + x. What are the dtypes of y and z?",
        options=(
            ("y is bfloat16 and z is bfloat16",
             "add is not on autocast's cast lists: it follows type promotion, and bf16 + fp32 promotes to fp32"),
            ("y is bfloat16 and z is float32",
             "right: matmul is on the lower-precision list, so y is bf16; add just promotes bf16 + fp32 to fp32"),
            ("y is float32 and z is float32",
             "matmul is exactly the kind of op autocast runs in bf16: y comes out bf16"),
            ("y is float32 and z is bfloat16",
             "matmul runs in bf16 under autocast, and nothing would turn an fp32 sum into bf16"),
        ),
        key="b",
        hints=("Autocast casts only the ops on its lists; the rest keep ordinary type promotion.",
               "matmul: lower-precision list. add: no list, promotion rules."),
        experiment=_autocast_dtypes_experiment,
    )
)


def _master_weights_experiment() -> None:
    for dtype in (torch.bfloat16, torch.float32):
        w = torch.tensor(1.0, dtype=dtype)
        for _ in range(100):
            w = w + torch.tensor(1e-3, dtype=dtype)
        print(f"{str(dtype):15s} 1.0 plus 100 updates of 1e-3 = {w.item():.4f}")
    print("bf16 keeps 8 significant bits: near 1.0 its spacing is 2^-7 = 0.0078, so an update of 1e-3 rounds away.")


add(
    multiple_choice(
        id="amp-bf16-master-weights",
        title="Why keep float32 weights under bf16 autocast?",
        topics=("amp",),
        difficulty=2,
        question="A weight equal to 1.0 receives an update of +1e-3 at every step. If the weight itself were "
        "stored in bfloat16, what would it be after 100 steps?",
        options=(
            ("about 1.1, the same as in float32",
             "that needs a spacing smaller than 1e-3 near 1.0; bf16's is 2^-7 = 0.0078"),
            ("infinite: bf16 overflows after repeated additions",
             "bf16 has fp32's exponent range (max ~3e38); 1.1 is nowhere near it"),
            ("still 1.0: each +1e-3 rounds back to 1.0 in bf16",
             "right: bf16 has 8 significant bits, so 1.001 rounds to 1.0; that is why autocast keeps the weights "
             "(and the optimizer's update) in float32"),
            ("about 1.008: bf16 rounds the first update up to one spacing",
             "round-to-nearest sends 1.001 down to 1.0, not up to 1.0078, and it does so at every step"),
        ),
        key="c",
        hints=("How many significant bits does bfloat16 keep? What is the spacing of representable numbers near 1?",
               "Spacing near 1 is 2^-7 ≈ 0.0078: anything below half of it rounds away."),
        experiment=_master_weights_experiment,
    )
)


def _value_vs_norm_experiment() -> None:
    for clip in ("value", "norm"):
        p = nn.Parameter(torch.zeros(2))
        p.grad = torch.tensor([3.0, 4.0])
        if clip == "value":
            nn.utils.clip_grad_value_([p], 1.0)
        else:
            nn.utils.clip_grad_norm_([p], 1.0)
        print(f"clip_grad_{clip}_(1.0) on [3, 4]: {p.grad.tolist()}")
    print("value clipping caps each element (direction changes); norm clipping rescales the whole vector.")


add(
    multiple_choice(
        id="clipping-value-vs-norm",
        title="clip_grad_value_ or clip_grad_norm_?",
        topics=("clipping",),
        difficulty=1,
        question="A parameter's gradient is [3.0, 4.0]. What do clip_grad_value_(params, 1.0) and "
        "clip_grad_norm_(params, 1.0) each leave in it?",
        options=(
            ("both leave [0.6, 0.8]: either rescales the whole vector",
             "only the norm version rescales; value clipping caps each element on its own"),
            ("value: [3.0, 4.0] unchanged; norm: [0.6, 0.8]",
             "clip_grad_value_ caps every element whose magnitude exceeds 1.0, so both elements change"),
            ("value: [1.0, 1.0]; norm: [1.0, 1.0] as well",
             "norm clipping divides by the norm (5) and keeps the direction: [0.6, 0.8]"),
            ("value: [1.0, 1.0]; norm: [0.6, 0.8]",
             "right: value clipping caps each element (and turns the direction); norm clipping scales the vector "
             "to norm 1 and keeps its direction"),
        ),
        key="d",
        hints=("One works element by element, the other on the vector's length.",
               "The norm of [3, 4] is 5."),
        experiment=_value_vs_norm_experiment,
    )
)
