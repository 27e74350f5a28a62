"""Notebook 11 (interview drills) as data: which bank drills it holds, in which sections, under which task ids.

The notebook builder (`harness.drills.notebook`) writes the notebook from this plan and lesson 11's checks
(`harness.checks.lesson11`) register each drill under its task id, so neither copies the other.
"""

from __future__ import annotations

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
# The notebook's sections (its `##` headings), by task: the builder writes each one before its first drill.
SECTIONS: dict[str, str] = {
    "11-train-step": "1. The training step",
    "11-plain-list": "2. Modules",
    "11-why-eval": "2. Modules",
    "11-warmup-cosine": "3. Learning-rate schedules",
    "11-amp-step": "4. Mixed precision",
    "11-epoch-metrics": "5. Host syncs",
    "11-exact-resume": "6. Checkpoints",
}


def answer_name(task_id: str) -> str:
    """The variable an explain drill's answer is stored in by the notebook ("11-why-eval" -> answer_why_eval)."""
    return "answer_" + task_id[3:].replace("-", "_")
