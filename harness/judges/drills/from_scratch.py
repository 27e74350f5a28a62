"""The judge side of the from_scratch drills (`harness.drills.bank.from_scratch`): judges and the references
they recompute, reference solutions, planted wrong answers, explain drills' options and keys.

A graded kernel never mounts this package (`harness.judges`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from harness.contract.case import Case
from harness.contract.compare import close_values, malformed, max_difference
from harness.contract.failure import fail
from harness.contract.forbidden import SELF_CHECKED, forbid
from harness.contract.wire import describe
from harness.drills.bank.from_scratch import (
    ADAMW_STARTER,
    ADAMW_STEPS,
    BETAS,
    EPS,
    LN_STARTER,
    adamw_setup,
    ln_inputs,
)
from harness.drills.core import Answers, choice_answers
from harness.drills.support import edited
from harness.judges.drills.whys import add_answers


def _ln_variant(x: torch.Tensor, normalized: tuple[int, ...], weight: torch.Tensor, bias: torch.Tensor, eps: float,
                *, unbiased: bool = False, eps_outside: bool = False, last_dim_only: bool = False,
                leading_dims: bool = False, all_dims: bool = False, detached: bool = False) -> torch.Tensor:
    """LayerNorm written with one of the candidates' usual mistakes (all False: the right formula)."""
    dims = (-1,) if last_dim_only else tuple(range(-len(normalized), 0))
    if leading_dims or all_dims:
        dims = tuple(range(x.dim() if all_dims else len(normalized)))
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, keepdim=True, correction=1 if unbiased else 0)
    if detached:
        mean, var = mean.detach(), var.detach()
    scale = var.sqrt() + eps if eps_outside else (var + eps).sqrt()
    return (x - mean) / scale * weight + bias


def _ln_reference(x, normalized, weight, bias, eps, upstream, make) -> tuple[torch.Tensor, list[torch.Tensor]]:
    leaves = [t.clone().requires_grad_() for t in (x, weight, bias)]
    y = make(leaves[0], normalized, leaves[1], leaves[2], eps)
    y.backward(upstream)
    return y.detach(), [t.grad for t in leaves]


_LN_MISTAKES = (
    ("unbiased-variance", {"unbiased": True}, "x.var() divides by n - 1 (Bessel's correction); LayerNorm uses the "
     "biased variance, dividing by n", "var = ((x - mean) ** 2).mean(dims), or x.var(dims, correction=0)"),
    ("eps-outside-sqrt", {"eps_outside": True}, "eps added to the standard deviation: LayerNorm adds it to the "
     "variance, inside the square root, which matters when the variance is small", "torch.sqrt(var + eps)"),
    ("wrong-dims", {"last_dim_only": True}, "the statistics were taken over the last dimension only: LayerNorm "
     "normalizes over all the trailing dimensions that normalized_shape names", "dims = the last "
     "len(normalized_shape) dimensions"),
    ("leading-dims", {"leading_dims": True}, "the output equals a LayerNorm whose mean and variance run over x's "
     "first len(normalized_shape) dimensions (the batch ones), so samples are mixed: LayerNorm normalizes each "
     "sample over its last dimensions", "dims = tuple(range(-len(normalized_shape), 0))"),
    ("all-dims", {"all_dims": True}, "the output equals a LayerNorm whose mean and variance run over every "
     "dimension of x (one mean for the whole batch): LayerNorm normalizes each sample over the last "
     "len(normalized_shape) dimensions only", "dims = tuple(range(-len(normalized_shape), 0))"),
)


def _judge_layer_norm(seen: dict, *, case: Case) -> str:
    forbid(seen.get("calls", {}), {
        "layer_norm": "the drill asks you to write LayerNorm, not to call it",
        "native_layer_norm": "the drill asks you to write LayerNorm, not to call it",
        "group_norm": "GroupNorm with one group is LayerNorm under another name",
    }, where="the drill's prompt")
    inputs, results = ln_inputs(case), seen.get("results")
    if not (isinstance(results, list) and len(results) == len(inputs)
            and all(isinstance(r, dict) and isinstance(r.get("grads"), list) and len(r["grads"]) == 3
                    for r in results)):
        malformed("not one result per input")
    for (x, normalized, weight, bias, eps, upstream), result in zip(inputs, results, strict=True):
        where = f"layer_norm on x of shape {tuple(x.shape)}, normalized_shape={normalized}, eps={eps}"
        y = result["y"]
        if not isinstance(y, torch.Tensor) or y.shape != x.shape:
            fail("wrong-shape", observed=f"layer_norm returned {describe(y)}",
                 expected=f"a tensor of x's shape {tuple(x.shape)}",
                 cause="a reduction without keepdim=True, or weight and bias broadcast against the wrong dimensions",
                 where=where)
        want, want_grads = _ln_reference(x, normalized, weight, bias, eps, upstream,
                                         lambda a, n, w, b, e: F.layer_norm(a, n, w, b, e))
        if not close_values(y, want, rtol=1e-4, atol=1e-5):
            for code, flags, cause, fix in _LN_MISTAKES:
                if close_values(y, _ln_variant(x, normalized, weight, bias, eps, **flags), rtol=1e-4, atol=1e-5):
                    fail(code, observed=f"output differs from F.layer_norm by up to {max_difference(y, want):.3g}",
                         expected="F.layer_norm's values", cause=cause, where=f"{where}: {fix}")
            fail("wrong-value", observed=f"output differs from F.layer_norm by up to {max_difference(y, want):.3g}",
                 expected="(x - mean) / sqrt(var + eps) * weight + bias over the normalized dimensions",
                 cause="the output matches none of the mistakes this check recognizes (the variance divided by "
                 "n - 1, eps outside the square root, the wrong dimensions): compare your formula with the "
                 "expected one term by term", where=where)
        got_grads = result["grads"]
        for name, got, ref in zip(("x", "weight", "bias"), got_grads, want_grads, strict=True):
            if close_values(got, ref, rtol=1e-4, atol=1e-5):
                continue
            detached = _ln_reference(x, normalized, weight, bias, eps, upstream,
                                     lambda a, n, w, b, e: _ln_variant(a, n, w, b, e, detached=True))[1]
            cause = ("the mean and variance were detached (or computed under no_grad): they depend on x, and the "
                     "gradient must flow through them" if close_values(got, detached[0], rtol=1e-4, atol=1e-5)
                     else "the output is not built from x, weight and bias with differentiable torch operations")
            shown = "None" if got is None else f"up to {max_difference(got, ref):.3g} off"
            fail("wrong-gradient", observed=f"the gradient of {name} is {shown}",
                 expected=f"the gradient of {name} through F.layer_norm", cause=cause, where=where)
    return ("values and gradients of x, weight and bias match F.layer_norm, over one and two normalized dimensions; "
            f"no layer_norm call or kernel was seen ({SELF_CHECKED})")


_LN_SOLUTION = edited(LN_STARTER,
                      ("    raise NotImplementedError\n",
                       "    dims = tuple(range(-len(normalized_shape), 0))\n"
                       "    mean = x.mean(dim=dims, keepdim=True)\n"
                       "    var = ((x - mean) ** 2).mean(dim=dims, keepdim=True)\n"
                       "    return (x - mean) / torch.sqrt(var + eps) * weight + bias\n"))


def _adamw_variant(case: Case, *, coupled: bool = False, bias_correction: bool = True, decay_lr: bool = True,
                   eps_inside: bool = False, decay_after: bool = False) -> list[list[torch.Tensor]]:
    """The parameters after each step of AdamW written with one of the usual mistakes."""
    params, grads, lr, weight_decay = adamw_setup(case)
    params = [p.clone() for p in params]
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    beta1, beta2 = BETAS
    trace = []
    for step, step_grads in enumerate(grads, start=1):
        for i, (p, g) in enumerate(zip(params, step_grads, strict=True)):
            if coupled:
                g = g + weight_decay * p
            elif not decay_after:
                p.mul_(1 - (lr if decay_lr else 1.0) * weight_decay)
            m[i] = beta1 * m[i] + (1 - beta1) * g
            v[i] = beta2 * v[i] + (1 - beta2) * g * g
            m_hat = m[i] / (1 - beta1 ** step) if bias_correction else m[i]
            v_hat = v[i] / (1 - beta2 ** step) if bias_correction else v[i]
            denom = (v_hat + EPS).sqrt() if eps_inside else v_hat.sqrt() + EPS
            p.sub_(lr * m_hat / denom)
            if decay_after:
                p.mul_(1 - lr * weight_decay)
        trace.append([p.clone() for p in params])
    return trace


def _adamw_reference(case: Case) -> list[list[torch.Tensor]]:
    params, grads, lr, weight_decay = adamw_setup(case)
    params = [p.clone().requires_grad_() for p in params]
    optimizer = torch.optim.AdamW(params, lr=lr, betas=BETAS, eps=EPS, weight_decay=weight_decay)
    trace = []
    for step_grads in grads:
        for p, g in zip(params, step_grads, strict=True):
            p.grad = g.clone()
        optimizer.step()
        trace.append([p.detach().clone() for p in params])
    return trace


_ADAMW_MISTAKES = (
    ("coupled-decay", {"coupled": True}, "the decay was added to the gradient (Adam's L2 penalty): Adam then "
     "divides it by sqrt(v), so heavily-updated weights are barely decayed", "decay the weights themselves: "
     "p.mul_(1 - lr * weight_decay), and leave the gradient alone"),
    ("no-bias-correction", {"bias_correction": False}, "m and v start at zero and are biased towards it in the "
     "first steps: divide them by 1 - beta1**step and 1 - beta2**step", "m_hat and v_hat"),
    ("decay-not-scaled-by-lr", {"decay_lr": False}, "p.mul_(1 - weight_decay): AdamW's decay is scaled by the "
     "learning rate, p *= 1 - lr * weight_decay", "the decay line"),
    ("eps-inside-sqrt", {"eps_inside": True}, "eps inside the square root: torch adds it to sqrt(v_hat), which "
     "matters for weights whose gradients are tiny", "denominator: v_hat.sqrt() + eps"),
    ("decay-after-update", {"decay_after": True}, "the parameters equal AdamW's with the decay applied after the "
     "Adam step, so the step itself is shrunk too: torch decays the weights as they were before the update",
     "p.mul_(1 - lr * weight_decay) before p.sub_(...)"),
)


def _judge_adamw(seen: dict, *, case: Case) -> str:
    steps = seen.get("optimizer_steps")
    if not isinstance(steps, int):
        malformed("optimizer steps not counted")
    if steps:
        fail("used-torch-optim", observed=f"{steps} torch.optim optimizer steps ran inside adamw_step",
             expected="the update written with tensor operations", cause="torch.optim computes the update for you: "
             "the drill asks you to write it", where="adamw_step: no torch.optim optimizer")
    forbid(seen.get("calls"), {"torch.optim": "the drill asks you to write the update with tensor operations, "
                                              "not torch.optim's functional adamw or fused kernels"},
           where="the drill's prompt")
    want = _adamw_reference(case)
    trace = seen.get("trace")
    if not (isinstance(trace, list) and len(trace) == len(want) and all(
            isinstance(t, list) and len(t) == 2 for t in trace)):
        malformed("not the parameters after each step")

    def matches(reference: list[list[torch.Tensor]], upto: int = ADAMW_STEPS) -> bool:
        return all(close_values(g, w, rtol=1e-5, atol=1e-7) for got_step, want_step in
                   zip(trace[:upto], reference[:upto], strict=True) for g, w in zip(got_step, want_step, strict=True))

    if matches(want):
        return ("the parameters match torch.optim.AdamW over four steps, tiny gradients included; no call into "
                f"torch.optim was seen ({SELF_CHECKED})")
    initial = adamw_setup(case)[0]
    if all(close_values(g, w, rtol=0, atol=0) for g, w in zip(trace[0], initial, strict=True)):
        fail("not-in-place", observed="the parameters did not change after a step",
             expected="each parameter updated in place", cause="a new tensor assigned to a local name "
             "(p = p - ...) or returned: the caller's parameter is untouched", where="adamw_step: p.mul_, p.sub_ "
             "under torch.no_grad()")
    for code, flags, cause, fix in _ADAMW_MISTAKES:
        if matches(_adamw_variant(case, **flags)):
            fail(code, observed="the parameters differ from torch.optim.AdamW's after the first steps",
                 expected="torch.optim.AdamW's parameters", cause=cause, where=f"adamw_step: {fix}")
    step = next(s for s in range(ADAMW_STEPS) if not matches(want, s + 1))
    worst = max(max_difference(g, w) for g, w in zip(trace[step], want[step], strict=True))
    fail("wrong-value", observed=f"after step {step + 1} the parameters differ from torch.optim.AdamW's by up to "
         f"{worst:.3g}", expected="torch.optim.AdamW's parameters", cause="the parameters match none of the "
         "mistakes this check recognizes (coupled decay, no bias correction, decay not scaled by lr or applied "
         "after the step, eps inside the square root): compare each line with AdamW's update",
         where="adamw_step")


_ADAMW_SOLUTION = edited(ADAMW_STARTER,
                         ("    raise NotImplementedError\n",
                          "    beta1, beta2 = betas\n"
                          "    for p, state in zip(params, states):\n"
                          "        g = p.grad\n"
                          "        p.mul_(1 - lr * weight_decay)\n"
                          "        m, v = state[\"exp_avg\"], state[\"exp_avg_sq\"]\n"
                          "        m.mul_(beta1).add_(g, alpha=1 - beta1)\n"
                          "        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)\n"
                          "        m_hat = m / (1 - beta1 ** step)\n"
                          "        v_hat = v / (1 - beta2 ** step)\n"
                          "        p.sub_(lr * m_hat / (v_hat.sqrt() + eps))\n"))


add_answers(
    Answers(
        drill_id="modules-layer-norm-from-scratch",
        solution=_LN_SOLUTION,
        wrong_answers=(
            (edited(_LN_SOLUTION,
                    ("((x - mean) ** 2).mean(dim=dims, keepdim=True)", "x.var(dim=dims, keepdim=True)")),
             "unbiased-variance"),
            (edited(_LN_SOLUTION, ("torch.sqrt(var + eps)", "(torch.sqrt(var) + eps)")), "eps-outside-sqrt"),
            (edited(_LN_SOLUTION,
                    ("    dims = tuple(range(-len(normalized_shape), 0))\n", "    dims = (-1,)\n")),
             "wrong-dims"),
            (edited(_LN_SOLUTION,
                    ("    dims = tuple(range(-len(normalized_shape), 0))\n",
                     "    dims = tuple(range(len(normalized_shape)))\n")), "leading-dims"),
            (edited(_LN_SOLUTION,
                    ("x.mean(dim=dims, keepdim=True)", "x.mean()"),
                    ("((x - mean) ** 2).mean(dim=dims, keepdim=True)", "((x - mean) ** 2).mean()")), "all-dims"),
            (edited(_LN_SOLUTION,
                    ("keepdim=True)\n    var", "keepdim=True).detach()\n    var"),
                    ("keepdim=True)\n    return", "keepdim=True).detach()\n    return")), "wrong-gradient"),
            ("import torch.nn.functional as F\n\n\ndef layer_norm(x, normalized_shape, weight, bias, eps=1e-5):\n"
             "    return F.layer_norm(x, normalized_shape, weight, bias, eps)\n", "forbidden-call"),
        ),
        judge=_judge_layer_norm,
    )
)


add_answers(
    Answers(
        drill_id="loop-adamw-from-scratch",
        solution=_ADAMW_SOLUTION,
        wrong_answers=(
            (edited(_ADAMW_SOLUTION,
                    ("        g = p.grad\n        p.mul_(1 - lr * weight_decay)\n",
                     "        g = p.grad + weight_decay * p\n")), "coupled-decay"),
            (edited(_ADAMW_SOLUTION, ("m / (1 - beta1 ** step)", "m"), ("v / (1 - beta2 ** step)", "v")),
             "no-bias-correction"),
            (edited(_ADAMW_SOLUTION, ("p.mul_(1 - lr * weight_decay)", "p.mul_(1 - weight_decay)")),
             "decay-not-scaled-by-lr"),
            (edited(_ADAMW_SOLUTION, ("(v_hat.sqrt() + eps)", "(v_hat + eps).sqrt()")), "eps-inside-sqrt"),
            (edited(_ADAMW_SOLUTION,
                    ("        p.mul_(1 - lr * weight_decay)\n", ""),
                    ("        p.sub_(lr * m_hat / (v_hat.sqrt() + eps))\n",
                     "        p.sub_(lr * m_hat / (v_hat.sqrt() + eps))\n        p.mul_(1 - lr * weight_decay)\n")),
             "decay-after-update"),
            (edited(ADAMW_STARTER,
                    ("    raise NotImplementedError\n",
                     "    opt = torch.optim.AdamW(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)\n"
                     "    for p, s in zip(params, states):\n"
                     "        opt.state[p] = {\"step\": torch.tensor(float(step - 1)), **s}\n"
                     "    opt.step()\n")), "used-torch-optim"),
            (edited(_ADAMW_SOLUTION,
                    ("p.mul_(1 - lr * weight_decay)", "p = p * (1 - lr * weight_decay)")),
             "not-in-place"),
        ),
        judge=_judge_adamw,
    )
)


add_answers(
    choice_answers(
        "loop-adam-l2-or-adamw",
        options=(
            ("both optimizers leave them: with a zero gradient, Adam's update is zero",
             "the decay is part of the update whatever the loss's gradient: Adam adds 0.1 * p to the gradient and "
             "AdamW shrinks p directly"),
            ("the same under both: each weight shrinks by a factor (1 - lr * 0.1) per step",
             "that is AdamW only: Adam's decay goes through the division by sqrt(v), which changes its size"),
            ("Adam moves each by about lr per step; AdamW scales each by (1 - lr * 0.1)",
             "Adam's decay term 0.1 * p is normalized by sqrt(v) like a gradient, so its step is about lr whatever "
             "p's size; AdamW's decoupled decay multiplies the weight"),
            ("Adam scales each by (1 - lr * 0.1); AdamW leaves them, as they have no gradient",
             "reversed: AdamW decays every weight each step; it is Adam whose decay is mixed into the gradient"),
        ),
        key="c",
    )
)
