"""Lesson 14 checks reject plausible mistakes with the right code and message, and accept correct variants.

MISTAKES and CORRECT are data (tests/test_requirements.py reads them); the two parametrized tests run them.
Each mistake is a small variant of a right answer that breaks one requirement, written the way fine-tuning code
goes wrong in practice (forum questions, the lesson's pitfalls).
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

from harness.checks.testing import Correct, Mistake, assert_forgeries_refused, solution_cell
from harness.contract.case import Case

_BATCHNORM = nn.modules.batchnorm._BatchNorm


# ---------------------------------------------------------------- 14-load-pretrained
def load_checked(model, state_dict):
    """Right: filter in a loop, check both lists, raise KeyError, return the missing keys."""
    backbone_only = {}
    for key, value in state_dict.items():
        if not key.startswith("head."):
            backbone_only[key] = value
    missing, unexpected = model.load_state_dict(backbone_only, strict=False)
    if unexpected or any(not key.startswith("head.") for key in missing):
        raise KeyError(f"missing {missing}, unexpected {unexpected}")
    return list(missing)


def load_strict_with_own_head(model, state_dict):
    """Right, another way: complete the checkpoint with the model's own head, then load strictly."""
    own_head = {k: v for k, v in model.state_dict().items() if k.startswith("head.")}
    merged = {**{k: v for k, v in state_dict.items() if not k.startswith("head.")}, **own_head}
    model.load_state_dict(merged, strict=True)
    return sorted(own_head)


def load_by_key_sets(model, state_dict):
    """Right, a third way: compare the key sets first (raising ValueError), then load the backbone strictly into
    the backbone module with the prefix removed (removeprefix)."""
    own = set(model.state_dict())
    given = {k for k in state_dict if not k.startswith("head.")}
    backbone = {k for k in own if k.startswith("backbone.")}
    if given != backbone:
        raise ValueError(f"missing {sorted(backbone - given)}, unexpected {sorted(given - backbone)}")
    model.backbone.load_state_dict({k.removeprefix("backbone."): state_dict[k] for k in given})
    return sorted(own - backbone)


def load_into_backbone_module(model, state_dict):
    # keys keep their "backbone." prefix: every one is unexpected, nothing loads, strict=False hides it
    result = model.backbone.load_state_dict(state_dict, strict=False)
    return [k for k in result.missing_keys]


def load_parameters_only(model, state_dict):
    # copies the parameters one by one: the BatchNorm running statistics stay those of the new model
    with torch.no_grad():
        for name, p in model.backbone.named_parameters():
            p.copy_(state_dict["backbone." + name])
    return ["head.bias", "head.weight"]


def load_every_fitting_key(model, state_dict):
    # the forum recipe: keep every key whose shape fits, so a new head of the old shape gets the old head
    own = model.state_dict()
    fitting = {k: v for k, v in state_dict.items() if k in own and own[k].shape == v.shape}
    result = model.load_state_dict(fitting, strict=False)
    return sorted(result.missing_keys)


def load_then_reset_head(model, state_dict):
    load_checked(model, state_dict)
    model.head.reset_parameters()  # "initialise the new head": it already was
    return ["head.bias", "head.weight"]


def load_ignoring_missing(model, state_dict):
    result = model.load_state_dict({k: v for k, v in state_dict.items() if not k.startswith("head.")}, strict=False)
    if result.unexpected_keys:
        raise RuntimeError(f"unexpected keys {result.unexpected_keys}")
    return sorted(result.missing_keys)


def load_ignoring_unexpected(model, state_dict):
    result = model.load_state_dict({k: v for k, v in state_dict.items() if not k.startswith("head.")}, strict=False)
    if any(not k.startswith("head.") for k in result.missing_keys):
        raise RuntimeError(f"missing keys {result.missing_keys}")
    return sorted(result.missing_keys)


def load_trusting_strict_false(model, state_dict):
    return model.load_state_dict({k: v for k, v in state_dict.items() if not k.startswith("head.")},
                                 strict=False).missing_keys


def load_returning_result(model, state_dict):
    result = model.load_state_dict({k: v for k, v in state_dict.items() if not k.startswith("head.")}, strict=False)
    if result.unexpected_keys or any(not k.startswith("head.") for k in result.missing_keys):
        raise RuntimeError("checkpoint mismatch")
    return result


def load_returning_unexpected(model, state_dict):
    result = model.load_state_dict({k: v for k, v in state_dict.items() if not k.startswith("head.")}, strict=False)
    if result.unexpected_keys or any(not k.startswith("head.") for k in result.missing_keys):
        raise RuntimeError("checkpoint mismatch")
    return result.unexpected_keys


def load_deleting_head(model, state_dict):
    for key in [k for k in state_dict if k.startswith("head.")]:
        del state_dict[key]  # changes the caller's checkpoint
    result = model.load_state_dict(state_dict, strict=False)
    if result.unexpected_keys or any(not k.startswith("head.") for k in result.missing_keys):
        raise RuntimeError("checkpoint mismatch")
    return sorted(result.missing_keys)


def load_with_plain_strict(model, state_dict):
    # strict=True with the old head: the 10-class head does not fit
    model.load_state_dict(state_dict)
    return []


# ---------------------------------------------------------------- 14-train-mode
def mode_by_class_name(model):
    """Right: train everything, then every frozen norm layer back to eval, found by class name."""
    model.train(True)
    for module in model.modules():
        params = list(module.parameters(recurse=False))
        if "BatchNorm" in type(module).__name__ and params and all(not p.requires_grad for p in params):
            module.train(False)


def mode_by_apply(model):
    """Right: model.apply with a function, the three BatchNorm classes named, all(...) over the parameters."""
    def keep_frozen_statistics(module):
        params = list(module.parameters())
        if isinstance(module, (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)) and params and all(
                not p.requires_grad for p in params):
            module.eval()
    model.train()
    model.apply(keep_frozen_statistics)


def mode_by_named_modules(model):
    """Right: named_modules, decided from the weight's flag alone (affine BatchNorm), in a comprehension."""
    model.train()
    frozen = [m for _, m in model.named_modules() if isinstance(m, _BATCHNORM) and m.weight is not None
              and not m.weight.requires_grad and not m.bias.requires_grad]
    for module in frozen:
        module.train(False)


def mode_backbone_only(model):
    # only the backbone is searched: the frozen BatchNorm1d of the neck keeps training
    model.train()
    for module in model.backbone.modules():
        if isinstance(module, _BATCHNORM) and not any(p.requires_grad for p in module.parameters()):
            module.eval()


def mode_batchnorm2d_only(model):
    # "BatchNorm" read as the conv kind: the frozen BatchNorm1d deep in the neck keeps training
    model.train()
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d) and not module.weight.requires_grad:
            module.eval()


def mode_two_levels(model):
    # walks two levels of children: the neck's BatchNorm1d, four modules deep, is never reached
    model.train()
    for part in model.children():
        for block in part.children():
            for module in block.children():
                if isinstance(module, _BATCHNORM) and not module.weight.requires_grad:
                    module.eval()


def mode_any_frozen(model):
    # any frozen parameter sends a BatchNorm to eval: one with a frozen weight and a trainable bias too
    model.train()
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and any(not p.requires_grad
                                                                       for p in module.parameters()):
            module.eval()


def mode_only_train(model):
    model.train()


def mode_backbone_eval(model):
    # every part with a frozen parameter goes to eval: the backbone's unfrozen block too
    model.train()
    for part in model.children():
        if not all(p.requires_grad for p in part.parameters()):
            part.eval()


def mode_every_batchnorm_eval(model):
    model.train()
    for module in model.modules():
        if isinstance(module, _BATCHNORM):
            module.eval()


def mode_without_train(model):
    for module in model.modules():
        if isinstance(module, _BATCHNORM) and not any(p.requires_grad for p in module.parameters()):
            module.eval()


def mode_only_batchnorm2d(model):
    model.train()
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d) and not module.weight.requires_grad:
            module.eval()
        elif isinstance(module, nn.BatchNorm1d):
            module.eval()  # "the head's BatchNorm too, to be safe"


def mode_freezing_batchnorms(model):
    model.train()
    for module in model.modules():
        if isinstance(module, _BATCHNORM) and not any(p.requires_grad for p in module.parameters()):
            module.requires_grad_(False)
            module.eval()
        elif isinstance(module, _BATCHNORM):
            module.requires_grad_(False)  # "BatchNorm should never train"


def mode_momentum_zero(model):
    model.train()
    for module in model.modules():
        if isinstance(module, _BATCHNORM) and not any(p.requires_grad for p in module.parameters()):
            module.momentum = 0.0  # the statistics stay, but the batch's are used to normalise


def mode_no_tracking(model):
    model.train()
    for module in model.modules():
        if isinstance(module, _BATCHNORM) and not any(p.requires_grad for p in module.parameters()):
            module.track_running_stats = False


def mode_eval_then_head(model):
    model.eval()
    model.head.train()


# ---------------------------------------------------------------- 14-param-groups
def groups_by_loop(model, *, head_lr, backbone_lr, weight_decay):
    """Right: four named lists filled in one loop, empty ones dropped."""
    lists = {"backbone_decay": [], "backbone_no_decay": [], "head_decay": [], "head_no_decay": []}
    for name, p in model.named_parameters():
        if p.requires_grad:
            part = "backbone" if name.startswith("backbone.") else "head"
            lists[f"{part}_{'decay' if p.dim() > 1 else 'no_decay'}"].append(p)
    groups = [{"params": ps, "lr": backbone_lr if key.startswith("backbone") else head_lr,
               "weight_decay": 0.0 if key.endswith("no_decay") else weight_decay}
              for key, ps in lists.items() if ps]
    return torch.optim.AdamW(groups, lr=head_lr)


def groups_by_module_type(model, *, head_lr, backbone_lr, weight_decay):
    """Right: decay decided by the module's type (conv and linear weights), set on the optimizer's default."""
    decayed = {id(m.weight) for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))}
    groups = []
    for part, lr in ((model.backbone, backbone_lr), (model.head, head_lr)):
        trainable = [p for p in part.parameters() if p.requires_grad]
        groups.append({"params": [p for p in trainable if id(p) in decayed], "lr": lr})
        groups.append({"params": [p for p in trainable if id(p) not in decayed], "lr": lr, "weight_decay": 0.0})
    return torch.optim.AdamW([g for g in groups if g["params"]], weight_decay=weight_decay)


def groups_by_comprehensions(model, *, head_lr, backbone_lr, weight_decay):
    """Right: one comprehension per group over named_parameters, removeprefix-free (partition by a key function)."""
    def key(item):
        name, p = item
        return ("backbone" if name.startswith("backbone.") else "head", "decay" if p.dim() >= 2 else "plain")

    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    options = {"backbone": backbone_lr, "head": head_lr}
    groups = [{"params": [p for item in trainable if key(item) == (part, kind) for p in [item[1]]],
               "lr": options[part], "weight_decay": weight_decay if kind == "decay" else 0.0}
              for part in ("backbone", "head") for kind in ("decay", "plain")]
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=head_lr, weight_decay=0.0)


def _two_part_groups(model, head_lr, backbone_lr, weight_decay, *, decay_test, frozen_too=False):
    groups = []
    for prefix, lr in (("backbone.", backbone_lr), ("head.", head_lr)):
        chosen = [(n, p) for n, p in model.named_parameters()
                  if n.startswith(prefix) and (frozen_too or p.requires_grad)]
        groups.append({"params": [p for n, p in chosen if decay_test(n, p)], "lr": lr, "weight_decay": weight_decay})
        groups.append({"params": [p for n, p in chosen if not decay_test(n, p)], "lr": lr, "weight_decay": 0.0})
    return [g for g in groups if g["params"]]


def groups_all_parameters(model, *, head_lr, backbone_lr, weight_decay):
    return torch.optim.AdamW(_two_part_groups(model, head_lr, backbone_lr, weight_decay,
                                              decay_test=lambda n, p: p.ndim >= 2, frozen_too=True))


def groups_bias_by_name(model, *, head_lr, backbone_lr, weight_decay):
    return torch.optim.AdamW(_two_part_groups(model, head_lr, backbone_lr, weight_decay,
                                              decay_test=lambda n, p: "bias" not in n))


def groups_matrices_only(model, *, head_lr, backbone_lr, weight_decay):
    return torch.optim.AdamW(_two_part_groups(model, head_lr, backbone_lr, weight_decay,
                                              decay_test=lambda n, p: p.ndim == 2))


def groups_default_decay(model, *, head_lr, backbone_lr, weight_decay):
    groups = _two_part_groups(model, head_lr, backbone_lr, weight_decay, decay_test=lambda n, p: p.ndim >= 2)
    for group in groups:
        if group["weight_decay"]:
            del group["weight_decay"]  # "AdamW decays by default"
    return torch.optim.AdamW(groups)


def groups_names_from_state_dict(model, *, head_lr, backbone_lr, weight_decay):
    # names from state_dict() zipped with parameters(): the BatchNorm buffers shift every later name
    groups = {}
    for name, p in zip(model.state_dict(), model.parameters()):  # noqa: B905 (as a student writes it)
        if p.requires_grad:
            groups.setdefault((name.startswith("backbone."), p.ndim >= 2), []).append(p)
    return torch.optim.AdamW([{"params": ps, "lr": backbone_lr if backbone else head_lr,
                               "weight_decay": weight_decay if decay else 0.0}
                              for (backbone, decay), ps in groups.items()])


def groups_names_from_state_dict_keep_vars(model, *, head_lr, backbone_lr, weight_decay):
    """Right: names and tensors from state_dict(keep_vars=True), buffers skipped (they are not parameters)."""
    trainable = [(n, t) for n, t in model.state_dict(keep_vars=True).items()
                 if isinstance(t, nn.Parameter) and t.requires_grad]
    groups = {}
    for name, p in trainable:
        groups.setdefault((name.startswith("backbone."), p.ndim >= 2), []).append(p)
    return torch.optim.AdamW([{"params": ps, "lr": backbone_lr if backbone else head_lr,
                               "weight_decay": weight_decay if decay else 0.0}
                              for (backbone, decay), ps in groups.items()])


def groups_lr_swapped(model, *, head_lr, backbone_lr, weight_decay):
    return torch.optim.AdamW(_two_part_groups(model, backbone_lr, head_lr, weight_decay,
                                              decay_test=lambda n, p: p.ndim >= 2))


def groups_one_lr(model, *, head_lr, backbone_lr, weight_decay):
    return torch.optim.AdamW(_two_part_groups(model, head_lr, head_lr, weight_decay,
                                              decay_test=lambda n, p: p.ndim >= 2))


def groups_everything_plus_no_decay(model, *, head_lr, backbone_lr, weight_decay):
    trainable = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW([{"params": trainable, "lr": backbone_lr, "weight_decay": weight_decay},
                              {"params": [p for p in trainable if p.ndim < 2], "weight_decay": 0.0}], lr=head_lr)


def groups_head_weight_only(model, *, head_lr, backbone_lr, weight_decay):
    groups = _two_part_groups(model, head_lr, backbone_lr, weight_decay, decay_test=lambda n, p: p.ndim >= 2)
    return torch.optim.AdamW([g for g in groups if not (g["lr"] == head_lr and g["weight_decay"] == 0.0)])


def groups_returned(model, *, head_lr, backbone_lr, weight_decay):
    return _two_part_groups(model, head_lr, backbone_lr, weight_decay, decay_test=lambda n, p: p.ndim >= 2)


def groups_in_sgd(model, *, head_lr, backbone_lr, weight_decay):
    return torch.optim.SGD(_two_part_groups(model, head_lr, backbone_lr, weight_decay,
                                            decay_test=lambda n, p: p.ndim >= 2), momentum=0.9)


# ---------------------------------------------------------------- 14-unfreeze
def _param_blocks(model):
    return [block for block in model.backbone if list(block.parameters())]


def unfreeze_by_name(model, epoch, every):
    """Right: decided parameter by parameter from the block index in its name, counted from the top."""
    indices = sorted({int(name.split(".")[1]) for name, _ in model.backbone.named_parameters(prefix="backbone")})
    for name, p in model.named_parameters():
        if name.startswith("head."):
            p.requires_grad_(True)
        else:
            from_top = len(indices) - indices.index(int(name.split(".")[1]))  # 1 for the last block
            p.requires_grad_(epoch >= every * from_top)


def unfreeze_reversed(model, epoch, every):
    """Right: walks the blocks from the top, unfreezing `epoch // every` of them."""
    model.head.requires_grad_(True)
    for rank, block in enumerate(reversed(_param_blocks(model))):
        block.requires_grad_(rank < epoch // every)


def unfreeze_by_parameter_flags(model, epoch, every):
    """Right: sets p.requires_grad on each parameter (not the module), counting the blocks with sum()."""
    n = sum(1 for block in model.backbone if any(p.numel() for p in block.parameters()))
    i = 0
    for block in model.backbone:
        params = list(block.parameters())
        if not params:
            continue
        for p in params:
            p.requires_grad = epoch >= every * (n - i)
        i += 1
    for p in model.head.parameters():
        p.requires_grad = True


def unfreeze_three_blocks(model, epoch, every):
    # a TransferNet has three blocks: the count written in
    blocks = _param_blocks(model)
    for i, block in enumerate(blocks):
        block.requires_grad_(epoch >= every * (3 - i))
    model.head.requires_grad_(True)


def unfreeze_only(model, epoch, every):
    blocks = _param_blocks(model)
    for i, block in enumerate(blocks):
        if epoch >= every * (len(blocks) - i):
            block.requires_grad_(True)  # never freezes what is not due
    model.head.requires_grad_(True)


def unfreeze_bottom_up(model, epoch, every):
    blocks = _param_blocks(model)
    for i, block in enumerate(blocks):
        block.requires_grad_(epoch >= every * (i + 1))
    model.head.requires_grad_(True)


def unfreeze_off_by_one(model, epoch, every):
    blocks = _param_blocks(model)
    for i, block in enumerate(blocks):
        block.requires_grad_(epoch > every * (len(blocks) - i))
    model.head.requires_grad_(True)


def unfreeze_forgetting_head(model, epoch, every):
    model.requires_grad_(False)
    blocks = _param_blocks(model)
    for i, block in enumerate(blocks):
        if epoch >= every * (len(blocks) - i):
            block.requires_grad_(True)


def unfreeze_counting_every_child(model, epoch, every):
    blocks = list(model.backbone)  # the pooling and flatten layers counted as blocks too
    for i, block in enumerate(blocks):
        block.requires_grad_(epoch >= every * (len(blocks) - i))
    model.head.requires_grad_(True)


def unfreeze_attribute(model, epoch, every):
    blocks = _param_blocks(model)
    for i, block in enumerate(blocks):
        block.requires_grad = epoch >= every * (len(blocks) - i)  # a plain attribute: no parameter changes
    model.head.requires_grad_(True)


def unfreeze_head_attribute(model, epoch, every):
    blocks = _param_blocks(model)
    for i, block in enumerate(blocks):
        block.requires_grad_(epoch >= every * (len(blocks) - i))
    model.head.requires_grad = True  # an attribute of the module object: a head that came in frozen stays frozen


def unfreeze_setattr_and_method(model, epoch, every):
    """Right: requires_grad_() on each block, with a (harmless) attribute of the same name set beside it."""
    blocks = _param_blocks(model)
    for i, block in enumerate(blocks):
        due = epoch >= every * (len(blocks) - i)
        block.requires_grad = due
        block.requires_grad_(due)
    model.head.requires_grad_(True)


def unfreeze_direct_parameters(model, epoch, every):
    # parameters(recurse=False) of a block: its parameters belong to its layers, so none is set
    blocks = _param_blocks(model)
    for i, block in enumerate(blocks):
        for p in block.parameters(recurse=False):
            p.requires_grad_(epoch >= every * (len(blocks) - i))
    model.head.requires_grad_(True)


def unfreeze_all_at_once(model, epoch, every):
    model.backbone.requires_grad_(epoch >= every)
    model.head.requires_grad_(True)


# ---------------------------------------------------------------- 14-lora
class LoRAByEinsum(nn.Module):
    """Right: the weight delta formed explicitly, F.linear on the sum, a gaussian A."""

    def __init__(self, base, r, alpha):
        super().__init__()
        self.base = base
        for p in self.base.parameters():
            p.requires_grad = False
        self.scale = alpha / r
        self.lora_A = nn.Parameter(torch.randn(r, base.in_features) / math.sqrt(base.in_features))
        self.lora_B = nn.Parameter(base.weight.new_zeros(base.out_features, r))

    def delta(self):
        return self.scale * torch.einsum("or,ri->oi", self.lora_B, self.lora_A)

    def forward(self, x):
        return nn.functional.linear(x, self.base.weight + self.delta(), self.base.bias)

    def merge(self):
        merged = nn.Linear(self.base.in_features, self.base.out_features, bias=self.base.bias is not None)
        merged.load_state_dict({"weight": self.base.weight + self.delta(),
                                **({"bias": self.base.bias} if self.base.bias is not None else {})})
        return merged


class LoRAByFunctionalLinear(nn.Module):
    """Right: F.linear twice, a gaussian A scaled by 1/r, merge through copy.deepcopy of the base."""

    def __init__(self, base, r, alpha):
        super().__init__()
        self.base = base
        for p in self.base.parameters():
            p.requires_grad = False
        self.alpha, self.r = alpha, r
        self.lora_A = nn.Parameter(torch.randn(r, base.in_features) / r)
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r))

    def forward(self, x):
        low_rank = nn.functional.linear(nn.functional.linear(x, self.lora_A), self.lora_B)
        return self.base(x) + low_rank * (self.alpha / self.r)

    def merge(self):
        merged = copy.deepcopy(self.base)
        with torch.no_grad():
            merged.weight.add_(self.lora_B @ self.lora_A, alpha=self.alpha / self.r)
        return merged


class LoRAByMatmul(nn.Module):
    """Right: torch.matmul on the flattened-and-restored input, merge through load_state_dict."""

    def __init__(self, base, r, alpha):
        super().__init__()
        self.base = base.requires_grad_(False)
        self.scale = alpha / r
        self.lora_A = nn.Parameter(nn.init.normal_(torch.empty(r, base.in_features), std=0.02))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r))

    def forward(self, x):
        flat = x.reshape(-1, x.shape[-1])
        update = torch.matmul(torch.matmul(flat, self.lora_A.t()), self.lora_B.t()) * self.scale
        return self.base(x) + update.reshape(*x.shape[:-1], -1)

    @torch.no_grad()
    def merge(self):
        merged = nn.Linear(self.base.in_features, self.base.out_features, bias=self.base.bias is not None)
        state = {k: v.clone() for k, v in self.base.state_dict().items()}
        state["weight"] += self.scale * self.lora_B @ self.lora_A
        merged.load_state_dict(state)
        return merged


def lora_forward(forward):
    """The solution's layer with another forward."""
    class LoRALinear(lora_variant()):
        pass

    LoRALinear.forward = forward
    return (LoRALinear,)


def _forward_mm(self, x):
    # torch.mm takes 2-d inputs only
    return self.base(x) + torch.mm(torch.mm(x, self.lora_A.t()), self.lora_B.t()) * self.scaling


def _forward_flattened(self, x):
    # flattens the leading dimensions and never restores them
    flat = x.view(-1, x.shape[-1])
    return self.base(flat) + (flat @ self.lora_A.T @ self.lora_B.T) * self.scaling


def lora_variant(*, freeze=True, a_init="kaiming", b_init="zeros", scale="alpha/r", register=True, detach_b=False,
                 merge_scale=True, merge_bias=True, merge_in_place=False):
    """A LoRA layer with one thing changed."""

    class LoRALinear(nn.Module):
        def __init__(self, base, r, alpha):
            super().__init__()
            self.base = base
            if freeze == "weight":
                base.weight.requires_grad_(False)
            elif freeze == "attribute":
                base.requires_grad = False  # an attribute of the module object: the parameters still train
            elif freeze:
                base.requires_grad_(False)
            else:
                base.eval()  # "frozen"
            self.scaling = {"alpha/r": alpha / r, "alpha": alpha, "none": 1.0, "alpha//r": alpha // r}[scale]
            a = torch.empty(r, base.in_features)
            nn.init.kaiming_uniform_(a, a=5 ** 0.5) if a_init == "kaiming" else nn.init.zeros_(a)
            b = torch.randn(base.out_features, r) * 0.1 if b_init == "random" else torch.zeros(base.out_features, r)
            if register:
                self.lora_A, self.lora_B = nn.Parameter(a), nn.Parameter(b)
            else:
                self.lora_A, self.lora_B = a.requires_grad_(), b.requires_grad_()

        def forward(self, x):
            b = self.lora_B.detach() if detach_b else self.lora_B
            return self.base(x) + (x @ self.lora_A.T @ b.T) * self.scaling

        @torch.no_grad()
        def merge(self):
            delta = self.lora_B @ self.lora_A * (self.scaling if merge_scale else 1.0)
            if merge_in_place:
                self.base.weight += delta
                return self.base
            merged = nn.Linear(self.base.in_features, self.base.out_features, bias=self.base.bias is not None)
            merged.weight.copy_(self.base.weight + delta)
            if self.base.bias is not None:
                if merge_bias:
                    merged.bias.copy_(self.base.bias)
                else:
                    merged.bias.zero_()
            return merged

    return LoRALinear


def lora_merge_returns_state():
    class LoRALinear(lora_variant()):
        @torch.no_grad()
        def merge(self):
            return {"weight": self.base.weight + self.scaling * self.lora_B @ self.lora_A, "bias": self.base.bias}

    return (LoRALinear,)


MISTAKES = [
    # 14-load-pretrained
    Mistake("14-load-pretrained", "backbone-not-loaded", "nothing was loaded into the backbone",
            (load_into_backbone_module,), story="model.backbone.load_state_dict with the full model's keys"),
    Mistake("14-load-pretrained", "backbone-not-loaded", "BatchNorm buffers",
            (load_parameters_only,), story="copies named_parameters one by one"),
    Mistake("14-load-pretrained", "head-overwritten", "the checkpoint's head was loaded",
            (load_every_fitting_key,), story="keeps every key whose shape fits (forum recipe)"),
    Mistake("14-load-pretrained", "head-overwritten", "re-initialised",
            (load_then_reset_head,), story="resets the head after loading"),
    Mistake("14-load-pretrained", "missing-ignored", "missing_keys it returned were not checked",
            (load_ignoring_missing,), story="checks the unexpected keys only"),
    Mistake("14-load-pretrained", "unexpected-ignored", "unexpected_keys it returned were not checked",
            (load_ignoring_unexpected,), story="checks the missing keys only"),
    Mistake("14-load-pretrained", "missing-ignored", "without raising",
            (load_trusting_strict_false,), story="trusts strict=False, checks nothing"),
    Mistake("14-load-pretrained", "wrong-return", "the whole result of load_state_dict",
            (load_returning_result,), story="returns the _IncompatibleKeys result"),
    Mistake("14-load-pretrained", "wrong-return", "the list of unexpected keys",
            (load_returning_unexpected,), story="returns the unexpected keys"),
    Mistake("14-load-pretrained", "checkpoint-modified", "deleted or popped",
            (load_deleting_head,), story="del state_dict['head.weight'] on the caller's dict"),
    Mistake("14-load-pretrained", "raised", "Error(s) in loading state_dict",
            (load_with_plain_strict,), story="strict load with the old head"),
    Mistake("14-load-pretrained", "backbone-not-loaded", "nothing was loaded into the backbone", solution_cell(
        "def load_pretrained(model, state_dict):\n"
        "    result = model.backbone.load_state_dict(state_dict, strict=False)\n"
        "    return sorted(result.missing_keys)\n",
        "load_pretrained"),
        story="loaded into the backbone module with the full model's keys: nothing matches, strict=False hides it",
        planted=True),
    # 14-train-mode
    Mistake("14-train-mode", "frozen-bn-training", "model.backbone only", (mode_backbone_only,),
            story="searches model.backbone only: the frozen BatchNorm1d in the neck keeps training"),
    Mistake("14-train-mode", "frozen-bn-training", "a single class such as nn.BatchNorm2d", (mode_batchnorm2d_only,),
            story="isinstance(m, nn.BatchNorm2d) only: a frozen BatchNorm1d is missed"),
    Mistake("14-train-mode", "frozen-bn-training", "stops at depth 3", (mode_two_levels,),
            story="walks three levels of children: the BatchNorm1d four modules deep is missed"),
    Mistake("14-train-mode", "frozen-bn-training", "model.train() sets every module",
            (mode_only_train,), story="just model.train(): frozen BatchNorm keeps updating"),
    Mistake("14-train-mode", "trainable-bn-eval", "a whole part of the model",
            (mode_backbone_eval,), story="eval() on every part with a frozen parameter: an unfrozen block too"),
    Mistake("14-train-mode", "trainable-bn-eval", "'head.1'",
            (mode_every_batchnorm_eval,), story="every BatchNorm in eval, trainable ones too"),
    Mistake("14-train-mode", "trainable-bn-eval", "ANY of its parameters is frozen", (mode_any_frozen,),
            story="any(not p.requires_grad ...) where the text says all: a half-frozen BatchNorm goes to eval"),
    Mistake("14-train-mode", "not-training", "the model came in eval mode",
            (mode_without_train,), story="forgets model.train()"),
    Mistake("14-train-mode", "trainable-bn-eval", "head.1",
            (mode_only_batchnorm2d,), story="BatchNorm1d put in eval 'to be safe'"),
    Mistake("14-train-mode", "flags-changed", "requires_grad changed",
            (mode_freezing_batchnorms,), story="freezes every BatchNorm too"),
    Mistake("14-train-mode", "frozen-bn-training", "frozen BatchNorm layers in training mode",
            (mode_momentum_zero,), story="momentum = 0 instead of eval()"),
    Mistake("14-train-mode", "frozen-bn-training", "backbone.0.1",
            (mode_no_tracking,), story="track_running_stats = False instead of eval()"),
    Mistake("14-train-mode", "not-training", "in eval mode: ['model'",
            (mode_eval_then_head,), story="model.eval(); model.head.train()"),
    Mistake("14-train-mode", "frozen-bn-training", "model.train() sets every module", solution_cell(
        "def train_mode(model):\n"
        "    model.train()\n",
        "train_mode"),
        story="model.train() alone: the frozen BatchNorm layers keep normalising with batch statistics", planted=True),
    # 14-param-groups
    Mistake("14-param-groups", "frozen-params-included", "frozen parameter backbone.0.0.weight",
            (groups_all_parameters,), story="no requires_grad filter"),
    Mistake("14-param-groups", "decay-on-bias-or-norm", "BatchNorm2d",
            (groups_bias_by_name,), story="'bias' in name decides: BatchNorm weights decayed"),
    Mistake("14-param-groups", "no-decay-on-weights", "Conv2d",
            (groups_matrices_only,), story="p.ndim == 2 misses conv kernels"),
    Mistake("14-param-groups", "no-decay-on-weights", "AdamW's default",
            (groups_default_decay,), story="leaves weight_decay to AdamW's default"),
    Mistake("14-param-groups", "wrong-lr", "zipped with model.parameters()", (groups_names_from_state_dict,),
            story="names from model.state_dict() zipped with model.parameters()"),
    Mistake("14-param-groups", "wrong-lr", "swapped",
            (groups_lr_swapped,), story="head_lr and backbone_lr swapped"),
    Mistake("14-param-groups", "wrong-lr", "one learning rate for every group",
            (groups_one_lr,), story="head_lr everywhere"),
    Mistake("14-param-groups", "duplicate-params", "more than one",
            (groups_everything_plus_no_decay,), story="everything plus a no-decay group"),
    Mistake("14-param-groups", "missing-params", "head.bias is in no group",
            (groups_head_weight_only,), story="forgets the head's bias"),
    Mistake("14-param-groups", "not-adamw", "the groups were returned",
            (groups_returned,), story="returns the groups"),
    Mistake("14-param-groups", "not-adamw", "returned SGD",
            (groups_in_sgd,), story="builds SGD"),
    Mistake("14-param-groups", "decay-on-bias-or-norm", "BatchNorm2d", solution_cell(
        "def finetune_optimizer(model, *, head_lr, backbone_lr, weight_decay):\n"
        "    groups = []\n"
        "    for prefix, lr in (('backbone.', backbone_lr), ('head.', head_lr)):\n"
        "        chosen = [(n, p) for n, p in model.named_parameters() if n.startswith(prefix) and p.requires_grad]\n"
        "        groups.append({'params': [p for n, p in chosen if 'bias' not in n], 'lr': lr,\n"
        "                       'weight_decay': weight_decay})\n"
        "        groups.append({'params': [p for n, p in chosen if 'bias' in n], 'lr': lr, 'weight_decay': 0.0})\n"
        "    return torch.optim.AdamW([g for g in groups if g['params']])\n",
        "finetune_optimizer"),
        story="no decay decided by the name: BatchNorm weights are not called 'bias', so they are decayed",
        planted=True),
    # 14-unfreeze
    Mistake("14-unfreeze", "not-frozen", "never freezes", (unfreeze_only,), story="only ever unfreezes"),
    Mistake("14-unfreeze", "wrong-order", "counted from the bottom", (unfreeze_bottom_up,),
            story="block 0 first"),
    Mistake("14-unfreeze", "wrong-timing", "off-by-one", (unfreeze_off_by_one,), story="> instead of >="),
    Mistake("14-unfreeze", "head-frozen", "the head is frozen with the backbone", (unfreeze_forgetting_head,),
            story="model.requires_grad_(False), head never unfrozen"),
    Mistake("14-unfreeze", "wrong-timing", "pooling and flatten included",
            (unfreeze_counting_every_child,), story="pool and flatten counted as blocks"),
    Mistake("14-unfreeze", "wrong-timing", "assigned to the module object (backbone.0, backbone.1, backbone.2)",
            (unfreeze_attribute,), story="block.requires_grad = flag"),
    Mistake("14-unfreeze", "head-frozen", "assigned to the module object (head)", (unfreeze_head_attribute,),
            story="model.head.requires_grad = True"),
    Mistake("14-unfreeze", "wrong-timing", "a fixed number of blocks (3, a TransferNet's)", (unfreeze_three_blocks,),
            story="n = 3 written in: a backbone of 2 or 4 blocks unfreezes on the wrong epochs"),
    Mistake("14-unfreeze", "wrong-timing", "parameters(recurse=False)", (unfreeze_direct_parameters,),
            story="loops over each block's direct parameters"),
    Mistake("14-unfreeze", "wrong-timing", "all blocks unfrozen at once", (unfreeze_all_at_once,),
            story="the whole backbone at epoch `every`"),
    Mistake("14-unfreeze", "wrong-order", "counted from the bottom", solution_cell(
        "def gradual_unfreeze(model, epoch, every):\n"
        "    blocks = [block for block in model.backbone if list(block.parameters())]\n"
        "    for index, block in enumerate(blocks):\n"
        "        block.requires_grad_(epoch >= every * (index + 1))\n"
        "    model.head.requires_grad_(True)\n",
        "gradual_unfreeze"),
        story="blocks counted from the bottom: the most general block unfreezes first", planted=True),
    # 14-lora
    Mistake("14-lora", "base-trainable", "assigned to the module object (base)", (lora_variant(freeze="attribute"),),
            story="self.base.requires_grad = False"),
    Mistake("14-lora", "base-trainable", "only the base weight was frozen", (lora_variant(freeze="weight"),),
            story="base.weight.requires_grad_(False): the bias still trains"),
    Mistake("14-lora", "base-trainable", "base.weight",
            (lora_variant(freeze=False),), story="base.eval() taken for freezing"),
    Mistake("14-lora", "wrong-adapter", "not wrapped in nn.Parameter",
            (lora_variant(register=False),), story="plain tensors with requires_grad"),
    Mistake("14-lora", "wrong-adapter", "no gradient",
            (lora_variant(detach_b=True),), story="B detached in forward"),
    Mistake("14-lora", "start-differs", "lora_B does not start at zero",
            (lora_variant(b_init="random"),), story="both adapters random"),
    Mistake("14-lora", "wrong-init", "neither ever moves",
            (lora_variant(a_init="zeros"),), story="both adapters zero"),
    Mistake("14-lora", "wrong-forward", "the scaling is alpha, not alpha / r",
            (lora_variant(scale="alpha"),), story="scales by alpha"),
    Mistake("14-lora", "wrong-forward", "alpha // r, a floor division", (lora_variant(scale="alpha//r"),),
            story="self.scaling = alpha // r: integer division of the ints the paper's configs use"),
    Mistake("14-lora", "wrong-forward", "torch.mm", lora_forward(_forward_mm),
            story="torch.mm in forward: raises on a 3-d input"),
    Mistake("14-lora", "wrong-forward", "returned shape (14, 5)", lora_forward(_forward_flattened),
            story="flattens the leading dimensions and never restores them"),
    Mistake("14-lora", "wrong-forward", "the scaling alpha / r is missing",
            (lora_variant(scale="none"),), story="no scaling"),
    Mistake("14-lora", "merge-differs", "the scaling alpha / r is missing from the merged weight",
            (lora_variant(merge_scale=False),), story="merge forgets the scaling"),
    Mistake("14-lora", "merge-differs", "bias was not copied",
            (lora_variant(merge_bias=False),), story="merge drops the bias"),
    Mistake("14-lora", "merge-differs", "returned dict", lora_merge_returns_state, story="merge returns a state dict"),
    Mistake("14-lora", "merge-modifies", "counted twice",
            (lora_variant(merge_in_place=True),), story="merges into self.base.weight in place"),
    Mistake("14-lora", "wrong-forward", "the scaling is alpha, not alpha / r", solution_cell(
        "class LoRALinear(nn.Module):\n"
        "    def __init__(self, base, r, alpha):\n"
        "        super().__init__()\n"
        "        self.base = base.requires_grad_(False)\n"
        "        self.scaling = alpha\n"
        "        self.lora_A = nn.Parameter(torch.randn(r, base.in_features) * 0.01)\n"
        "        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r))\n"
        "\n"
        "    def forward(self, x):\n"
        "        return self.base(x) + (x @ self.lora_A.T @ self.lora_B.T) * self.scaling\n"
        "\n"
        "    @torch.no_grad()\n"
        "    def merge(self):\n"
        "        merged = nn.Linear(self.base.in_features, self.base.out_features, bias=self.base.bias is not None)\n"
        "        merged.weight.copy_(self.base.weight + self.scaling * self.lora_B @ self.lora_A)\n"
        "        if self.base.bias is not None:\n"
        "            merged.bias.copy_(self.base.bias)\n"
        "        return merged\n",
        "LoRALinear"),
        story="scaled by alpha instead of alpha / r", planted=True),
]

CORRECT = [
    Correct("14-load-pretrained", (load_checked,), story="filters in a loop, raises KeyError"),
    Correct("14-load-pretrained", (load_strict_with_own_head,), story="completes with its own head, strict load"),
    Correct("14-load-pretrained", (load_by_key_sets,), story="key sets compared first, removeprefix, strict load"),
    Correct("14-train-mode", (mode_by_class_name,), story="by class name, train(True)/train(False)"),
    Correct("14-train-mode", (mode_by_apply,), story="model.apply with the three BatchNorm classes"),
    Correct("14-train-mode", (mode_by_named_modules,), story="named_modules, weight and bias flags"),
    Correct("14-param-groups", (groups_by_loop,), story="four named lists"),
    Correct("14-param-groups", (groups_by_module_type,), story="by module type, decay as the default"),
    Correct("14-param-groups", (groups_by_comprehensions,), story="a key function and one comprehension"),
    Correct("14-param-groups", (groups_names_from_state_dict_keep_vars,),
            story="state_dict(keep_vars=True), buffers skipped"),
    Correct("14-unfreeze", (unfreeze_by_name,), story="parameter by parameter, from the name"),
    Correct("14-unfreeze", (unfreeze_reversed,), story="from the top, epoch // every blocks"),
    Correct("14-unfreeze", (unfreeze_by_parameter_flags,), story="p.requires_grad = ..., blocks counted with sum"),
    Correct("14-unfreeze", (unfreeze_setattr_and_method,), story="block.requires_grad = flag beside requires_grad_"),
    Correct("14-lora", (LoRAByEinsum,), story="explicit delta, F.linear, gaussian A"),
    Correct("14-lora", (LoRAByFunctionalLinear,), story="F.linear twice, deepcopy merge with add_(alpha=)"),
    Correct("14-lora", (LoRAByMatmul,), story="matmul on the flattened input, reshaped back; load_state_dict merge"),
]


@pytest.mark.parametrize("correct", list({c.task: c for c in reversed(CORRECT)}.values()), ids=str)  # one per task
def test_judges_refuse_shortened_observations(correct):
    assert_forgeries_refused(correct.task, *correct.objects, case=Case())
