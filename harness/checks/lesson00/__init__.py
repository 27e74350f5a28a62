"""Checks of lesson 00 (welcome): a tensor on the right device, counting parameters, accuracy.

Each probe calls the student's function on seeded inputs and records what came back; each judge rebuilds
the inputs and compares with what PyTorch itself computes. The visible case already holds every edge case
the exercise text states (a device the function did not expect, frozen and shared parameters, buffers, a
single sample); the hidden variants use other sizes and seeds.

The probe side: one module per task (its probe and what it records), lesson-wide inputs in
`common`. The judges live in `harness.judges.lesson00`, which a graded kernel never mounts.
"""

from harness.checks.lesson00 import accuracy, count_params, make_batch  # noqa: F401 (registers them)
