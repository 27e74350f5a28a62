"""The bank side of held drills of memory whose answer passes a graded exercise and which lesson 11's notebook does not
hold: memory-checkpoint-reentrant.

Their prompts, starters and hints answer that exercise too nearly, so a graded student tree ships neither this module
nor their index entries (`harness.grading.held_drills`); their probes stay in the topic's module.
"""

from __future__ import annotations

from harness.drills.bank.memory import _probe_checkpointed
from harness.drills.core import Drill, add

CHECKPOINT_STARTER = '''from torch.utils.checkpoint import checkpoint


def checkpointed_forward(blocks, x):
    """Symptom: training runs, the loss never moves, and a warning says 'None of the inputs have requires_grad'."""
    h = x
    for block in blocks:
        h = checkpoint(block, h, use_reentrant=True)
    return h
'''


add(
    Drill(
        id="memory-checkpoint-reentrant",
        title="Bug hunt: activation checkpointing that stops training",
        kind="bughunt",
        topics=("memory", "performance"),
        difficulty=2,
        prompt="checkpointed_forward saves memory, but after adding it the model stops learning: the parameters get "
        "no gradient. Fix it so that every block stays checkpointed and the gradients equal the plain forward's.",
        entry="checkpointed_forward",
        starter=CHECKPOINT_STARTER,
        hints=("Does the input x require grad? What does the reentrant variant do when no input does?",
               "use_reentrant=False tracks the parameters' gradients whatever the inputs."),
        probe=_probe_checkpointed,
    )
)

