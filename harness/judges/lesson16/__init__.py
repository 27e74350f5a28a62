"""The judges of lesson 16: one module per task (its judge, with the requirement table and hints it
declares, and the references it recomputes).

Imported after the probes (`harness.checks.lesson16`), which register the tasks first.
"""

import harness.checks.lesson16  # noqa: F401 (the probes register the tasks before their judges)
from harness.judges.lesson16 import int8_weights, load_artefact, onnx_export, predict, save_artefact, top_k  # noqa: F401 (registers them)
