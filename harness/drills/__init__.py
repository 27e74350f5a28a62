"""Interview drills: a bank of PyTorch-training questions whose answers are checked by running them.

Three kinds: "write" (implement a piece), "bughunt" (fix a broken loop presented by its symptom) and
"explain" (predict-the-output or multiple choice, backed by an experiment that runs and shows the answer).
`harness drill` is the command-line trainer; notebook 11 uses the same bank.
"""

from harness.drills.core import Drill, all_drills, get_drill, run_check

__all__ = ["Drill", "all_drills", "get_drill", "run_check"]
