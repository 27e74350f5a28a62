"""The judges of lesson 02: one module per task (its judge, with the requirement table and hints it
declares, and the references it recomputes).

Imported after the probes (`harness.checks.lesson02`), which register the tasks first.
"""

import harness.checks.lesson02  # noqa: F401 (the probes register the tasks before their judges)
from harness.judges.lesson02 import (  # noqa: F401 (registers them)
    count_trainable,
    freeze_backbone,
    init_weights,
    mlp,
    param_groups,
    running_standardizer,
)
