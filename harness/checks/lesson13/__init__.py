"""Checks of lesson 13, performance and memory: the training-memory formula, gradient accumulation with
uneven micro-batches, activation checkpointing, and a determinism context manager that restores the flags.

- 13-memory-formula: the probe calls the student's formula on models built from the case (frozen layers, a
  bfloat16 layer, a tied weight) and returns the numbers; the judge rebuilds the models and counts the bytes.
- 13-accumulate: the probe runs the student's step twice on a seeded MLP and records, through hooks, the
  size of every forward's batch, the model's mode and the gradients and parameters the optimizer saw; the
  judge recomputes the full-batch gradient at those parameters.
- 13-checkpoint: the probe runs the student's forward on seeded blocks with dropout, records the output,
  the shapes of what autograd saved outside the checkpoints, the gradients after a seeded backward, and the
  order in which the blocks ran and got their gradients (one block recomputed at a time); the judge
  recomputes the plain forward and backward with the same dropout masks.
- 13-deterministic: the probe sets the global flags to the case's prior values, enters the student's
  context manager (normally and with an exception inside), records the flags inside and after, and restores
  the flags itself; the judge compares with the case's priors.

The probe side: one module per task (its probe and what it records), lesson-wide inputs in
`common`. The judges live in `harness.judges.lesson13`, which a graded kernel never mounts.
"""

from harness.checks.lesson13 import accumulate, activation_formula, checkpoint, deterministic, memory_formula  # noqa: F401 (registers them)
