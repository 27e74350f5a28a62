"""AMP drills: a step under autocast and a GradScaler (clipped), skipped steps, the loss in fp32, a loop with three
bugs."""

from __future__ import annotations

import torch
from torch import nn

from harness.contract import expect
from harness.contract.case import Case
from harness.contract.compare import close_values, isclose_number, isclose_numbers, malformed, same_values
from harness.contract.failure import fail
from harness.contract.wire import describe
from harness.drills.bank.amp_clipping import (
    LOOP_BATCHES,
    LOOP_EPOCHS,
    LOOP_MAX_LR,
    LOOP_STARTER,
    LOSS_BATCHES,
    LOSS_STARTER,
    case_max_norm,
    class_batch,
    fp32_loss_classifier,
    loop_batches,
    onecycle,
    probe_model,
    regression_batch,
    skip_plan,
)
from harness.drills.core import Answers, add_judge
from harness.drills.support import edited, with_fixes
from harness.judges.drills.amp_clipping.common import two_params
from harness.judges.drills.whys import add_answers

_INIT_SCALE = 2.0**10


def _amp_reference(params: list, batch: tuple[torch.Tensor, torch.Tensor], max_norm: float | None,
                   ) -> tuple[list[torch.Tensor], torch.Tensor]:
    """(gradients the optimizer should see, loss) for a Linear(8, 1) at `params`: bf16 autocast forward and
    loss, backward outside autocast, clipped to max_norm (None: not clipped)."""
    weight, bias = two_params(params)
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


def _judge_clipped_gradient(step: object, batch: tuple[torch.Tensor, torch.Tensor], max_norm: float,
                            where: str, label: str = "the step") -> None:
    """Fail unless the gradient the optimizer stepped with is the unscaled gradient, clipped to max_norm."""
    if not isinstance(step, dict):
        malformed("a recorded step is not a dict")
    params = two_params(step.get("params"))
    grads = step.get("grads")
    if not isinstance(grads, list) or any(g is None for g in grads):
        fail("missing-gradient", observed=f"at {label} some parameter had no gradient",
             expected="a gradient on every parameter", cause="backward not called, or grads cleared before the step",
             where=where)
    seen = two_params(grads)
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
        expect.close(f"the {name} gradient at {label}", got, ref, atol=1e-5, rtol=2e-3, where=where,
                     cause="the gradient is not the bf16-autocast gradient of this batch's loss, unscaled and "
                     "clipped to max_norm")


_SCALER_ORDER = ["scale", "unscale_", "step", "update"]


_AMP_WHERE = "scaler.scale(loss).backward(); scaler.unscale_(opt); clip_grad_norm_; scaler.step(opt); scaler.update()"


def _judge_autocast(seen: dict) -> None:
    forward, backward = seen.get("forward_autocast"), seen.get("backward_autocast")
    if not isinstance(forward, list) or not isinstance(backward, list):
        malformed("autocast records missing")
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
        malformed("scaler calls malformed")
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
        malformed("gradient records missing")
    if not all(f is True for f in fresh):
        fail("stale-gradients", observed="backward added to the gradients the previous step left in .grad",
             expected="gradients cleared before backward", cause="no optimizer.zero_grad(set_to_none=True): "
             "backward accumulates into .grad", where="optimizer.zero_grad(set_to_none=True) at the start of the step")
    _judge_scaler_calls(seen.get("calls"))
    steps = seen.get("steps")
    if not isinstance(steps, list):
        malformed("steps missing")
    if len(steps) != 1:
        fail("step-count", observed=f"{len(steps)} optimizer steps for one call", expected="1",
             cause="scaler.step called more than once, or never", where="scaler.step(optimizer)")
    batch, max_norm = regression_batch(case, 1, scale=20.0), case_max_norm(case)
    _judge_clipped_gradient(steps[0], batch, max_norm, where=_AMP_WHERE)
    _, want_loss = _amp_reference(list(two_params(steps[0]["params"])), batch, None)
    loss = seen.get("loss")
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.is_floating_point():
        fail("wrong-loss", observed=f"amp_step returned {describe(loss)}", expected="the loss, as a 0-d float tensor",
             cause="returning loss.item() (a host sync each step) or nothing", where="return loss.detach()")
    returned = loss.detach().reshape(()).float()
    if isclose_number(float(returned), float(want_loss) * _INIT_SCALE, rel_tol=1e-3, abs_tol=0.0):
        fail("wrong-value", observed=f"amp_step returned {float(returned):.6g}, exactly {_INIT_SCALE:g} (the scale) "
             f"times the batch's loss {float(want_loss):.6g}", expected=f"{float(want_loss):.6g}, the unscaled loss",
             cause="the scaled loss (scaler.scale(loss)) was returned", where="return loss.detach()")
    expect.close("the returned loss", returned, want_loss, atol=1e-4, rtol=1e-3,
                 where="return loss.detach()", cause="the loss returned is not this batch's (unscaled) loss")
    init = probe_model(case, 2).linear.weight.detach()
    weight = seen.get("inf_weight")
    if not isinstance(weight, torch.Tensor) or weight.shape != init.shape:
        malformed("inf_weight malformed")
    if seen.get("inf_steps") != 0 or not same_values(weight, init, dtype=False):
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
        malformed("forward modes missing")
    if not all(mode is True for mode in training):
        fail("not-train-mode", observed="the forward ran in eval mode (the model was handed over after an "
             "evaluation)", expected="model.train() before the forward", cause="amp_step relies on the mode the "
             "model happens to be in: after an evaluation, dropout stays off and batch norm uses its running "
             "statistics", where="the first line of amp_step")
    return ("training mode, autocast around forward+loss, backward outside, unscale_ then clip, scale/step/update, "
            "inf steps skipped")


def _judge_clip_under_amp(seen: dict, *, case: Case) -> str:
    steps = seen.get("steps")
    if not isinstance(steps, list):
        malformed("steps missing")
    if len(steps) != 1:
        fail("step-count", observed=f"{len(steps)} optimizer steps", expected="one step",
             cause="the step ran a number of times other than once", where="the scaler.step calls")
    max_norm = case_max_norm(case)
    _judge_clipped_gradient(steps[0], regression_batch(case, 5, scale=50.0), max_norm,
                            where="the lines between backward and scaler.step")
    return f"the optimizer sees the unscaled gradient clipped to max_norm={max_norm}"


def _judge_skipped(seen: dict, *, case: Case) -> str:
    returned, stepped = seen.get("returned"), seen.get("stepped")
    plan = skip_plan(case)
    if not isinstance(stepped, list) or len(stepped) != len(plan) or not isinstance(returned, list):
        malformed("steps or results missing")
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


_SMOOTHING = 0.1


def _judge_loss_fp32(seen: dict, *, case: Case) -> str:
    autocast, losses = seen.get("autocast"), seen.get("losses")
    if not isinstance(autocast, list) or not isinstance(losses, list) or len(losses) != LOSS_BATCHES:
        malformed("records missing")
    if not autocast or not all(a is True for a in autocast):
        fail("no-autocast", observed="the model's forward ran outside autocast", expected="the forward under "
             "torch.autocast('cpu', dtype=torch.bfloat16)", cause="the fix removed autocast altogether: the matmuls "
             "then run in float32 and lose the bf16 speed-up", where="the autocast block around model(x)")
    for i, loss in enumerate(losses):
        model, (x, y) = fp32_loss_classifier(case, i), class_batch(case, i)
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
                 "they keep 8 significant bits", where="the loss: the dtype it is computed in")
        if not close_values(loss.reshape(()).double(), want.double(), rtol=2e-5, atol=1e-6, dtype=False):
            fail("loss-computed-in-bf16", observed=f"batch {i}: loss {float(loss):.6f}", expected=f"{float(want):.6f} "
                 "(the smoothed cross-entropy of the bf16 logits, computed in float32)",
                 cause="the loss was computed in bf16 and only its result converted (.float() at the end): the "
                 "rounding already happened in log_softmax", where="the loss: where .float() is applied")
    return "forward in bf16, loss computed in float32 from the upcast logits"


_LOSS_SOLUTION = edited(LOSS_STARTER,
                        ("        logits = model(x)\n        log_probs = logits.log_softmax(dim=-1)\n",
                         "        logits = model(x)\n"
                         "    log_probs = logits.float().log_softmax(dim=-1)  # the loss in float32\n"),
                        ("        nll = -log_probs", "    nll = -log_probs"),
                        ("        uniform =", "    uniform ="),
                        ("        loss = ((1", "    loss = ((1"))


def _onecycle_lrs(total: int) -> list[float]:
    """The LR OneCycleLR gives each of `total` optimizer steps, stepped once per batch."""
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=LOOP_MAX_LR, momentum=0.9)
    scheduler = onecycle(optimizer, total)
    lrs = []
    for _ in range(total):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return lrs


def _judge_loop(seen: dict, *, case: Case) -> str:
    _judge_autocast(seen)
    steps, total = seen.get("steps"), LOOP_EPOCHS * LOOP_BATCHES
    if not isinstance(steps, list):
        malformed("steps missing")
    if len(steps) != total:
        fail("step-count", observed=f"{len(steps)} optimizer steps", expected=f"{total} ({LOOP_EPOCHS} epochs of "
             f"{LOOP_BATCHES} batches; no gradient here is infinite)", cause="steps skipped or repeated",
             where="the scaler.step calls in the batch loop")
    batches, max_norm = loop_batches(case), case_max_norm(case)
    for i, step in enumerate(steps):
        _judge_clipped_gradient(step, batches[i % LOOP_BATCHES], max_norm, where=_AMP_WHERE,
                                label=f"step {i} (epoch {i // LOOP_BATCHES}, batch {i % LOOP_BATCHES})")
    lrs = [s.get("lrs") for s in steps]
    if not all(isinstance(lr, list) and len(lr) == 1 and isinstance(lr[0], float) for lr in lrs):
        malformed("recorded learning rates malformed")
    got, want = [lr[0] for lr in lrs], _onecycle_lrs(total)
    if not all(isclose_number(g, w) for g, w in zip(got, want, strict=True)):
        per_epoch = [want[e] for e in range(LOOP_EPOCHS) for _ in range(LOOP_BATCHES)]
        per_epoch_seen = isclose_numbers(got, per_epoch, rel_tol=1e-6, abs_tol=0.0)
        fail("scheduler-per-epoch" if per_epoch_seen else "wrong-schedule",
             observed=f"learning rate at each step: {[round(v, 5) for v in got]}",
             expected=f"{[round(v, 5) for v in want]}",
             cause="OneCycleLR was built with total_steps = epochs * len(batches): it expects one step per batch; "
             "stepped once per epoch, it stays in its warm-up for the whole run",
             where="where scheduler.step() is called")
    losses = seen.get("losses")
    if not isinstance(losses, torch.Tensor) or losses.shape != (total,):
        fail("wrong-losses", observed=f"train returned {type(losses).__name__} "
             f"{tuple(losses.shape) if isinstance(losses, torch.Tensor) else ''}", expected=f"a tensor of {total} "
             "losses", cause="the losses are not collected per step", where="what losses.append receives")
    for i, step in enumerate(steps):
        _, want_loss = _amp_reference(list(two_params(step["params"])), batches[i % LOOP_BATCHES], None)
        expect.close(f"the loss of step {i}", losses[i].detach().float(), want_loss, atol=1e-4, rtol=1e-3,
                     where="what losses.append receives", cause="the recorded loss is not the step's batch loss")
    return "backward outside autocast, unscale_ before clipping, OneCycleLR stepped per batch"


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
    return with_fixes(LOOP_STARTER, *bugs)


add_judge("amp-train-step", _judge_amp_step)


add_answers(
    Answers(
        drill_id="amp-skipped-steps",
        solution=_SKIP_SOLUTION,
        wrong_answers=(
            (edited(_SKIP_SOLUTION,
                    ("    return not scaler.get_scale() < scale  # update() lowers the scale only "
                     "after a skipped step\n",
                     "    return True\n")), "skip-not-detected"),
            (edited(_SKIP_SOLUTION, ("not scaler.get_scale() < scale", "scaler.get_scale() == scale")),
             "taken-reported-skipped"),
            (edited(_SKIP_SOLUTION,
                    ("    return not scaler.get_scale() < scale  # update() lowers the scale only "
                     "after a skipped step\n",
                     "    return bool(torch.isfinite(loss))\n")),
             "skip-not-detected"),
        ),
        judge=_judge_skipped,
    )
)


add_answers(
    Answers(
        drill_id="amp-loss-in-fp32",
        solution=_LOSS_SOLUTION,
        wrong_answers=(
            (edited(LOSS_STARTER, ("    return loss\n", "    return loss.float()\n")), "loss-computed-in-bf16"),
            (edited(_LOSS_SOLUTION,
                    ('    with torch.autocast("cpu", dtype=torch.bfloat16):\n'
                     '        logits = model(x)\n',
                     "    logits = model(x)\n")), "no-autocast"),
        ),
        judge=_judge_loss_fp32,
    )
)


add_answers(
    Answers(
        drill_id="amp-loop-three-bugs",
        solution=_amp_loop_fixed(_BUG_BACKWARD, _BUG_CLIP, _BUG_SCHEDULER),
        wrong_answers=(
            (_amp_loop_fixed(_BUG_BACKWARD, _BUG_CLIP), "scheduler-per-epoch"),
            (_amp_loop_fixed(_BUG_BACKWARD, _BUG_SCHEDULER), "clip-before-unscale"),
            (_amp_loop_fixed(_BUG_CLIP, _BUG_SCHEDULER), "backward-inside-autocast"),
            (edited(_amp_loop_fixed(_BUG_BACKWARD, _BUG_SCHEDULER),
                    (_BUG_CLIP[0], "            scaler.unscale_(optimizer)\n")),
             "not-clipped"),
        ),
        judge=_judge_loop,
    )
)
