"""Interview drills: a bank of PyTorch-training questions whose answers are checked by running them.

Three kinds: "write" (implement a piece), "bughunt" (fix a broken loop presented by its symptom) and
"explain" (multiple choice, backed by an experiment that runs and shows the answer). Answers run in a child
process and are judged outside it (`harness.drills.checker`). `harness drill` is the command-line trainer;
notebook 11 uses the same bank.

`Drill`, `all_drills` and `get_drill` are imported on first use, so that `harness drill check` (which asks the
warm checker) never imports torch.
"""

from typing import Any

__all__ = ["Drill", "all_drills", "get_drill"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from harness.drills import core

        return getattr(core, name)
    raise AttributeError(f"module 'harness.drills' has no attribute {name!r}")
