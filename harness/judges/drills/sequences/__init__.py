"""The judge side of the sequences drills (`harness.drills.bank.sequences`): judges and the references
they recompute, reference solutions, planted wrong answers, explain drills' options and keys.

A graded kernel never mounts this package (`harness.judges`).

One module per group of drills; `common` holds what several of them share.
"""

from harness.judges.drills.sequences import attention, classifier, explain, losses, padding  # noqa: F401  (adds the answers)
