"""The judge side of the export drills (`harness.drills.bank.export`): judges and the references
they recompute, reference solutions, planted wrong answers, explain drills' options and keys.

A graded kernel never mounts this package (`harness.judges`).

One module per group of drills; `common` holds what several of them share.
"""

from harness.judges.drills.export import explain, parity, saving  # noqa: F401  (adds the answers)
