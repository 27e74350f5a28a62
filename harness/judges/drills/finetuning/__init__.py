"""The judge side of the finetuning drills (`harness.drills.bank.finetuning`): judges and the references
they recompute, reference solutions, planted wrong answers, explain drills' options and keys.

A graded kernel never mounts this package (`harness.judges`).

One module per group of drills; `common` holds what several of them share.
"""

from harness.judges.drills.finetuning import explain, freezing, lora, script  # noqa: F401  (adds the answers)
