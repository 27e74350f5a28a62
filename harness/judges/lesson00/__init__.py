"""The judges of lesson 00: one module per task (its judge, with the requirement table and hints it
declares, and the references it recomputes).

Imported after the probes (`harness.checks.lesson00`), which register the tasks first.
"""

import harness.checks.lesson00  # noqa: F401 (the probes register the tasks before their judges)
from harness.judges.lesson00 import accuracy, count_params, make_batch  # noqa: F401 (registers them)
