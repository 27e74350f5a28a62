"""Checks of lesson 09 (DDP): each probe runs the student's code on real gloo process groups of forked ranks.

Probes record, judges decide. A probe forks the ranks (`harness.launch.launch_forked`: no interpreter
starts, so a launch costs well under a second), runs the student's code in them, and returns what the
ranks produced as data: results and inputs after the call, parameters, the indices each rank loaded,
which ranks wrote files and what the files hold. Its judge rebuilds the case's inputs and recomputes the
references in-process on tiny tensors (no processes, no DDP, no files of the student's).

What is compared, and the tolerance: plain SGD (no momentum, no weight decay) in float32 on a tiny MLP;
DDP on 2 ranks with per-rank batch B against one process with batch 2B on the same samples in the same
order. The two differ only in the order float32 additions happen (DDP sums the two ranks' gradients, one
process sums all 2B samples at once), so parameters agree to about 1e-6: the checks allow 1e-4 (absolute
and relative).

The probe side: one module per task (its probe and what it records), lesson-wide inputs in
`common`. The judges live in `harness.judges.lesson09`, which a graded kernel never mounts.
"""

from harness.checks.lesson09 import ddp_mean, no_sync, save_rank0, shard_loader, train_ddp  # noqa: F401 (registers them)
