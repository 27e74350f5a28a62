"""15-masked-loss, the judge.

The mean cross-entropy over real tokens, as a differentiable 0-dim tensor; padding and inputs untouched.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from harness.checks.lesson15.masked_loss import loss_inputs
from harness.contract.case import Case
from harness.contract.compare import judged, same_values, tensor, type_name
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.protocol import refuse_nonfinite
from harness.contract.recorded import recorded
from harness.contract.registry import judges
from harness.contract.wire import WireError
from harness.judges.lesson15.common import dtype_cause, dtype_hint, matches_for


def _number(value: torch.Tensor) -> str:
    return f"{float(value):.5g}" if value.numel() == 1 else f"a tensor of shape {tuple(value.shape)}"


@recorded
def _per_token(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view(targets.shape)


def _softmax_over_time(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The masked mean when the log-softmax normalises over time (dim=1) instead of the classes."""
    picked = -logits.double().log_softmax(dim=1).gather(2, targets[..., None]).squeeze(2)
    return picked[mask].mean()


@recorded
def _reference_masked(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor,
                                                                                                   torch.Tensor]:
    """The mean cross-entropy over the real tokens, in float64, and its gradient with respect to the logits."""
    leaf = logits.double().requires_grad_(True)
    loss = F.cross_entropy(leaf.flatten(0, 1), targets.flatten(), reduction="none").view(targets.shape)[mask].mean()
    loss.backward()
    return loss.detach(), leaf.grad


@judges(
    "15-masked-loss", nonfinite=("results/*",),  # refused by the judge call by call, in the order of the calls
    hints=Hints(
        nudge="Compute the cross-entropy of every position (reduction='none'), keep the real ones with the mask, "
        "and average over those only.",
        concept="A padded batch has positions that are not tokens; their loss must count for nothing, and the mean "
        "divides by the number of real tokens (mask.sum()), not by batch * time. Either select with the mask, or "
        "set padded targets to ignore_index (on a copy) and let F.cross_entropy skip them.",
        solution="per_token = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction='none')\n"
        "return per_token[mask.flatten()].mean()",
        section="2. A loss that ignores padding",
    ),
    requires={
        "not-a-scalar": Requirement("returns a 0-dim tensor",
                                    hint="Print the .shape of what you return: it should be torch.Size([])."),
        "wrong-dtype": Requirement("the loss has the logits' dtype",
                                   hint="Print the dtype of what you return for bfloat16 logits: which operation "
                                   "changed it?"),
        "padding-counted": Requirement(
            "padded positions count for nothing: neither their logits and targets nor their number",
            hint="Change the logits at the padded positions only and call your loss again: does the value move? "
            "What do you divide by?"),
        "wrong-value": Requirement(
            "returns the mean cross-entropy over the real tokens of the whole batch, whatever their class (0 included)",
            hint="Compare with F.cross_entropy on the real tokens alone, taken out with logits[mask]: is yours a sum, "
            "a mean of per-sequence means, or does it skip a class?"),
        "no-gradient": Requirement(
            "the result is differentiable: its gradient reaches the logits",
            hint="Does the result have a grad_fn? .item(), float(), numpy and torch.tensor(...) all cut the graph."),
        "inputs-modified": Requirement(
            "leaves logits, targets and mask unchanged",
            hint="Which line writes into targets (or logits, or mask)? Change a copy (targets.masked_fill(...), "
            "not targets[...] = ...)."),
    },
)
def judge_masked_loss(seen: dict, *, case: Case) -> str:
    """The mean cross-entropy over real tokens, as a differentiable 0-dim tensor; padding and inputs untouched."""
    for index, ((description, logits, targets, mask), result) in enumerate(judged(loss_inputs(case),
                                                                                 seen["results"])):
        # a NaN is refused here, call by call, so that an earlier call's own failure (the mean of sequence means)
        # comes first: the hidden case's all-padding row makes that mistake's later call NaN
        refuse_nonfinite({f"results/{index}": result})
        got = result["returned"]
        after = result["after"]
        if not isinstance(after, list) or len(after) != 3:
            raise WireError("malformed observation: the inputs after the call are missing")
        for name, before, now in zip(("logits", "targets", "mask"), (logits, targets, mask), after, strict=True):
            now = tensor(now, f"{name} after the call")
            if now.shape != before.shape or now.dtype != before.dtype or not same_values(now, before, dtype=False):
                fail("inputs-modified", observed=f"{name} changed during the call ({description})",
                     expected="the inputs left as they were",
                     cause="an in-place write such as targets[~mask] = -100 or a method ending in _ (masked_fill_, "
                     "mul_): the caller's tensor changes too", where=f"the line of your loss that writes into {name}")
        if not isinstance(got, torch.Tensor) or got.dim() != 0:
            fail("not-a-scalar",
                 observed=f"returned {type_name(got)}" + (f" of shape {tuple(got.shape)}"
                                                          if isinstance(got, torch.Tensor) else "")
                 + f" for {description}",
                 expected="a 0-dim tensor: the mean over real tokens",
                 cause="the per-token losses are returned without averaging (reduction='none'), a dimension was "
                 "kept (keepdim=True, view(1)), or the value became a Python number (.item(), float())",
                 where="the return statement of masked_cross_entropy")
        per_token = _per_token(logits.double(), targets)
        want = per_token[mask].mean()
        if got.dtype != logits.dtype:
            fail("wrong-dtype", observed=f"returned a {got.dtype} loss for {description}",
                 expected=f"{logits.dtype}, the logits' dtype",
                 cause=dtype_cause(got.dtype, logits.dtype), where="the computation of the returned value",
                 hint=dtype_hint(logits.dtype))
        matches = matches_for(logits.dtype)
        value = got.detach().double()
        if not matches(value, want):
            every = per_token.mean()
            zeroed = (per_token * mask).mean()
            sequence_means = torch.stack([row[m].mean() for row, m in zip(per_token, mask, strict=True) if m.any()])
            if matches(value, every):
                code, cause = "padding-counted", "the mean over every position, padded ones included"
            elif matches(value, zeroed):
                code, cause = "padding-counted", ("the padded losses were zeroed but still counted in the mean: "
                                                  "(loss * mask).mean() divides by batch * time, not by mask.sum()")
            elif matches(value, per_token[mask].sum()):
                code, cause = "wrong-value", "the sum over real tokens, not their mean"
            elif matches(value, per_token[mask].sum() / len(mask)):
                code, cause = "wrong-value", (f"the sum over real tokens divided by the batch size ({len(mask)}), not "
                                              f"by the number of real tokens ({int(mask.sum())})")
            elif matches(value, sequence_means.mean()):
                code, cause = "wrong-value", ("the mean of each sequence's mean: a short sequence's tokens then "
                                              "weigh more than a long one's")
            elif matches(value, per_token[mask & (targets != 0)].mean()):
                code, cause = "wrong-value", ("the real tokens whose target is class 0 were left out too: "
                                              "ignore_index=0 skips every target equal to 0, and 0 is a real class "
                                              "here; mark the padded targets with -100 (on a copy) or select with "
                                              "the mask")
            elif matches(value, per_token[targets != 0].mean()):
                code, cause = "padding-counted", ("ignore_index=0 without the mask: it skips the targets equal to 0, "
                                                  "real ones included, and counts every padded position whose target "
                                                  "is another class; only the mask says which positions are real")
            elif matches(value, _softmax_over_time(logits, targets, mask)):
                code, cause = "wrong-value", ("the log-softmax ran over the time axis (dim=1) of (batch, time, "
                                              "classes): the classes are the last axis")
            else:
                code, cause = "wrong-value", "another quantity than the ones the check recognises (every position, " \
                    "a sum, per-sequence means, a class skipped, the softmax's axis): look for logits and targets " \
                    "paired in another order or another reduction"
            fail(code, observed=f"loss {float(value):.5g} for {description}",
                 expected=f"{float(want):.5g}, the mean cross-entropy over the {int(mask.sum())} real tokens",
                 cause=cause, where="the reduction in masked_cross_entropy")
        again = result["again"]
        if not isinstance(again, torch.Tensor) or again.numel() != 1 or again.dtype != logits.dtype \
                or not matches(again.detach().reshape(()), want):
            fail("padding-counted",
                 observed=f"changing the logits and targets at padded positions only changed the loss to "
                 f"{_number(again) if isinstance(again, torch.Tensor) else type_name(again)} ({description})",
                 expected=f"the same loss, {float(want):.5g}: padded positions count for nothing",
                 cause="the padded positions take part before the mask is applied (a weighting that depends on "
                 "them, a mask built from the targets' values)", where="how the mask is applied")
        grad = result["grad"]
        _, want_grad = _reference_masked(logits, targets, mask)
        if not result["requires_grad"] or grad is None:
            fail("no-gradient", observed=f"the loss has no gradient path to the logits ({description})",
                 expected="loss.backward() fills logits.grad",
                 cause="the graph was cut: .item(), float(), .detach(), numpy, or a new tensor made with "
                 "torch.tensor(...) from the value", where="the computation of the returned value")
        grad = tensor(grad, "grad")
        if grad.dtype != logits.dtype:
            raise WireError("malformed observation: the gradient's dtype is not the logits'")
        if not matches(grad, want_grad):
            fail("no-gradient", observed=f"logits.grad differs from the gradient of the masked mean ({description})",
                 expected="the gradient of the mean over real tokens (zero at padded positions)",
                 cause="part of the computation is detached, or a constant was computed from the values",
                 where="the computation of the returned value")
    return "the mean cross-entropy over real tokens, differentiable, with padding and inputs untouched"
