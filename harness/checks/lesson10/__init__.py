"""Checks of lesson 10 (the capstone): each piece of the capstone run, then the run itself.

The probes run the student's pieces and record what they did as data: the precision chosen for described
devices, the optimizer's groups and the learning rate every step gets, the batches each of two real gloo ranks
(forked, `harness.launch.launch_forked`) reads, what the training runs wrote into their checkpoints and the
optimizer steps they took, where a run called with a made-up device (`meta`) put its model, the trained model's
outputs on images generated from the case, and the report's text. The judges rebuild the inputs and decide:
they recompute the reference precision, schedule and groups, compare the runs' weights, score the model's
outputs against labels only they hold, and evaluate the weights of the report's run on its test set themselves.

The probe side: one module per task (its probe and what it records), lesson-wide inputs in
`common`. The judges live in `harness.judges.lesson10`, which a graded kernel never mounts.
"""

from harness.checks.lesson10 import held_out, optimizer, precision, report, train, train_loader  # noqa: F401 (registers them)
