"""Clipping drills: with accumulation, the total norm, per parameter group."""

from __future__ import annotations

import torch
from torch import nn

from harness.contract import expect
from harness.contract.case import Case
from harness.contract.compare import close_tensors, close_values, isclose_number, malformed, number
from harness.contract.failure import fail
from harness.drills.bank.amp_clipping import (
    ACC_SETTINGS,
    case_max_norm,
    clipping_micro_batches,
    group_optimizer,
    norm_model,
    per_group_model,
    stale_grads,
)
from harness.drills.core import Answers
from harness.drills.support import edited
from harness.judges.drills.amp_clipping.common import CLIP, two_params
from harness.judges.drills.whys import add_answers


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
    if not isinstance(runs, list) or len(runs) != len(ACC_SETTINGS):
        malformed("runs missing")
    for (scale, max_norm), steps in zip(ACC_SETTINGS, runs, strict=True):
        micro = clipping_micro_batches(case, scale)
        if not isinstance(steps, list) or len(steps) != 1:
            fail("step-count", observed=f"{len(steps) if isinstance(steps, list) else steps} optimizer steps for one "
                 f"group of {len(micro)} micro-batches", expected="1", cause="stepping per micro-batch",
                 where="step once, after the last micro-batch")
        step = steps[0]
        if not isinstance(step, dict) or not isinstance(step.get("grads"), list) or None in step["grads"]:
            malformed("recorded step malformed")
        params, grads = two_params(step.get("params")), two_params(step["grads"])
        want = _accumulated(params, micro, max_norm)
        if all(close_values(g, w, rtol=1e-4, atol=1e-6, dtype=False) for g, w in zip(grads, want, strict=True)):
            continue
        mistakes = (
            ("stale-gradients", dict(stale=stale_grads(case)), "the gradients left by the previous step were not "
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
            if all(close_values(g, o, rtol=1e-4, atol=1e-6, dtype=False) for g, o in zip(grads, other, strict=True)):
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


def _judge_total_norm(seen: dict, *, case: Case) -> str:
    model, max_norm = norm_model(case), case_max_norm(case, 61)
    grads = [p.grad.clone() for p in model.parameters()]
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    syncs = seen.get("syncs")
    if not isinstance(syncs, list):
        malformed("sync records missing")
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
    if (isclose_number(value, max_norm, rel_tol=1e-4, abs_tol=0.0)
            or value < float(total) * 0.999 and value <= max_norm * 1.0001):
        fail("norm-after-clip", observed=f"returned norm {value:.5g} (max_norm={max_norm})",
             expected=f"{float(total):.5g}, the norm before clipping",
             cause="the norm was measured after clipping: it is min(norm, max_norm) and hides every explosion",
             where="clip_grad_norm_ returns the total norm before clipping: keep its return value")
    sum_of_norms = float(sum(torch.linalg.vector_norm(g) for g in grads))
    if isclose_number(value, sum_of_norms, rel_tol=1e-4, abs_tol=0.0):
        fail("wrong-norm", observed=f"returned norm {value:.5g}", expected=f"{float(total):.5g}",
             cause="the sum of per-parameter norms is not the total norm: the total is the norm of all gradients "
             "concatenated, sqrt(sum of squared norms)", where="torch.linalg.vector_norm of the per-parameter norms")
    expect.close("the returned norm", norm.reshape(()).float(), total, atol=1e-5, rtol=1e-4, where="the return value",
                 cause="the total L2 norm over all parameters' gradients, before clipping")
    got = seen.get("grads")
    if not isinstance(got, list) or len(got) != len(grads):
        malformed("grads missing")
    for i, (g, p) in enumerate(zip(got, model.parameters(), strict=True)):
        expect.close(f"gradient {i} after the call", g, p.grad, atol=1e-6, rtol=1e-4,
                     where="torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)",
                     cause="the gradients are not clipped in place to max_norm")
    return "clips in place and returns the pre-clip total norm as a tensor, without a host sync"


_NORM_SOLUTION = '''import torch


def clip_and_norm(model, max_norm):
    return torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
'''


def _judge_per_group(seen: dict, *, case: Case) -> str:
    def clipped(how: str) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        model = per_group_model(case)
        groups = group_optimizer(model, case).param_groups
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
        malformed("grads missing")
    if any(g.shape != w.shape for g, w in zip(got, want, strict=True)):
        malformed("grads of the wrong shapes")
    if not all(close_values(g, w, rtol=1e-4, atol=1e-6, dtype=False) for g, w in zip(got, want, strict=True)):
        for how, code, cause in (
            ("together", "clipped-together", "all parameters were clipped as one vector with one threshold: each "
             "group has its own max_norm and its own norm"),
            ("per-parameter", "clipped-per-parameter", "each parameter tensor was clipped on its own: the norm to "
             "clip is the group's total norm, over all its parameters"),
        ):
            if close_tensors(got, clipped(how)[1], rtol=1e-4, atol=1e-6, dtype=False):
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
        if isinstance(n, torch.Tensor) and isclose_number(number(n), float(w), rel_tol=1e-4, abs_tol=0.0):
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


add_answers(
    Answers(
        drill_id="clipping-with-accumulation",
        solution=_ACC_SOLUTION,
        wrong_answers=(
            (edited(_ACC_SOLUTION,
                    ("        loss.backward()\n" + CLIP, "        loss.backward()\n    " + CLIP)),
             "clipped-per-micro-batch"),
            (edited(_ACC_SOLUTION, (" / len(micro_batches)", "")), "loss-not-averaged"),
            (edited(_ACC_SOLUTION, ("    optimizer.zero_grad(set_to_none=True)\n", "")), "stale-gradients"),
            (edited(_ACC_SOLUTION,
                    ("        loss.backward()\n" + CLIP + "    optimizer.step()\n",
                     "        loss.backward()\n    " + CLIP + "        optimizer.step()\n")),
             "step-count"),
        ),
        judge=_judge_accumulate,
    )
)


add_answers(
    Answers(
        drill_id="clipping-total-norm",
        solution=_NORM_SOLUTION,
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
        judge=_judge_total_norm,
    )
)


add_answers(
    Answers(
        drill_id="clipping-per-group",
        solution=_GROUP_SOLUTION,
        wrong_answers=(
            ("import torch\n\ndef clip_per_group(optimizer):\n"
             "    params = [p for g in optimizer.param_groups for p in g['params']]\n"
             "    return [torch.nn.utils.clip_grad_norm_(params, optimizer.param_groups[0]['max_norm'])]\n",
             "clipped-together"),
            ("import torch\n\ndef clip_per_group(optimizer):\n    norms = []\n"
             "    for group in optimizer.param_groups:\n        for p in group['params']:\n"
             "            norms.append(torch.nn.utils.clip_grad_norm_([p], group['max_norm']))\n    return norms\n",
             "clipped-per-parameter"),
            (edited(_GROUP_SOLUTION,
                    ('        norms.append(torch.nn.utils.clip_grad_norm_(group["params"], group["max_norm"]))\n',
                     '        torch.nn.utils.clip_grad_norm_(group["params"], group["max_norm"])\n'
                     '        norms.append(torch.linalg.vector_norm(\n'
                     '            torch.stack([p.grad.norm() for p in group["params"]])))\n')),
             "wrong-norms"),
        ),
        judge=_judge_per_group,
    )
)
