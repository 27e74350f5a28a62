"""15-smoothed-loss, the judge.

The value and gradient of F.cross_entropy(label_smoothing=...), finite for huge logits, no forbidden call.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from harness.checks.lesson15.smoothed_loss import smoothed_calls
from harness.contract.case import Case
from harness.contract.compare import close_values, judged, tensor, type_name
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.forbidden import forbid
from harness.contract.registry import judges
from harness.contract.wire import WireError
from harness.judges.lesson15.common import LOW_PRECISION, dtype_cause, dtype_hint, matches_for

_SMOOTHED_FORBIDDEN = {
    "cross_entropy": "the exercise asks you to write the loss from log_softmax (or logsumexp) yourself",
    "nll_loss": "the exercise asks you to pick the target's log-probability yourself (gather or indexing)",
    "numpy": "a numpy computation is invisible to autograd: the loss would have no gradient",
}


def _smoothed_other_classes(logits: torch.Tensor, targets: torch.Tensor, smoothing: float) -> torch.Tensor:
    """The convention that spreads eps over the C - 1 other classes (not PyTorch's)."""
    classes = logits.shape[-1]
    weights = torch.full(logits.shape, smoothing / (classes - 1), dtype=torch.float64)
    weights.scatter_(1, targets[:, None], 1 - smoothing)
    return -(weights * logits.double().log_softmax(-1)).sum(-1).mean()


def _target_share_missing(logits: torch.Tensor, targets: torch.Tensor, smoothing: float) -> torch.Tensor:
    """The convention that gives the target 1 - eps and every other class eps / C (the weights sum to 1 - eps / C)."""
    weights = torch.full(logits.shape, smoothing / logits.shape[-1], dtype=torch.float64)
    weights.scatter_(1, targets[:, None], 1 - smoothing)
    return -(weights * logits.double().log_softmax(-1)).sum(-1).mean()


def _uniform_summed(logits: torch.Tensor, targets: torch.Tensor, smoothing: float) -> torch.Tensor:
    """The loss when the smoothing term sums -log p over the classes instead of averaging it."""
    log_probs = logits.double().log_softmax(dim=-1)
    nll = -log_probs.gather(1, targets[:, None]).squeeze(1)
    return ((1 - smoothing) * nll - smoothing * log_probs.sum(dim=-1)).mean()


@judges(
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
def judge_smoothed_loss(seen: dict, *, case: Case) -> str:
    """The value and gradient of F.cross_entropy(label_smoothing=...), finite for huge logits, no forbidden call."""
    forbid(seen["calls"], _SMOOTHED_FORBIDDEN, where="the text of exercise 5")
    for (description, logits, targets, smoothing), result in judged(smoothed_calls(case), seen["results"]):
        got = result["returned"]
        if not isinstance(got, torch.Tensor) or got.dim() != 0:
            shape = f" of shape {tuple(got.shape)}" if isinstance(got, torch.Tensor) else ""
            fail("not-a-scalar", observed=f"returned {type_name(got)}{shape} for {description}",
                 expected="a 0-dim tensor: the mean over the batch",
                 cause="the per-example losses are returned without .mean(), a dimension was kept, or the value "
                 "became a Python number (.item(), float())", where="the return statement of smoothed_cross_entropy")
        leaf = logits.double().clone().requires_grad_(True)
        loss = F.cross_entropy(leaf, targets, label_smoothing=smoothing)
        loss.backward()
        want = loss.detach()
        if got.dtype != logits.dtype:
            fail("wrong-dtype", observed=f"returned a {got.dtype} loss for {description}",
                 expected=f"{logits.dtype}, the logits' dtype, as F.cross_entropy returns",
                 cause=dtype_cause(got.dtype, logits.dtype), where="the computation of the returned value",
                 hint=dtype_hint(logits.dtype))
        close = matches_for(logits.dtype)
        value = got.detach().double()
        if not torch.isfinite(value):
            fail("not-stable", observed=f"the loss is {float(value)} for {description}",
                 expected=f"{float(want):.6g} (finite)",
                 cause="log of a softmax that underflowed to 0 (softmax(...).log() gives -inf), or exp of a large "
                 "logit overflowing (exp(100) is inf in float32 without subtracting the max first)",
                 where="where the log-probabilities are computed")
        if not close(value, want):
            hint = None
            plain = F.cross_entropy(logits.double(), targets)
            if smoothing and close(value, plain):
                cause = "the smoothing is missing: this is the plain cross-entropy"
            elif smoothing and close(value, _smoothed_other_classes(logits, targets, smoothing)):
                cause = "smoothing spread over the C - 1 other classes; PyTorch spreads eps / C over all C classes, " \
                        "the target's included: (1 - eps) * NLL + eps * mean over classes of -log p"
            elif close(value, want * len(targets)):
                cause = "the sum over the batch, not the mean"
            elif smoothing and close(value, _target_share_missing(logits, targets, smoothing)):
                cause = "the target's own share eps / C is missing: PyTorch gives the target 1 - eps + eps / C and " \
                    "every other class eps / C"
            elif smoothing and close(value, (1 - smoothing) * plain):
                cause = "the smoothing term is missing: only (1 - eps) * NLL"
            elif smoothing and close(value, _uniform_summed(logits, targets, smoothing)):
                cause = "the uniform term sums -log p over the classes instead of averaging it: eps * sum is C " \
                    "times eps * mean (log_probs.sum(-1) where the formula has log_probs.mean(-1))"
                hint = "Print your smoothing term next to -log_probs.mean(dim=-1): is yours C times larger?"
            else:
                cause = "another formula: the sign of the log-probabilities, the weights of the two terms, or the " \
                    "target's log-probability taken from the wrong column (gather along dim 1)"
            fail("wrong-value", observed=f"loss {float(value):.6g} for {description}",
                 expected=f"{float(want):.6g}, F.cross_entropy(logits, targets, label_smoothing={smoothing})",
                 cause=cause, where="the formula in smoothed_cross_entropy", hint=hint)
        grad = result["grad"]
        if grad is None:
            fail("no-gradient", observed=f"the loss has no gradient path to the logits ({description})",
                 expected="loss.backward() fills logits.grad",
                 cause="the graph was cut: .item(), float(), .detach(), or a new tensor made with torch.tensor(...) "
                 "from the value", where="the computation of the returned value")
        grad = tensor(grad, "grad")
        if grad.dtype != logits.dtype:
            raise WireError("malformed observation: the gradient's dtype is not the logits'")
        grad = grad.double()
        if not torch.isfinite(grad).all():
            fail("not-stable", observed=f"the gradient holds inf or NaN for {description}",
                 expected="a finite gradient",
                 cause="the log-probabilities went through log(0) or exp overflow on the way",
                 where="where the log-probabilities are computed")
        tolerance = 2e-2 if logits.dtype in LOW_PRECISION else 1e-3
        if not close_values(grad, leaf.grad, rtol=tolerance, atol=tolerance, dtype=False):
            fail("no-gradient", observed=f"logits.grad differs from F.cross_entropy's ({description})",
                 expected="the gradient of F.cross_entropy(logits, targets, label_smoothing=smoothing)",
                 cause="part of the computation is detached (a .detach() or a value computed outside the graph)",
                 where="the computation of the returned value")
    return "the value and gradient of F.cross_entropy(label_smoothing=...) from torch operations, finite for large " \
        "logits"
