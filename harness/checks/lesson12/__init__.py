"""Checks of lesson 12, debugging a training run: the loss at initialisation, gradient norms per layer, the first
non-finite module, and an LR range test.

Each probe builds the case's seeded models and inputs, calls the student's function with instrumentation
(forward pre-hooks for the mode and grad mode, a step pre-hook for the gradients and learning rates the
optimizer sees, the hooks left on the model afterwards) and returns data. Each judge rebuilds the same models
and inputs, recomputes what the result must be (the cross-entropy, the gradient norms, the first non-finite
module through its own hooks, every step of the sweep at the parameters it started from) and compares.

The probe side: one module per task (its probe and what it records), lesson-wide inputs in
`common`. The judges live in `harness.judges.lesson12`, which a graded kernel never mounts.
"""

from harness.checks.lesson12 import dead_units, first_nonfinite, grad_norms, init_loss, lr_range  # noqa: F401 (registers them)
