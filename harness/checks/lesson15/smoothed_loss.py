"""15-smoothed-loss, the probe.

Call the loss on each case's logits (a leaf that requires grad) with the torch calls recorded; record the
value and the gradient reaching the logits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
from harness.contract.forbidden import CallRecorder
from harness.contract.instruments import collect
from harness.contract.registry import register


def smoothed_calls(case: Case) -> list[tuple[str, torch.Tensor, torch.Tensor, float]]:
    """(description, logits (N, C), targets (N,), smoothing) of each call: ordinary logits, smoothing 0, logits in
    the hundreds (where softmax then log gives log(0)), and bfloat16 logits (a loss computed in float32 must come
    back in the logits' dtype). Hidden: other sizes and smoothings."""
    generator = torch.Generator().manual_seed(case.seeded(157 if case.hidden else 156))
    plan = ([(8, 7, 0.05, 1.0), (5, 2, 0.3, 1.0), (3, 6, 0.0, 3.0), (6, 5, 0.15, 150.0), (7, 3, 0.1, 2.0, "bf16")]
            if case.hidden else [(6, 5, 0.1, 1.0), (4, 3, 0.0, 1.0), (4, 4, 0.2, 100.0), (5, 4, 0.1, 1.0, "bf16")])
    calls = []
    for n, classes, smoothing, scale, *low in plan:
        logits = torch.randn(n, classes, generator=generator) * scale
        targets = torch.randint(0, classes, (n,), generator=generator)
        size = "logits in the hundreds" if scale > 10 else f"logits of shape {(n, classes)}"
        if low:
            logits, size = logits.to(torch.bfloat16), f"bfloat16 {size}"
        calls.append((f"{size}, smoothing={smoothing}", logits, targets, smoothing))
    return calls


@register(
    "15-smoothed-loss", nonfinite=('results/*/returned', 'results/*/grad'),
    hints=Hints(
        nudge="log_probs = logits.log_softmax(-1); the target term is -log_probs at the target (gather); the "
        "smoothing term is -log_probs averaged over all classes; mix them with (1 - smoothing) and smoothing.",
        concept="Label smoothing trains towards (1 - eps) on the target plus eps / C on every class (the target "
        "included, as PyTorch does). Its cross-entropy is (1 - eps) * NLL + eps * mean over classes of -log p, "
        "averaged over the batch. log_softmax (or logits - logsumexp) stays finite for huge logits; "
        "softmax().log() does not. Torch operations keep the graph: autograd gives the gradient for free.",
        solution="log_probs = logits.log_softmax(dim=-1)\n"
        "nll = -log_probs.gather(1, targets[:, None]).squeeze(1)\n"
        "return ((1 - smoothing) * nll - smoothing * log_probs.mean(dim=-1)).mean()",
        section="5. A custom loss in torch operations",
    ),
    requires={
        "forbidden-call": Requirement(
            "does not call F.cross_entropy, F.nll_loss (or nn.CrossEntropyLoss) or numpy",
            hint="Write it from log_softmax, gather (or indexing) and mean: F.cross_entropy is what you compare with "
            "afterwards."),
        "not-a-scalar": Requirement("returns a 0-dim tensor (the mean over the batch)",
                                    hint="Print the .shape of what you return; did you average over the batch?"),
        "wrong-dtype": Requirement("the loss has the logits' dtype, as F.cross_entropy's does",
                                   hint="Print the dtype of what you return for float32 logits: which operation "
                                   "changed it?"),
        "wrong-value": Requirement(
            "equals F.cross_entropy(logits, targets, label_smoothing=smoothing)",
            hint="Check smoothing=0 first (plain cross-entropy), then the smoothing term: PyTorch spreads eps over "
            "all C classes, the target's included."),
        "not-stable": Requirement(
            "stays finite for logits in the hundreds",
            hint="Try logits = torch.tensor([[300.0, 0.0, -300.0]]): softmax gives an exact 0, and log(0) = -inf. "
            "Which function computes log-probabilities without taking the log of a softmax?"),
        "no-gradient": Requirement(
            "is differentiable, with the gradient of F.cross_entropy(..., label_smoothing=smoothing)",
            hint="Does the result have a grad_fn? .item(), float() and torch.tensor(...) cut the graph."),
    },
)
def probe_smoothed_loss(smoothed_cross_entropy: Callable[..., Any], *, case: Case) -> dict:
    """Call the loss on each case's logits (a leaf that requires grad) with the torch calls recorded; record the
    value and the gradient reaching the logits."""
    recorder = CallRecorder()

    def record(item: tuple[str, torch.Tensor, torch.Tensor, float]) -> dict:
        _, logits, targets, smoothing = item
        leaf = logits.clone().requires_grad_(True)
        with recorder:
            returned = smoothed_cross_entropy(leaf, targets.clone(), smoothing)
        grad = None
        if isinstance(returned, torch.Tensor) and returned.numel() == 1 and returned.grad_fn is not None:
            returned.sum().backward()
            grad = leaf.grad
        return {"returned": returned, "grad": grad}

    results = collect(smoothed_calls(case), record)
    return {"results": results, "calls": recorder.seen}
