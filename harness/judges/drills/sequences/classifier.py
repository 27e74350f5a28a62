"""The sequence classifier drill with three bugs: its reference and pooled-loss judge."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from harness.contract import expect
from harness.contract.case import Case
from harness.contract.compare import close_values, malformed
from harness.contract.failure import fail
from harness.contract.wire import describe
from harness.drills.bank.sequences import (
    SEQ_STARTER,
    classifier_setup,
    seq_lr,
)
from harness.drills.core import Answers
from harness.drills.support import edited
from harness.judges.drills.sequences.common import CLOSE
from harness.judges.drills.whys import add_answers


def _pooled_loss(params: dict[str, torch.Tensor], tokens: torch.Tensor, lengths: torch.Tensor, labels: torch.Tensor,
                 *, include_next: bool = False, by_steps: bool = False) -> torch.Tensor:
    steps = tokens.shape[1]
    h = F.embedding(tokens, params["embed.weight"])
    positions = torch.arange(steps)[None, :]
    mask = positions <= lengths[:, None] if include_next else positions < lengths[:, None]
    pooled = (h * mask[..., None]).sum(1) / (steps if by_steps else lengths[:, None])
    return F.cross_entropy(F.linear(pooled, params["classifier.weight"], params["classifier.bias"]), labels)


def _judge_seq_step(seen: dict, *, case: Case) -> str:
    where = "train_step"
    _, _, batches = classifier_setup(case)
    steps, losses = seen.get("steps"), seen.get("losses")
    if not isinstance(steps, list) or not isinstance(losses, list) or len(losses) != len(batches):
        malformed("records missing")
    if len(steps) != len(batches):
        fail("wrong-step-count", observed=f"{len(steps)} optimizer steps for {len(batches)} calls",
             expected="one optimizer.step() per call", cause="the step is missing or repeated", where=where)
    earlier: dict[str, torch.Tensor] = {}
    for i, ((tokens, lengths, labels), step, got_loss) in enumerate(zip(batches, steps, losses, strict=True)):
        if not isinstance(step, dict):
            malformed("step record")
        params = {n: t.detach().clone().requires_grad_(True)
                  for n, t in _dict_of_tensors(step.get("params")).items()}
        if set(params) != {"embed.weight", "classifier.weight", "classifier.bias"}:
            malformed("the probe's optimizer records are incomplete")
        want = _pooled_loss(params, tokens, lengths, labels)
        if not close_values(got_loss, want.detach(), **CLOSE):
            if isinstance(got_loss, torch.Tensor) and got_loss.dim() == 0 and any(
                    close_values(got_loss, _pooled_loss(params, tokens, lengths, labels, include_next=True, by_steps=s),
                                 **CLOSE)
                    for s in (False, True)):
                fail("pad-token-pooled", observed=f"at step {i} the pooled vector includes the first padding token",
                     expected="the mean of the real tokens' embeddings (t < length)",
                     cause="`<=` in the mask: position lengths[b] is the first PAD, not the last real token",
                     where="the padding mask's comparison")
            if close_values(got_loss, _pooled_loss(params, tokens, lengths, labels, by_steps=True), **CLOSE):
                fail("divides-by-padded-length", observed=f"at step {i} the sum of real embeddings is divided by T",
                     expected="divided by each sequence's length",
                     cause="dividing by the padded length shrinks short sequences' vectors toward 0: the prediction "
                     "depends on how much padding the batch had", where="the division of the pooled sum")
            expect.close(f"the loss returned at step {i}", got_loss if isinstance(got_loss, torch.Tensor)
                         else describe(got_loss), want.detach(), atol=1e-5, rtol=1e-4, where=where,
                         cause="cross_entropy of the classifier on the masked mean of the embeddings")
        want.backward()
        grads = step.get("grads")
        if not isinstance(grads, dict):
            malformed("grads missing")
        if all(grads.get(n) is None or (isinstance(grads.get(n), torch.Tensor) and grads[n].abs().sum() == 0)
               for n in params):
            fail("gradients-cleared", observed=f"at step {i} the optimizer saw no gradient (None or zeros)",
                 expected="the gradient of this step's loss", cause="zero_grad() between backward() and step() "
                 "erases the gradient just computed", where="what happens to .grad between steps")
        summed = {n: p.grad + earlier[n] for n, p in params.items()} if earlier else None
        if summed and not all(close_values(grads.get(n), p.grad, atol=1e-5, rtol=1e-4) for n, p in params.items()) \
                and all(close_values(grads.get(n), summed[n], atol=1e-5, rtol=1e-4) for n in params):
            fail("stale-gradients", observed=f"at step {i} the optimizer saw the sum of this step's gradient and "
                 "every earlier step's", expected="the gradient of this step's loss alone",
                 cause="nothing clears .grad between steps: backward() adds into it", where="what happens to .grad "
                 "between steps")
        for name, p in params.items():
            expect.close(f"the gradient of {name} at step {i}", grads.get(name), p.grad, atol=1e-5, rtol=1e-4,
                         where=where, cause="the gradient of another loss than the prompt's")
        earlier = summed or {n: p.grad for n, p in params.items()}
    final = _dict_of_tensors(seen.get("final"))
    last = _dict_of_tensors(steps[-1].get("params"))
    lr = seq_lr(case)
    params = {n: t.clone().requires_grad_(True) for n, t in last.items()}
    _pooled_loss(params, *batches[-1]).backward()
    for name, p in params.items():
        expect.close(f"{name} after the last step", final.get(name), (p - lr * p.grad).detach(), atol=1e-5,
                     rtol=1e-4, where=where, cause="the step is not SGD(lr) on this gradient")
    return "pooling over real tokens only, divided by the true lengths, and each step's own gradient"


def _dict_of_tensors(value: Any) -> dict[str, torch.Tensor]:
    if not isinstance(value, dict) or not all(isinstance(v, torch.Tensor) for v in value.values()):
        malformed("not a dict of tensors")
    return value


_SEQ_SOLUTION = '''import torch
import torch.nn.functional as F


def train_step(embed, classifier, tokens, lengths, labels, optimizer):
    """One step of a bag-of-embeddings classifier on a padded batch (pad id 0). Returns the loss, detached."""
    optimizer.zero_grad(set_to_none=True)
    steps = tokens.shape[1]
    h = embed(tokens)  # (B, T, D)
    mask = torch.arange(steps, device=tokens.device)[None, :] < lengths[:, None]  # (B, T): real tokens
    pooled = (h * mask[..., None]).sum(dim=1) / lengths[:, None]
    logits = classifier(pooled)
    loss = F.cross_entropy(logits, labels)
    loss.backward()
    optimizer.step()
    return loss.detach()
'''


_SEQ_FIX_MASK = ("<= lengths[:, None]", "< lengths[:, None]")


_SEQ_FIX_DIV = ("/ steps\n", "/ lengths[:, None]\n")


_SEQ_FIX_ZERO = ("    loss.backward()\n    optimizer.zero_grad(set_to_none=True)\n",
                 "    loss.backward()\n")


def _seq_fixed(*fixes: tuple[str, str]) -> str:
    source = edited(SEQ_STARTER, *fixes)
    if _SEQ_FIX_ZERO in fixes:
        source = edited(source, ("    steps = tokens.shape[1]\n",
                                 "    optimizer.zero_grad(set_to_none=True)\n    steps = tokens.shape[1]\n"))
    return source


add_answers(
    Answers(
        drill_id="sequences-classifier-three-bugs",
        solution=_SEQ_SOLUTION,
        wrong_answers=(
            (_seq_fixed(_SEQ_FIX_DIV, _SEQ_FIX_ZERO), "pad-token-pooled"),
            (_seq_fixed(_SEQ_FIX_MASK, _SEQ_FIX_ZERO), "divides-by-padded-length"),
            (_seq_fixed(_SEQ_FIX_MASK, _SEQ_FIX_DIV), "gradients-cleared"),
            (edited(_seq_fixed(_SEQ_FIX_MASK, _SEQ_FIX_DIV, _SEQ_FIX_ZERO),
                    ("    optimizer.zero_grad(set_to_none=True)\n    steps", "    steps")), "stale-gradients"),
        ),
        judge=_judge_seq_step,
    )
)
