"""14-param-groups, the judge.

An AdamW holding every trainable parameter once, frozen ones in none; decay on kernels and matrices only;
the backbone at backbone_lr, the head at head_lr.
"""

from __future__ import annotations

from torch import nn

from harness.checks.lesson14.param_groups import group_model, group_settings
from harness.checks.param_groups import check_weight_decay, group_lr, group_of_each_parameter
from harness.contract.case import Case
from harness.contract.compare import same_number
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import WireError

_ADAMW_DEFAULT_WEIGHT_DECAY = 0.01


@judges(
    "14-param-groups",
    hints=Hints(
        nudge="Sort each trainable parameter by two questions: backbone or head (its learning rate), matrix or kernel "
              "(p.ndim >= 2: weight decay) or bias and norm scale (no decay). Each answer pair is one group.",
        concept="An optimizer takes groups: dicts with 'params' and their own options, each parameter in one group "
                "only, options left out taking the optimizer's defaults (AdamW's weight_decay is 0.01). Frozen "
                "parameters stay out: they would only cost memory for their optimizer state.",
        solution="for name, p in model.named_parameters(): if p.requires_grad: groups[(name.startswith('backbone.'), "
                 "p.ndim >= 2)].append(p); return torch.optim.AdamW([{'params': ps, 'lr': backbone_lr if backbone "
                 "else head_lr, 'weight_decay': weight_decay if decay else 0.0} for (backbone, decay), ps in "
                 "groups.items() if ps])",
        section="4. Full fine-tuning with differential learning rates"),
    requires={
        "frozen-params-included": Requirement(
            "frozen parameters are in no group",
            hint="The model you get has a frozen block. Which attribute of a parameter tells, and does your function "
                 "look at it?"),
        "missing-params": Requirement(
            "every trainable parameter is in a group (the parameters themselves, not copies)",
            hint="Count the parameters in your groups and the trainable ones of the model: which kind does no "
                 "selection of yours take?"),
        "duplicate-params": Requirement(
            "each parameter is in exactly one group",
            hint="Can one parameter pass two of your selections (a group of everything plus a group of biases)?"),
        "decay-on-bias-or-norm": Requirement(
            "biases and normalisation weights (ndim < 2) get weight_decay 0.0",
            hint="Print p.ndim for a BatchNorm weight and for a bias: which group do they land in? A BatchNorm "
                 "weight's name does not contain 'bias'."),
        "no-decay-on-weights": Requirement(
            "conv kernels and linear weights (ndim >= 2) get weight_decay, set explicitly in their group",
            hint="A conv kernel has 4 dimensions: does your test for 'a weight matrix' take it? And does every group "
                 "with weights set 'weight_decay' itself?"),
        "wrong-lr": Requirement(
            "backbone parameters get backbone_lr, head parameters head_lr",
            hint="Print each group's lr with the names of its parameters: which get backbone_lr?"),
        "not-adamw": Requirement(
            "returns a torch.optim.AdamW built on those groups",
            hint="Print type(finetune_optimizer(...)): is it the optimizer, or the list of groups you built?"),
    },
)
def judge_param_groups(seen: dict, *, case: Case) -> str:
    """An AdamW holding every trainable parameter once, frozen ones in none; decay on kernels and matrices only;
    the backbone at backbone_lr, the head at head_lr."""
    settings, records = group_settings(case), seen["optimizers"]
    if not isinstance(records, list) or not records or len(records) > len(settings):
        raise WireError("malformed observation: not one optimizer per model")
    for index, (setting, record) in enumerate(zip(settings, records, strict=False)):
        width, classes, frozen, head_lr, backbone_lr, weight_decay = setting
        if record.get("type") != "AdamW":
            fail("not-adamw", observed=f"finetune_optimizer returned {record.get('type')}",
                 expected="a torch.optim.AdamW built on your parameter groups",
                 cause="the groups were returned instead of the optimizer built on them"
                 if record.get("type") in ("list", "tuple", "dict") else "another optimizer class, or nothing",
                 where="the return statement: return torch.optim.AdamW(groups)")
        model = group_model(case, index, width, classes, frozen)
        groups = record["groups"]
        try:
            holders = group_of_each_parameter(model, groups)
        except ValueError as error:
            raise WireError(f"malformed observation: {error}") from None
        lrs = {name: group_lr(group, name) for name, group in holders.items()}
        _fail_names_from_state_dict(model, lrs, head_lr, backbone_lr)
        for name, group in holders.items():
            check_weight_decay(model, name, group, weight_decay, default=_ADAMW_DEFAULT_WEIGHT_DECAY,
                               default_is="AdamW's default")
            in_backbone = name.startswith("backbone.")
            wanted = backbone_lr if in_backbone else head_lr
            got = lrs[name]
            if not same_number(got, wanted):
                fail("wrong-lr", observed=f"{name} has lr {got:g}",
                     expected=f"{wanted:g} " + ("(backbone_lr: a pretrained parameter)" if in_backbone
                                                else "(head_lr: the new head)"),
                     cause=_lr_cause(lrs, head_lr, backbone_lr),
                     where="set 'lr' in every group: backbone_lr for names starting with 'backbone.', head_lr "
                           "otherwise")
    if len(records) != len(settings):
        raise WireError("malformed observation: optimizers missing")
    return "AdamW with every trainable parameter once, decay on kernels and matrices only, backbone at its own lr"


def _fail_names_from_state_dict(model: nn.Module, lrs: dict[str, float], head_lr: float, backbone_lr: float) -> None:
    """Fail with wrong-lr when the learning rates follow the names of state_dict() zipped with parameters(): the
    state dict also holds buffers (BatchNorm's running statistics), so from the first buffer on every name belongs
    to another tensor."""
    params = [name for name, _ in model.named_parameters()]
    given = dict(zip(params, model.state_dict(), strict=False))

    def follows(names: dict[str, str]) -> bool:
        return all(same_number(lr, backbone_lr if names[name].startswith("backbone.") else head_lr)
                   for name, lr in lrs.items())

    if follows(given) and not follows({name: name for name in params}):
        wrong = next(name for name in lrs if given[name].startswith("backbone.") != name.startswith("backbone."))
        fail("wrong-lr", observed=f"{wrong} has lr {lrs[wrong]:g}, the learning rate of the name {given[wrong]!r}: "
             "each parameter got the lr of the state_dict() key at its position in parameters()",
             expected=f"{backbone_lr if wrong.startswith('backbone.') else head_lr:g} for {wrong}",
             cause="the names were taken from model.state_dict() and zipped with model.parameters(): the state dict "
                   "also holds buffers (BatchNorm's running_mean, running_var, num_batches_tracked), so from the first "
                   "buffer on each name belongs to another tensor",
             where="for name, p in model.named_parameters(): the name and the parameter come as a pair",
             hint="Print the pairs your loop makes, name beside p.shape: do the shapes match the layers the names "
                  "say?")


def _lr_cause(lrs: dict[str, float], head_lr: float, backbone_lr: float) -> str:
    """Why some parameter has the wrong lr, from the lr of every parameter."""
    values = set(lrs.values())
    if len(values) == 1:
        return f"one learning rate for every group ({values.pop():g}): the pretrained layers need backbone_lr"
    if all(same_number(lr, head_lr if name.startswith("backbone.") else backbone_lr)
           for name, lr in lrs.items()):
        return "head_lr and backbone_lr swapped"
    return ("the test that tells a backbone parameter (name.startswith('backbone.')) picks the wrong ones, or another "
            "value than head_lr and backbone_lr")
