"""Check one answer: a verdict the answer cannot forge.

For a "write" or "bughunt" drill the answer runs in a process of its own (`harness.drills.pool`: a child forked
from a warm `harness.drills.runner` that never ran answer code): not a fork of the checker, with no descriptor of
the checker's, in a new session, in the bubblewrap sandbox where it works; everything it starts ends with it. It
executes the answer's source and the drill's probe, and sends the probe's observation (data only,
`harness.contract.wire`)
back on a pipe behind a nonce. A forked child of the checker, which never ran any of the answer's code,
decodes that data and runs the drill's judge, which rebuilds the inputs from the case and recomputes every
expected value with torch functions the answer never had a chance to patch. Whatever the answer prints,
patches or returns, it only reaches the judge as data. A measurement only the answer's process can make (host
syncs, recorded calls, what a save did to the disk) can be rewritten by the answer: where a mistake can show in
values the judge recomputes, the drill makes it show there; where it cannot, the drill is a self-check
(`harness.contract.forbidden.SELF_CHECKED`): its PASS line says so and a mock interview does not score it.

The process that forks the judge (the inline CLI, or the warm checker of `harness.drills.server`) imports
torch and the bank and never computes with them itself: forking a process that has run torch's parallel CPU
kernels can hang the child. An "explain" answer is never run: it is parsed as a string
(`harness.drills.choices`).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch._dynamo  # noqa: F401 (building an optimizer imports it: seconds in every forked check, unless here)

from harness.contract import wire
from harness.contract.case import Case
from harness.contract.failure import CheckFailed
from harness.contract.protocol import refuse_nonfinite
from harness.drills.choices import Choices, bank_order, debrief, judge_choice
from harness.drills.core import SELF_CHECK_NOTE, Drill
from harness.drills.pool import Job, read_all, run_answer, unsandboxed_label

CHECK_TIMEOUT_S = 120.0
JUDGE_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Result:
    """The verdict on one answer, and what the candidate reads with it."""

    passed: bool
    code: str  # "passed", or the failure code
    message: str
    output: str = ""  # what the answer printed (never part of the verdict)
    debrief: str = ""  # explain drills: why each option is right or wrong
    unsandboxed: str = ""  # why the answer ran without the bubblewrap sandbox ("" when it ran in it, or never ran)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def draw_case() -> Case:
    """A fresh case for one check: inputs no answer can know in advance (a hard-coded result fails)."""
    return Case(hidden=False, seed=secrets.randbelow(1_000_000))


def check_source(drill: Drill, source: str, *, filename: str = "<answer>", order: tuple[int, ...] | None = None,
                 case: Case | None = None, timeout_s: float = CHECK_TIMEOUT_S) -> Result:
    """Check the answer `source` to `drill`.

    Args:
        drill: the drill.
        source: the answer file's text.
        filename: the answer file's path (error messages quote the answer's lines from it).
        order: explain drills: the order the options were shown in (`choices.shuffled_order`); the bank's
            order when None.
        case: the inputs' case; a fresh one is drawn when None.
        timeout_s: how long the answer and its probe may run.
    """
    if drill.kind == "explain":
        return _check_choice(drill, source, order or bank_order())
    case = case or draw_case()
    report = run_answer(Job(drill.id, source, filename, case), timeout_s)
    if report.frame is None:
        passed, code, message = False, report.how, how_message(report.how, drill, timeout_s)
    else:
        verdict = _run_judge(drill, report.frame, case)
        passed, code, message = verdict["passed"], verdict["code"], verdict["message"]
    if passed and drill.self_check and "self-check" not in message:
        message = f"{message}\n[self-check] {SELF_CHECK_NOTE}"
    unsandboxed = unsandboxed_label()
    if unsandboxed:  # the candidate reads it with the verdict, and the progress record keeps it
        message = f"{message}\n[unsandboxed] {unsandboxed}"
    return Result(passed, code, message, report.output, unsandboxed=unsandboxed)


def how_message(code: str, drill: Drill, timeout_s: float) -> str:
    """The message of a check whose answer process sent no observation."""
    if code == "timeout":
        return f"your answer ran longer than {timeout_s:.0f} s (an infinite loop, or far too much work?)"
    if code == "too-large":
        return "[too-large] your answer file is over 1 MB: an answer is a few dozen lines"
    return (f"[{code}] your answer's process ended without reporting to the checker (it exited, was killed or "
            f"closed the checker's pipe): nothing of {drill.entry} was checked, so the drill is not passed")


def _check_choice(drill: Drill, source: str, order: tuple[int, ...]) -> Result:
    choices: Choices = drill.choices  # type: ignore[assignment]
    after = debrief(choices, order, drill.experiment)
    try:
        return Result(True, "passed", judge_choice(source, choices, order), debrief=after)
    except CheckFailed as failure:
        return Result(False, failure.code, str(failure), debrief=after if failure.code == "wrong-choice" else "")


def _reap(pid: int) -> None:
    """Kill the child's whole process group (ranks and workers it started included) and wait for it."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _run_judge(drill: Drill, frame: bytes, case: Case) -> dict[str, Any]:
    """Decode the observation and judge it in a forked child that never ran the answer's code."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            os.setpgid(0, 0)
            verdict = _judge(drill, frame, case)
            os.write(write_end, json.dumps(verdict).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        data, timed_out = read_all(read_end, JUDGE_TIMEOUT_S)
    finally:
        os.close(read_end)
        _reap(pid)
    try:
        verdict = json.loads(data)
        if not timed_out and isinstance(verdict, dict) and set(verdict) == {"passed", "code", "message"}:
            return verdict
    except json.JSONDecodeError:
        pass
    return {"passed": False, "code": "judge-failed",
            "message": "[judge-failed] the checker's judge did not finish: this is a bug of the drill, not of your "
                       "answer; please report it with your answer file"}


def _judge(drill: Drill, frame: bytes, case: Case) -> dict[str, Any]:
    """The verdict on one observation, as JSON-ready data."""
    try:
        observation = wire.decode(frame)
        if "raised" in observation:
            raise CheckFailed(
                f"[raised]\n  Observed:      your answer raised {observation['raised']}\n"
                f"  Expected:      it runs on the check's inputs\n"
                f"  Likely cause:  an unfinished starter, or a bug on the line named above\n"
                f"  Where to look: your answer file", code="raised")
        if "failed" in observation:
            raise CheckFailed(str(observation.get("message", "")), code=str(observation["failed"]))
        seen = observation.get("seen")
        if not isinstance(seen, dict):
            raise wire.WireError("the probe's observation is not a dict")
        refuse_nonfinite(seen, drill.nonfinite)  # the contract's gate: no NaN or infinity reaches a judge
        return {"passed": True, "code": "passed", "message": drill.judge(seen, case=case)}  # type: ignore[misc]
    except CheckFailed as failure:
        return {"passed": False, "code": failure.code, "message": str(failure)}
    except Exception as error:  # data the judge cannot use: not what an honest probe sends
        return {"passed": False, "code": "forged-observation",
                "message": f"[forged-observation] the observation sent to the checker is not what the drill's "
                           f"probe sends ({type(error).__name__}: {str(error)[:300]}): not passed"}


def check_file(drill: Drill, path: Path, *, order: tuple[int, ...] | None = None,
               timeout_s: float = CHECK_TIMEOUT_S) -> Result:
    """Check the answer file at `path` (a missing file is a failure that says how to get one)."""
    if not path.is_file():
        return Result(False, "no-answer", f"no answer file at {path}: run `harness drill start {drill.id}`")
    return check_source(drill, path.read_text(), filename=str(path.resolve()), order=order, timeout_s=timeout_s)
