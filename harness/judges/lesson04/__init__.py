"""The judges of lesson 04: one module per task (its judge, with the requirement table and hints it
declares, and the references it recomputes).

Imported after the probes (`harness.checks.lesson04`), which register the tasks first.
"""

import harness.checks.lesson04  # noqa: F401 (the probes register the tasks before their judges)
from harness.judges.lesson04 import evaluate, fit, running_mean, train_epoch, train_step  # noqa: F401 (registers them)
