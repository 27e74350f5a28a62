"""The judges of lesson 03: one module per task (its judge, with the requirement table and hints it
declares, and the references it recomputes).

Imported after the probes (`harness.checks.lesson03`), which register the tasks first.
"""

import harness.checks.lesson03  # noqa: F401 (the probes register the tasks before their judges)
from harness.judges.lesson03 import dataset, pad_collate, seeded_loader, split_normalize, worker_init  # noqa: F401 (registers them)
