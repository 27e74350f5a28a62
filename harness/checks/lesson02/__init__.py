"""Checks of lesson 02, nn.Module: registration, buffers, counting and freezing, initialisation, param groups.

Each probe builds small modules from the case's seeds, runs the student's class or function on them and
records parameters, buffers, state_dict keys, optimizer groups and outputs as data; each judge rebuilds the
inputs (and the modules it can build itself), recomputes the reference outputs and decides. The visible case
already holds every edge case the exercise's text names (frozen parameters, a head frozen beforehand, nested
containers, a Linear without bias, a constant feature, non-default arguments); the hidden variant draws other
sizes, seeds and settings of the same kinds.

The probe side: one module per task (its probe and what it records), lesson-wide inputs in
`common`. The judges live in `harness.judges.lesson02`, which a graded kernel never mounts.
"""

from harness.checks.lesson02 import (  # noqa: F401 (registers them)
    count_trainable,
    freeze_backbone,
    init_weights,
    mlp,
    param_groups,
    running_standardizer,
)
