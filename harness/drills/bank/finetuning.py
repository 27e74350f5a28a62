"""Drills on fine-tuning a pretrained model: freezing, parameter groups, loading into a new head, LoRA,
gradual unfreezing, and why a linear probe or a low learning rate often wins.

Self-contained: the models are built here from the case's seed (a "pretrained" backbone is a seeded one with
BatchNorm running statistics that are not the defaults), so the probe and the judge build identical ones.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

from harness.contract.case import Case
from harness.drills.core import Drill, add
from harness.drills.support import explain


class _PretrainedNet(nn.Module):
    """A small "pretrained" network: `backbone` (Linear, BatchNorm1d, ReLU, Linear, ReLU) and a Linear `head`."""

    def __init__(self, d_in: int, hidden: int, n_out: int) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(d_in, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
                                      nn.Linear(hidden, hidden), nn.ReLU())
        self.head = nn.Linear(hidden, n_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


def pretrained_sizes(case: Case) -> tuple[int, int, int]:
    """The pretrained network's sizes (d_in, hidden, n_out), drawn by the case."""
    gen = torch.Generator().manual_seed(case.seeded(900))
    d_in, hidden, n_out = (int(v) for v in torch.randint(3, 9, (3,), generator=gen))
    return d_in, hidden + 2, n_out


def pretrained_model(case: Case, base: int = 0, n_out: int | None = None) -> _PretrainedNet:
    """The case's "pretrained" network: seeded weights and non-default BatchNorm running statistics."""
    d_in, hidden, default_out = pretrained_sizes(case)
    torch.manual_seed(case.seeded(base))
    net = _PretrainedNet(d_in, hidden, default_out if n_out is None else n_out)
    bn = net.backbone[1]
    gen = torch.Generator().manual_seed(case.seeded(base + 1))
    with torch.no_grad():
        bn.running_mean.copy_(torch.randn(hidden, generator=gen) * 0.5)
        bn.running_var.copy_(torch.rand(hidden, generator=gen) + 0.5)
        bn.weight.copy_(torch.rand(hidden, generator=gen) + 0.5)
        bn.bias.copy_(torch.randn(hidden, generator=gen) * 0.1)
    return net


def shifted_batches(case: Case, base: int, n: int,
                     classes: int | None = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """`n` batches of 8 rows (regression targets, or class labels when `classes` is given), shifted away from
    the pretraining statistics so that BatchNorm in train mode would move its running statistics."""
    d_in, _, n_out = pretrained_sizes(case)
    gen = torch.Generator().manual_seed(case.seeded(base))
    out = []
    for _ in range(n):
        x = torch.randn(8, d_in, generator=gen) * 2 + 1
        y = (torch.randint(0, classes, (8,), generator=gen) if classes
             else torch.randn(8, n_out, generator=gen))
        out.append((x, y))
    return out


def finetune_lr(case: Case) -> float:
    """The case's fine-tuning learning rate."""
    return 0.05 + 0.01 * (case.seed % 7)


class _OptimizerSpy:
    """Records every `optimizer.step()` of any optimizer (the answer builds its own): the model's names of the
    parameters it holds, their gradients and values just before the step, and each group's lr."""

    def __init__(self, model: nn.Module) -> None:
        self.names = {id(p): name for name, p in model.named_parameters()}
        self.steps: list[dict[str, Any]] = []

    def __enter__(self) -> _OptimizerSpy:
        self._handle = register_optimizer_step_pre_hook(self._record)
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.remove()

    def _record(self, optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        names = [self.names.get(id(p), "<not the model's>") for p in params]
        self.steps.append({
            "names": names,
            "grads": {n: (None if p.grad is None else p.grad.detach().clone())
                      for n, p in zip(names, params, strict=True)},
            "params": {n: p.detach().clone() for n, p in zip(names, params, strict=True)},
        })


def state_copy(model: nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of `model`'s state dict."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# --- freeze the backbone: a linear probe ------------------------------------------------------------------

PROBE_BATCHES = 3


def _probe_linear_probe(answer: dict, *, case: Case) -> dict:
    model = pretrained_model(case)
    with _OptimizerSpy(model) as spy:
        returned = answer["linear_probe"](model, shifted_batches(case, 20, PROBE_BATCHES), finetune_lr(case))
    return {"steps": spy.steps, "state": state_copy(model), "returned_model": returned is model,
            "requires_grad": {n: p.requires_grad for n, p in model.named_parameters()}}


add(
    Drill(
        id="finetuning-freeze-backbone", unjudged=('steps/*/*/head.*',),
        self_check=True,
        title="Train only the head of a pretrained model (a linear probe)",
        kind="write",
        topics=("finetuning", "modules"),
        difficulty=2,
        prompt="linear_probe(model, batches, lr) gets a pretrained model with `model.backbone` (Linear, "
        "BatchNorm1d with pretrained running statistics, ReLU, Linear, ReLU) and a new `model.head` (Linear). "
        "Train only the head: freeze the backbone with requires_grad_(False), keep the backbone's BatchNorm in eval "
        "mode (its running statistics must not move), and give torch.optim.SGD(lr=lr) (no momentum) only the "
        "trainable parameters. One step per (x, y) in batches on F.mse_loss(model(x), y). Return the model.",
        entry="linear_probe",
        starter="import torch\nimport torch.nn.functional as F\n\n\ndef linear_probe(model, batches, lr):\n"
        "    raise NotImplementedError\n",
        hints=("Three separate things make a backbone frozen: no gradient, no optimizer slot, and no BatchNorm "
               "statistics update. Which one does requires_grad_(False) not cover?",
               "model.backbone.requires_grad_(False); optimizer over [p for p in model.parameters() if "
               "p.requires_grad]; model.train() then model.backbone.eval()."),
        probe=_probe_linear_probe,
    )
)


# --- parameter groups: a lower LR for the backbone, no weight decay on norms and biases --------------------

class NormNet(nn.Module):
    """A backbone with a LayerNorm and a BatchNorm at unnamed Sequential positions, and a head."""

    def __init__(self, d_in: int, hidden: int, n_out: int) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(d_in, hidden), nn.LayerNorm(hidden), nn.ReLU(),
                                      nn.Linear(hidden, hidden), nn.BatchNorm1d(hidden), nn.ReLU())
        self.head = nn.Linear(hidden, n_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


def finetuning_group_settings(case: Case) -> tuple[float, float, float]:
    """lr, backbone factor, weight decay."""
    return 1e-3 * (1 + case.seed % 9), 0.1 * (1 + case.seed % 4), 0.01 * (1 + case.seed % 5)


def _probe_finetuning_param_groups(answer: dict, *, case: Case) -> dict:
    d_in, hidden, n_out = pretrained_sizes(case)
    torch.manual_seed(case.seeded(0))
    model = NormNet(d_in, hidden, n_out)
    names = {id(p): name for name, p in model.named_parameters()}
    optimizer = answer["make_optimizer"](model, *finetuning_group_settings(case))
    groups = [{"names": [names.get(id(p), "<not the model's>") for p in group["params"]], "lr": group.get("lr"),
               "weight_decay": group.get("weight_decay")} for group in optimizer.param_groups]
    return {"type": type(optimizer).__name__, "groups": groups}


add(
    Drill(
        id="finetuning-param-groups",
        self_check=True,
        title="Parameter groups: a smaller LR for the backbone, no weight decay on norms and biases",
        kind="write",
        topics=("finetuning",),
        difficulty=2,
        prompt="make_optimizer(model, lr, backbone_factor, weight_decay) returns torch.optim.AdamW for a model with "
        "`model.backbone` (Linears, a LayerNorm and a BatchNorm1d inside an nn.Sequential) and `model.head`. "
        "Backbone parameters get lr * backbone_factor, head parameters get lr. Biases and the norm layers' "
        "weights get weight_decay 0; every other parameter gets weight_decay. Every parameter in exactly one group.",
        entry="make_optimizer",
        starter="import torch\n\n\ndef make_optimizer(model, lr, backbone_factor, weight_decay):\n"
        "    raise NotImplementedError\n",
        hints=("An optimizer takes a list of dicts, each with its own 'params', 'lr' and 'weight_decay'. How do "
               "you tell a bias or a norm's weight from a weight matrix without relying on names?",
               "Split each of backbone and head by p.ndim > 1 (decay) vs p.ndim == 1 (no decay): four groups."),
        probe=_probe_finetuning_param_groups,
    )
)


# --- load a checkpoint into a model with a new head --------------------------------------------------------

OLD_CLASSES = 11


def checkpoint_scenarios(case: Case) -> list[tuple[str, dict[str, torch.Tensor]]]:
    """The scenarios: a good checkpoint (old 11-class head), one saved from DDP ("module." prefix), one missing
    a backbone tensor, one with an extra backbone tensor."""
    good = pretrained_model(case, 40, n_out=OLD_CLASSES).state_dict()
    missing = dict(good)
    del missing["backbone.3.weight"]
    extra = dict(good)
    extra["backbone.5.weight"] = torch.ones(3)
    return [("good", dict(good)), ("ddp", {f"module.{k}": v for k, v in good.items()}),
            ("missing", missing), ("extra", extra)]


def _probe_load_pretrained(answer: dict, *, case: Case) -> dict:
    results = {}
    for label, checkpoint in checkpoint_scenarios(case):
        model = pretrained_model(case, 10)
        try:
            returned = answer["load_pretrained"](model, checkpoint)
        except Exception as error:  # refusing is the point in three scenarios
            results[label] = {"raised": type(error).__name__, "state": state_copy(model)}
        else:
            results[label] = {"returned": returned, "state": state_copy(model)}
    return results


add(
    Drill(
        id="finetuning-load-new-head", unjudged=('*/state/*',),
        title="Load a pretrained checkpoint into a model with a new head",
        kind="write",
        topics=("finetuning", "checkpointing"),
        difficulty=2,
        prompt="load_pretrained(model, checkpoint) loads a state_dict saved from the same architecture with an "
        "11-class head into `model`, whose `model.head` has a different number of classes. Load every tensor except "
        "the head's with load_state_dict(strict=False) and return (missing_keys, unexpected_keys) as it reports "
        "them. Refuse (raise) anything else: a missing key outside head.*, or any unexpected key.",
        entry="load_pretrained",
        starter="import torch\n\n\ndef load_pretrained(model, checkpoint):\n    raise NotImplementedError\n",
        hints=("strict=False does not ignore a size mismatch; and it silently ignores keys that do not match at all. "
               "What do you need to drop first, and what do you need to check after?",
               "Drop the head.* keys, load with strict=False, raise unless missing_keys are all head.* and "
               "unexpected_keys is empty."),
        probe=_probe_load_pretrained,
    )
)


# --- LoRA ---------------------------------------------------------------------------------------------------

def lora_setup(case: Case) -> dict[str, Any]:
    """The LoRA drill's base layer, inputs, low-rank factors (a, b), rank and alpha, drawn by the case."""
    gen = torch.Generator().manual_seed(case.seeded(60))
    d_in, d_out = (int(v) for v in torch.randint(4, 10, (2,), generator=gen))
    r = int(torch.randint(2, 5, (1,), generator=gen))
    alpha = float(torch.randint(2, 17, (1,), generator=gen))
    x = torch.randn(5, d_in, generator=gen)
    a = torch.randn(r, d_in, generator=gen)
    b = torch.randn(d_out, r, generator=gen)
    torch.manual_seed(case.seeded(61))
    base = nn.Linear(d_in, d_out)
    return {"d_in": d_in, "d_out": d_out, "r": r, "alpha": alpha, "x": x, "a": a, "b": b, "base": base}


def _probe_lora(answer: dict, *, case: Case) -> dict:
    s = lora_setup(case)
    lora = answer["LoRALinear"](s["base"], s["r"], s["alpha"])
    seen: dict[str, Any] = {
        "trainable": sorted(n for n, p in lora.named_parameters() if p.requires_grad),
        "a0": lora.lora_A.detach().clone(), "b0": lora.lora_B.detach().clone(), "out0": lora(s["x"]).detach(),
    }
    with torch.no_grad():
        lora.lora_A.copy_(s["a"])
        lora.lora_B.copy_(s["b"])
    out1 = lora(s["x"])
    seen["out1"] = out1.detach()
    merged = lora.merge()
    seen["merged_type"] = type(merged).__name__
    with torch.no_grad():
        seen["out_merged"] = merged(s["x"]).detach()
        seen["out_after_merge"] = lora(s["x"]).detach()
    return seen


add(
    Drill(
        id="finetuning-lora-linear", unjudged=('out_after_merge',),
        title="A LoRA linear layer, and merging it",
        kind="write",
        topics=("finetuning", "modules"),
        difficulty=2,
        prompt="Write LoRALinear(base, r, alpha): it keeps the nn.Linear `base` frozen, adds trainable "
        "self.lora_A (r, in_features, random init) and self.lora_B (out_features, r, zeros), and computes "
        "base(x) + (alpha / r) * x @ A.T @ B.T. merge() returns a new nn.Linear equal to the adapted layer "
        "(weight W + (alpha / r) * B @ A, the base's bias), leaving the LoRA layer unchanged.",
        entry="LoRALinear",
        starter="import torch\nfrom torch import nn\n\n\nclass LoRALinear(nn.Module):\n"
        "    def __init__(self, base: nn.Linear, r: int, alpha: float):\n        super().__init__()\n"
        "        raise NotImplementedError\n\n    def forward(self, x):\n        raise NotImplementedError\n\n"
        "    def merge(self) -> nn.Linear:\n        raise NotImplementedError\n",
        hints=("What must the layer compute before any training step? Which of A and B must be zero for that, and "
               "why can't both be?",
               "base.requires_grad_(False); A kaiming-uniform, B zeros; scale = alpha / r; merge into a new Linear "
               "with W + scale * B @ A."),
        probe=_probe_lora,
    )
)


# --- gradual unfreezing -------------------------------------------------------------------------------------

class _Blocks(nn.Module):
    def __init__(self, n: int, d: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(d, d) for _ in range(n))
        self.head = nn.Linear(d, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = torch.relu(block(x))
        return self.head(x)


def n_blocks(case: Case) -> int:
    """How many blocks the case's network has (3 to 5)."""
    return 3 + case.seed % 3


def _probe_unfreeze(answer: dict, *, case: Case) -> dict:
    n = n_blocks(case)
    model = _Blocks(n, 4)
    model.blocks.requires_grad_(False)  # as the fine-tuning starts: pretrained blocks frozen, new head trainable
    flags = []
    for epoch in range(n + 2):
        answer["unfreeze"](model, epoch)
        flags.append({name: p.requires_grad for name, p in model.named_parameters()})
    return {"flags": flags}


add(
    Drill(
        id="finetuning-gradual-unfreeze",
        self_check=True,
        title="Gradual unfreezing, from the head down",
        kind="write",
        topics=("finetuning",),
        difficulty=1,
        prompt="unfreeze(model, epoch) is called at the start of every epoch (0, 1, 2, ...). model.blocks is an "
        "nn.ModuleList of pretrained blocks (input side first) and model.head a new layer. At epoch e the head and "
        "the last e blocks (those nearest the head) are trainable, every other block frozen (requires_grad). The "
        "optimizer was built over all parameters: frozen ones get no gradient and are skipped.",
        entry="unfreeze",
        starter="def unfreeze(model, epoch):\n    raise NotImplementedError\n",
        hints=("Which blocks are trainable at epoch 0, 1 and len(blocks)? Beware of model.blocks[-epoch:] at epoch 0.",
               "block i is trainable iff i >= len(blocks) - epoch; the head always is."),
        probe=_probe_unfreeze,
    )
)


# --- difficulty 3: a fine-tuning script with three bugs -----------------------------------------------------

SCRIPT_BATCHES = 3
SCRIPT_CLASSES = 4


def script_model(case: Case) -> _PretrainedNet:
    """The fine-tuning script's pretrained network with a `SCRIPT_CLASSES`-class head."""
    return pretrained_model(case, 70, n_out=SCRIPT_CLASSES)


def _probe_finetuning_script(answer: dict, *, case: Case) -> dict:
    model = script_model(case)
    with _OptimizerSpy(model) as spy:
        answer["finetune"](model, shifted_batches(case, 71, SCRIPT_BATCHES, SCRIPT_CLASSES), finetune_lr(case))
    return {"steps": spy.steps, "state": state_copy(model)}


SCRIPT_STARTER = '''import torch
import torch.nn.functional as F


def finetune(model, batches, lr):
    """Train the new head of a pretrained classifier; the backbone stays frozen."""
    model.backbone.requires_grad_(False)
    optimizer = torch.optim.SGD(model.head.parameters(), lr=lr, momentum=0.9)
    model.backbone.eval()  # keep the pretrained BatchNorm statistics
    model.train()
    for x, y in batches:
        logits = model(x)
        probs = logits.softmax(dim=-1)
        loss = F.cross_entropy(probs, y)
        loss.backward()
        optimizer.step()
    return model
'''


add(
    Drill(
        id="finetuning-script-three-bugs",
        title="Bug hunt: a head-only fine-tuning script with three bugs",
        kind="bughunt",
        topics=("finetuning", "loop", "debugging"),
        difficulty=3,
        prompt="finetune(model, batches, lr) should train only the new head of a pretrained classifier "
        "(model.backbone with BatchNorm, model.head) with SGD(lr, momentum=0.9) on F.cross_entropy, one step per "
        "batch, the backbone frozen with its pretrained BatchNorm statistics. After a run, the backbone's BatchNorm "
        "running means and variances no longer match the pretrained ones, the loss hardly falls from about "
        "ln(number of classes), and the head's weights move further at every step although the batches are alike. "
        "Three bugs cause this; fix all three without changing what the script is meant to do (the check reports "
        "the first problem it observes).",
        entry="finetune",
        starter=SCRIPT_STARTER,
        hints=("Look at the mode of each module when the loop runs, at what F.cross_entropy expects as input, and "
               "at what .grad holds at the second step.",
               "model.train() must come before model.backbone.eval(); pass logits (not probabilities) to "
               "cross_entropy; zero the gradients at every step."),
        probe=_probe_finetuning_script,
    )
)


# --- explain drills -----------------------------------------------------------------------------------------

def _features_task(seed: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 16, generator=gen)
    y = (x[:, :2].sum(1) > 0).long()
    return x, y


def _linear_probe_experiment() -> None:
    torch.manual_seed(0)
    backbone = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
    head = nn.Linear(64, 2)
    x_pre, y_pre = _features_task(1, 2000)  # "pretraining" on plenty of data from the same family of tasks
    optimizer = torch.optim.Adam([*backbone.parameters(), *head.parameters()], lr=1e-2)
    for _ in range(150):
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(head(backbone(x_pre)), y_pre).backward()
        optimizer.step()
    x_small, y_small = _features_task(2, 24)  # the new, small labelled set
    x_test, y_test = _features_task(3, 2000)
    pretrained = {k: v.clone() for k, v in backbone.state_dict().items()}
    for label, lr, train_backbone in (("linear probe (frozen backbone)", 1e-2, False),
                                      ("full fine-tune, pretraining lr 1e-1", 1e-1, True)):
        backbone.load_state_dict(pretrained)
        torch.manual_seed(5)
        new_head = nn.Linear(64, 2)
        params = [*new_head.parameters(), *(backbone.parameters() if train_backbone else [])]
        optimizer = torch.optim.Adam(params, lr=lr)
        for _ in range(100):
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(new_head(backbone(x_small)), y_small).backward()
            optimizer.step()
        with torch.no_grad():
            accuracy = (new_head(backbone(x_test)).argmax(1) == y_test).float().mean().item()
        print(f"{label:38s} on 24 examples: held-out accuracy {accuracy:.3f}")
    print("With few labels and features that already fit, the frozen backbone generalises; a large-lr full "
          "fine-tune fits the 24 examples and moves the features.")


add(
    explain(
        id="finetuning-linear-probe-or-finetune",
        title="Linear probe or full fine-tune?",
        topics=("finetuning",),
        difficulty=1,
        question="You have 300 labelled images from a domain close to ImageNet and a ResNet pretrained on "
        "ImageNet. Which first move usually gives the best held-out accuracy for the least risk?",
        hints=("How many parameters does each option fit on 300 examples?",
               "Features that already separate the classes need only a linear classifier on top."),
        experiment=_linear_probe_experiment,
    )
)


def _forgetting_experiment() -> None:
    x_a, y_a = _features_task(11, 1000)
    gen = torch.Generator().manual_seed(12)
    x_b = torch.randn(200, 16, generator=gen)
    y_b = (x_b[:, 2] > 0).long()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(300):
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(x_a), y_a).backward()
        optimizer.step()
    pretrained = {k: v.clone() for k, v in model.state_dict().items()}
    for lr in (1.0, 0.01):
        model.load_state_dict(pretrained)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        for _ in range(50):
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(model(x_b), y_b).backward()
            optimizer.step()
        with torch.no_grad():
            acc_a = (model(x_a).argmax(1) == y_a).float().mean().item()
            moved = sum((model.state_dict()[k] - v).norm() ** 2 for k, v in pretrained.items()) ** 0.5
        print(f"fine-tune lr {lr:<5}: weights moved {moved:.2f} from the pretrained ones; source-task accuracy "
              f"{acc_a:.3f}")
    print("A large lr overwrites what pretraining learned (catastrophic forgetting); a small one adapts it.")


add(
    explain(
        id="finetuning-forgetting-lower-lr",
        title="Why fine-tuning at the pretraining learning rate forgets",
        topics=("finetuning", "schedulers"),
        difficulty=2,
        question="Full fine-tuning at lr=0.1, the peak LR of pretraining, drops the source-task accuracy within "
        "100 steps, and the target accuracy ends below a linear probe's. What is the main cause, and the fix?",
        hints=("Compare how far the weights move from the pretrained ones at each learning rate.",
               "Pretraining already found good weights: the fine-tuning steps must be small."),
        experiment=_forgetting_experiment,
    )
)


def _frozen_bn_experiment() -> None:
    torch.manual_seed(0)
    backbone = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU())
    backbone.requires_grad_(False)
    before = backbone[1].running_mean.clone()
    x = torch.randn(16, 4) * 3 + 2
    backbone.train()
    backbone(x)
    moved = (backbone[1].running_mean - before).abs().max()
    print(f"requires_grad_(False), train(): running_mean moved by {moved:.3f}")
    backbone[1].running_mean.copy_(before)
    backbone.eval()
    backbone(x)
    moved = (backbone[1].running_mean - before).abs().max()
    print(f"requires_grad_(False), eval():  running_mean moved by {moved:.3f}")


add(
    explain(
        id="finetuning-frozen-batchnorm",
        title="A frozen backbone that still changes",
        topics=("finetuning", "modules"),
        difficulty=2,
        question="You froze the backbone with requires_grad_(False) and call model.train() at each epoch. No "
        "backbone weight changes, yet the backbone's outputs for the same input differ after fine-tuning. Why?",
        hints=("What state does a backbone have besides its parameters?",
               "Buffers: BatchNorm's running_mean and running_var, updated in train mode."),
        experiment=_frozen_bn_experiment,
    )
)


def _lora_count_experiment() -> None:
    base = nn.Linear(4096, 4096, bias=False, device="meta")  # sizes only: no memory is allocated
    r = 8
    lora_a, lora_b = torch.empty(r, 4096, device="meta"), torch.empty(4096, r, device="meta")
    full, adapter = base.weight.numel(), lora_a.numel() + lora_b.numel()
    print(f"full fine-tune of W (4096 x 4096): {full:,} trainable values")
    print(f"LoRA r={r}: A is {tuple(lora_a.shape)}, B is {tuple(lora_b.shape)}: {adapter:,} trainable values "
          f"({100 * adapter / full:.2f}% of W); Adam keeps two more values per trainable one")


add(
    explain(
        id="finetuning-lora-parameter-count",
        title="How many parameters does LoRA train?",
        topics=("finetuning", "memory"),
        difficulty=1,
        question="You put a LoRA adapter with rank r = 8 on a 4096 x 4096 linear layer (no bias) and freeze W. "
        "How many values does the optimizer train for that layer?",
        hints=("LoRA replaces the update of W by B @ A. What are the shapes of A and B?",
               "A is (r, in), B is (out, r): r * (in + out) values."),
        experiment=_lora_count_experiment,
    )
)
