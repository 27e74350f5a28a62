"""08-atomic-save, the judge.

Saves must replace the file whole, and a save that fails must leave the previous file intact.
"""

from __future__ import annotations

from harness.checks.lesson08.atomic_save import atomic_states
from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.judges.lesson08.common import _same
from harness.judges.lesson08.writes import judge_writes


@judges(
    "08-atomic-save",
    hints=Hints(
        nudge="torch.save(obj, path) first truncates `path`: if it dies half way, the old checkpoint is gone "
        "too. Write somewhere else first, and only swap the finished file in.",
        concept="Write a temporary file in the same folder, then os.replace it onto path (an atomic rename); "
        "if anything raises, remove the temporary file and re-raise.",
        solution="path = Path(path); tmp = path.with_name(path.name + '.tmp'); try: torch.save(obj, tmp); "
        "os.replace(tmp, path) except BaseException: tmp.unlink(missing_ok=True); raise",
        section="4. Atomic saves",
    ),
    requires={
        "wrong-content": Requirement(
            "after a save, path holds the object just saved",
            hint="After your function returns, what does torch.load(path) give? Did the new file reach path?"),
        "temp-left-behind": Requirement(
            "nothing but path is left in the folder, after a good save or a failed one",
            hint="List the folder after a save, and after a save that raised: is a temporary file still there?"),
        "not-atomic": Requirement(
            "a save that fails half way leaves the previous file intact",
            hint="What is in path while torch.save is still writing into it, and if the process is killed "
            "right then?"),
        "swallowed-error": Requirement(
            "a failed save re-raises its exception",
            hint="When the save fails, how does the training loop find out?"),
    },
)
def judge_atomic_save(seen: dict, *, case: Case) -> str:
    """Saves must replace the file whole, and a save that fails must leave the previous file intact."""
    name = "last.pt"
    states = atomic_states(case)
    for number, (state, save) in enumerate(zip(states, seen["saves"], strict=True), start=1):
        if not _same(save["content"], state):
            fail(
                "wrong-content",
                observed=f"after save {number}, {name} does not hold what was saved",
                expected="torch.load(path, weights_only=True) returns the object just saved",
                cause="the temporary file is never moved onto `path`, or a different object is written",
                where="the final os.replace(tmp, path)",
            )
        if save["listing"] != [name]:
            fail(
                "temp-left-behind",
                observed=f"after a successful save the folder holds {save['listing']}",
                expected=f"only {name}",
                cause="the temporary file is copied (shutil.copy) instead of renamed with os.replace, or an extra "
                "file is written next to the checkpoint",
                where="move the temporary file with os.replace",
            )
    for number, save in enumerate(seen["saves"], start=1):
        judge_writes(save.get("writes"), during=f"save {number}")
    judge_writes(seen.get("crash_writes"), during="a save that crashed half way")
    survived = seen["survived"]
    if not _same(survived, states[-1]):
        fail(
            "not-atomic",
            observed=f"after a save that crashed half way, {name} is "
            f"{survived if isinstance(survived, str) else 'missing' if survived is None else 'a different object'}",
            expected="the previous checkpoint, intact",
            cause="torch.save writes straight to `path` (it truncates the old file before the new one is "
            "complete), or the old file is removed before the new one is complete",
            where="save to a temporary file in the same folder, then os.replace it onto `path`",
        )
    if seen["crashed"] is not True:
        fail(
            "swallowed-error",
            observed="the save failed, but atomic_save returned normally",
            expected="the exception propagates, so the training loop knows the checkpoint was not written",
            cause="an except block that does not re-raise",
            where="end the except block with a bare `raise`",
        )
    if seen["listing"] != [name]:
        fail(
            "temp-left-behind",
            observed=f"after a failed save the folder holds {seen['listing']}",
            expected=f"only {name}: the half-written temporary file removed",
            cause="no cleanup when torch.save raises",
            where="except BaseException: tmp.unlink(missing_ok=True); raise",
        )
    return "saves replace the file whole; a crash mid-save keeps the previous checkpoint and leaves no debris"
