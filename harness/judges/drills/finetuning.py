"""The judge side of the finetuning drills (`harness.drills.bank.finetuning`): judges and the references
they recompute, reference solutions, planted wrong answers, explain drills' options and keys.

A graded kernel never mounts this package (`harness.judges`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from harness.contract import expect
from harness.contract.case import Case
from harness.contract.compare import close_values, is_tensor_like, isclose_number, number, same_values
from harness.contract.failure import fail
from harness.contract.wire import WireError, describe
from harness.drills.bank.finetuning import (
    _OLD_CLASSES,
    _PROBE_BATCHES,
    _SCRIPT_BATCHES,
    _SCRIPT_CLASSES,
    _SCRIPT_STARTER,
    _checkpoints,
    _finetuning_group_settings,
    _lora_setup,
    _lr,
    _n_blocks,
    _NormNet,
    _pretrained,
    _script_model,
    _shifted_batches,
    _sizes,
    _state_copy,
)
from harness.drills.core import Answers, choice_answers
from harness.drills.support import with_fixes
from harness.judges.drills.whys import add_answers


def _checked_tensor_dict(value: Any, what: str) -> dict[str, torch.Tensor]:
    if not isinstance(value, dict) or not all(isinstance(v, torch.Tensor) for v in value.values()):
        raise WireError(f"{what} is not a dict of tensors")
    return value


def _changed(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor], prefix: str,
             keys: tuple[str, ...] = ("weight", "bias")) -> list[str]:
    """Names under `prefix` whose `after` value differs from `before` (or is missing / misshapen)."""
    out = []
    for name, want in before.items():
        if not name.startswith(prefix) or name.rsplit(".", 1)[-1] not in keys:
            continue
        got = after.get(name)
        if not isinstance(got, torch.Tensor) or got.shape != want.shape or not close_values(
                got.double(), want.double(), atol=1e-7, rtol=0, dtype=False):
            out.append(name)
    return out


def _counted_steps(seen: dict, n: int, where: str) -> list[dict]:
    steps = seen.get("steps")
    if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
        raise WireError("the step records are not a list of dicts")
    if len(steps) != n:
        fail("wrong-step-count", observed=f"optimizer.step() ran {len(steps)} times",
             expected=f"{n} steps, one per batch", cause="a loop that skips or repeats batches, or no optimizer",
             where=where)
    return steps


def _judge_linear_probe(seen: dict, *, case: Case) -> str:
    where = "linear_probe"
    start = _state_copy(_pretrained(case))
    state = _checked_tensor_dict(seen.get("state"), "the model's state")
    steps = _counted_steps(seen, _PROBE_BATCHES, where)
    moved = _changed(start, state, "backbone.")
    if moved:
        fail("backbone-changed", observed=f"backbone parameters changed during training: {', '.join(moved[:3])}",
             expected="a frozen backbone: every backbone weight and bias as it was loaded",
             cause="the backbone was not frozen, or its parameters were given to the optimizer with gradients on",
             where="freeze with model.backbone.requires_grad_(False) before building the optimizer")
    drifted = _changed(start, state, "backbone.1.", ("running_mean", "running_var"))
    if drifted:
        fail("bn-stats-changed", observed=f"the backbone's BatchNorm running statistics moved ({drifted[0]})",
             expected="the pretrained running_mean / running_var untouched",
             cause="BatchNorm in train mode updates its running statistics on every forward, requires_grad or "
             "not (and normalises with the batch's statistics instead of the pretrained ones)",
             where="call model.backbone.eval() after model.train(), before the loop")
    flags = seen.get("requires_grad")
    if not isinstance(flags, dict):
        raise WireError("requires_grad flags missing")
    trainable_backbone = [n for n, flag in flags.items() if n.startswith("backbone.") and flag is not False]
    if trainable_backbone:
        fail("backbone-requires-grad", observed=f"{trainable_backbone[0]} still has requires_grad=True",
             expected="requires_grad=False on every backbone parameter",
             cause="leaving the backbone out of the optimizer stops its updates, but autograd still computes "
             "(and stores) every backbone gradient: the cost of fine-tuning for the result of a linear probe",
             where="model.backbone.requires_grad_(False)")
    head = sorted(n for n in start if n.startswith("head."))
    for step in steps:
        names = step.get("names")
        if not isinstance(names, list):
            raise WireError("optimizer names missing")
        if sorted(names) != head:
            extra = sorted(set(names) - set(head))
            fail("frozen-params-in-optimizer",
                 observed=f"the optimizer holds {len(names)} tensors ({', '.join(extra[:3]) or 'not the head'})",
                 expected=f"only the trainable ones: {', '.join(head)}",
                 cause="torch.optim.SGD(model.parameters()) also holds the frozen tensors: harmless until someone "
                 "unfreezes them or adds weight decay, and the optimizer state is built for all of them",
                 where="torch.optim.SGD(model.head.parameters(), ...) or [p for p in ... if p.requires_grad]")
    reference = _pretrained(case)
    reference.backbone.requires_grad_(False)
    reference.train()
    reference.backbone.eval()
    optimizer = torch.optim.SGD(reference.head.parameters(), lr=_lr(case))
    for x, y in _shifted_batches(case, 20, _PROBE_BATCHES):
        optimizer.zero_grad(set_to_none=True)
        F.mse_loss(reference(x), y).backward()
        optimizer.step()
    for name, want in _state_copy(reference).items():
        if name.startswith("head."):
            got = state.get(name)
            expect.close(f"the trained {name}", got if got is not None else describe(got), want, atol=1e-5,
                         rtol=1e-5, where=where, cause="the loop differs from plain SGD(lr) on MSE, one step per "
                         "batch, gradients zeroed each step")
    if seen.get("returned_model") is not True:
        fail("wrong-return", observed="linear_probe did not return the model it trained", expected="return model",
             cause="a missing return statement, or a copy returned", where="the last line of linear_probe")
    return ("the backbone and its BatchNorm statistics stayed as loaded, only the head was in the optimizer and "
            "it trained as SGD on MSE should")


_LINEAR_PROBE_SOLUTION = '''import torch
import torch.nn.functional as F


def linear_probe(model, batches, lr):
    model.backbone.requires_grad_(False)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    model.backbone.eval()  # BatchNorm keeps its pretrained running statistics
    for x, y in batches:
        optimizer.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
    return model
'''


def _judge_finetuning_param_groups(seen: dict, *, case: Case) -> str:
    where = "make_optimizer"
    lr, factor, decay = _finetuning_group_settings(case)
    d_in, hidden, n_out = _sizes(case)
    model = _NormNet(d_in, hidden, n_out)
    norm_weights = {f"backbone.{i}.weight" for i, m in enumerate(model.backbone)
                    if isinstance(m, (nn.LayerNorm, nn.BatchNorm1d))}
    if seen.get("type") != "AdamW":
        fail("wrong-optimizer", observed=f"make_optimizer returned a {seen.get('type')}", expected="torch.optim.AdamW",
             cause="Adam's weight_decay is an L2 term added to the gradient, not AdamW's decoupled decay",
             where=where)
    groups = seen.get("groups")
    if not isinstance(groups, list):
        raise WireError("param groups missing")
    where_is: dict[str, tuple[float, float]] = {}
    for group in groups:
        if not isinstance(group, dict) or not isinstance(group.get("names"), list):
            raise WireError("malformed param group")
        for name in group["names"]:
            if name in where_is:
                fail("param-duplicated", observed=f"{name} is in two parameter groups", expected="each once",
                     cause="a catch-all group over model.parameters() next to the specific ones", where=where)
            where_is[str(name)] = (group.get("lr"), group.get("weight_decay"))
    for name, _ in model.named_parameters():
        if name not in where_is:
            fail("param-missing", observed=f"{name} is in no parameter group",
                 expected="every parameter of the model in exactly one group",
                 cause="a group was forgotten (the head?), so that parameter never trains", where=where)
        got_lr, got_decay = where_is[name]
        want_lr = lr * factor if name.startswith("backbone.") else lr
        if not isinstance(got_lr, float) or not isclose_number(got_lr, want_lr, rel_tol=1e-6, abs_tol=0.0):
            fail("wrong-lr", observed=f"{name} has lr {got_lr}", expected=f"lr {want_lr:g} "
                 f"({'lr * backbone_factor' if name.startswith('backbone.') else 'lr'})",
                 cause="the pretrained backbone takes smaller steps than the new head: its lr is lr * backbone_factor",
                 where=where)
        no_decay = name.endswith(".bias") or name in norm_weights
        want_decay = 0.0 if no_decay else decay
        if not isclose_number(number(got_decay), want_decay, abs_tol=1e-12, rel_tol=1e-9):
            fail("decay-on-norm-or-bias" if no_decay else "no-decay-on-weights",
                 observed=f"{name} (a {'bias or norm weight' if no_decay else 'weight matrix'}) has weight_decay "
                 f"{got_decay}", expected=f"weight_decay {want_decay:g}",
                 cause="decay pulls a norm's scale and the biases toward 0, which only hurts; choose by the kind of "
                 "tensor (p.ndim == 1, or the module's type), not by name: a LayerNorm inside a Sequential is "
                 "named 'backbone.1.weight'" if no_decay else "only biases and norm weights skip weight decay",
                 where=where)
    return "four kinds of parameter, each with its own lr and weight decay, every parameter exactly once"


_GROUPS_SOLUTION = '''import torch


def make_optimizer(model, lr, backbone_factor, weight_decay):
    groups = []
    for part, part_lr in ((model.backbone, lr * backbone_factor), (model.head, lr)):
        decay = [p for p in part.parameters() if p.ndim > 1]
        no_decay = [p for p in part.parameters() if p.ndim <= 1]  # biases and norm weights
        groups.append({"params": decay, "lr": part_lr, "weight_decay": weight_decay})
        groups.append({"params": no_decay, "lr": part_lr, "weight_decay": 0.0})
    return torch.optim.AdamW(groups, lr=lr)
'''

_GROUPS_BY_NAME = '''import torch


def make_optimizer(model, lr, backbone_factor, weight_decay):
    groups = []
    for prefix, part_lr in (("backbone.", lr * backbone_factor), ("head.", lr)):
        named = [(n, p) for n, p in model.named_parameters() if n.startswith(prefix)]
        skip = [p for n, p in named if "bias" in n or "norm" in n]
        keep = [p for n, p in named if not ("bias" in n or "norm" in n)]
        groups.append({"params": keep, "lr": part_lr, "weight_decay": weight_decay})
        groups.append({"params": skip, "lr": part_lr, "weight_decay": 0.0})
    return torch.optim.AdamW(groups, lr=lr)
'''


def _keys(value: Any) -> list[str] | None:
    if isinstance(value, (list, tuple)) and all(isinstance(k, str) for k in value):
        return sorted(value)
    return None


def _judge_load_pretrained(seen: dict, *, case: Case) -> str:
    where = "load_pretrained"
    good = seen.get("good")
    if not isinstance(good, dict):
        raise WireError("scenario missing")
    if "raised" in good:
        fail("refused-good-checkpoint", observed=f"load_pretrained raised {good['raised']} on a good checkpoint whose "
             f"only difference is the old {_OLD_CLASSES}-class head", expected="the backbone loaded, the new head kept",
             cause="load_state_dict(strict=False) still raises on a size mismatch: drop the checkpoint's head.* "
             "tensors first; strict=True refuses the (expected) missing head keys",
             where="filter the checkpoint: {k: v for k, v in checkpoint.items() if not k.startswith('head.')}")
    state = _checked_tensor_dict(good.get("state"), "the model's state")
    source = _checkpoints(case)[0][1]
    fresh = _state_copy(_pretrained(case, 10))
    for name, want in source.items():
        if name.startswith("backbone."):
            got = state.get(name)
            if not isinstance(got, torch.Tensor) or got.shape != want.shape or not same_values(got, want, dtype=False):
                fail("backbone-not-loaded", observed=f"{name} is not the checkpoint's", expected="every backbone "
                     "tensor (running statistics included) copied from the checkpoint",
                     cause="the keys did not match (a prefix?) and strict=False skipped them silently", where=where)
    for name, want in fresh.items():
        if name.startswith("head.") and not same_values(state.get(name, torch.empty(0)), want, dtype=False):
            fail("head-overwritten", observed=f"the new head's {name} changed", expected="the new head as built",
                 cause="the old head's tensors were loaded into the new one", where=where)
    returned = good.get("returned")
    pair = returned if isinstance(returned, (list, tuple)) and len(returned) == 2 else (None, None)
    missing, unexpected = _keys(pair[0]), _keys(pair[1])
    want_missing = sorted(k for k in fresh if k.startswith("head."))
    if missing != want_missing or unexpected != []:
        fail("wrong-report", observed=f"load_pretrained returned {describe(returned)}",
             expected=f"(missing, unexpected) = ({want_missing}, [])",
             cause="return the two key lists load_state_dict(strict=False) reports (result.missing_keys, "
             "result.unexpected_keys), after the head was dropped", where=where)
    refusals = {"ddp": ("accepted-foreign-keys", "a checkpoint saved from DDP, every key prefixed 'module.'"),
                "missing": ("accepted-missing-backbone", "a checkpoint that lacks backbone.3.weight"),
                "extra": ("accepted-unexpected-keys", "a checkpoint with an extra backbone.5.weight")}
    for label, (code, what) in refusals.items():
        outcome = seen.get(label)
        if not isinstance(outcome, dict):
            raise WireError("scenario missing")
        if "raised" not in outcome:
            fail(code, observed=f"load_pretrained accepted {what}", expected="an exception naming the keys",
                 cause="strict=False loads whatever matches and reports the rest: a missing key outside the head, or "
                 "any unexpected key, means the model is not the one you think, so refuse it",
                 where="check result.missing_keys (only head.* allowed) and result.unexpected_keys (none allowed)")
    return "the backbone loaded, the new head kept and reported missing, and three wrong checkpoints refused"


_LOAD_SOLUTION = '''import torch


def load_pretrained(model, checkpoint):
    kept = {k: v for k, v in checkpoint.items() if not k.startswith("head.")}
    result = model.load_state_dict(kept, strict=False)
    bad_missing = [k for k in result.missing_keys if not k.startswith("head.")]
    if bad_missing or result.unexpected_keys:
        raise ValueError(f"checkpoint does not fit: missing {bad_missing}, unexpected {result.unexpected_keys}")
    return list(result.missing_keys), list(result.unexpected_keys)
'''


def _judge_lora(seen: dict, *, case: Case) -> str:
    where = "LoRALinear"
    s = _lora_setup(case)
    base, x, r, alpha = s["base"], s["x"], s["r"], s["alpha"]
    a0, b0 = seen.get("a0"), seen.get("b0")
    for label, got, shape in (("lora_A", a0, (r, s["d_in"])), ("lora_B", b0, (s["d_out"], r))):
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != shape:
            fail("wrong-shape", observed=f"{label} is {describe(got)}", expected=f"a tensor of shape {shape}",
                 cause="A maps in_features to r, B maps r to out_features: delta W = B @ A has the base's shape",
                 where=where)
    trainable = seen.get("trainable")
    if not isinstance(trainable, list):
        raise WireError("trainable names missing")
    if not {"lora_A", "lora_B"} <= set(trainable):
        fail("adapter-not-trainable", observed=f"trainable parameters: {trainable}",
             expected="['lora_A', 'lora_B']", cause="lora_A and lora_B must be nn.Parameter attributes (a plain "
             "tensor is invisible to model.parameters(), so no optimizer would train it)", where=where)
    if trainable != ["lora_A", "lora_B"]:
        fail("base-not-frozen", observed=f"trainable parameters: {trainable}", expected="['lora_A', 'lora_B'] only",
             cause="the base layer must be frozen (base.requires_grad_(False)): LoRA trains only the two small "
             "matrices", where=where)
    if b0.abs().sum() != 0:
        fail("b-not-zero", observed="lora_B is not all zeros after __init__", expected="lora_B initialised to zeros",
             cause="with B = 0 the adapted layer starts exactly as the pretrained one (delta W = B @ A = 0)",
             where="nn.init.zeros_ / torch.zeros for lora_B")
    if a0.abs().sum() == 0:
        fail("dead-adapter", observed="lora_A and lora_B are both all zeros after __init__",
             expected="lora_A random (e.g. kaiming_uniform_), lora_B zeros",
             cause="with both zero, the gradient of each is a product with the other: both stay zero forever",
             where="the initialisation of lora_A")
    with torch.no_grad():
        plain = base(x)
        want = plain + (alpha / r) * (x @ s["a"].T @ s["b"].T)
        unscaled = plain + alpha * (x @ s["a"].T @ s["b"].T)
    expect.close("the output at initialisation", seen.get("out0"), plain, atol=1e-5, rtol=1e-5, where=where,
                 cause="the adapted layer must start equal to the base layer")
    out1 = seen.get("out1")
    if close_values(out1, unscaled, atol=1e-4, dtype=False) and not close_values(out1, want, atol=1e-4, dtype=False):
        fail("wrong-scale", observed="the update is scaled by alpha", expected=f"scaled by alpha / r = {alpha / r:g}",
             cause="LoRA scales B @ A by alpha / r so that changing r does not change the update's size",
             where="self.scale = alpha / r")
    expect.close("the output with A and B set", out1, want, atol=1e-4, rtol=1e-4, where=where,
                 cause="forward is base(x) + (alpha / r) * x @ A.T @ B.T")
    if seen.get("merged_type") != "Linear":
        fail("merge-not-linear", observed=f"merge() returned a {seen.get('merged_type')}", expected="an nn.Linear",
             cause="merging folds the adapter into one plain Linear for inference", where="merge")
    expect.close("the merged layer's output", seen.get("out_merged"), want, atol=1e-4, rtol=1e-4, where="merge",
                 cause="the merged weight is W + (alpha / r) * B @ A, with the base's bias")
    after = seen.get("out_after_merge")
    if is_tensor_like(after, want, dtype=False) and not close_values(after, want, atol=1e-4, dtype=False):
        fail("merge-mutated-base", observed="after merge(), the LoRA layer's own output changed",
             expected="merge() leaves the adapted layer as it was",
             cause="the merge wrote W + scale * B @ A into the base's weight in place, so the adapter now counts "
             "twice", where="build a new nn.Linear in merge (or clone the weight)")
    return "frozen base, B = 0 at start, alpha / r scaling, and a merged Linear equal to the adapted layer"


_LORA_SOLUTION = '''import math

import torch
from torch import nn


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, r: int, alpha: float):
        super().__init__()
        self.base = base
        self.base.requires_grad_(False)
        self.lora_A = nn.Parameter(torch.empty(r, base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.scale = alpha / r

    def forward(self, x):
        return self.base(x) + (x @ self.lora_A.T @ self.lora_B.T) * self.scale

    @torch.no_grad()
    def merge(self) -> nn.Linear:
        merged = nn.Linear(self.base.in_features, self.base.out_features)
        merged.weight.copy_(self.base.weight + self.scale * self.lora_B @ self.lora_A)
        merged.bias.copy_(self.base.bias)
        return merged
'''


def _judge_unfreeze(seen: dict, *, case: Case) -> str:
    n = _n_blocks(case)
    flags = seen.get("flags")
    if not isinstance(flags, list) or len(flags) != n + 2 or not all(isinstance(f, dict) for f in flags):
        raise WireError("flags missing")
    for epoch, epoch_flags in enumerate(flags):
        if not (epoch_flags.get("head.weight") is True and epoch_flags.get("head.bias") is True):
            fail("head-frozen", observed=f"at epoch {epoch} the head is frozen", expected="the head trains at every "
                 "epoch", cause="the new head is randomly initialised: it must train from the first step",
                 where="unfreeze")
        want = set(range(max(0, n - epoch), n))
        got = set()
        for i in range(n):
            states = {epoch_flags.get(f"blocks.{i}.weight"), epoch_flags.get(f"blocks.{i}.bias")}
            if states == {True}:
                got.add(i)
            elif states != {False}:
                fail("half-frozen", observed=f"block {i} is half trainable at epoch {epoch}",
                     expected="a block's weight and bias frozen or trainable together", cause="a loop over "
                     "named parameters that skips one of them", where="unfreeze")
        if got == want:
            continue
        observed = f"at epoch {epoch} of {n} blocks, trainable blocks {sorted(got)}"
        expected = f"trainable blocks {sorted(want)} (the top {len(want)}: the ones nearest the head)"
        if got == set(range(len(want))) and want:
            fail("wrong-order", observed=observed, expected=expected,
                 cause="the blocks nearest the input hold the most general features: unfreeze from the head down",
                 where="index the blocks from the end")
        if got - want:
            fail("unfrozen-too-early", observed=observed, expected=expected,
                 cause="model.blocks[-epoch:] is the whole list when epoch is 0 (-0 == 0)" if epoch == 0 else
                 "more blocks than the schedule allows", where="the slice of blocks you unfreeze")
        fail("still-frozen", observed=observed, expected=expected,
             cause="the blocks unfrozen at earlier epochs must stay trainable (do not re-freeze them)",
             where="unfreeze")
    return "the head trains from epoch 0 and one more block from the top unfreezes at each epoch"


_UNFREEZE_SOLUTION = '''def unfreeze(model, epoch):
    n = len(model.blocks)
    model.head.requires_grad_(True)
    for i, block in enumerate(model.blocks):
        block.requires_grad_(i >= n - epoch)
'''


def _head_grads(case: Case, head: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                softmax_first: bool) -> dict[str, torch.Tensor]:
    model = _script_model(case)
    model.eval()
    with torch.no_grad():
        model.head.weight.copy_(head["head.weight"])
        model.head.bias.copy_(head["head.bias"])
    logits = model(x)
    F.cross_entropy(logits.softmax(-1) if softmax_first else logits, y).backward()
    return {"head.weight": model.head.weight.grad, "head.bias": model.head.bias.grad}


def _judge_finetuning_script(seen: dict, *, case: Case) -> str:
    where = "finetune"
    start = _state_copy(_script_model(case))
    state = _checked_tensor_dict(seen.get("state"), "the model's state")
    moved = _changed(start, state, "backbone.")
    if moved:
        fail("backbone-changed", observed=f"{moved[0]} changed", expected="a frozen backbone",
             cause="the backbone was unfrozen or handed to the optimizer", where=where)
    drifted = _changed(start, state, "backbone.1.", ("running_mean", "running_var"))
    if drifted:
        fail("bn-stats-changed", observed="the frozen backbone's BatchNorm running statistics moved",
             expected="the pretrained statistics untouched",
             cause="the backbone's BatchNorm ran in train mode during training: it normalised with batch "
             "statistics and overwrote the pretrained ones",
             where="the calls that set each module's mode before the loop")
    steps = _counted_steps(seen, _SCRIPT_BATCHES, where)
    previous = None
    batches = _shifted_batches(case, 71, _SCRIPT_BATCHES, _SCRIPT_CLASSES)
    for i, ((x, y), step) in enumerate(zip(batches, steps, strict=True)):
        params = _checked_tensor_dict(step.get("params"), "recorded parameters")
        grads = step.get("grads")
        if not isinstance(grads, dict) or set(params) != {"head.weight", "head.bias"}:
            fail("frozen-params-in-optimizer", observed=f"the optimizer holds {sorted(params)}",
                 expected="the head's weight and bias", cause="the optimizer must hold the trainable head only",
                 where=where)
        want = _head_grads(case, params, x, y, softmax_first=False)
        got = grads.get("head.weight"), grads.get("head.bias")
        if (close_values(got[0], want["head.weight"], atol=1e-5, rtol=1e-4)
                and close_values(got[1], want["head.bias"], atol=1e-5, rtol=1e-4)):
            previous = got
            continue
        if all(g is None or (isinstance(g, torch.Tensor) and g.abs().sum() == 0) for g in got):
            fail("gradients-cleared", observed=f"at step {i} the optimizer saw no gradient (None or zeros)",
                 expected="the gradient of this batch's loss", cause="zero_grad() ran between backward() and step()",
                 where="where zero_grad sits in the loop")
        if previous is not None and close_values(got[0], want["head.weight"] + previous[0], atol=1e-5, rtol=1e-4):
            fail("missing-zero-grad", observed=f"at step {i} the gradient is this batch's plus the previous one's",
                 expected="this batch's gradient only", cause="gradients accumulate in .grad until zeroed",
                 where="the loop: what happens to .grad between steps")
        softmaxed = _head_grads(case, params, x, y, softmax_first=True)
        if close_values(got[0], softmaxed["head.weight"], atol=1e-5, rtol=1e-4):
            fail("double-softmax", observed=f"at step {i} the gradient is that of cross_entropy(softmax(logits))",
                 expected="the gradient of cross_entropy(logits)",
                 cause="F.cross_entropy applies log_softmax itself: a softmax before it squashes the logits into "
                 "[0, 1] and shrinks every gradient", where="what F.cross_entropy receives")
        fail("wrong-gradient", observed=f"at step {i} the optimizer saw a gradient unlike cross_entropy's",
             expected="the gradient of F.cross_entropy(model(x), y) for this batch",
             cause="the loss or the forward pass differs from the prompt's", where=where)
    reference = _script_model(case)
    reference.backbone.requires_grad_(False)
    reference.train()
    reference.backbone.eval()
    optimizer = torch.optim.SGD(reference.head.parameters(), lr=_lr(case), momentum=0.9)
    for x, y in _shifted_batches(case, 71, _SCRIPT_BATCHES, _SCRIPT_CLASSES):
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(reference(x), y).backward()
        optimizer.step()
    for name in ("head.weight", "head.bias"):
        expect.close(f"the trained {name}", state.get(name), reference.state_dict()[name], atol=1e-5, rtol=1e-5,
                     where=where, cause="the update differs from SGD(lr, momentum=0.9)")
    return "frozen backbone with its pretrained statistics, fresh gradients of the right loss, SGD with momentum"


_SCRIPT_SOLUTION = '''import torch
import torch.nn.functional as F


def finetune(model, batches, lr):
    """Train the new head of a pretrained classifier; the backbone stays frozen."""
    model.backbone.requires_grad_(False)
    optimizer = torch.optim.SGD(model.head.parameters(), lr=lr, momentum=0.9)
    model.train()
    model.backbone.eval()  # keep the pretrained BatchNorm statistics
    for x, y in batches:
        optimizer.zero_grad(set_to_none=True)
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        loss.backward()
        optimizer.step()
    return model
'''

_FIX_BN = ("    model.backbone.eval()  # keep the pretrained BatchNorm statistics\n    model.train()\n",
           "    model.train()\n    model.backbone.eval()  # keep the pretrained BatchNorm statistics\n")
_FIX_SOFTMAX = ("        probs = logits.softmax(dim=-1)\n        loss = F.cross_entropy(probs, y)\n",
                "        loss = F.cross_entropy(logits, y)\n")
_FIX_ZERO = ("    for x, y in batches:\n", "    for x, y in batches:\n        optimizer.zero_grad(set_to_none=True)\n")


def _finetuning_script_fixed(*fixes: tuple[str, str]) -> str:
    return with_fixes(_SCRIPT_STARTER, *fixes)


add_answers(
    Answers(
        drill_id="finetuning-freeze-backbone",
        solution=_LINEAR_PROBE_SOLUTION,
        wrong_answers=(
            (_LINEAR_PROBE_SOLUTION.replace("    model.backbone.eval()  # BatchNorm keeps its pretrained running "
                                            "statistics\n", ""), "bn-stats-changed"),
            (_LINEAR_PROBE_SOLUTION.replace("[p for p in model.parameters() if p.requires_grad]",
                                            "model.parameters()"), "frozen-params-in-optimizer"),
            (_LINEAR_PROBE_SOLUTION.replace("    model.backbone.requires_grad_(False)\n", "").replace(
                "[p for p in model.parameters() if p.requires_grad]", "model.head.parameters()"),
             "backbone-requires-grad"),
            (_LINEAR_PROBE_SOLUTION.replace("    model.backbone.requires_grad_(False)\n", ""), "backbone-changed"),
        ),
        judge=_judge_linear_probe,
    )
)


add_answers(
    Answers(
        drill_id="finetuning-param-groups",
        solution=_GROUPS_SOLUTION,
        wrong_answers=(
            (_GROUPS_BY_NAME, "decay-on-norm-or-bias"),
            (_GROUPS_SOLUTION.replace("(model.backbone, lr * backbone_factor)", "(model.backbone, lr)"), "wrong-lr"),
            (_GROUPS_SOLUTION.replace(", (model.head, lr)):", ",):"), "param-missing"),
            (_GROUPS_SOLUTION.replace("torch.optim.AdamW", "torch.optim.Adam"), "wrong-optimizer"),
        ),
        judge=_judge_finetuning_param_groups,
    )
)


add_answers(
    Answers(
        drill_id="finetuning-load-new-head",
        solution=_LOAD_SOLUTION,
        wrong_answers=(
            (_LOAD_SOLUTION.replace("    if bad_missing or result.unexpected_keys:\n", "    if False:\n"),
             "accepted-foreign-keys"),
            (_LOAD_SOLUTION.replace("if not k.startswith(\"head.\")}", "}"), "refused-good-checkpoint"),
            (_LOAD_SOLUTION.replace("if bad_missing or result.unexpected_keys:", "if result.unexpected_keys:"),
             "accepted-missing-backbone"),
            (_LOAD_SOLUTION.replace("if bad_missing or result.unexpected_keys:", "if bad_missing:"),
             "accepted-unexpected-keys"),
        ),
        judge=_judge_load_pretrained,
    )
)


add_answers(
    Answers(
        drill_id="finetuning-lora-linear",
        solution=_LORA_SOLUTION,
        wrong_answers=(
            (_LORA_SOLUTION.replace("self.scale = alpha / r", "self.scale = alpha"), "wrong-scale"),
            (_LORA_SOLUTION.replace("        self.base.requires_grad_(False)\n", ""), "base-not-frozen"),
            (_LORA_SOLUTION.replace("        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))\n",
                                    "        nn.init.zeros_(self.lora_A)\n"), "dead-adapter"),
            (_LORA_SOLUTION.replace("torch.zeros(base.out_features, r)", "torch.randn(base.out_features, r)"),
             "b-not-zero"),
            (_LORA_SOLUTION.replace("self.base.weight + self.scale * self.lora_B @ self.lora_A",
                                    "self.base.weight + self.lora_B @ self.lora_A"), "wrong-value"),
            (_LORA_SOLUTION.replace(
                "        merged = nn.Linear(self.base.in_features, self.base.out_features)\n"
                "        merged.weight.copy_(self.base.weight + self.scale * self.lora_B @ self.lora_A)\n"
                "        merged.bias.copy_(self.base.bias)\n        return merged\n",
                "        self.base.weight += self.scale * self.lora_B @ self.lora_A\n        return self.base\n"),
             "merge-mutated-base"),
        ),
        judge=_judge_lora,
    )
)


add_answers(
    Answers(
        drill_id="finetuning-gradual-unfreeze",
        solution=_UNFREEZE_SOLUTION,
        wrong_answers=(
            ("def unfreeze(model, epoch):\n    model.head.requires_grad_(True)\n"
             "    for block in model.blocks[-epoch:]:\n        block.requires_grad_(True)\n", "unfrozen-too-early"),
            ("def unfreeze(model, epoch):\n    model.head.requires_grad_(True)\n"
             "    for block in model.blocks[:epoch]:\n        block.requires_grad_(True)\n", "wrong-order"),
            ("def unfreeze(model, epoch):\n    n = len(model.blocks)\n    model.head.requires_grad_(True)\n"
             "    for i, block in enumerate(model.blocks):\n        block.requires_grad_(i == n - epoch)\n",
             "still-frozen"),
            ("def unfreeze(model, epoch):\n    n = len(model.blocks)\n    for i, block in enumerate(model.blocks):\n"
             "        block.requires_grad_(i >= n - epoch)\n    model.head.requires_grad_(epoch > 0)\n",
             "head-frozen"),
        ),
        judge=_judge_unfreeze,
    )
)


add_answers(
    Answers(
        drill_id="finetuning-script-three-bugs",
        solution=_SCRIPT_SOLUTION,
        wrong_answers=(
            (_finetuning_script_fixed(_FIX_BN, _FIX_ZERO), "double-softmax"),
            (_finetuning_script_fixed(_FIX_BN, _FIX_SOFTMAX), "missing-zero-grad"),
            (_finetuning_script_fixed(_FIX_SOFTMAX, _FIX_ZERO), "bn-stats-changed"),
            (_finetuning_script_fixed(_FIX_BN, _FIX_SOFTMAX).replace("        loss.backward()\n",
                                                   "        loss.backward()\n        optimizer.zero_grad()\n"),
             "gradients-cleared"),
            (_finetuning_script_fixed(_FIX_BN, _FIX_SOFTMAX, _FIX_ZERO).replace(", momentum=0.9", ""), "wrong-value"),
        ),
        judge=_judge_finetuning_script,
    )
)


add_answers(
    choice_answers(
        "finetuning-linear-probe-or-finetune",
        options=(
            ("Fit a linear head on frozen features first, then fine-tune gently",
             "few labels cannot re-fit millions of weights, and features that already separate the classes need "
             "only a head; fine-tuning after that (LP-FT) starts from a trained head instead of a random one"),
            ("Fine-tune every layer at the pretraining LR from the very first step",
             "the random head sends large, noisy gradients into the backbone and 300 images are overfitted in a "
             "few epochs: the pretrained features are damaged before the head is any good"),
            ("Re-initialise every layer and train the whole network from scratch",
             "from scratch a ResNet needs far more than 300 images; it throws away exactly what transfers"),
            ("Unfreeze everything but keep BatchNorm in train mode to adapt stats",
             "small fine-tuning batches give noisy batch statistics that overwrite the pretrained running ones; "
             "it does not address the few-labels problem either"),
        ),
        key="a",
    )
)


add_answers(
    choice_answers(
        "finetuning-forgetting-lower-lr",
        options=(
            ("BatchNorm statistics drift: put the backbone in eval, keep the LR",
             "BatchNorm drift can hurt, but it does not explain features being overwritten by large steps; the "
             "weights themselves move far from the pretrained ones"),
            ("Large steps overwrite the features: cut the LR 10-100x, warm up",
             "at the pretraining LR each step moves the weights as far as pretraining did, so what was learned is "
             "overwritten; a small LR (and a warm-up while the new head is random) adapts it instead"),
            ("Training is too short: keep the same LR and train for more epochs",
             "more steps at the same LR move the weights even further from the pretrained solution"),
            ("Weight decay is too weak: raise it so the weights stay near where they are",
             "weight decay pulls weights toward zero, not toward the pretrained values; that is L2-SP, a "
             "different penalty"),
        ),
        key="b",
    )
)


add_answers(
    choice_answers(
        "finetuning-frozen-batchnorm",
        options=(
            ("SGD with momentum keeps updating parameters that have requires_grad off",
             "a parameter with no gradient (grad None) is skipped by every built-in optimizer, momentum or not"),
            ("Dropout in the new head feeds random noise back into the backbone's layers",
             "dropout changes the head's activations in train mode, not the backbone's stored state"),
            ("BatchNorm in train mode updates its running mean and var from the new data",
             "running statistics are buffers, not parameters: requires_grad does not touch them and train mode "
             "updates them on every forward; keep the frozen backbone in eval()"),
            ("The optimizer's weight decay keeps shrinking the frozen weights each step",
             "decay is applied inside step() only to parameters that have a gradient; frozen ones are skipped"),
        ),
        key="c",
    )
)


add_answers(
    choice_answers(
        "finetuning-lora-parameter-count",
        options=(
            ("16,777,216: every entry of W still receives an update",
             "that is full fine-tuning; with LoRA, W is frozen and only the two small matrices train"),
            ("32,768: only B (4096 x 8) trains, A stays as initialised",
             "both A and B are trainable; only their initialisation differs (A random, B zero)"),
            ("33,554,432: W plus a full-size B @ A, both of them trained",
             "W is frozen, and B @ A is never stored as a parameter: only its two thin factors are"),
            ("65,536: A is 8 x 4096 and B is 4096 x 8, both trained",
             "r * (in + out) = 8 * 8192 = 65,536, about 0.4% of W's 16.8 M: with Adam's two states per value, the "
             "optimizer memory shrinks by the same factor"),
        ),
        key="d",
    )
)
