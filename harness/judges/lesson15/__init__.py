"""The judges of lesson 15: one module per task (its judge, with the requirement table and hints it
declares, and the references it recomputes).

Imported after the probes (`harness.checks.lesson15`), which register the tasks first.
"""

import harness.checks.lesson15  # noqa: F401 (the probes register the tasks before their judges)
from harness.judges.lesson15 import attention, masked_loss, pad_collate, smoothed_loss, warmup  # noqa: F401 (registers them)
