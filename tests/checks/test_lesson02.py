"""Lesson 02 checks: each exercise's mutation set (plausible mistakes, each failing with its requirement's code and
message on the visible check) and correct variants written differently (passing visible, hidden and drawn cases)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from harness.checks import CheckFailed, check, core, hint
from harness.checks.lesson02.param_groups import group_model
from harness.checks.testing import Correct, Mistake, solution_cell
from harness.contract.case import Case
from harness.judges.lesson02.common import zipped_state_dict_names
from tests.exercises import lesson_tasks


# ------------------------------------------------------------------------------------------------------ 02-mlp
class MLPModuleList(nn.Module):
    def __init__(self, sizes: list[int], dropout: float = 0.0) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:], strict=True))
        self.p = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for index, layer in enumerate(self.layers):
            x = layer(x)
            if index < len(self.layers) - 1:
                x = F.dropout(torch.relu(x), self.p, training=self.training)
        return x


class MLPSequential(nn.Module):
    def __init__(self, sizes: list[int], dropout: float = 0.0) -> None:
        super().__init__()
        blocks: list[nn.Module] = []
        for a, b in zip(sizes[:-2], sizes[1:-1], strict=True):
            blocks += [nn.Linear(a, b), nn.ReLU(), nn.Dropout(dropout)]
        self.net = nn.Sequential(*blocks, nn.Linear(sizes[-2], sizes[-1]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class MLPNoSuper(MLPModuleList):
    def __init__(self, sizes: list[int], dropout: float = 0.0) -> None:
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:], strict=True))


class MLPPlainList(MLPModuleList):
    def __init__(self, sizes: list[int], dropout: float = 0.0) -> None:
        nn.Module.__init__(self)
        self.layers = [nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:], strict=True)]
        self.p = dropout


class MLPNoBias(MLPModuleList):
    def __init__(self, sizes: list[int], dropout: float = 0.0) -> None:
        super().__init__(sizes, dropout)
        self.layers = nn.ModuleList(nn.Linear(a, b, bias=False) for a, b in zip(sizes[:-1], sizes[1:], strict=True))


class MLPReluEverywhere(MLPModuleList):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = F.dropout(torch.relu(layer(x)), self.p, training=self.training)
        return x


class MLPLinearOnly(MLPModuleList):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class MLPSigmoid(MLPModuleList):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        *hidden, last = self.layers
        for layer in hidden:
            x = torch.sigmoid(layer(x))
        return last(x)


class MLPDropoutAlwaysOn(MLPModuleList):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        *hidden, last = self.layers
        for layer in hidden:
            x = F.dropout(torch.relu(layer(x)), self.p)  # the bug: training defaults to True
        return last(x)


class MLPIgnoresDropout(MLPModuleList):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        *hidden, last = self.layers
        for layer in hidden:
            x = torch.relu(layer(x))
        return last(x)


class MLPManualDropout(MLPModuleList):
    """Correct: a dropout mask drawn by hand, in train mode only, survivors rescaled."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        *hidden, last = self.layers
        for layer in hidden:
            x = torch.relu(layer(x))
            if self.training and self.p > 0:
                x = x * (torch.rand_like(x) >= self.p) / (1 - self.p)
        return last(x)


class MLPDefaultDropout(MLPModuleList):
    def __init__(self, sizes: list[int], dropout: float = 0.0) -> None:
        super().__init__(sizes, dropout)
        self.dropout = nn.Dropout()  # the bug: nn.Dropout's default p=0.5, the argument is ignored

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        *hidden, last = self.layers
        for layer in hidden:
            x = self.dropout(torch.relu(layer(x)))
        return last(x)


class MLPKeepProbability(MLPModuleList):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        *hidden, last = self.layers
        for layer in hidden:
            x = F.dropout(torch.relu(layer(x)), 1 - self.p, training=self.training)  # the bug: keep_prob, TF 1 style
        return last(x)


class MLPMaskWithoutRescale(MLPModuleList):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        *hidden, last = self.layers
        for layer in hidden:
            x = torch.relu(layer(x))
            if self.training:
                x = x * (torch.rand_like(x) >= self.p)  # the bug: survivors not scaled by 1 / (1 - p)
        return last(x)


class MLPDropoutFirstOnly(MLPModuleList):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        *hidden, last = self.layers
        for index, layer in enumerate(hidden):
            x = torch.relu(layer(x))
            if index == 0:
                x = F.dropout(x, self.p, training=self.training)  # the bug: only after the first hidden layer
        return last(x)


class MLPDropoutOnOutput(MLPModuleList):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for index, layer in enumerate(self.layers):
            x = layer(x)
            if index < len(self.layers) - 1:
                x = torch.relu(x)
            x = F.dropout(x, self.p, training=self.training)  # the bug: the output scores dropped too
        return x


class MLPInputDropout(MLPModuleList):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        *hidden, last = self.layers
        for layer in hidden:
            x = torch.relu(layer(F.dropout(x, self.p, training=self.training)))  # the bug: dropout before each layer
        return last(F.dropout(x, self.p, training=self.training))


# ------------------------------------------------------------------------------------------ 02-count-trainable
def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def count_by_identity(model: nn.Module) -> int:
    unique = {id(p): p for _, p in model.named_parameters(remove_duplicate=False) if p.requires_grad}
    return sum(p.numel() for p in unique.values())


def count_unique_tensors(model: nn.Module) -> int:
    return sum(p.numel() for p in {p for p in model.parameters() if p.requires_grad})


def count_direct_children(model: nn.Module) -> int:
    return sum(p.numel() for child in model.children() for p in child.parameters(recurse=False) if p.requires_grad)


def count_with_numpy(model: nn.Module) -> int:
    return np.sum([p.numel() for p in model.parameters() if p.requires_grad])


# -------------------------------------------------------------------------------------- 02-running-standardizer
class StandardizerLerp(nn.Module):
    def __init__(self, num_features: int, momentum: float = 0.1, eps: float = 1e-5) -> None:
        super().__init__()
        self.momentum, self.eps = momentum, eps
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))

    def statistics(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.training:
            return self.running_mean, self.running_var
        mean, var = x.mean(0), x.var(0, unbiased=False)
        with torch.no_grad():
            self.running_mean.lerp_(mean, self.momentum)
            self.running_var.lerp_(var, self.momentum)
        return mean, var

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean, var = self.statistics(x)
        return (x - mean) / torch.sqrt(var + self.eps)


class StandardizerUnbiased(StandardizerLerp):
    def statistics(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.training:
            return self.running_mean, self.running_var
        mean, var = x.mean(0), x.var(0)
        self.running_mean.mul_(1 - self.momentum).add_(self.momentum * mean.detach())
        self.running_var.mul_(1 - self.momentum).add_(self.momentum * var.detach())
        return mean, var


class StandardizerNoSuper(StandardizerLerp):
    def __init__(self, num_features: int, momentum: float = 0.1, eps: float = 1e-5) -> None:
        self.momentum, self.eps = momentum, eps
        self.register_buffer("running_mean", torch.zeros(num_features))


class StandardizerParameters(StandardizerLerp):
    def __init__(self, num_features: int, momentum: float = 0.1, eps: float = 1e-5) -> None:
        nn.Module.__init__(self)
        self.momentum, self.eps = momentum, eps
        self.running_mean = nn.Parameter(torch.zeros(num_features), requires_grad=False)
        self.running_var = nn.Parameter(torch.ones(num_features), requires_grad=False)


class StandardizerPlainAttributes(StandardizerLerp):
    def __init__(self, num_features: int, momentum: float = 0.1, eps: float = 1e-5) -> None:
        nn.Module.__init__(self)
        self.momentum, self.eps = momentum, eps
        self.running_mean, self.running_var = torch.zeros(num_features), torch.ones(num_features)


class StandardizerNotPersistent(StandardizerLerp):
    def __init__(self, num_features: int, momentum: float = 0.1, eps: float = 1e-5) -> None:
        nn.Module.__init__(self)
        self.momentum, self.eps = momentum, eps
        self.register_buffer("running_mean", torch.zeros(num_features), persistent=False)
        self.register_buffer("running_var", torch.ones(num_features), persistent=False)


class StandardizerZeroVariance(StandardizerLerp):
    def __init__(self, num_features: int, momentum: float = 0.1, eps: float = 1e-5) -> None:
        super().__init__(num_features, momentum, eps)
        self.running_var.zero_()


class StandardizerTracksGradient(StandardizerLerp):
    def statistics(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.training:
            return self.running_mean, self.running_var
        mean, var = x.mean(0), x.var(0, unbiased=False)
        self.running_mean = (1 - self.momentum) * self.running_mean + self.momentum * mean
        self.running_var = (1 - self.momentum) * self.running_var + self.momentum * var
        return mean, var


class StandardizerSwappedMomentum(StandardizerLerp):
    def statistics(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.training:
            return self.running_mean, self.running_var
        mean, var = x.mean(0), x.var(0, unbiased=False)
        with torch.no_grad():
            self.running_mean.lerp_(mean, 1 - self.momentum)
            self.running_var.lerp_(var, 1 - self.momentum)
        return mean, var


class StandardizerRunningInTraining(StandardizerLerp):
    def statistics(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.training:
            super().statistics(x)
        return self.running_mean, self.running_var


class StandardizerUpdatesInEval(StandardizerLerp):
    def statistics(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, var = x.mean(0), x.var(0, unbiased=False)
        with torch.no_grad():
            self.running_mean.lerp_(mean, self.momentum)
            self.running_var.lerp_(var, self.momentum)
        return (mean, var) if self.training else (self.running_mean, self.running_var)


class StandardizerBatchStatsAlways(StandardizerLerp):
    def statistics(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, var = x.mean(0), x.var(0, unbiased=False)
        if self.training:
            with torch.no_grad():
                self.running_mean.lerp_(mean, self.momentum)
                self.running_var.lerp_(var, self.momentum)
        return mean, var


class StandardizerCachedScale(StandardizerLerp):
    """Keeps the eval-time scale in a plain attribute, which state_dict does not save."""

    def __init__(self, num_features: int, momentum: float = 0.1, eps: float = 1e-5) -> None:
        super().__init__(num_features, momentum, eps)
        self.scale = torch.ones(num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            out = super().forward(x)
            self.scale = torch.rsqrt(self.running_var + self.eps)
            return out
        return (x - self.running_mean) * self.scale.to(x.dtype)


class StandardizerFloat32Output(StandardizerLerp):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x).float()


class StandardizerBatchNormFunction(StandardizerLerp):
    """Correct: F.batch_norm updates the buffers in place (with the unbiased variance) and normalises."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.batch_norm(x, self.running_mean, self.running_var, training=self.training, momentum=self.momentum,
                            eps=self.eps)


class StandardizerDefaultMomentum(StandardizerLerp):
    def statistics(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.training:
            return self.running_mean, self.running_var
        mean, var = x.mean(0), x.var(0, unbiased=False)
        with torch.no_grad():
            self.running_mean.mul_(0.9).add_(0.1 * mean)  # the bug: BatchNorm's default momentum, not the argument
            self.running_var.mul_(0.9).add_(0.1 * var)
        return mean, var


class StandardizerEpsOnStd(StandardizerLerp):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean, var = self.statistics(x)
        return (x - mean) / (var.sqrt() + self.eps)  # the bug: eps added to the std


class StandardizerNoEps(StandardizerLerp):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean, var = self.statistics(x)
        return (x - mean) / var.sqrt()


class StandardizerFixedEps(StandardizerLerp):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean, var = self.statistics(x)
        return (x - mean) / torch.sqrt(var + 1e-5)  # the bug: the eps argument ignored


# ------------------------------------------------------------------------------------------ 02-freeze-backbone
def freeze_with_modules(model: nn.Module) -> None:
    model.backbone.requires_grad_(False)
    model.head.requires_grad_(True)


def freeze_by_name(model: nn.Module) -> None:
    for name, param in model.named_parameters():
        param.requires_grad_(not name.startswith("backbone."))


def freeze_attribute(model: nn.Module) -> None:
    model.backbone.requires_grad = False  # the bug: an attribute on the module, not on its parameters


def freeze_everything(model: nn.Module) -> None:
    model.requires_grad_(False)
    for param in model.head.parameters():
        if param.ndim >= 2:
            param.requires_grad_(True)


def freeze_backbone_only(model: nn.Module) -> None:
    model.backbone.requires_grad_(False)


def freeze_loop(model: nn.Module) -> None:
    for param in model.backbone.parameters():
        param.requires_grad = False
    for param in model.head.parameters():
        param.requires_grad = True


def freeze_eval(model: nn.Module) -> None:
    model.backbone.eval()  # the bug: eval() switches dropout and batch norm, it freezes nothing
    model.head.requires_grad_(True)


def freeze_direct_linears(model: nn.Module) -> None:
    for module in model.backbone.children():
        if isinstance(module, nn.Linear):  # the bug: the norm and the nested Linear are missed
            module.requires_grad_(False)
    model.head.requires_grad_(True)


def freeze_not_recursive(model: nn.Module) -> None:
    for param in model.backbone.parameters(recurse=False):  # the bug: a Sequential holds no parameters itself
        param.requires_grad_(False)
    model.head.requires_grad_(True)


# --------------------------------------------------------------------------------------------- 02-init-weights
def init_kaiming(model: nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
            if module.bias is not None:
                nn.init.zeros_(module.bias)


def init_uniform_with_apply(model: nn.Module) -> None:
    def initialise(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            bound = math.sqrt(6 / module.in_features)  # uniform(-b, b) has std b / sqrt(3) = sqrt(2 / fan_in)
            with torch.no_grad():
                module.weight.uniform_(-bound, bound)
                if module.bias is not None:
                    module.bias.zero_()

    model.apply(initialise)


def init_copies(model: nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, nn.Linear):
            weight = module.weight.detach().clone()
            nn.init.kaiming_normal_(weight, nonlinearity="relu")


def init_children_only(model: nn.Module) -> None:
    for module in model.children():
        if isinstance(module, nn.Linear):
            nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
            nn.init.zeros_(module.bias)


def init_fan_out(model: nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            if module.bias is not None:
                nn.init.zeros_(module.bias)


def init_shifted(model: nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, nn.Linear):
            std = math.sqrt(2 / module.in_features)
            nn.init.normal_(module.weight, mean=std, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)


def init_weights_only(model: nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.kaiming_normal_(module.weight, nonlinearity="relu")


def init_every_parameter(model: nn.Module) -> None:
    for param in model.parameters():
        if param.ndim >= 2:
            nn.init.kaiming_normal_(param, nonlinearity="relu")
        else:
            nn.init.zeros_(param)


def init_normal_by_hand(model: nn.Module) -> None:
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Linear):
                module.weight.normal_(0.0, math.sqrt(2 / module.in_features))
                if module.bias is not None:
                    module.bias.zero_()


def init_new_parameters(model: nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, nn.Linear):  # the bug: new Parameters replace the ones an optimizer would hold
            std = math.sqrt(2 / module.in_features)
            module.weight = nn.Parameter(torch.randn(module.out_features, module.in_features) * std)
            if module.bias is not None:
                module.bias = nn.Parameter(torch.zeros(module.out_features))


def init_xavier(model: nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.xavier_normal_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)


def init_assumes_bias(model: nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
            nn.init.zeros_(module.bias)  # the bug: a Linear built with bias=False has bias None


# --------------------------------------------------------------------------------------------- 02-param-groups
def groups_by_key(model: nn.Module, *, lr: float, weight_decay: float, backbone_lr: float) -> list[dict]:
    groups: dict[tuple[bool, bool], list] = {}
    for name, param in model.named_parameters():
        if param.requires_grad:
            groups.setdefault((name.startswith("backbone."), param.ndim >= 2), []).append(param)
    return [{"params": params, "lr": backbone_lr if backbone else lr, "weight_decay": weight_decay if decay else 0.0}
            for (backbone, decay), params in groups.items()]


def groups_four_lists(model: nn.Module, *, lr: float, weight_decay: float, backbone_lr: float) -> list[dict]:
    def split(module: nn.Module) -> tuple[list, list]:
        trainable = [p for p in module.parameters() if p.requires_grad]
        return [p for p in trainable if p.ndim >= 2], [p for p in trainable if p.ndim < 2]

    (backbone_decay, backbone_plain), (head_decay, head_plain) = split(model.backbone), split(model.head)
    return [
        {"params": backbone_decay, "lr": backbone_lr, "weight_decay": weight_decay},
        {"params": backbone_plain, "lr": backbone_lr, "weight_decay": 0.0},
        {"params": head_decay, "lr": lr, "weight_decay": weight_decay},
        {"params": head_plain, "lr": lr, "weight_decay": 0.0},
    ]


def groups_with_frozen(model, *, lr, weight_decay, backbone_lr):
    groups = []
    for module, module_lr in ((model.backbone, backbone_lr), (model.head, lr)):
        params = list(module.parameters())
        groups.append({"params": [p for p in params if p.ndim >= 2], "lr": module_lr, "weight_decay": weight_decay})
        groups.append({"params": [p for p in params if p.ndim < 2], "lr": module_lr, "weight_decay": 0.0})
    return groups


def groups_head_decay_only(model, *, lr, weight_decay, backbone_lr):
    return [g for g in groups_four_lists(model, lr=lr, weight_decay=weight_decay, backbone_lr=backbone_lr)][:3]


def groups_overlapping(model, *, lr, weight_decay, backbone_lr):
    return [{"params": list(model.parameters()), "lr": lr, "weight_decay": weight_decay},
            {"params": [p for p in model.parameters() if p.ndim < 2], "lr": lr, "weight_decay": 0.0}]


def groups_decay_everything(model, *, lr, weight_decay, backbone_lr):
    return [{"params": [p for p in model.backbone.parameters() if p.requires_grad], "lr": backbone_lr,
             "weight_decay": weight_decay},
            {"params": [p for p in model.head.parameters() if p.requires_grad], "lr": lr, "weight_decay": weight_decay}]


def groups_off_by_one(model, *, lr, weight_decay, backbone_lr):
    groups = groups_by_key(model, lr=lr, weight_decay=weight_decay, backbone_lr=backbone_lr)
    for group in groups:
        group["weight_decay"] = weight_decay if all(p.ndim > 2 for p in group["params"]) else 0.0
    return groups


def groups_missing_weight_decay(model, *, lr, weight_decay, backbone_lr):
    groups = groups_by_key(model, lr=lr, weight_decay=weight_decay, backbone_lr=backbone_lr)
    for group in groups:
        if group["weight_decay"]:
            del group["weight_decay"]
    return groups


def groups_swapped_lr(model, *, lr, weight_decay, backbone_lr):
    return groups_by_key(model, lr=backbone_lr, weight_decay=weight_decay, backbone_lr=lr)


def groups_detached(model, *, lr, weight_decay, backbone_lr):
    groups = groups_by_key(model, lr=lr, weight_decay=weight_decay, backbone_lr=backbone_lr)
    return [{**group, "params": [p.detach() for p in group["params"]]} for group in groups]


def groups_without_lr_for_head(model, *, lr, weight_decay, backbone_lr):
    groups = groups_by_key(model, lr=lr, weight_decay=weight_decay, backbone_lr=backbone_lr)
    for group in groups:
        if group["lr"] == lr:
            del group["lr"]  # the bug: assumes the optimizer's lr, but make_param_groups' caller sets none
    return groups


def groups_zipped_state_dict(model, *, lr, weight_decay, backbone_lr):
    groups = []
    for name, param in zip(model.state_dict(), model.parameters()):  # noqa: B905  (state_dict holds buffers too)
        if param.requires_grad:
            groups.append({"params": [param], "lr": backbone_lr if name.startswith("backbone.") else lr,
                           "weight_decay": weight_decay if param.ndim >= 2 else 0.0})
    return groups


def groups_by_identity(model, *, lr, weight_decay, backbone_lr):
    """Correct too: backbone membership by identity, every parameter its own group."""
    backbone = {id(p) for p in model.backbone.parameters()}
    return [{"params": [p], "lr": backbone_lr if id(p) in backbone else lr,
             "weight_decay": weight_decay if p.ndim >= 2 else 0.0}
            for p in model.parameters() if p.requires_grad]


# ------------------------------------------------------------------------------------------------ mutation set
MISTAKES = [
    # 02-mlp
    Mistake("02-mlp", "missing-super-init", "super().__init__()", (MLPNoSuper,),
            story="forgets super().__init__(): the classic first nn.Module error"),
    Mistake("02-mlp", "unregistered-layers", "nn.ModuleList", (MLPPlainList,),
            story="keeps the layers in a Python list (the lesson's first pitfall, a forum FAQ)"),
    Mistake("02-mlp", "wrong-layers", "some without bias", (MLPNoBias,),
            story="builds the layers with bias=False"),
    Mistake("02-mlp", "relu-after-last", "never negative", (MLPReluEverywhere,),
            story="applies ReLU after every layer, the output layer included"),
    Mistake("02-mlp", "missing-activation", "one big linear map", (MLPLinearOnly,),
            story="stacks Linear layers without an activation"),
    Mistake("02-mlp", "wrong-forward", "another activation than ReLU", (MLPSigmoid,),
            story="uses sigmoid between the layers"),
    Mistake("02-mlp", "dropout-in-eval", "training=True", (MLPDropoutAlwaysOn,),
            story="F.dropout(x, p) without training=self.training (forum FAQ)"),
    Mistake("02-mlp", "dropout-missing", "zeroed no unit after hidden layer 1", (MLPIgnoresDropout,),
            story="accepts the dropout argument and never uses it"),
    Mistake("02-mlp", "dropout-missing", "zeroed no unit after hidden layer 2", (MLPDropoutFirstOnly,),
            story="applies dropout after the first hidden layer only"),
    Mistake("02-mlp", "wrong-dropout", "nn.Dropout()'s default", (MLPDefaultDropout,),
            story="nn.Dropout() without the argument: always p=0.5"),
    Mistake("02-mlp", "wrong-dropout", "probability of zeroing a unit, not of keeping it", (MLPKeepProbability,),
            story="passes the keep probability (TensorFlow 1's keep_prob habit)"),
    Mistake("02-mlp", "wrong-dropout", "without rescaling the survivors", (MLPMaskWithoutRescale,),
            story="draws a mask by hand and forgets the 1 / (1 - p) rescaling"),
    Mistake("02-mlp", "dropout-misplaced", "output is not the last Linear's result", (MLPDropoutOnOutput,),
            story="applies dropout after every layer, the output scores included"),
    Mistake("02-mlp", "dropout-misplaced", "does not receive the input x itself", (MLPInputDropout,),
            story="applies dropout before each layer, so the input is dropped too"),
    Mistake("02-mlp", "unregistered-layers", "nn.ModuleList", solution_cell(
        "class MLP(nn.Module):\n"
        "    def __init__(self, sizes, dropout=0.0):\n"
        "        super().__init__()\n"
        "        self.layers = [nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:])]  # the bug: a plain list\n"
        "        self.dropout = nn.Dropout(dropout)\n"
        "\n"
        "    def forward(self, x):\n"
        "        *hidden, last = self.layers\n"
        "        for layer in hidden:\n"
        "            x = self.dropout(torch.relu(layer(x)))\n"
        "        return last(x)\n",
        "MLP"),
        story="a plain list", planted=True),
    # 02-count-trainable
    Mistake("02-count-trainable", "counts-tensors", "not of numbers",
            (lambda m: sum(1 for p in m.parameters() if p.requires_grad),),
            story="len(list(model.parameters())): counts tensors"),
    Mistake("02-count-trainable", "counts-shared-twice", "counted twice",
            (lambda m: sum(p.numel() for _, p in m.named_parameters(remove_duplicate=False) if p.requires_grad),),
            story="named_parameters(remove_duplicate=False) counts a tied layer twice"),
    Mistake("02-count-trainable", "counts-buffers", "running statistics",
            (lambda m: sum(t.numel() for t in m.state_dict().values()),),
            story="sums the state_dict, buffers included (forum answer that circulates)"),
    Mistake("02-count-trainable", "counts-frozen", "requires_grad=False",
            (lambda m: sum(p.numel() for p in m.parameters()),),
            story="counts every parameter, frozen ones included"),
    Mistake("02-count-trainable", "wrong-count", "none of the usual slips",
            (lambda m: sum(p.numel() for p in m.parameters() if p.requires_grad and p.ndim >= 2),),
            story="counts only the weight matrices"),
    Mistake("02-count-trainable", "wrong-count", "nested Sequential", (count_direct_children,),
            story="walks model.children() without recursing into nested containers"),
    Mistake("02-count-trainable", "not-an-int", "returns a tensor",
            (lambda m: torch.tensor([p.numel() for p in m.parameters() if p.requires_grad]).sum(),),
            story="sums with torch: returns a tensor"),
    Mistake("02-count-trainable", "not-an-int", "numpy integer", (count_with_numpy,),
            story="np.sum returns numpy.int64"),
    Mistake("02-count-trainable", "counts-buffers", "running statistics", solution_cell(
        "def count_trainable(model):\n"
        "    return sum(t.numel() for t in model.state_dict().values())  # the bug: buffers counted too\n",
        "count_trainable"),
        story="buffers counted too", planted=True),
    # 02-running-standardizer
    Mistake("02-running-standardizer", "missing-super-init", "super().__init__()", (StandardizerNoSuper,),
            story="forgets super().__init__() before register_buffer"),
    Mistake("02-running-standardizer", "buffer-is-parameter", "nn.Parameter", (StandardizerParameters,),
            story="nn.Parameter(requires_grad=False) for the statistics"),
    Mistake("02-running-standardizer", "not-registered", "register_buffer", (StandardizerPlainAttributes,),
            story="plain tensor attributes: not saved, not moved"),
    Mistake("02-running-standardizer", "not-in-state-dict", "persistent=False", (StandardizerNotPersistent,),
            story="persistent=False copied from a positional-encoding example"),
    Mistake("02-running-standardizer", "wrong-initial-values", "zeros and ones", (StandardizerZeroVariance,),
            story="starts the running variance at zero"),
    Mistake("02-running-standardizer", "tracks-gradient", "torch.no_grad()", (StandardizerTracksGradient,),
            story="updates the buffers outside no_grad, by reassignment"),
    Mistake("02-running-standardizer", "wrong-update", "swapped", (StandardizerSwappedMomentum,),
            story="momentum and 1 - momentum swapped (Keras' convention)"),
    Mistake("02-running-standardizer", "wrong-update", "fixed at 0.1", (StandardizerDefaultMomentum,),
            story="hard-codes BatchNorm's default momentum 0.1"),
    Mistake("02-running-standardizer", "wrong-output", "batch's own statistics", (StandardizerRunningInTraining,),
            story="normalises with the running statistics in train mode"),
    Mistake("02-running-standardizer", "wrong-eps", "added to the standard deviation", (StandardizerEpsOnStd,),
            story="(x - mean) / (std + eps), a common variant of the formula"),
    Mistake("02-running-standardizer", "wrong-eps", "0 / 0 is nan", (StandardizerNoEps,),
            story="leaves eps out: a constant feature gives nan"),
    Mistake("02-running-standardizer", "wrong-eps", "fixed at 1e-5", (StandardizerFixedEps,),
            story="hard-codes eps=1e-5 and ignores the argument"),
    Mistake("02-running-standardizer", "updates-in-eval", "self.training", (StandardizerUpdatesInEval,),
            story="updates the statistics in every mode"),
    Mistake("02-running-standardizer", "batch-stats-in-eval", "use the batch's statistics",
            (StandardizerBatchStatsAlways,), story="normalises with the batch's statistics in eval mode too"),
    Mistake("02-running-standardizer", "state-dict-round-trip", "fresh module", (StandardizerCachedScale,),
            story="caches the eval scale in a plain attribute"),
    Mistake("02-running-standardizer", "does-not-move", "float64", (StandardizerFloat32Output,),
            story="casts the output to float32"),
    Mistake("02-running-standardizer", "not-registered", "register_buffer", solution_cell(
        "class RunningStandardizer(nn.Module):\n"
        "    def __init__(self, num_features, momentum=0.1, eps=1e-5):\n"
        "        super().__init__()\n"
        "        self.momentum, self.eps = momentum, eps\n"
        "        self.running_mean = torch.zeros(num_features)  # the bug: plain attributes, not buffers\n"
        "        self.running_var = torch.ones(num_features)\n"
        "\n"
        "    def forward(self, x):\n"
        "        if self.training:\n"
        "            mean, var = x.mean(dim=0), x.var(dim=0, unbiased=False)\n"
        "            with torch.no_grad():\n"
        "                self.running_mean.lerp_(mean, self.momentum)\n"
        "                self.running_var.lerp_(var, self.momentum)\n"
        "        else:\n"
        "            mean, var = self.running_mean, self.running_var\n"
        "        return (x - mean) / torch.sqrt(var + self.eps)\n",
        "RunningStandardizer"),
        story="plain attributes, not buffers", planted=True),
    # 02-freeze-backbone
    Mistake("02-freeze-backbone", "backbone-trainable", "plain attribute", (freeze_attribute,),
            story="module.requires_grad = False: the lesson's first trap"),
    Mistake("02-freeze-backbone", "backbone-trainable", "eval() switches dropout and batch norm", (freeze_eval,),
            story="thinks backbone.eval() freezes it (forum FAQ)"),
    Mistake("02-freeze-backbone", "backbone-trainable", "only some of the backbone's parameters",
            (freeze_direct_linears,), story="freezes the direct Linear children only"),
    Mistake("02-freeze-backbone", "backbone-trainable", "no flag of the backbone's parameters changed",
            (freeze_not_recursive,), story="parameters(recurse=False) on a Sequential"),
    Mistake("02-freeze-backbone", "head-frozen", "your function froze them too", (freeze_everything,),
            story="freezes the whole model, then unfreezes the head's weights only"),
    Mistake("02-freeze-backbone", "head-frozen", "came in frozen", (freeze_backbone_only,),
            story="freezes the backbone and assumes the head is already trainable"),
    Mistake("02-freeze-backbone", "backbone-trainable", "plain attribute", solution_cell(
        "def freeze_backbone(model):\n"
        "    model.backbone.requires_grad = False  # the bug: sets an attribute on the module, not on its parameters\n"
        "    model.head.requires_grad_(True)\n",
        "freeze_backbone"),
        story="sets an attribute on the module, not on its parameters", planted=True),
    # 02-init-weights
    Mistake("02-init-weights", "not-in-place", "new parameter objects", (init_new_parameters,),
            story="assigns new nn.Parameters instead of filling the old ones"),
    Mistake("02-init-weights", "not-initialised", "initialised copies", (init_copies,),
            story="initialises a detached clone"),
    Mistake("02-init-weights", "missed-nested-layers", "only the top level was visited", (init_children_only,),
            story="model.children() instead of model.modules()"),
    Mistake("02-init-weights", "wrong-std", "mode='fan_out'", (init_fan_out,),
            story="mode='fan_out', the default of some tutorials for convolutions"),
    Mistake("02-init-weights", "wrong-std", "another initialiser", (init_xavier,),
            story="Xavier (Glorot) init, meant for tanh"),
    Mistake("02-init-weights", "wrong-mean", "mean 0", (init_shifted,), story="passes the std as the mean too"),
    Mistake("02-init-weights", "bias-not-zero", "default (uniform) init", (init_weights_only,),
            story="initialises the weights and forgets the biases"),
    Mistake("02-init-weights", "norm-changed", "BatchNorm1d parameter blocks.1.1.weight changed",
            (init_every_parameter,),
            story="initialises every parameter by ndim, norm weights included"),
    Mistake("02-init-weights", "raised", "NoneType", (init_assumes_bias,),
            story="assumes every Linear has a bias"),
    Mistake("02-init-weights", "missed-nested-layers", "only the top level was visited", solution_cell(
        "def init_weights_(model):\n"
        "    for module in model.children():  # the bug: nested layers are never reached\n"
        "        if isinstance(module, nn.Linear):\n"
        "            nn.init.kaiming_normal_(module.weight, nonlinearity='relu')\n"
        "            nn.init.zeros_(module.bias)\n",
        "init_weights_"),
        story="nested layers are never reached", planted=True),
    # 02-param-groups
    Mistake("02-param-groups", "frozen-params-included", "frozen parameter backbone.0.weight", (groups_with_frozen,),
            story="no requires_grad filter"),
    Mistake("02-param-groups", "missing-params", "is in no group", (groups_head_decay_only,),
            story="a kind of parameter that no branch takes"),
    Mistake("02-param-groups", "missing-params", "copies", (groups_detached,),
            story="puts p.detach() in the groups"),
    Mistake("02-param-groups", "duplicate-params", "more than one", (groups_overlapping,),
            story="a group of everything plus a group of biases"),
    Mistake("02-param-groups", "decay-on-bias-or-norm", "also takes this bias or norm weight",
            (groups_decay_everything,),
            story="weight decay on every parameter"),
    Mistake("02-param-groups", "no-decay-on-weights", "misses this matrix", (groups_off_by_one,),
            story="ndim > 2 instead of >= 2"),
    Mistake("02-param-groups", "no-decay-on-weights", "sets no weight_decay", (groups_missing_weight_decay,),
            story="leaves weight_decay out of the decayed groups"),
    Mistake("02-param-groups", "wrong-lr", "swapped", (groups_swapped_lr,), story="lr and backbone_lr swapped"),
    Mistake("02-param-groups", "wrong-lr", "sets no lr", (groups_without_lr_for_head,),
            story="leaves lr out of the head's groups"),
    Mistake("02-param-groups", "wrong-lr", "paired with model.parameters() (zip)", (groups_zipped_state_dict,),
            story="names from zip(model.state_dict(), model.parameters()) (issue 43: passed without a buffer in the "
            "backbone)"),
    Mistake("02-param-groups", "decay-on-bias-or-norm", "also takes this bias or norm weight", solution_cell(
        "def make_param_groups(model, *, lr, weight_decay, backbone_lr):\n"
        "    # the bug: weight decay on every parameter, biases and LayerNorm weights included\n"
        "    return [\n"
        "        {'params': [p for p in model.backbone.parameters() if p.requires_grad], 'lr': backbone_lr,\n"
        "         'weight_decay': weight_decay},\n"
        "        {'params': [p for p in model.head.parameters() if p.requires_grad], 'lr': lr, 'weight_decay'"
        ": weight_decay},\n"
        "    ]\n",
        "make_param_groups"),
        story="weight decay on every parameter, biases and LayerNorm weights included", planted=True),
]

CORRECT = [
    Correct("02-mlp", (MLPModuleList,), story="ModuleList and F.dropout(training=self.training)"),
    Correct("02-mlp", (MLPSequential,), story="one nn.Sequential of Linear, ReLU, Dropout"),
    Correct("02-mlp", (MLPManualDropout,), story="a rescaled mask drawn by hand in train mode"),
    Correct("02-count-trainable", (count_parameters,), story="the one-line sum over parameters()"),
    Correct("02-count-trainable", (count_by_identity,), story="deduplicates by id"),
    Correct("02-count-trainable", (count_unique_tensors,), story="a set of tensors"),
    Correct("02-running-standardizer", (StandardizerLerp,), story="lerp_ under no_grad"),
    Correct("02-running-standardizer", (StandardizerUnbiased,), story="unbiased variance, detached update"),
    Correct("02-running-standardizer", (StandardizerBatchNormFunction,), story="F.batch_norm on the buffers"),
    Correct("02-freeze-backbone", (freeze_with_modules,), story="requires_grad_ on both modules"),
    Correct("02-freeze-backbone", (freeze_by_name,), story="by parameter name"),
    Correct("02-freeze-backbone", (freeze_loop,), story="setting p.requires_grad in loops"),
    Correct("02-init-weights", (init_kaiming,), story="kaiming_normal_ over modules()"),
    Correct("02-init-weights", (init_uniform_with_apply,), story="Kaiming uniform by hand with apply"),
    Correct("02-init-weights", (init_normal_by_hand,), story="normal_ under no_grad"),
    Correct("02-param-groups", (groups_by_key,), story="groups keyed by (backbone, decay)"),
    Correct("02-param-groups", (groups_four_lists,), story="four lists, some possibly empty"),
    Correct("02-param-groups", (groups_by_identity,), story="one group per parameter, backbone told by identity"),
]


TASKS = lesson_tasks("02")


@pytest.mark.parametrize("task", TASKS)
def test_hints_have_three_levels_and_name_a_section(task: str, capsys) -> None:
    for level in (1, 2, 3):
        hint(task, level)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" for ")[0] for line in lines] == ["Hint 1/3", "Hint 2/3", "Hint 3/3"]
    assert f'(Reread the section "{core.get(task).hints.section}".)' in lines[1]


def test_the_first_hint_follows_the_failure(capsys) -> None:
    core._hints_shown.pop("02-freeze-backbone", None)
    with pytest.raises(CheckFailed):
        check("02-freeze-backbone", freeze_backbone_only)
    hint("02-freeze-backbone")
    out = capsys.readouterr().out
    assert "(after [head-frozen])" in out and "Freeze the head by hand first" in out
    core._hints_shown.pop("02-freeze-backbone", None)
    core._last_failure.pop("02-freeze-backbone", None)


@pytest.mark.parametrize("task, solution", [
    ("02-mlp", MLPModuleList), ("02-count-trainable", count_parameters), ("02-running-standardizer", StandardizerLerp),
    ("02-freeze-backbone", freeze_with_modules), ("02-init-weights", init_kaiming), ("02-param-groups", groups_by_key),
])
def test_checks_leave_the_students_random_stream_alone(task: str, solution: Any, capsys) -> None:
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    check(task, solution, hidden=True)
    assert torch.equal(torch.rand(3), expected)


def test_attribute_on_the_module_gets_its_own_first_hint():
    """Issue 43: `block.requires_grad = flag` is told that the attribute went on the module, not its parameters, and
    hint 1 follows that cause (another backbone-trainable cause keeps the requirement's own hint)."""
    with pytest.raises(CheckFailed) as failure:
        check("02-freeze-backbone", freeze_attribute)
    assert failure.value.code == "backbone-trainable"
    assert "set on the module backbone itself" in str(failure.value)
    assert "only adds an attribute to the module" in failure.value.hint
    with pytest.raises(CheckFailed) as failure:
        check("02-freeze-backbone", freeze_eval)
    assert failure.value.hint is None


@pytest.mark.parametrize("hidden", [False, True])
def test_param_groups_case_has_a_buffer_before_backbone_parameters(hidden):
    """Issue 43: a buffer precedes backbone parameters in state_dict(), enough of them to give head parameters
    backbone names when names are zipped from state_dict() with parameters()."""
    zipped = zipped_state_dict_names(group_model(Case(hidden=hidden), freeze_first=True))
    assert any(name.startswith("head.") and given.startswith("backbone.") for name, given in zipped.items())
