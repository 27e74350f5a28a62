"""The judge side of the debugging drills (`harness.drills.bank.debugging`): judges and the references
they recompute, reference solutions, planted wrong answers, explain drills' options and keys.

A graded kernel never mounts this package (`harness.judges`).

One module per group of drills; `common` holds what several of them share.
"""

from harness.judges.drills.debugging import explain, init, instruments, runs  # noqa: F401  (adds the answers)
