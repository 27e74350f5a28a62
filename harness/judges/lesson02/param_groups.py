"""02-param-groups, the judge.

Every trainable parameter in exactly one group, decay only on matrices, backbone at its own lr.
"""

from __future__ import annotations

from torch import nn

from harness.checks.lesson02.param_groups import DEFAULT_LR, DEFAULT_WEIGHT_DECAY, group_model, group_settings
from harness.checks.param_groups import check_weight_decay, group_lr, group_of_each_parameter
from harness.contract.case import Case
from harness.contract.compare import same_number
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.judges.lesson02.common import ZIPPED_NAMES_CAUSE, ZIPPED_NAMES_HINT, zipped_state_dict_names


def _lrs_follow_zipped_names(model: nn.Module, groups: list, lr: float, backbone_lr: float) -> bool:
    """Whether every trainable parameter's lr is the one its zipped state_dict() name would get."""
    zipped_names = zipped_state_dict_names(model)
    for name, group in group_of_each_parameter(model, groups).items():
        zipped_lr = backbone_lr if zipped_names[name].startswith("backbone.") else lr
        if not same_number(group_lr(group, name), zipped_lr):
            return False
    return True


@judges(
    "02-param-groups",
    hints=Hints(
        nudge="Ask two questions of each trainable parameter: is it in the backbone (backbone_lr)? Is it a matrix "
              "(ndim >= 2: weight decay) or a bias or norm weight (ndim < 2: none)? Each answer pair is one group.",
        concept="An optimizer takes a list of groups, dicts with 'params' and their own options; a parameter may be "
                "in one group only, and options a group leaves out take the optimizer's defaults. "
                "model.named_parameters() gives each parameter with its name, p.requires_grad and p.ndim the rest.",
        solution="for name, p in model.named_parameters(): skip if not p.requires_grad; key = "
                 "(name.startswith('backbone.'), p.ndim >= 2); append p to that key's list; return "
                 "[{'params': ps, 'lr': backbone_lr if backbone else lr, 'weight_decay': weight_decay if decay else "
                 "0.0} for (backbone, decay), ps in lists.items()]",
        section="7. Parameter groups"),
    requires={
        "frozen-params-included": Requirement(
            "frozen parameters appear in no group",
            hint="The model you get may have frozen parameters. Which attribute tells, and does your function look "
                 "at it?"),
        "missing-params": Requirement(
            "every trainable parameter appears in a group (the parameters themselves, not copies)",
            hint="Count the parameters in your groups and compare with the trainable ones: which kind does no "
                 "branch take, and are they the model's own tensors?"),
        "duplicate-params": Requirement(
            "each parameter appears exactly once",
            hint="Can one parameter pass two of your selections? Each parameter needs one test that picks one group."),
        "decay-on-bias-or-norm": Requirement(
            "parameters with ndim < 2 (biases, norm weights) get weight_decay 0.0",
            hint="Print p.ndim for a bias and for a LayerNorm weight. Which group do they land in?"),
        "no-decay-on-weights": Requirement(
            "parameters with ndim >= 2 get weight_decay, set explicitly in their group",
            hint="An Embedding's weight is a matrix too. Does every group with matrices set 'weight_decay'?"),
        "wrong-lr": Requirement(
            "backbone parameters get backbone_lr, all others lr, set in every group",
            hint="Print each group's lr with the names of its parameters: which get backbone_lr, and does every "
                 "group set 'lr'?"),
    },
)
def judge_param_groups(seen: dict, *, case: Case) -> str:
    """Every trainable parameter in exactly one group, decay only on matrices, backbone at its own lr."""
    for setting, groups in zip(group_settings(case), seen["groups"], strict=True):
        freeze_first, lr, weight_decay, backbone_lr = setting
        model = group_model(case, freeze_first)
        for name, group in group_of_each_parameter(model, groups).items():
            check_weight_decay(model, name, group, weight_decay, default=DEFAULT_WEIGHT_DECAY,
                               default_is="the optimizer's default in this check")
            in_backbone = name.startswith("backbone.")
            wanted_lr = backbone_lr if in_backbone else lr
            got = group_lr(group, name)
            if not same_number(got, wanted_lr):
                swapped = same_number(got, lr if in_backbone else backbone_lr)
                misnamed = zipped_state_dict_names(model)[name]
                if swapped and _lrs_follow_zipped_names(model, groups, lr, backbone_lr):
                    fail("wrong-lr", observed=f"{name} has lr {got}, the lr for the name {misnamed}: the state_dict() "
                         "key at its position in parameters()",
                         expected=f"{wanted_lr} (lr: a head parameter)" if not in_backbone
                         else f"{wanted_lr} (backbone_lr: a backbone parameter)",
                         cause=ZIPPED_NAMES_CAUSE,
                         where="iterate model.named_parameters(): it pairs each parameter with its own name",
                         hint=ZIPPED_NAMES_HINT)
                fail("wrong-lr", observed=f"{name} has lr {got}", expected=f"{wanted_lr} "
                     f"({'backbone_lr: a backbone parameter' if in_backbone else 'lr: a head parameter'})",
                     cause=f"its group sets no lr, so it takes the optimizer's default ({DEFAULT_LR} in this check)"
                     if same_number(got, DEFAULT_LR)
                     else "lr and backbone_lr swapped, or the test that tells a backbone parameter"
                     " (name.startswith('backbone.')) picks the wrong ones" if swapped
                     else "another learning rate than lr or backbone_lr",
                     where="set 'lr' in every group: backbone_lr for names starting with 'backbone.', lr otherwise")
    return "every trainable parameter in exactly one group, decay only on matrices, backbone at its own lr"
