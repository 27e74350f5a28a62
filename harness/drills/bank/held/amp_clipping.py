"""The bank side of held drills of amp_clipping whose answer passes a graded exercise and which lesson 11's notebook
does not hold: clipping-under-amp.

Their prompts, starters and hints answer that exercise too nearly, so a graded student tree ships neither this module
nor their index entries (`harness.grading.held_drills`); their probes stay in the topic's module.
"""

from __future__ import annotations

from harness.drills.bank.amp_clipping import _probe_clip_under_amp
from harness.drills.core import Drill, add

CLIP_BEFORE_UNSCALE = '''import torch


def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm):
    x, y = batch
    model.train()
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()
'''


add(
    Drill(
        id="clipping-under-amp",
        unjudged=("steps/*/params/*",),  # the weights the judge recomputes the gradients from
        title="Bug hunt: clipping under AMP has no effect on the threshold you asked for",
        kind="bughunt",
        topics=("clipping", "amp"),
        difficulty=2,
        prompt="With max_norm=1.0 this AMP step leaves the optimizer seeing gradient norms of about 1/4096 on "
        "exploding batches. Fix amp_step so the optimizer sees gradients clipped to exactly max_norm.",
        entry="amp_step",
        starter=CLIP_BEFORE_UNSCALE,
        hints=("What are the gradients multiplied by when clip_grad_norm_ sees them?",
               "The scaler multiplies the loss by the scale: unscale_ first, then clip."),
        probe=_probe_clip_under_amp,
    )
)

