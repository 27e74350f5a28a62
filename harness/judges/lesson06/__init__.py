"""The judges of lesson 06: one module per task (its judge, with the requirement table and hints it
declares, and the references it recomputes).

Imported after the probes (`harness.checks.lesson06`), which register the tasks first.
"""

import harness.checks.lesson06  # noqa: F401 (the probes register the tasks before their judges)
from harness.judges.lesson06 import accum_clip, amp_clip, clip_step, grad_norm  # noqa: F401 (registers them)
