"""The judges of lesson 01: one module per task (its judge, with the requirement table and hints it
declares, and the references it recomputes).

Imported after the probes (`harness.checks.lesson01`), which register the tasks first.
"""

import harness.checks.lesson01  # noqa: F401 (the probes register the tasks before their judges)
from harness.judges.lesson01 import (  # noqa: F401 (registers them)
    ema_update,
    logsumexp,
    pairwise_distances,
    per_loss_gradients,
    silu_function,
    to_tokens,
)
