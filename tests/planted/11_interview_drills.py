"""Planted bugs for notebook 11: each drill's first plausible wrong answer, in place of its solution cell."""

from harness.drills import get_drill
from harness.drills.lesson import NOTEBOOK_DRILLS, answer_name

_EXPECTED_CODES = {
    "11-train-step": "missing-zero-grad",
    "11-plain-list": "unregistered-layers",
    "11-why-eval": "wrong-choice",
    "11-warmup-cosine": "wrong-warmup",
    "11-amp-step": "missing-update",
    "11-epoch-metrics": "sync-per-step",
    "11-exact-resume": "missing-optimizer-state",
}


def _cell_source(task_id: str, drill_id: str) -> str:
    drill = get_drill(drill_id)
    wrong = drill.wrong_answers[0][0]
    if drill.kind == "explain":
        wrong = wrong.replace("answer =", answer_name(task_id) + " =", 1)
    return wrong


PLANTED = {task: (_cell_source(task, drill), _EXPECTED_CODES[task]) for task, drill in NOTEBOOK_DRILLS}
