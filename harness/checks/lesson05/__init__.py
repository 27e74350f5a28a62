"""Checks of lesson 05, mixed precision: dtype choice, rounding, autocast dtypes, the scaler, the AMP step.

Every probe runs the student's code on small seeded models on the CPU (bf16 and fp16 autocast and the CPU
GradScaler all exist there) and records what it observes: returned values, output dtypes, optimizer steps
taken, the scale after a step, and the parameters. Each judge rebuilds the inputs from the case, recomputes
the reference (a real GradScaler, one autocast forward, the canonical AMP step) and compares. What only the
kernel can see (the autocast state during forward, loss and backward, the order of the scaler calls, a
direct optimizer.step) the probe reports itself, as a failure: it can cost the task, never pass it.

The probe side: one module per task (its probe and what it records), lesson-wide inputs in
`common`. The judges live in `harness.judges.lesson05`, which a graded kernel never mounts.
"""

from harness.checks.lesson05 import amp_step, cast_report, choose_precision, output_dtypes, scale_trace  # noqa: F401 (registers them)
