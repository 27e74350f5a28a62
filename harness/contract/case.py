"""`Case`: the one thing a probe and a judge share, from which each builds the same inputs on its own."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

# The seed offset of visible cases and of hidden cases run locally (an instructor's solution run, tests).
# When graded, hidden cases use an offset drawn from the instructor's secret.
LOCAL_SEED = 0


@dataclass(frozen=True)
class Case:
    """One set of inputs a check runs on: visible or hidden, and a seed offset.

    Checks derive every input from `hidden` (which family of inputs: the hidden ones add other shapes and
    edge cases) and `seed` (added to the check's own seeds: 0 for the visible case, drawn at grade time for
    hidden ones), so the probe and the judge build identical inputs independently. A task whose targets must
    stay secret (`register(..., inputs_as_data=...)`) is graded otherwise: its hidden cases reach the kernel
    with `inputs`, a file of the inputs the grader built, and without the seed that would rebuild the targets.
    """

    hidden: bool = False
    seed: int = LOCAL_SEED
    inputs: str = ""  # a file of the case's inputs, written by the grader (`harness.grading.sealed`)

    def seeded(self, base: int) -> int:
        """The seed to use where the check used `base`: `base` shifted by this case's offset."""
        return base + self.seed

    def digest(self) -> str:
        """A short fingerprint of the case, echoed by the probe so the judge can match observations."""
        named = f"{int(self.hidden)}:inputs:{self.inputs}" if self.inputs else f"{int(self.hidden)}:{self.seed}"
        return hashlib.sha256(named.encode()).hexdigest()[:16]  # the kernel's copy and the judge's agree
