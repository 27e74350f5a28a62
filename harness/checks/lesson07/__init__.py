"""Checks of lesson 07 (learning-rate schedulers).

Each probe runs the student's code on inputs built from the case and records what it observes: the learning
rate and the weights and gradients of every `optimizer.step()` (an optimizer step pre-hook, `StepRecorder`),
the calls a scheduler receives (with the model's weights at that moment), and the modes the model ran in.
Each judge rebuilds the same inputs, recomputes the schedule, the losses and the optimizer updates itself,
and decides. Nothing reads source.

The probe side: one module per task (its probe and what it records), lesson-wide inputs in
`common`. The judges live in `harness.judges.lesson07`, which a graded kernel never mounts.
"""

from harness.checks.lesson07 import amp_skip, inverse_sqrt, one_cycle, per_epoch, per_step, plateau, warmup_cosine  # noqa: F401 (registers them)
