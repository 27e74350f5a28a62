"""The held drills' answers: the solutions and planted wrong answers of the drills whose answer passes a graded
exercise (`harness.grading.answerable.WITHHELD_DRILLS`), one module per bank topic, and the references their judges
recompute where a reference answers an exercise.

The judges of lesson 11's drills stay in the topics' modules (`harness.drills.core.add_judge`), so lesson 11's local
checks run in a graded student tree, which does not ship this package (`harness.grading.held_drills`); there a judge
reads a held reference's values on the visible case from `recorded.json` (`harness.judges.drills.recorded`). The
other held drills leave that tree whole (`harness.drills.bank.held`): their judges are joined here, with their
answers, and their whys are in `whys`.
"""

from __future__ import annotations


def recorded_values() -> dict[str, dict[str, str]]:
    """Each held reference's values on the visible case, as `harness.judges.drills.recorded` reads them."""
    from harness.judges.drills.held import schedulers
    from harness.judges.drills.recorded import values_on

    return values_on(schedulers.VISIBLE)
