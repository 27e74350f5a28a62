"""The held answers of the memory drills: the solutions and planted wrong answers of memory-checkpoint-reentrant
(its answer passes 13-checkpoint).

Their judges are in `harness.judges.drills.memory`; a graded student tree does not ship this module.
"""

from __future__ import annotations

import harness.judges.drills.memory  # noqa: F401  (joins the judges first)
from harness.drills.bank.held.memory import CHECKPOINT_STARTER
from harness.drills.core import Answers
from harness.drills.support import edited
from harness.judges.drills.held.whys import add_answers
from harness.judges.drills.memory import _judge_checkpointed

add_answers(
    Answers(
        drill_id="memory-checkpoint-reentrant",
        solution=edited(CHECKPOINT_STARTER, ("use_reentrant=True", "use_reentrant=False")),
        wrong_answers=(
            (edited(CHECKPOINT_STARTER,
                    ("h = checkpoint(block, h, use_reentrant=True)",
                     "h = block(h) if block is blocks[-1] else checkpoint(block, h, "
                     "use_reentrant=False)")), "not-checkpointed"),
            (edited(CHECKPOINT_STARTER,
                    ("h = checkpoint(block, h, use_reentrant=True)", "h = block(h)")),
             "not-checkpointed"),
            (edited(CHECKPOINT_STARTER,
                    ("h = checkpoint(block, h, use_reentrant=True)",
                     "h = checkpoint(block, h.detach(), use_reentrant=False)")), "wrong-grads"),
        ),
        judge=_judge_checkpointed,
    )
)
