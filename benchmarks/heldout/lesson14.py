"""Lesson 14 held-out entries (written from the exercise text only)."""

from entry import Entry

PRELUDE = '''
import math
import torch
import torch.nn.functional as F
from torch import nn
from harness.checks import check, hint
from harness.env import select_device
from harness.finetune import TransferNet, pretrained_state_dict
from harness.repro import seed_everything
seed_everything(0)
device = select_device()
'''

LP = "def load_pretrained(model, state_dict):\n"
TM = "def train_mode(model):\n"
FO = "def finetune_optimizer(model, *, head_lr, backbone_lr, weight_decay):\n"
GU = "def gradual_unfreeze(model, epoch, every):\n"
GU_BLOCKS = ("    blocks = [b for b in model.backbone.children() if any(True for _ in b.parameters())]\n"
             "    n = len(blocks)\n")


def lora(init: str, scaling: str = "alpha / r", merge: str = "") -> str:
    """A LoRALinear with its __init__ body's adapter lines, scaling and merge varied."""
    return f'''
class LoRALinear(nn.Module):
    def __init__(self, base, r, alpha):
        super().__init__()
{init}
        self.scaling = {scaling}

    def forward(self, x):
        return self.base(x) + (x @ self.lora_A.T @ self.lora_B.T) * self.scaling

    @torch.no_grad()
    def merge(self):
{merge or """        merged = nn.Linear(self.base.in_features, self.base.out_features, bias=self.base.bias is not None)
        merged.weight.copy_(self.base.weight + self.scaling * self.lora_B @ self.lora_A)
        if self.base.bias is not None:
            merged.bias.copy_(self.base.bias)
        return merged"""}
'''


GOOD_INIT = '''        self.base = base.requires_grad_(False)
        self.lora_A = nn.Parameter(torch.empty(r, base.in_features))
        nn.init.kaiming_uniform_(self.lora_A, a=5 ** 0.5)
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r))'''

ENTRIES = [
    Entry("14-load-pretrained", "mistake", "strict=False and done",
          "no check of missing/unexpected keys: a mismatching checkpoint loads silently", LP + '''
    backbone = {k: v for k, v in state_dict.items() if not k.startswith("head.")}
    result = model.load_state_dict(backbone, strict=False)
    return sorted(result.missing_keys)
''', ("load_pretrained",)),
    Entry("14-load-pretrained", "mistake", "loaded everything that fits",
          "the old head is loaded when its shapes fit (only mismatching shapes are skipped)", LP + '''
    own = model.state_dict()
    fitting = {k: v for k, v in state_dict.items() if k in own and own[k].shape == v.shape}
    unexpected = [k for k in state_dict if k not in own]
    if unexpected:
        raise KeyError(unexpected)
    model.load_state_dict(fitting, strict=False)
    return sorted(k for k in own if k not in fitting)
''', ("load_pretrained",)),
    Entry("14-load-pretrained", "mistake", "popped the head keys from the checkpoint",
          "modifies the state_dict passed in (head keys deleted)", LP + '''
    for key in [k for k in state_dict if k.startswith("head.")]:
        del state_dict[key]
    result = model.load_state_dict(state_dict, strict=False)
    wrong = [k for k in result.missing_keys if not k.startswith("head.")]
    if wrong or result.unexpected_keys:
        raise RuntimeError("mismatch")
    return sorted(result.missing_keys)
''', ("load_pretrained",)),
    Entry("14-load-pretrained", "mistake", "copied parameters only",
          "only named_parameters are loaded: BatchNorm buffers keep their init", LP + '''
    params = dict(model.named_parameters())
    for name, p in params.items():
        if name.startswith("head."):
            continue
        if name not in state_dict:
            raise KeyError(name)
        with torch.no_grad():
            p.copy_(state_dict[name])
    extra = [k for k in state_dict if k not in model.state_dict()]
    if extra:
        raise KeyError(extra)
    return sorted(n for n in model.state_dict() if n.startswith("head."))
''', ("load_pretrained",)),
    Entry("14-train-mode", "mistake", "every BatchNorm to eval",
          "BatchNorm layers with trainable parameters are put in eval mode too", TM + '''
    model.train()
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.eval()
''', ("train_mode",)),
    Entry("14-train-mode", "mistake", "checked BatchNorm2d only",
          "isinstance(nn.BatchNorm2d): frozen BatchNorm1d layers stay in train mode", TM + '''
    model.train()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d) and not any(p.requires_grad for p in m.parameters()):
            m.eval()
''', ("train_mode",)),
    Entry("14-train-mode", "mistake", "any frozen parameter",
          "a BatchNorm with only some parameters frozen goes to eval (any instead of all)", TM + '''
    model.train()
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and any(not p.requires_grad for p in m.parameters()):
            m.eval()
''', ("train_mode",)),
    Entry("14-train-mode", "mistake", "no model.train() first",
          "only BatchNorm modes are set: a model that came in eval mode stays in eval (dropout off)", TM + '''
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.train(any(p.requires_grad for p in m.parameters()))
''', ("train_mode",)),
    Entry("14-param-groups", "mistake", "frozen parameters in the groups",
          "no requires_grad filter", FO + '''
    groups = {}
    for name, p in model.named_parameters():
        key = (name.startswith("backbone."), p.ndim >= 2)
        groups.setdefault(key, []).append(p)
    return torch.optim.AdamW([{"params": ps, "lr": backbone_lr if b else head_lr,
                               "weight_decay": weight_decay if d else 0.0} for (b, d), ps in groups.items()])
''', ("finetune_optimizer",)),
    Entry("14-param-groups", "mistake", "decay on names ending in weight",
          "BatchNorm weights (1-d, named weight) are decayed", FO + '''
    groups = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            groups.setdefault((name.startswith("backbone."), name.endswith("weight")), []).append(p)
    return torch.optim.AdamW([{"params": ps, "lr": backbone_lr if b else head_lr,
                               "weight_decay": weight_decay if d else 0.0} for (b, d), ps in groups.items()])
''', ("finetune_optimizer",)),
    Entry("14-param-groups", "mistake", "weight decay left to AdamW's default",
          "the decayed groups set no weight_decay: AdamW's default 0.01 applies, not weight_decay", FO + '''
    groups = []
    for prefix, lr in (("backbone.", backbone_lr), ("head.", head_lr)):
        ps = [(n, p) for n, p in model.named_parameters() if p.requires_grad and n.startswith(prefix)]
        groups.append({"params": [p for n, p in ps if p.ndim >= 2], "lr": lr})
        groups.append({"params": [p for n, p in ps if p.ndim < 2], "lr": lr, "weight_decay": 0.0})
    return torch.optim.AdamW([g for g in groups if g["params"]])
''', ("finetune_optimizer",)),
    Entry("14-param-groups", "mistake", "head_lr and backbone_lr swapped",
          "the backbone gets head_lr and the head backbone_lr", FO + '''
    groups = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            groups.setdefault((name.startswith("backbone."), p.ndim >= 2), []).append(p)
    return torch.optim.AdamW([{"params": ps, "lr": head_lr if b else backbone_lr,
                               "weight_decay": weight_decay if d else 0.0} for (b, d), ps in groups.items()])
''', ("finetune_optimizer",)),
    Entry("14-unfreeze", "mistake", "unfreezes one period early",
          "off-by-one: block i trainable from every * (n - i - 1), so the last block trains at epoch 0",
          GU + GU_BLOCKS + '''
    for i, block in enumerate(blocks):
        block.requires_grad_(epoch >= every * (n - i - 1))
    model.head.requires_grad_(True)
''', ("gradual_unfreeze",)),
    Entry("14-unfreeze", "mistake", "only ever unfreezes",
          "blocks not yet due are not frozen when the model came in trainable", GU + GU_BLOCKS + '''
    for i, block in enumerate(blocks):
        if epoch >= every * (n - i):
            block.requires_grad_(True)
    model.head.requires_grad_(True)
''', ("gradual_unfreeze",)),
    Entry("14-unfreeze", "mistake", "block.requires_grad = flag",
          "sets a plain attribute on the module: no parameter's requires_grad changes", GU + GU_BLOCKS + '''
    for i, block in enumerate(blocks):
        block.requires_grad = epoch >= every * (n - i)
    model.head.requires_grad_(True)
''', ("gradual_unfreeze",)),
    Entry("14-unfreeze", "mistake", "unfroze from the input up",
          "block 0 (next to the input) unfreezes first instead of the last block", GU + GU_BLOCKS + '''
    for i, block in enumerate(blocks):
        block.requires_grad_(epoch >= every * (i + 1))
    model.head.requires_grad_(True)
''', ("gradual_unfreeze",)),
    Entry("14-lora", "mistake", "integer division alpha // r",
          "alpha // r truncates the scaling (e.g. 3 // 2 = 1, or 0 when alpha < r)", lora(GOOD_INIT, "alpha // r"),
          ("LoRALinear",)),
    Entry("14-lora", "mistake", "both adapters zero",
          "A and B both start at zero: gradients of both are zero, the adapter never moves", lora('''
        self.base = base.requires_grad_(False)
        self.lora_A = nn.Parameter(torch.zeros(r, base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r))'''), ("LoRALinear",)),
    Entry("14-lora", "mistake", "base left trainable",
          "the base weight and bias are not frozen", lora('''
        self.base = base
        self.lora_A = nn.Parameter(torch.empty(r, base.in_features))
        nn.init.kaiming_uniform_(self.lora_A, a=5 ** 0.5)
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r))'''), ("LoRALinear",)),
    Entry("14-lora", "mistake", "A at zero, B random",
          "swapped init: output starts as base but B's gradient (proportional to A x) is zero at the start",
          lora('''
        self.base = base.requires_grad_(False)
        self.lora_A = nn.Parameter(torch.zeros(r, base.in_features))
        self.lora_B = nn.Parameter(torch.empty(base.out_features, r))
        nn.init.kaiming_uniform_(self.lora_B, a=5 ** 0.5)'''), ("LoRALinear",)),
    Entry("14-lora", "mistake", "merge updates the base in place",
          "merge adds B A into base.weight and returns base: the LoRA layer itself changes", lora(GOOD_INIT, merge='''
        self.base.weight += self.scaling * self.lora_B @ self.lora_A
        return self.base'''), ("LoRALinear",)),
    Entry("14-lora", "mistake", "scaling r / alpha",
          "inverted scaling factor", lora(GOOD_INIT, "r / alpha"), ("LoRALinear",)),
    Entry("14-load-pretrained", "correct", "explicit key sets, then strict load of a merged dict", "", LP + '''
    own = model.state_dict()
    head = {k for k in own if k.startswith("head.")}
    given = {k for k in state_dict if not k.startswith("head.")}
    if given != set(own) - head:
        raise ValueError(f"keys differ: {sorted(given ^ (set(own) - head))}")
    merged = dict(own)
    merged.update({k: state_dict[k] for k in given})
    model.load_state_dict(merged, strict=True)
    return sorted(head)
''', ("load_pretrained",)),
    Entry("14-train-mode", "correct", "train(flag) per BatchNorm after train()", "", TM + '''
    model.train(True)
    for m in filter(lambda m: isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)), model.modules()):
        m.train(any(p.requires_grad for p in m.parameters(recurse=False)))
''', ("train_mode",)),
    Entry("14-unfreeze", "correct", "per-parameter flags, blocks counted from the top", "", GU + '''
    blocks = [b for b in model.backbone.children() if next(b.parameters(), None) is not None]
    for depth_from_top, block in enumerate(reversed(blocks), start=1):
        for p in block.parameters():
            p.requires_grad = epoch >= every * depth_from_top
    for p in model.head.parameters():
        p.requires_grad = True
''', ("gradual_unfreeze",)),
    Entry("14-lora", "correct", "F.linear with a float scaling and einsum-free merge", "", '''
class LoRALinear(nn.Module):
    def __init__(self, base, r, alpha):
        super().__init__()
        self.base = base
        for p in base.parameters():
            p.requires_grad_(False)
        self.r, self.alpha = r, float(alpha)
        self.lora_A = nn.Parameter(nn.init.kaiming_uniform_(torch.empty(r, base.in_features), a=math.sqrt(5)))
        self.lora_B = nn.Parameter(base.weight.new_zeros(base.out_features, r))

    def forward(self, x):
        return self.base(x) + F.linear(F.linear(x, self.lora_A), self.lora_B) * (self.alpha / self.r)

    @torch.no_grad()
    def merge(self):
        out = nn.Linear(self.base.in_features, self.base.out_features, bias=self.base.bias is not None)
        out.weight.copy_(torch.addmm(self.base.weight, self.lora_B, self.lora_A, alpha=self.alpha / self.r))
        if self.base.bias is not None:
            out.bias.copy_(self.base.bias)
        return out
''', ("LoRALinear",)),
]
