"""Drills on tensors: numerics, broadcasting, views and copies, dtypes, in-place updates, indexing, batched products."""

from __future__ import annotations

import torch

from harness.contract.case import Case
from harness.contract.forbidden import CallRecorder
from harness.drills.core import Drill, add
from harness.drills.support import explain


def logsumexp_inputs(case: Case) -> list[tuple[torch.Tensor, int]]:
    """Random inputs of several shapes and dims, then rows at ±1000 and rows of -inf (probe and judge alike)."""
    inputs = []
    for base, shape, dim in ((0, (4, 7), 1), (1, (3, 5, 2), 0), (2, (6,), 0), (3, (2, 3, 4), -1)):
        gen = torch.Generator().manual_seed(case.seeded(base))
        inputs.append((torch.randn(shape, generator=gen) * 5, dim))
    inputs.append((torch.tensor([[1000.0, 1000.0, -1000.0], [-1000.0, -1000.0, -1000.0]]), 1))
    inputs.append((torch.tensor([[-float("inf"), -float("inf")], [0.0, -float("inf")]]), 1))
    return inputs


def _probe_logsumexp(answer: dict, *, case: Case) -> dict:
    with CallRecorder() as calls:
        outputs = [answer["logsumexp"](x, dim) for x, dim in logsumexp_inputs(case)]
    return {"outputs": outputs, "calls": calls.seen}


_PAIRWISE_SHAPES = ((5, 3, 4), (1, 7, 2), (6, 6, 1), (4, 9, 16), (40, 30, 3))


def pairwise_inputs(case: Case) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(x, y) pairs of the pairwise-distances drill, one per shape of `_PAIRWISE_SHAPES`."""
    inputs = []
    for base, (n, m, d) in enumerate(_PAIRWISE_SHAPES):
        gen = torch.Generator().manual_seed(case.seeded(base))
        inputs.append((torch.randn(n, d, generator=gen), torch.randn(m, d, generator=gen)))
    return inputs


def _probe_pairwise(answer: dict, *, case: Case) -> dict:
    outputs, counts = [], []
    for a, b in pairwise_inputs(case):
        with CallRecorder() as calls:
            outputs.append(answer["pairwise_sq_dists"](a, b))
        counts.append(calls.count)
    return {"outputs": outputs, "counts": counts}


add(
    Drill(
        id="tensors-pairwise-distances",
        title="Pairwise squared distances by broadcasting",
        kind="write",
        topics=("tensors",),
        difficulty=1,
        prompt="Given a (n, d) and b (m, d), return the (n, m) matrix of squared Euclidean distances, "
        "with broadcasting and no Python loops.",
        entry="pairwise_sq_dists",
        starter="import torch\n\n\ndef pairwise_sq_dists(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:\n"
        "    raise NotImplementedError\n",
        hints=("Make the shapes (n, 1, d) and (1, m, d); their difference broadcasts to (n, m, d).",
               "((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)"),
        probe=_probe_pairwise,
    )
)


def _broadcast_experiment() -> None:
    a, b = torch.zeros(3, 1), torch.zeros(4)
    print(f"(3, 1) + (4,) -> {tuple((a + b).shape)}: shapes align from the right; size-1 dims stretch.")


add(
    explain(
        id="tensors-broadcast-shape",
        title="Predict a broadcast shape",
        topics=("tensors",),
        difficulty=1,
        question="x has shape (3, 1) and y has shape (4,). What is the shape of x + y?",
        hints=("Align the shapes from the right: (3, 1) against (_, 4).",
               "A size-1 dimension stretches to match; a missing leading dimension is treated as 1."),
        experiment=_broadcast_experiment,
    )
)


# --- tensors-view-or-copy (explain) --------------------------------------------------------------------------


def _view_or_copy_experiment() -> None:
    for text, make in (("y = x[x >= 0]", lambda x: x[x >= 0]), ("y = x.reshape(4, 3).clone()",
                                                                 lambda x: x.reshape(4, 3).clone()),
                       ("y = x[[0, 2]]", lambda x: x[[0, 2]]), ("y = x.t()[1:]", lambda x: x.t()[1:])):
        x = torch.zeros(3, 4)
        y = make(x)
        y += 1
        print(f"{text:28s} then y += 1: x changed? {bool(x.any())}; shares storage? "
              f"{y.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()}")
    print("Basic slicing, transpose and view return views; boolean and integer-list indexing copy.")


add(
    explain(
        id="tensors-view-or-copy",
        title="Views and copies: which line changes x?",
        topics=("tensors",),
        difficulty=2,
        question="x = torch.zeros(3, 4). Each line below is followed by y += 1. After which one does x change?",
        hints=("Which indexing operations can be expressed as a new (offset, shape, strides) over the same storage?",
               "Basic slicing, t(), view() give views; masks and integer lists gather elements into a copy."),
        experiment=_view_or_copy_experiment,
    )
)


# --- tensors-uint8-wraparound (bughunt) ----------------------------------------------------------------------

UINT8_STARTER = '''import torch


def center(images):
    """images: a uint8 tensor (N, C, H, W) of pixels 0..255. Returns float32 values in [-1, 1): (pixel - 128) / 128.

    Symptom: black pixels come out near +1 instead of -1, and the network trains on garbage."""
    return (images - 128) / 128
'''


def uint8_images(case: Case) -> list[torch.Tensor]:
    """Two uint8 image batches, each holding 0 and 255."""
    images = []
    for base, shape in enumerate(((2, 3, 4, 5), (1, 1, 6, 6))):
        gen = torch.Generator().manual_seed(case.seeded(base))
        x = torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8)
        x.view(-1)[:2] = torch.tensor([0, 255], dtype=torch.uint8)
        images.append(x)
    return images


def _probe_uint8(answer: dict, *, case: Case) -> dict:
    images = uint8_images(case)
    return {"outputs": [answer["center"](x) for x in images], "inputs_after": images}


add(
    Drill(
        id="tensors-uint8-wraparound",
        title="Bug hunt: black pixels come out white",
        kind="bughunt",
        topics=("tensors", "data"),
        difficulty=1,
        prompt="center(images) should map uint8 pixels 0..255 to float32 (pixel - 128) / 128, but black pixels come "
        "out near +1 instead of -1. Fix it.",
        entry="center",
        starter=UINT8_STARTER,
        hints=("What dtype does images - 128 have, and what does that dtype do with 0 - 128?",
               "uint8 arithmetic wraps modulo 256: convert to float32 before subtracting."),
        probe=_probe_uint8,
    )
)


# --- tensors-sgd-in-place (write) ----------------------------------------------------------------------------


def sgd_case(case: Case) -> tuple[float, list[torch.Tensor], list[torch.Tensor]]:
    """(lr, parameters, gradients) of the SGD drill: three tensors of different shapes each."""
    gen = torch.Generator().manual_seed(case.seeded(0))
    lr = 0.01 + 0.2 * float(torch.rand(1, generator=gen))
    shapes = ((4, 3), (3,), (2, 2, 2))
    return lr, [torch.randn(s, generator=gen) for s in shapes], [torch.randn(s, generator=gen) for s in shapes]


def _probe_sgd(answer: dict, *, case: Case) -> dict:
    lr, values, grads = sgd_case(case)
    params = [v.clone().requires_grad_(True) for v in values]
    for p, g in zip(params, grads, strict=True):
        p.grad = g.clone()
    answer["sgd_update_"](params, lr)
    return {"params": [{"value": p.detach().clone(), "grad": p.grad, "requires_grad": p.requires_grad,
                        "is_leaf": p.is_leaf} for p in params]}


add(
    Drill(
        id="tensors-sgd-in-place",
        self_check=True,
        title="An SGD step in place on leaf tensors",
        kind="write",
        topics=("tensors", "autograd"),
        difficulty=1,
        prompt="Write sgd_update_(params, lr): each p in params is a leaf tensor with requires_grad=True and a .grad. "
        "Update every p in place to p - lr * p.grad, then set p.grad to None. The parameters must stay the same "
        "tensor objects (a module and an optimizer hold them), still leaves, still requiring grad.",
        entry="sgd_update_",
        starter="import torch\n\n\ndef sgd_update_(params, lr):\n    raise NotImplementedError\n",
        hints=("p -= ... on a leaf that requires grad raises: what tells autograd not to record an operation? And "
               "does `p = p - ...` change the caller's tensor?",
               "with torch.no_grad(): for p in params: p -= lr * p.grad; p.grad = None"),
        probe=_probe_sgd,
    )
)


# --- tensors-attention-scores (write) ------------------------------------------------------------------------

_ATTENTION_SHAPES = ((2, 3, 5, 4, 8), (1, 2, 3, 7, 6), (8, 8, 2, 3, 16))  # (B, H, T, S, D); B*H = 64 in the last


def attention_scores_inputs(case: Case) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(q, k) pairs of the attention-scores drill, one per shape of `_ATTENTION_SHAPES`."""
    inputs = []
    for base, (b, h, t, s, d) in enumerate(_ATTENTION_SHAPES):
        gen = torch.Generator().manual_seed(case.seeded(base))
        inputs.append((torch.randn(b, h, t, d, generator=gen), torch.randn(b, h, s, d, generator=gen)))
    return inputs


def _probe_attention_scores(answer: dict, *, case: Case) -> dict:
    outputs, counts = [], []
    for q, k in attention_scores_inputs(case):
        with CallRecorder() as calls:
            outputs.append(answer["attention_scores"](q, k))
        counts.append(calls.count)
    return {"outputs": outputs, "counts": counts}


add(
    Drill(
        id="tensors-attention-scores",
        title="Batched attention scores",
        kind="write",
        topics=("tensors", "sequences"),
        difficulty=2,
        prompt="Write attention_scores(q, k): q is (B, H, T, D) and k is (B, H, S, D). Return the (B, H, T, S) "
        "tensor of scaled dot products q[b, h, t] · k[b, h, s] / sqrt(D), batched over B and H (no Python loops).",
        entry="attention_scores",
        starter="import torch\n\n\ndef attention_scores(q, k):\n    raise NotImplementedError\n",
        hints=("matmul batches over all leading axes; you need k's last two axes swapped.",
               "q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) (or torch.einsum('bhtd,bhsd->bhts', q, k))."),
        probe=_probe_attention_scores,
    )
)


# --- tensors-masked-mean (write) -----------------------------------------------------------------------------


def masked_mean_inputs(case: Case) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Padded batches: the first with large finite garbage in the padding, the second with nan there."""
    inputs = []
    for base, garbage in ((0, "large"), (1, "nan")):
        gen = torch.Generator().manual_seed(case.seeded(base))
        b, t, d = 24, 7, 3
        lengths = torch.randint(1, t + 1, (b,), generator=gen)
        lengths[0], lengths[1] = 1, t
        x = torch.randn(b, t, d, generator=gen)
        pad = torch.arange(t)[None, :] >= lengths[:, None]
        x[pad] = float("nan") if garbage == "nan" else 1000.0
        inputs.append((x, lengths))
    return inputs


def _probe_masked_mean(answer: dict, *, case: Case) -> dict:
    outputs, counts = [], []
    for x, lengths in masked_mean_inputs(case):
        with CallRecorder() as calls:
            outputs.append(answer["masked_mean"](x.clone(), lengths.clone()))
        counts.append(calls.count)
    return {"outputs": outputs, "counts": counts}


add(
    Drill(
        id="tensors-masked-mean", nonfinite=('outputs/*',),
        title="Mean over the valid positions of a padded batch",
        kind="write",
        topics=("tensors", "sequences"),
        difficulty=2,
        prompt="x is a padded batch of sequences (B, T, D) and lengths (B,) an int64 tensor of true lengths "
        "(1 ≤ length ≤ T): positions t ≥ lengths[b] are padding and may hold any value, nan included. Write "
        "masked_mean(x, lengths) returning the (B, D) mean over each sequence's valid positions, with no Python "
        "loops.",
        entry="masked_mean",
        starter="import torch\n\n\ndef masked_mean(x, lengths):\n    raise NotImplementedError\n",
        hints=("Build a (B, T) boolean mask by comparing arange(T) with lengths, broadcast. How do you zero the "
               "padding when it may hold nan?",
               "mask = arange(T)[None, :] < lengths[:, None]; x.masked_fill(~mask[..., None], 0).sum(1) / lengths"),
        probe=_probe_masked_mean,
    )
)


# --- tensors-gather-log-probs (write) ------------------------------------------------------------------------


def gather_inputs(case: Case) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(logits, targets); N > C so that a gather along the wrong axis still runs. One row's target sits 200
    below that row's best logit, where softmax underflows to 0 in float32."""
    inputs = []
    for base, (n, c) in enumerate(((9, 4), (16, 10))):
        gen = torch.Generator().manual_seed(case.seeded(base))
        logits = torch.randn(n, c, generator=gen) * 3
        targets = torch.randint(0, c, (n,), generator=gen)
        logits[0, targets[0]] = logits[0].max() - 200.0
        inputs.append((logits, targets))
    return inputs


def _probe_gather_log_probs(answer: dict, *, case: Case) -> dict:
    with CallRecorder() as calls:
        outputs = [answer["target_log_probs"](logits, targets) for logits, targets in gather_inputs(case)]
    return {"outputs": outputs, "calls": calls.seen}


add(
    Drill(
        id="tensors-gather-log-probs", nonfinite=('outputs/*',),
        title="Pick each row's target log-probability",
        kind="write",
        topics=("tensors",),
        difficulty=1,
        prompt="Write target_log_probs(logits, targets): logits is (N, C), targets (N,) int64 class indices. Return "
        "the (N,) tensor of log p(targets[n] | row n) under softmax, stable for logits far apart, with no Python "
        "loops. Do not call F.cross_entropy or F.nll_loss. (A self-check: the calls are "
        "recorded inside your answer's own process, so its pass does not count in a mock interview.)",
        entry="target_log_probs",
        starter="import torch\n\n\ndef target_log_probs(logits, targets):\n    raise NotImplementedError\n",
        hints=("Which function gives log-probabilities without computing probabilities first? Then pick one entry "
               "per row: which axis holds the classes?",
               "torch.log_softmax(logits, 1).gather(1, targets[:, None]).squeeze(1)"),
        probe=_probe_gather_log_probs,
        self_check=True,
    )
)
