"""Lesson 02 checks: each rejects planted bugs with its code and message, and accepts different correct solutions."""

from __future__ import annotations

import math
from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from harness.checks import check
from harness.checks.testing import assert_check_fails, assert_check_passes


# ------------------------------------------------------------------------------------------------------ 02-mlp
class MLPModuleList(nn.Module):
    def __init__(self, sizes: list[int], dropout: float = 0.0) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
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
        for a, b in zip(sizes[:-2], sizes[1:-1]):
            blocks += [nn.Linear(a, b), nn.ReLU(), nn.Dropout(dropout)]
        self.net = nn.Sequential(*blocks, nn.Linear(sizes[-2], sizes[-1]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class MLPNoSuper(MLPModuleList):
    def __init__(self, sizes: list[int], dropout: float = 0.0) -> None:
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))


class MLPPlainList(MLPModuleList):
    def __init__(self, sizes: list[int], dropout: float = 0.0) -> None:
        nn.Module.__init__(self)
        self.layers = [nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:])]
        self.p = dropout


class MLPNoBias(MLPModuleList):
    def __init__(self, sizes: list[int], dropout: float = 0.0) -> None:
        super().__init__(sizes, dropout)
        self.layers = nn.ModuleList(nn.Linear(a, b, bias=False) for a, b in zip(sizes[:-1], sizes[1:]))


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


@pytest.mark.parametrize("solution", [MLPModuleList, MLPSequential])
def test_mlp_accepts_correct(solution: type, capsys) -> None:
    assert_check_passes("02-mlp", solution, capsys=capsys)


@pytest.mark.parametrize("solution, code, phrase", [
    (MLPNoSuper, "missing-super-init", "super().__init__()"),
    (MLPPlainList, "unregistered-layers", "nn.ModuleList"),
    (MLPNoBias, "wrong-layers", "with biases"),
    (MLPReluEverywhere, "relu-after-last", "never negative"),
    (MLPLinearOnly, "missing-activation", "one big linear map"),
    (MLPSigmoid, "wrong-forward", "Linear -> ReLU"),
    (MLPDropoutAlwaysOn, "dropout-in-eval", "training=True"),
    (MLPIgnoresDropout, "dropout-missing", "identical outputs twice"),
])
def test_mlp_rejects_bug(solution: type, code: str, phrase: str) -> None:
    assert_check_fails("02-mlp", solution, code=code, phrase=phrase)


# ------------------------------------------------------------------------------------------ 02-count-trainable
def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def count_by_identity(model: nn.Module) -> int:
    unique = {id(p): p for _, p in model.named_parameters(remove_duplicate=False) if p.requires_grad}
    return sum(p.numel() for p in unique.values())


@pytest.mark.parametrize("solution", [count_parameters, count_by_identity])
def test_count_trainable_accepts_correct(solution: Callable, capsys) -> None:
    assert_check_passes("02-count-trainable", solution, capsys=capsys)


@pytest.mark.parametrize("solution, code, phrase", [
    (lambda m: sum(1 for p in m.parameters() if p.requires_grad), "counts-tensors", "not of numbers"),
    (lambda m: sum(p.numel() for _, p in m.named_parameters(remove_duplicate=False) if p.requires_grad),
     "counts-shared-twice", "counted twice"),
    (lambda m: sum(t.numel() for t in m.state_dict().values()), "counts-buffers", "running statistics"),
    (lambda m: sum(p.numel() for p in m.parameters()), "counts-frozen", "requires_grad=False"),
    (lambda m: sum(p.numel() for p in m.parameters() if p.requires_grad and p.ndim >= 2), "wrong-count",
     "trainable scalars"),
    (lambda m: torch.tensor([p.numel() for p in m.parameters() if p.requires_grad]).sum(), "not-an-int", "Python int"),
])
def test_count_trainable_rejects_bug(solution: Callable, code: str, phrase: str) -> None:
    assert_check_fails("02-count-trainable", solution, code=code, phrase=phrase)


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


@pytest.mark.parametrize("solution", [StandardizerLerp, StandardizerUnbiased])
def test_running_standardizer_accepts_correct(solution: type, capsys) -> None:
    assert_check_passes("02-running-standardizer", solution, capsys=capsys)


@pytest.mark.parametrize("solution, code, phrase", [
    (StandardizerNoSuper, "missing-super-init", "super().__init__()"),
    (StandardizerParameters, "buffer-is-parameter", "nn.Parameter"),
    (StandardizerPlainAttributes, "not-registered", "register_buffer"),
    (StandardizerNotPersistent, "not-in-state-dict", "persistent=False"),
    (StandardizerZeroVariance, "wrong-initial-values", "zeros and ones"),
    (StandardizerTracksGradient, "tracks-gradient", "torch.no_grad()"),
    (StandardizerSwappedMomentum, "wrong-update", "swapped"),
    (StandardizerRunningInTraining, "wrong-output", "batch's own statistics"),
    (StandardizerUpdatesInEval, "updates-in-eval", "self.training"),
    (StandardizerBatchStatsAlways, "batch-stats-in-eval", "use the batch's statistics"),
    (StandardizerCachedScale, "state-dict-round-trip", "fresh module"),
    (StandardizerFloat32Output, "does-not-move", "float64"),
])
def test_running_standardizer_rejects_bug(solution: type, code: str, phrase: str) -> None:
    assert_check_fails("02-running-standardizer", solution, code=code, phrase=phrase)


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


@pytest.mark.parametrize("solution", [freeze_with_modules, freeze_by_name])
def test_freeze_backbone_accepts_correct(solution: Callable, capsys) -> None:
    assert_check_passes("02-freeze-backbone", solution, capsys=capsys)


@pytest.mark.parametrize("solution, code, phrase, hidden", [
    (freeze_attribute, "backbone-trainable", "plain attribute", False),
    (freeze_everything, "head-frozen", "head parameters do not require grad", False),
    (freeze_backbone_only, "head-frozen", "it was frozen before your function ran", True),
])
def test_freeze_backbone_rejects_bug(solution: Callable, code: str, phrase: str, hidden: bool) -> None:
    assert_check_fails("02-freeze-backbone", solution, code=code, phrase=phrase, hidden=hidden)


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


@pytest.mark.parametrize("solution", [init_kaiming, init_uniform_with_apply])
def test_init_weights_accepts_correct(solution: Callable, capsys) -> None:
    assert_check_passes("02-init-weights", solution, capsys=capsys)


@pytest.mark.parametrize("solution, code, phrase", [
    (init_copies, "not-initialised", "initialised copies"),
    (init_children_only, "missed-nested-layers", "model.modules()"),
    (init_fan_out, "wrong-std", "mode='fan_out'"),
    (init_shifted, "wrong-mean", "mean 0"),
    (init_weights_only, "bias-not-zero", "nn.init.zeros_"),
    (init_every_parameter, "norm-changed", "LayerNorm"),
])
def test_init_weights_rejects_bug(solution: Callable, code: str, phrase: str) -> None:
    assert_check_fails("02-init-weights", solution, code=code, phrase=phrase)


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


@pytest.mark.parametrize("solution", [groups_by_key, groups_four_lists])
def test_param_groups_accepts_correct(solution: Callable, capsys) -> None:
    assert_check_passes("02-param-groups", solution, capsys=capsys)


@pytest.mark.parametrize("solution, code, phrase, hidden", [
    (groups_with_frozen, "frozen-params-included", "frozen parameter backbone.0.weight", True),
    (groups_head_decay_only, "missing-params", "is in no group", False),
    (groups_detached, "missing-params", "copies", False),
    (groups_overlapping, "duplicate-params", "more than one", False),
    (groups_decay_everything, "decay-on-bias-or-norm", "no regularising benefit", False),
    (groups_off_by_one, "no-decay-on-weights", "sorts by name instead of p.ndim", False),
    (groups_missing_weight_decay, "no-decay-on-weights", "weight_decay 0.777", False),
    (groups_swapped_lr, "wrong-lr", "(backbone)", False),
])
def test_param_groups_rejects_bug(solution: Callable, code: str, phrase: str, hidden: bool) -> None:
    assert_check_fails("02-param-groups", solution, code=code, phrase=phrase, hidden=hidden)


def test_hints_exist_for_every_task(capsys) -> None:
    from harness.checks import hint

    tasks = ("02-mlp", "02-count-trainable", "02-running-standardizer", "02-freeze-backbone", "02-init-weights",
             "02-param-groups")
    for task in tasks:
        hint(task, 2)
    assert capsys.readouterr().out.count("Hint 2/2") == len(tasks)


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
