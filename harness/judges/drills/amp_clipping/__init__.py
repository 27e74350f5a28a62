"""The judge side of the amp_clipping drills (`harness.drills.bank.amp_clipping`): judges and the references
they recompute, reference solutions, planted wrong answers, explain drills' options and keys.

A graded kernel never mounts this package (`harness.judges`).

One module per group of drills; `common` holds what several of them share.
"""

from harness.judges.drills.amp_clipping import amp, clipping, explain  # noqa: F401  (adds the answers)
