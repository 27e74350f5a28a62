"""PyTorch Training Lab's harness: real training, records, curves, and the checks that grade the course.

Import what you need from its modules: `harness.env`, `harness.repro`, `harness.data`, `harness.train`,
`harness.checks`, `harness.distributed`, `harness.grading`, `harness.drills`.
"""

__version__ = "0.1.0"
