"""Lesson 02 held-out entries (written from the exercise text only)."""

from entry import Entry

PRELUDE = '''
import torch
import torch.nn.functional as F
from torch import nn
from harness.checks import check, hint
from harness.env import select_device
from harness.repro import seed_everything
seed_everything(0)
device = select_device()
'''

RS_INIT = '''
class RunningStandardizer(nn.Module):
    def __init__(self, num_features, momentum=0.1, eps=1e-5):
        super().__init__()
        self.momentum, self.eps = momentum, eps
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))
'''

ENTRIES = [
    Entry("02-mlp", "mistake", "layers in a Python list",
          "a plain list does not register the layers: no parameters in the model", '''
class MLP(nn.Module):
    def __init__(self, sizes, dropout=0.0):
        super().__init__()
        self.layers = [nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:])]
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        for layer in self.layers[:-1]:
            x = self.dropout(torch.relu(layer(x)))
        return self.layers[-1](x)
''', ("MLP",)),
    Entry("02-mlp", "mistake", "ReLU and dropout after every layer",
          "the output layer is followed by ReLU and dropout: not raw scores", '''
class MLP(nn.Module):
    def __init__(self, sizes, dropout=0.0):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        for layer in self.layers:
            x = self.dropout(torch.relu(layer(x)))
        return x
''', ("MLP",)),
    Entry("02-mlp", "mistake", "F.dropout without the training flag",
          "F.dropout defaults to training=True: dropout stays active in eval mode", '''
class MLP(nn.Module):
    def __init__(self, sizes, dropout=0.0):
        super().__init__()
        self.p = dropout
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))

    def forward(self, x):
        for layer in self.layers[:-1]:
            x = F.dropout(torch.relu(layer(x)), self.p)
        return self.layers[-1](x)
''', ("MLP",)),
    Entry("02-count-trainable", "mistake", "counted the state_dict",
          "state_dict includes buffers and frozen parameters", '''
def count_trainable(model):
    return sum(t.numel() for t in model.state_dict().values())
''', ("count_trainable",)),
    Entry("02-count-trainable", "mistake", "named_parameters(remove_duplicate=False)",
          "a shared parameter is counted twice", '''
def count_trainable(model):
    return sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False) if p.requires_grad)
''', ("count_trainable",)),
    Entry("02-running-standardizer", "mistake", "running statistics updated inside the graph",
          "no torch.no_grad/detach: the buffer update is recorded by autograd", RS_INIT + '''
    def forward(self, x):
        if self.training:
            mean, var = x.mean(0), x.var(0, unbiased=False)
            self.running_mean = (1 - self.momentum) * self.running_mean + self.momentum * mean
            self.running_var = (1 - self.momentum) * self.running_var + self.momentum * var
        else:
            mean, var = self.running_mean, self.running_var
        return (x - mean) / torch.sqrt(var + self.eps)
''', ("RunningStandardizer",)),
    Entry("02-running-standardizer", "mistake", "momentum on the old value",
          "running = momentum * running + (1 - momentum) * batch: the convention swapped", RS_INIT + '''
    def forward(self, x):
        if self.training:
            mean, var = x.mean(0), x.var(0, unbiased=False)
            with torch.no_grad():
                self.running_mean.mul_(self.momentum).add_((1 - self.momentum) * mean)
                self.running_var.mul_(self.momentum).add_((1 - self.momentum) * var)
        else:
            mean, var = self.running_mean, self.running_var
        return (x - mean) / torch.sqrt(var + self.eps)
''', ("RunningStandardizer",)),
    Entry("02-running-standardizer", "mistake", "eps hard-coded",
          "uses 1e-5 instead of the eps the module was built with", RS_INIT + '''
    def forward(self, x):
        if self.training:
            mean, var = x.mean(0), x.var(0, unbiased=False)
            with torch.no_grad():
                self.running_mean.lerp_(mean, self.momentum)
                self.running_var.lerp_(var, self.momentum)
        else:
            mean, var = self.running_mean, self.running_var
        return (x - mean) / torch.sqrt(var + 1e-5)
''', ("RunningStandardizer",)),
    Entry("02-running-standardizer", "mistake", "plain tensor attributes",
          "running statistics are plain attributes, not buffers: missing from state_dict", '''
class RunningStandardizer(nn.Module):
    def __init__(self, num_features, momentum=0.1, eps=1e-5):
        super().__init__()
        self.momentum, self.eps = momentum, eps
        self.running_mean = torch.zeros(num_features)
        self.running_var = torch.ones(num_features)

    def forward(self, x):
        if self.training:
            mean, var = x.mean(0), x.var(0, unbiased=False)
            with torch.no_grad():
                self.running_mean.lerp_(mean, self.momentum)
                self.running_var.lerp_(var, self.momentum)
        else:
            mean, var = self.running_mean, self.running_var
        return (x - mean) / torch.sqrt(var + self.eps)
''', ("RunningStandardizer",)),
    Entry("02-freeze-backbone", "mistake", "backbone.requires_grad = False",
          "sets an unused attribute on the module: no parameter is frozen", '''
def freeze_backbone(model):
    model.backbone.requires_grad = False
    model.head.requires_grad_(True)
''', ("freeze_backbone",)),
    Entry("02-freeze-backbone", "mistake", "forgot the head",
          "the head is not made trainable when it came frozen", '''
def freeze_backbone(model):
    for p in model.backbone.parameters():
        p.requires_grad = False
''', ("freeze_backbone",)),
    Entry("02-init-weights", "mistake", "looped over children",
          "model.children() is one level only: nested Linear layers are skipped", '''
def init_weights_(model):
    for m in model.children():
        if isinstance(m, nn.Linear):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
''', ("init_weights_",)),
    Entry("02-init-weights", "mistake", "assigned new Parameters",
          "new nn.Parameter objects replace the old ones: an optimizer built before holds stale tensors", '''
def init_weights_(model):
    for m in model.modules():
        if isinstance(m, nn.Linear):
            m.weight = nn.Parameter(torch.randn_like(m.weight) * (2 / m.in_features) ** 0.5)
            if m.bias is not None:
                m.bias = nn.Parameter(torch.zeros_like(m.bias))
''', ("init_weights_",)),
    Entry("02-init-weights", "mistake", "mode fan_out",
          "std = sqrt(2 / out_features) instead of sqrt(2 / in_features)", '''
def init_weights_(model):
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
''', ("init_weights_",)),
    Entry("02-param-groups", "mistake", "no decay only for names ending in bias",
          "1-d norm weights get weight decay", '''
def make_param_groups(model, *, lr, weight_decay, backbone_lr):
    groups = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            groups.setdefault((name.startswith("backbone."), not name.endswith("bias")), []).append(p)
    return [{"params": ps, "lr": backbone_lr if b else lr, "weight_decay": weight_decay if d else 0.0}
            for (b, d), ps in groups.items()]
''', ("make_param_groups",)),
    Entry("02-param-groups", "mistake", "frozen parameters included",
          "no requires_grad filter", '''
def make_param_groups(model, *, lr, weight_decay, backbone_lr):
    groups = {}
    for name, p in model.named_parameters():
        groups.setdefault((name.startswith("backbone."), p.ndim >= 2), []).append(p)
    return [{"params": ps, "lr": backbone_lr if b else lr, "weight_decay": weight_decay if d else 0.0}
            for (b, d), ps in groups.items()]
''', ("make_param_groups",)),
    Entry("02-mlp", "correct", "nn.Sequential built from a flat list", "", '''
class MLP(nn.Module):
    def __init__(self, sizes, dropout=0.0):
        super().__init__()
        parts = []
        for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
            parts.append(nn.Linear(a, b))
            if i < len(sizes) - 2:
                parts += [nn.ReLU(), nn.Dropout(dropout)]
        self.net = nn.Sequential(*parts)

    def forward(self, x):
        return self.net(x)
''', ("MLP",)),
    Entry("02-param-groups", "correct", "four explicit groups, empty ones dropped", "", '''
def make_param_groups(model, *, lr, weight_decay, backbone_lr):
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    groups = []
    for in_bb in (True, False):
        for decay in (True, False):
            ps = [p for n, p in named if n.startswith("backbone.") == in_bb and (p.dim() >= 2) == decay]
            if ps:
                groups.append(dict(params=ps, lr=backbone_lr if in_bb else lr,
                                   weight_decay=weight_decay if decay else 0.0))
    return groups
''', ("make_param_groups",)),
]
