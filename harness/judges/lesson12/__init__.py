"""The judges of lesson 12: one module per task (its judge, with the requirement table and hints it
declares, and the references it recomputes).

Imported after the probes (`harness.checks.lesson12`), which register the tasks first.
"""

import harness.checks.lesson12  # noqa: F401 (the probes register the tasks before their judges)
from harness.judges.lesson12 import dead_units, first_nonfinite, grad_norms, init_loss, lr_range  # noqa: F401 (registers them)
