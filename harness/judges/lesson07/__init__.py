"""The judges of lesson 07: one module per task (its judge, with the requirement table and hints it
declares, and the references it recomputes).

Imported after the probes (`harness.checks.lesson07`), which register the tasks first.
"""

import harness.checks.lesson07  # noqa: F401 (the probes register the tasks before their judges)
from harness.judges.lesson07 import amp_skip, inverse_sqrt, one_cycle, per_epoch, per_step, plateau, warmup_cosine  # noqa: F401 (registers them)
