"""Planted bugs in 01_tensors_autograd: each replaces one solution cell; the pipeline test expects that exercise alone
to fail."""

PLANTED = {
    "01-to-tokens": (
        "def to_tokens(images):\n"
        "    n, c, h, w = images.shape\n"
        "    return images.reshape(n, h * w, c)  # the bug: no permute, pixels of one channel become a token\n",
        "wrong-order",
    ),
    "01-pairwise-distances": (
        "def pairwise_distances(x, y):\n"
        "    squared = x.pow(2).sum(1, keepdim=True) - 2 * x @ y.T + y.pow(2).sum(1)\n"
        "    return squared.sqrt()  # the bug: rounding makes some squared distances negative -> nan\n",
        "non-finite",
    ),
    "01-logsumexp": (
        "def logsumexp(x, dim):\n"
        "    return x.exp().sum(dim=dim).log()  # the bug: exp overflows for large inputs\n",
        "overflow",
    ),
    "01-per-loss-gradients": (
        "def per_loss_gradients(w, losses):\n"
        "    gradients = []\n"
        "    for loss in losses:\n"
        "        loss(w).backward()  # the bug: .grad is never reset, so gradients accumulate\n"
        "        gradients.append(w.grad.clone())\n"
        "    w.grad = None\n"
        "    return gradients\n",
        "accumulated",
    ),
    "01-ema-update": (
        "def ema_update_(ema, params, decay):\n"
        "    for average, param in zip(ema, params):  # the bug: no torch.no_grad(), autograd records the update\n"
        "        average.mul_(decay).add_(param, alpha=1 - decay)\n",
        "builds-graph",
    ),
    "01-silu-function": (
        "class SiLUFunction(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        ctx.save_for_backward(x)\n"
        "        return x * torch.sigmoid(x)\n"
        "\n"
        "    @staticmethod\n"
        "    def backward(ctx, grad_output):\n"
        "        (x,) = ctx.saved_tensors\n"
        "        return grad_output * torch.sigmoid(x)  # the bug: the product rule's second term is missing\n",
        "wrong-backward",
    ),
}
