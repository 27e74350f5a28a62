"""Lesson 01 held-out entries (written from the exercise text only)."""

from entry import Entry

PRELUDE = '''
import math
import torch
import torch.nn.functional as F
from harness.checks import check, hint
from harness.env import select_device
from harness.repro import seed_everything
seed_everything(0)
device = select_device()
'''

ENTRIES = [
    Entry("01-to-tokens", "mistake", "reshape without permute",
          "reshape(N, H*W, C) reinterprets memory: channels and pixels mixed up", '''
def to_tokens(images):
    n, c, h, w = images.shape
    return images.reshape(n, h * w, c)
''', ("to_tokens",)),
    Entry("01-to-tokens", "mistake", "permute then view",
          "view on a permuted (non-contiguous) tensor raises", '''
def to_tokens(images):
    n, c, h, w = images.shape
    return images.permute(0, 2, 3, 1).view(n, h * w, c)
''', ("to_tokens",)),
    Entry("01-to-tokens", "mistake", "permute with the wrong order",
          "permute(0, 3, 2, 1) puts W before H: token index w*H + h instead of h*W + w", '''
def to_tokens(images):
    n, c, h, w = images.shape
    return images.permute(0, 3, 2, 1).reshape(n, h * w, c)
''', ("to_tokens",)),
    Entry("01-pairwise-distances", "mistake", "expansion without a clamp",
          "|x|^2 - 2x.y + |y|^2 can be slightly negative: sqrt gives nan on the diagonal", '''
def pairwise_distances(x, y):
    sq = (x * x).sum(1)[:, None] - 2 * x @ y.T + (y * y).sum(1)[None, :]
    return sq.sqrt()
''', ("pairwise_distances",)),
    Entry("01-pairwise-distances", "mistake", "cdist on float32 copies",
          "inputs upcast/downcast to float32: the inputs' dtype (float64) is not kept", '''
def pairwise_distances(x, y):
    return torch.cdist(x.float(), y.float())
''', ("pairwise_distances",)),
    Entry("01-pairwise-distances", "mistake", "broadcast on the wrong axes",
          "x[None] - y[:, None] gives the (m, n) matrix, transposed", '''
def pairwise_distances(x, y):
    return (x[None, :, :] - y[:, None, :]).pow(2).sum(-1).sqrt()
''', ("pairwise_distances",)),
    Entry("01-logsumexp", "mistake", "the naive formula",
          "exp overflows for inputs in the hundreds: inf", '''
def logsumexp(x, dim):
    return x.exp().sum(dim).log()
''', ("logsumexp",)),
    Entry("01-logsumexp", "mistake", "max trick without the -inf guard",
          "an all -inf slice computes -inf - (-inf) = nan", '''
def logsumexp(x, dim):
    m = x.amax(dim=dim, keepdim=True)
    return m.squeeze(dim) + (x - m).exp().sum(dim).log()
''', ("logsumexp",)),
    Entry("01-logsumexp", "mistake", "kept the reduced dimension",
          "keepdim result: the shape keeps dim instead of removing it", '''
def logsumexp(x, dim):
    m = x.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    return m + (x - m).exp().sum(dim, keepdim=True).log()
''', ("logsumexp",)),
    Entry("01-per-loss-gradients", "mistake", "never reset w.grad between losses",
          "backward adds into w.grad: each gradient includes the previous losses'", '''
def per_loss_gradients(w, losses):
    out = []
    for loss in losses:
        loss(w).backward()
        out.append(w.grad.clone())
    w.grad = None
    return out
''', ("per_loss_gradients",)),
    Entry("01-per-loss-gradients", "mistake", "left the last gradient in w.grad",
          "w.grad is not set back to None at the end", '''
def per_loss_gradients(w, losses):
    out = []
    for loss in losses:
        w.grad = None
        loss(w).backward()
        out.append(w.grad)
    return out
''', ("per_loss_gradients",)),
    Entry("01-ema-update", "mistake", "assigned new tensors into the list",
          "ema[i] = ... replaces the list's tensors instead of updating them in place", '''
def ema_update_(ema, params, decay):
    with torch.no_grad():
        for i, p in enumerate(params):
            ema[i] = decay * ema[i] + (1 - decay) * p
''', ("ema_update_",)),
    Entry("01-ema-update", "mistake", "decay and 1 - decay swapped",
          "ema <- (1 - decay) ema + decay * param", '''
def ema_update_(ema, params, decay):
    with torch.no_grad():
        for a, p in zip(ema, params):
            a.mul_(1 - decay).add_(p, alpha=decay)
''', ("ema_update_",)),
    Entry("01-ema-update", "mistake", "no torch.no_grad",
          "adding a parameter that requires grad in place records a graph: the EMA tensors require grad", '''
def ema_update_(ema, params, decay):
    for a, p in zip(ema, params):
        a.mul_(decay).add_((1 - decay) * p)
''', ("ema_update_",)),
    Entry("01-silu-function", "mistake", "backward is grad * sigmoid(x)",
          "derivative missing the x * s * (1 - s) term of the product rule", '''
class SiLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * torch.sigmoid(x)
''', ("SiLUFunction",)),
    Entry("01-to-tokens", "correct", "flatten then transpose", "", '''
def to_tokens(images):
    return images.flatten(start_dim=2).transpose(1, 2).contiguous()
''', ("to_tokens",)),
    Entry("01-logsumexp", "correct", "nan_to_num on the max", "", '''
def logsumexp(x, dim):
    m = x.detach().amax(dim, keepdim=True)
    m = m.masked_fill(m == float("-inf"), 0.0)
    return (x - m).exp().sum(dim).log() + m.squeeze(dim)
''', ("logsumexp",)),
    Entry("01-silu-function", "correct", "save the sigmoid too", "", '''
class SiLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        s = x.sigmoid()
        ctx.save_for_backward(x, s)
        return x * s

    @staticmethod
    def backward(ctx, g):
        x, s = ctx.saved_tensors
        return g * (s + x * s * (1 - s))
''', ("SiLUFunction",)),
]
