"""Checks of lesson 15, sequences and transformers: a padding collate function, a loss that ignores padding,
attention by hand with padding and causal masks, a warm-up schedule, and a label-smoothed cross-entropy in torch
operations.

Each probe builds the case's inputs from the seed, calls the student's function on copies, and returns what
came back (values, gradients, the inputs after the call, the torch calls made). Each judge rebuilds the
inputs, recomputes the reference with PyTorch's own operations, and compares; where the result is wrong it
also computes the usual wrong answers (padding counted, masks ignored or inverted, no 1/sqrt(d) scale,
smoothing spread over C - 1 classes) and names the one the observation matches.

The probe side: one module per task (its probe and what it records), lesson-wide inputs in
`common`. The judges live in `harness.judges.lesson15`, which a graded kernel never mounts.
"""

from harness.checks.lesson15 import attention, masked_loss, pad_collate, smoothed_loss, warmup  # noqa: F401 (registers them)
