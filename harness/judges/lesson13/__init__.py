"""The judges of lesson 13: one module per task (its judge, with the requirement table and hints it
declares, and the references it recomputes).

Imported after the probes (`harness.checks.lesson13`), which register the tasks first.
"""

import harness.checks.lesson13  # noqa: F401 (the probes register the tasks before their judges)
from harness.judges.lesson13 import accumulate, activation_formula, checkpoint, deterministic, memory_formula  # noqa: F401 (registers them)
