"""Checks of lesson 03, data loading: a map-style Dataset, a padding collate function, a seeded loader,
a worker_init_fn that stops workers from drawing the same "random" augmentations, and a leakage-free
split with normalisation from training statistics.

The probes drive the student's objects through real DataLoaders (a real 2-worker loader for the worker
seeding) and record what comes out: items, batches, epoch orders, noise draws, the returned splits. The
judges rebuild the inputs from the case and decide from those records what must have come out.

The probe side: one module per task (its probe and what it records), lesson-wide inputs in
`common`. The judges live in `harness.judges.lesson03`, which a graded kernel never mounts.
"""

from harness.checks.lesson03 import dataset, pad_collate, seeded_loader, split_normalize, worker_init  # noqa: F401 (registers them)
