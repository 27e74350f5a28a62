"""The judges of lesson 08: one module per task (its judge, with the requirement table and hints it
declares, and the references it recomputes).

Imported after the probes (`harness.checks.lesson08`), which register the tasks first.
"""

import harness.checks.lesson08  # noqa: F401 (the probes register the tasks before their judges)
from harness.judges.lesson08 import atomic_save, best_last, early_stopping, portable, resume  # noqa: F401 (registers them)
