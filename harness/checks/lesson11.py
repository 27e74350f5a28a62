"""Checks of lesson 11 (interview drills): each task is a drill of the bank, checked by the drill's own check.

The visible and hidden test cells run the same drill check (it already tries several seeds and shapes).
"""

from __future__ import annotations

from typing import Any

from harness.checks.core import register
from harness.drills.core import get_drill

# The drills of notebook 11, in order: (task id, drill id). Names the answers define must not collide.
NOTEBOOK_DRILLS: tuple[tuple[str, str], ...] = (
    ("11-train-step", "loop-train-step"),
    ("11-plain-list", "modules-plain-list"),
    ("11-why-eval", "modules-why-eval"),
    ("11-warmup-cosine", "schedulers-warmup-cosine"),
    ("11-amp-step", "amp-train-step"),
    ("11-epoch-metrics", "performance-epoch-metrics"),
    ("11-exact-resume", "checkpointing-exact-resume"),
)


def _register(task_id: str, drill_id: str) -> None:
    drill = get_drill(drill_id)

    @register(task_id, hints=drill.hints)
    def run(namespace: dict[str, Any], *, hidden: bool) -> str:
        return drill.check(dict(namespace))

    run.__qualname__ = f"check_{task_id}"


for _task, _drill in NOTEBOOK_DRILLS:
    _register(_task, _drill)
