"""Instructor grading of the course with nbgrader, made parallel and robust to any submission.

One module per job: `layout` (where assignments and notebooks are), `release` (notebooks/ from
solutions/), `student_tree` (the student course from an allowlist), `restore` (repair a submission's test
cells), `sandbox` (the kernel in bubblewrap, with resource limits), `execute` (execution that survives dead
and hung kernels and output floods, and the grader's own cells: guard and probes), `tamper` (the in-kernel
guard that flags monkeypatching), `autograde` (one submission in an isolated course directory, points from
the judge), `jobs` (the versioned job and result records every backend exchanges), `feedback` (hidden
tests stripped), `submissions` (folders and LMS zips), `batch` (many submissions over worker processes, one
gradebook), `shards` (one deterministic slice of a class into its own folder, resumable), `merge` (shard
folders joined into one gradebook), `summary` (grades CSV, distribution, pass rates), `cli` (`harness grade`).
Points are decided by `harness.judge`, outside the student's kernel.
Nothing here is imported by the student-facing harness, and nbgrader is imported only where it is used.
"""
