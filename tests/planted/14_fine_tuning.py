"""Planted bugs in 14_fine_tuning: each replaces one solution cell; the pipeline test expects that exercise alone
to fail."""

PLANTED = {
    "14-load-pretrained": (
        # loaded into the backbone module with the full model's keys: nothing matches, strict=False hides it
        "def load_pretrained(model, state_dict):\n"
        "    result = model.backbone.load_state_dict(state_dict, strict=False)\n"
        "    return sorted(result.missing_keys)\n",
        "backbone-not-loaded",
    ),
    "14-train-mode": (
        # model.train() alone: the frozen BatchNorm layers keep normalising with batch statistics
        "def train_mode(model):\n"
        "    model.train()\n",
        "frozen-bn-training",
    ),
    "14-param-groups": (
        # no decay decided by the name: BatchNorm weights are not called 'bias', so they are decayed
        "def finetune_optimizer(model, *, head_lr, backbone_lr, weight_decay):\n"
        "    groups = []\n"
        "    for prefix, lr in (('backbone.', backbone_lr), ('head.', head_lr)):\n"
        "        chosen = [(n, p) for n, p in model.named_parameters() if n.startswith(prefix) and p.requires_grad]\n"
        "        groups.append({'params': [p for n, p in chosen if 'bias' not in n], 'lr': lr,\n"
        "                       'weight_decay': weight_decay})\n"
        "        groups.append({'params': [p for n, p in chosen if 'bias' in n], 'lr': lr, 'weight_decay': 0.0})\n"
        "    return torch.optim.AdamW([g for g in groups if g['params']])\n",
        "decay-on-bias-or-norm",
    ),
    "14-unfreeze": (
        # blocks counted from the bottom: the most general block unfreezes first
        "def gradual_unfreeze(model, epoch, every):\n"
        "    blocks = [block for block in model.backbone if list(block.parameters())]\n"
        "    for index, block in enumerate(blocks):\n"
        "        block.requires_grad_(epoch >= every * (index + 1))\n"
        "    model.head.requires_grad_(True)\n",
        "wrong-order",
    ),
    "14-lora": (
        # scaled by alpha instead of alpha / r
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
        "wrong-forward",
    ),
}
