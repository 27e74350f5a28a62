"""Checks of lesson 14, fine-tuning: loading a checkpoint into a model with a new head, training mode with frozen
BatchNorm layers, parameter groups for fine-tuning, and a LoRA linear layer.

Every model is a small `harness.finetune.TransferNet` (or built around one) made from the case's seeds, with
BatchNorm statistics drawn at random so that a buffer that was not loaded shows. Each probe runs the student's
function or class on those models and records data: the state after loading, the modes and the outputs of a
seeded forward pass, the optimizer's groups by parameter name, the LoRA layer's outputs and gradients. Each judge
rebuilds the same models and inputs, recomputes what the result must be, and decides; flags the probe reports
(a module's mode, a parameter's requires_grad) only name a cause or fail a task, and the outputs the judge
recomputes decide every pass.

The probe side: one module per task (its probe and what it records), lesson-wide inputs in
`common`. The judges live in `harness.judges.lesson14`, which a graded kernel never mounts.
"""

from harness.checks.lesson14 import load_pretrained, lora, param_groups, train_mode, unfreeze  # noqa: F401 (registers them)
