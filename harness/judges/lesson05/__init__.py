"""The judges of lesson 05: one module per task (its judge, with the requirement table and hints it
declares, and the references it recomputes).

Imported after the probes (`harness.checks.lesson05`), which register the tasks first.
"""

import harness.checks.lesson05  # noqa: F401 (the probes register the tasks before their judges)
from harness.judges.lesson05 import amp_step, cast_report, choose_precision, output_dtypes, scale_trace  # noqa: F401 (registers them)
