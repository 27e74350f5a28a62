"""The judges of lesson 14: one module per task (its judge, with the requirement table and hints it
declares, and the references it recomputes).

Imported after the probes (`harness.checks.lesson14`), which register the tasks first.
"""

import harness.checks.lesson14  # noqa: F401 (the probes register the tasks before their judges)
from harness.judges.lesson14 import load_pretrained, lora, param_groups, train_mode, unfreeze  # noqa: F401 (registers them)
