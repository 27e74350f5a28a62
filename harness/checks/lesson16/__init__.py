"""Checks of lesson 16, export and serving: a deployable artefact saved and loaded safely, batched inference,
an ONNX export with a dynamic batch axis, and per-channel int8 weights.

Every check builds its own small classifier from the case (seeded weights, BatchNorm statistics from a few
seeded batches, left in training mode as a model is after training). The probes call the student's function
on it and record data: what `torch.load(..., weights_only=True)` reads back from their file, the state of the
model they return, the mode of every forward (a forward pre-hook), the outputs ONNX Runtime computes from
their .onnx file. The judges rebuild the same model and inputs from the case and recompute every expected
value in eager PyTorch: the judge itself never exports, loads a file or starts ONNX Runtime.

The probe side: one module per task (its probe and what it records), lesson-wide inputs in
`common`. The judges live in `harness.judges.lesson16`, which a graded kernel never mounts.
"""

from harness.checks.lesson16 import int8_weights, load_artefact, onnx_export, predict, save_artefact, top_k  # noqa: F401 (registers them)
