"""Checks of lesson 06, gradient clipping: the total norm, clipping a step, under AMP, with accumulation.

Each probe runs the student's step on a seeded model and records, through a step pre-hook
(`harness.contract.instruments.StepRecorder`), the gradients the optimizer actually sees, with the parameters the
call started from, what it returned, and (under AMP) the steps taken and the scale after an overflow. Each
judge rebuilds the model at those parameters, computes the reference gradient itself, and compares: norm,
direction (norm clipping keeps it, value clipping does not) and scale. The threshold max_norm is a fraction
of the true gradient norm: the probe derives it to call the student's code, the judge recomputes it.

The probe side: one module per task (its probe and what it records), lesson-wide inputs in
`common`. The judges live in `harness.judges.lesson06`, which a graded kernel never mounts.
"""

from harness.checks.lesson06 import accum_clip, amp_clip, clip_step, grad_norm  # noqa: F401 (registers them)
