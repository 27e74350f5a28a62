"""Checks of lesson 04, the training loop: a device-side running mean, `train_step`, `train_epoch`,
`evaluate`, and a `fit` with early stopping.

Each probe runs the student's code on a tiny seeded model and data built from the case, watches it through
optimizer and forward hooks and a host-sync counter, and records what it saw: the gradients and parameters
at every optimizer step, the mode of every forward pass, the number of host syncs, the values returned and
the states the model held. Each judge rebuilds the model and data from the case and decides: it recomputes
the reference gradients and losses at the recorded parameters, and evaluates the recorded states itself.

The probe side: one module per task (its probe and what it records), lesson-wide inputs in
`common`. The judges live in `harness.judges.lesson04`, which a graded kernel never mounts.
"""

from harness.checks.lesson04 import evaluate, fit, running_mean, train_epoch, train_step  # noqa: F401 (registers them)
