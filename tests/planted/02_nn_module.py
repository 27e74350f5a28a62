"""Planted bugs in 02_nn_module: each replaces one solution cell; the pipeline test expects that exercise alone
to fail."""

PLANTED = {
    "02-mlp": (
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
        "unregistered-layers",
    ),
    "02-count-trainable": (
        "def count_trainable(model):\n"
        "    return sum(t.numel() for t in model.state_dict().values())  # the bug: buffers counted too\n",
        "counts-buffers",
    ),
    "02-running-standardizer": (
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
        "not-registered",
    ),
    "02-freeze-backbone": (
        "def freeze_backbone(model):\n"
        "    model.backbone.requires_grad = False  # the bug: sets an attribute on the module, not on its parameters\n"
        "    model.head.requires_grad_(True)\n",
        "backbone-trainable",
    ),
    "02-init-weights": (
        "def init_weights_(model):\n"
        "    for module in model.children():  # the bug: nested layers are never reached\n"
        "        if isinstance(module, nn.Linear):\n"
        "            nn.init.kaiming_normal_(module.weight, nonlinearity='relu')\n"
        "            nn.init.zeros_(module.bias)\n",
        "missed-nested-layers",
    ),
    "02-param-groups": (
        "def make_param_groups(model, *, lr, weight_decay, backbone_lr):\n"
        "    # the bug: weight decay on every parameter, biases and LayerNorm weights included\n"
        "    return [\n"
        "        {'params': [p for p in model.backbone.parameters() if p.requires_grad], 'lr': backbone_lr,\n"
        "         'weight_decay': weight_decay},\n"
        "        {'params': [p for p in model.head.parameters() if p.requires_grad], 'lr': lr, "
        "'weight_decay': weight_decay},\n"
        "    ]\n",
        "decay-on-bias-or-norm",
    ),
}
