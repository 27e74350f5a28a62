"""Instructor grading of the course with nbgrader, made parallel and robust to any submission.

One module per job: `layout` (where assignments and notebooks are), `release` (notebooks/ from
solutions/), `restore` (repair a submission's test cells), `sandbox` (the kernel's resource limits),
`execute` (execution that survives dead and hung kernels and output floods), `tamper` (the in-kernel guard
against monkeypatched checks), `autograde` (one submission in an isolated course directory), `feedback`
(hidden tests stripped), `submissions` (folders and LMS zips), `batch` (many submissions over worker
processes, one gradebook), `summary` (grades CSV, distribution, pass rates), `cli` (`harness grade`).
Nothing here is imported by the student-facing harness, and nbgrader is imported only where it is used.
"""
