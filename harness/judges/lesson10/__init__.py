"""The judges of lesson 10: one module per task (its judge, with the requirement table and hints it
declares, and the references it recomputes).

Imported after the probes (`harness.checks.lesson10`), which register the tasks first.
"""

import harness.checks.lesson10  # noqa: F401 (the probes register the tasks before their judges)
from harness.judges.lesson10 import held_out, optimizer, precision, report, train, train_loader  # noqa: F401 (registers them)
