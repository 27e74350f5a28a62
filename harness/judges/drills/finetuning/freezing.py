"""Fine-tuning drills on what trains: a frozen backbone, parameter groups, a new head loaded, gradual unfreezing."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from harness.contract import expect
from harness.contract.case import Case
from harness.contract.compare import isclose_number, malformed, number, same_values, tensor_dict
from harness.contract.failure import fail
from harness.contract.wire import describe
from harness.drills.bank.finetuning import (
    OLD_CLASSES,
    PROBE_BATCHES,
    NormNet,
    checkpoint_scenarios,
    finetune_lr,
    finetuning_group_settings,
    n_blocks,
    pretrained_model,
    pretrained_sizes,
    shifted_batches,
    state_copy,
)
from harness.drills.core import Answers
from harness.drills.support import edited
from harness.judges.drills.finetuning.common import changed_entries, counted_steps
from harness.judges.drills.whys import add_answers


def _judge_linear_probe(seen: dict, *, case: Case) -> str:
    where = "linear_probe"
    start = state_copy(pretrained_model(case))
    state = tensor_dict(seen.get("state"), "the model's state")
    steps = counted_steps(seen, PROBE_BATCHES, where)
    moved = changed_entries(start, state, "backbone.")
    if moved:
        fail("backbone-changed", observed=f"backbone parameters changed during training: {', '.join(moved[:3])}",
             expected="a frozen backbone: every backbone weight and bias as it was loaded",
             cause="the backbone was not frozen, or its parameters were given to the optimizer with gradients on",
             where="freeze with model.backbone.requires_grad_(False) before building the optimizer")
    drifted = changed_entries(start, state, "backbone.1.", ("running_mean", "running_var"))
    if drifted:
        fail("bn-stats-changed", observed=f"the backbone's BatchNorm running statistics moved ({drifted[0]})",
             expected="the pretrained running_mean / running_var untouched",
             cause="BatchNorm in train mode updates its running statistics on every forward, requires_grad or "
             "not (and normalises with the batch's statistics instead of the pretrained ones)",
             where="call model.backbone.eval() after model.train(), before the loop")
    flags = seen.get("requires_grad")
    if not isinstance(flags, dict):
        malformed("requires_grad flags missing")
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
            malformed("optimizer names missing")
        if sorted(names) != head:
            extra = sorted(set(names) - set(head))
            fail("frozen-params-in-optimizer",
                 observed=f"the optimizer holds {len(names)} tensors ({', '.join(extra[:3]) or 'not the head'})",
                 expected=f"only the trainable ones: {', '.join(head)}",
                 cause="torch.optim.SGD(model.parameters()) also holds the frozen tensors: harmless until someone "
                 "unfreezes them or adds weight decay, and the optimizer state is built for all of them",
                 where="torch.optim.SGD(model.head.parameters(), ...) or [p for p in ... if p.requires_grad]")
    reference = pretrained_model(case)
    reference.backbone.requires_grad_(False)
    reference.train()
    reference.backbone.eval()
    optimizer = torch.optim.SGD(reference.head.parameters(), lr=finetune_lr(case))
    for x, y in shifted_batches(case, 20, PROBE_BATCHES):
        optimizer.zero_grad(set_to_none=True)
        F.mse_loss(reference(x), y).backward()
        optimizer.step()
    for name, want in state_copy(reference).items():
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
    lr, factor, decay = finetuning_group_settings(case)
    d_in, hidden, n_out = pretrained_sizes(case)
    model = NormNet(d_in, hidden, n_out)
    norm_weights = {f"backbone.{i}.weight" for i, m in enumerate(model.backbone)
                    if isinstance(m, (nn.LayerNorm, nn.BatchNorm1d))}
    if seen.get("type") != "AdamW":
        fail("wrong-optimizer", observed=f"make_optimizer returned a {seen.get('type')}", expected="torch.optim.AdamW",
             cause="Adam's weight_decay is an L2 term added to the gradient, not AdamW's decoupled decay",
             where=where)
    groups = seen.get("groups")
    if not isinstance(groups, list):
        malformed("param groups missing")
    where_is: dict[str, tuple[float, float]] = {}
    for group in groups:
        if not isinstance(group, dict) or not isinstance(group.get("names"), list):
            malformed("param group")
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
        malformed("scenario missing")
    if "raised" in good:
        fail("refused-good-checkpoint", observed=f"load_pretrained raised {good['raised']} on a good checkpoint whose "
             f"only difference is the old {OLD_CLASSES}-class head", expected="the backbone loaded, the new head kept",
             cause="load_state_dict(strict=False) still raises on a size mismatch: drop the checkpoint's head.* "
             "tensors first; strict=True refuses the (expected) missing head keys",
             where="filter the checkpoint: {k: v for k, v in checkpoint.items() if not k.startswith('head.')}")
    state = tensor_dict(good.get("state"), "the model's state")
    source = checkpoint_scenarios(case)[0][1]
    fresh = state_copy(pretrained_model(case, 10))
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
            malformed("scenario missing")
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


def _judge_unfreeze(seen: dict, *, case: Case) -> str:
    n = n_blocks(case)
    flags = seen.get("flags")
    if not isinstance(flags, list) or len(flags) != n + 2 or not all(isinstance(f, dict) for f in flags):
        malformed("flags missing")
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


add_answers(
    Answers(
        drill_id="finetuning-freeze-backbone",
        solution=_LINEAR_PROBE_SOLUTION,
        wrong_answers=(
            (edited(_LINEAR_PROBE_SOLUTION,
                    ("    model.backbone.eval()  # BatchNorm keeps its pretrained running "
                     "statistics\n",
                     "")), "bn-stats-changed"),
            (edited(_LINEAR_PROBE_SOLUTION,
                    ("[p for p in model.parameters() if p.requires_grad]", "model.parameters()")),
             "frozen-params-in-optimizer"),
            (edited(_LINEAR_PROBE_SOLUTION,
                    ("    model.backbone.requires_grad_(False)\n", ""),
                    ("[p for p in model.parameters() if p.requires_grad]", "model.head.parameters()")),
             "backbone-requires-grad"),
            (edited(_LINEAR_PROBE_SOLUTION, ("    model.backbone.requires_grad_(False)\n", "")), "backbone-changed"),
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
            (edited(_GROUPS_SOLUTION,
                    ("(model.backbone, lr * backbone_factor)", "(model.backbone, lr)")), "wrong-lr"),
            (edited(_GROUPS_SOLUTION, (", (model.head, lr)):", ",):")), "param-missing"),
            (edited(_GROUPS_SOLUTION, ("torch.optim.AdamW", "torch.optim.Adam")), "wrong-optimizer"),
        ),
        judge=_judge_finetuning_param_groups,
    )
)


add_answers(
    Answers(
        drill_id="finetuning-load-new-head",
        solution=_LOAD_SOLUTION,
        wrong_answers=(
            (edited(_LOAD_SOLUTION,
                    ("    if bad_missing or result.unexpected_keys:\n", "    if False:\n")),
             "accepted-foreign-keys"),
            (edited(_LOAD_SOLUTION, ("if not k.startswith(\"head.\")}", "}")), "refused-good-checkpoint"),
            (edited(_LOAD_SOLUTION,
                    ("if bad_missing or result.unexpected_keys:", "if result.unexpected_keys:")),
             "accepted-missing-backbone"),
            (edited(_LOAD_SOLUTION, ("if bad_missing or result.unexpected_keys:", "if bad_missing:")),
             "accepted-unexpected-keys"),
        ),
        judge=_judge_load_pretrained,
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
