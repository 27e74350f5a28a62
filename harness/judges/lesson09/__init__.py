"""The judges of lesson 09: one module per task (its judge, with the requirement table and hints it
declares, and the references it recomputes).

Imported after the probes (`harness.checks.lesson09`), which register the tasks first.
"""

import harness.checks.lesson09  # noqa: F401 (the probes register the tasks before their judges)
from harness.judges.lesson09 import ddp_mean, no_sync, save_rank0, shard_loader, train_ddp  # noqa: F401 (registers them)
