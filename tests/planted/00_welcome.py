"""Planted bugs in 00_welcome: each replaces one solution cell; the pipeline test expects that exercise alone
to fail."""

PLANTED = {
    "00-make-batch": (
        "def make_batch(n, device):\n    return torch.zeros(3, 8, 8, device=device)\n",
        "wrong-shape",
    ),
    "00-count-params": (
        "def count_trainable_parameters(model):\n    return sum(p.numel() for p in model.parameters())\n",
        "counts-frozen",
    ),
    "00-accuracy": (
        "def accuracy(logits, targets):\n    return (logits.argmin(dim=1) == targets).float().mean().item()\n",
        "wrong-accuracy",
    ),
}
