"""Checks of lesson 01, tensors and autograd: views, broadcasting, stable reductions, gradients, Functions.

Each probe runs the student's object on inputs seeded from the case and records what came back (results,
gradients, the inputs as they were left); each judge rebuilds the same inputs, computes the reference
itself (in float64 where precision matters) and decides. The hidden variant uses other shapes, dtypes and
edge cases. The visible case already holds every edge case the exercise texts state (memory layouts, huge
and masked inputs, matrices, large magnitudes), so that a hidden failure is never the first sign of one.

The probe side: one module per task (its probe and what it records), lesson-wide inputs in
`common`. The judges live in `harness.judges.lesson01`, which a graded kernel never mounts.
"""

from harness.checks.lesson01 import (  # noqa: F401 (registers them)
    ema_update,
    logsumexp,
    pairwise_distances,
    per_loss_gradients,
    silu_function,
    to_tokens,
)
