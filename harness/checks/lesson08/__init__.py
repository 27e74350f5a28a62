"""Checks of lesson 08 (checkpointing).

They observe files and states: what a checkpoint holds, what survives a crash in the middle of a save, and
whether a run killed and resumed (in a fresh Python process for the visible case) ends with exactly the
weights of a run that never stopped. Each probe runs the student's code, reads back what it wrote with
`torch.load(..., weights_only=True)` and records it as data (tensors, numbers, file names), never as pickled
bytes; each judge rebuilds the case's inputs, recomputes what the files and states must hold (for the resume
check, by replaying the small reference run), and decides.

The resume probe rebuilds the student's functions in the child process from their source
(`inspect.getsource`, plus the notebook functions and modules they use), because a function defined in a
notebook cannot be imported by another process.

The probe side: one module per task (its probe and what it records), lesson-wide inputs in
`common`. The judges live in `harness.judges.lesson08`, which a graded kernel never mounts.
"""

from harness.checks.lesson08 import atomic_save, best_last, early_stopping, portable, resume  # noqa: F401 (registers them)
