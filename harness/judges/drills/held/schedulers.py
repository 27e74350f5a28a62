"""The held answers of the schedulers drills: schedulers-warmup-cosine's solution and planted wrong answers, and the
reference its judge recomputes (`harness.judges.drills.schedulers`), which answers 07-warmup-cosine and
11-warmup-cosine."""

from __future__ import annotations

import math
from typing import Any, Callable

import harness.judges.drills.schedulers  # noqa: F401  (joins the judges first)
from harness.contract.case import Case
from harness.drills.bank.schedulers import warmup_configs, warmup_queries
from harness.drills.core import Answers
from harness.drills.support import edited
from harness.judges.drills.held.whys import add_answers


def warmup_cosine_factor(step: int, warmup: int, total: int) -> float:
    """The drill's reference: linear warmup reaching 1 at the last warmup step, cosine to 0 at `total`, 0 after."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


def warmup_cosine_expected(step: int, warmup: int, total: int) -> dict[str, Any]:
    """The reference factor at (step, warmup, total) and what each named slip gives there (None: not there)."""
    p = (step - warmup) / max(1, total - warmup)
    slips = {
        "step / warmup during warmup: the first step gets a learning rate of 0 (the rule is (step + 1) / warmup)":
            step / warmup if step < warmup else None,
        "the 0.5 of the cosine is missing: the factor starts at 2": 1 + math.cos(math.pi * min(p, 1.0)),
        "cos(pi * p / 2), a quarter period: the factor is not 0 at total": math.cos(math.pi * min(p, 1.0) / 2),
        "p is not clamped to 1: after total the cosine climbs back up": 0.5 * (1 + math.cos(math.pi * p)),
    }
    return {"want": warmup_cosine_factor(step, warmup, total), "slips": slips}


def _visible_calls() -> list[tuple[int, int, int]]:
    """The (step, warmup, total) the judge asks about on the visible case: the queries, then the LambdaLR steps."""
    warmup, total = warmup_configs(Case())[0]
    return [*warmup_queries(Case()), *((step, warmup, total) for step in range(warmup + 3))]


# What a graded student tree records (`harness.judges.drills.held.recorded_values`): name -> (function, its calls)
VISIBLE: dict[str, tuple[Callable[..., Any], list[tuple[int, int, int]]]] = {
    "schedulers.warmup_cosine_expected": (warmup_cosine_expected, _visible_calls()),
}

_COSINE_SOLUTION = (
    "import math\n\n\ndef warmup_cosine(step, warmup, total):\n"
    "    if step < warmup:\n        return (step + 1) / warmup\n"
    "    progress = min((step - warmup) / max(1, total - warmup), 1.0)\n"
    "    return 0.5 * (1 + math.cos(math.pi * progress))\n"
)

add_answers(
    Answers(
        drill_id="schedulers-warmup-cosine",
        solution=_COSINE_SOLUTION,
        wrong_answers=(
            (edited(_COSINE_SOLUTION, ("(step + 1) / warmup", "step / warmup")), "wrong-warmup"),
            (edited(_COSINE_SOLUTION,
                    ("min((step - warmup) / max(1, total - warmup), 1.0)",
                     "(step - warmup) / max(1, total - warmup)")), "not-clamped"),
            (edited(_COSINE_SOLUTION, ("max(1, total - warmup)", "(total - warmup)")), "raised"),
            (edited(_COSINE_SOLUTION, ("math.pi * progress", "math.pi * progress / 2")), "wrong-decay"),
        ),
    )
)
