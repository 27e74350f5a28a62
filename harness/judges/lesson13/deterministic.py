"""13-deterministic, the judge.

Inside: deterministic, errors, no benchmark, cuDNN deterministic; after: the priors; exceptions propagate.
"""

from __future__ import annotations

from typing import Any

from harness.checks.lesson13.deterministic import prior_flags
from harness.contract.case import Case
from harness.contract.compare import judged
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import WireError

FLAGS = ("deterministic", "warn_only", "benchmark", "cudnn_deterministic")


def _flag_text(flags: dict[str, bool]) -> str:
    return ", ".join(f"{name}={flags[name]}" for name in FLAGS)


def _valid_flags(value: Any) -> dict[str, bool]:
    if not isinstance(value, dict) or sorted(value) != sorted(FLAGS) or not all(
            isinstance(v, bool) for v in value.values()):
        raise WireError("malformed observation: flags are not the four booleans")
    return value


DEFAULTS = {"deterministic": False, "warn_only": False, "benchmark": False, "cudnn_deterministic": False}


def _restore_cause(prior: dict[str, bool], inside: dict[str, bool], after: dict[str, bool],
                   changed: list[str]) -> tuple[str, str | None]:
    """Why the flags after the block differ from `prior`, from what they are: the slip whose result they equal,
    and its own hint (None when none of the slips fits)."""
    if changed == ["warn_only"]:
        return ("use_deterministic_algorithms(previous) without warn_only=: it resets warn_only to False",
                "What does torch.use_deterministic_algorithms(flag) set warn_only to when you leave it out?")
    if after == inside:
        return ("the flags after the block are those set inside it: the 'old' values were read after they were "
                "changed (read them first, before use_deterministic_algorithms(True))",
                "When does your code read the values it writes back: before or after it changes the flags?")
    if after == DEFAULTS:
        return ("defaults (all False) were written back instead of the values read before the block",
                "Do you write back the values you read before the block, or fixed ones?")
    if prior["benchmark"] != prior["cudnn_deterministic"] and after["benchmark"] == prior["cudnn_deterministic"] \
            and after["cudnn_deterministic"] == prior["benchmark"]:
        return ("the saved values were written back to the wrong flags: benchmark's old value went to "
                "cudnn.deterministic and the other way round",
                "Print what you saved and the flag each saved value is written back to: does each go home?")
    return ("one of: the old values read after changing them, defaults written back, or a saved value written to "
            "another flag", None)


@judges(
    "13-deterministic",
    hints=Hints(
        nudge="Read the four flags first, set them, yield inside try, and write the old values back in finally.",
        concept="Global flags outlive a cell: a context manager that changes them must restore the values it found "
        "(including warn_only), also when the block raises: @contextlib.contextmanager with try/finally.",
        solution="before = (torch.are_deterministic_algorithms_enabled(), "
        "torch.is_deterministic_algorithms_warn_only_enabled(), cudnn.benchmark, cudnn.deterministic)\n"
        "torch.use_deterministic_algorithms(True); cudnn.benchmark = False; cudnn.deterministic = True\n"
        "try: yield\nfinally: torch.use_deterministic_algorithms(before[0], warn_only=before[1]); ...",
        section="6. Determinism against speed",
    ),
    requires={
        "not-deterministic": Requirement(
            "inside the block, deterministic algorithms are enforced (use_deterministic_algorithms(True), "
            "errors, not warnings)",
            hint="Print torch.are_deterministic_algorithms_enabled() and "
            "torch.is_deterministic_algorithms_warn_only_enabled() inside your block."),
        "benchmark-on": Requirement(
            "inside the block, cudnn.benchmark is False",
            hint="What does cudnn.benchmark choose, and why does that break run-to-run equality?"),
        "cudnn-not-deterministic": Requirement(
            "inside the block, cudnn.deterministic is True",
            hint="There are two cuDNN flags: which one asks for deterministic convolution algorithms?"),
        "not-restored": Requirement(
            "on exit, every flag (warn_only included) is back to the value it had before the block",
            hint="Enter your context with benchmark=True set beforehand: what is it after the block?"),
        "not-restored-on-error": Requirement(
            "the flags are restored also when the block raises",
            hint="What runs after a yield when the block raises? Put the restoring code where it always runs."),
        "exception-swallowed": Requirement(
            "an exception raised in the block propagates out of it",
            hint="Does your context manager catch the exception (except: pass, or a return in finally)?"),
    },
)
def judge_deterministic(seen: dict, *, case: Case) -> str:
    """Inside: deterministic, errors, no benchmark, cuDNN deterministic; after: the priors; exceptions propagate."""
    # the uses whose block returned first: a wrong restore shows there as itself, where after a block that
    # raised it would look like a restore skipped by the exception
    uses, stop = [], None
    try:
        uses.extend(judged(prior_flags(case), seen["results"]))
    except Exception as error:  # noqa: BLE001 -- a recorded stop: raised once the uses before it are judged
        stop = error
    for (prior, raises), result in sorted(uses, key=lambda use: use[0][1]):
        inside, after = _valid_flags(result["inside"]), _valid_flags(result["after"])
        if not isinstance(result["propagated"], bool):
            raise WireError("malformed observation: propagated is not a bool")
        before = f"(flags before the block: {_flag_text(prior)})"
        if not inside["deterministic"] or inside["warn_only"]:
            warned = inside["deterministic"] and inside["warn_only"]
            fail("not-deterministic", observed=f"inside the block: deterministic={inside['deterministic']}, "
                 f"warn_only={inside['warn_only']} {before}", expected="deterministic=True, warn_only=False",
                 cause="deterministic algorithms are on but only warn (warn_only=True passed, or kept from before): "
                 "a nondeterministic operation then runs anyway" if warned else
                 "use_deterministic_algorithms(True) is missing: deterministic algorithms are off inside the block",
                 where="the setup before the yield",
                 hint="What does warn_only=True turn the error of a nondeterministic operation into?" if warned
                 else None)
        if inside["benchmark"]:
            fail("benchmark-on", observed=f"inside the block: cudnn.benchmark=True {before}",
                 expected="cudnn.benchmark=False", cause="torch.backends.cudnn.benchmark is not set to False",
                 where="the setup before the yield")
        if not inside["cudnn_deterministic"]:
            fail("cudnn-not-deterministic", observed=f"inside the block: cudnn.deterministic=False {before}",
                 expected="cudnn.deterministic=True", cause="torch.backends.cudnn.deterministic is not set to True",
                 where="the setup before the yield")
        if raises and not result["propagated"]:
            fail("exception-swallowed", observed="an exception raised inside the block did not come out of it",
                 expected="the exception propagates to the caller", cause="an except clause that does not re-raise, "
                 "or a return inside finally", where="the code around the yield")
        if after != prior:
            changed = [name for name in FLAGS if after[name] != prior[name]]
            cause, cause_hint = _restore_cause(prior, inside, after, changed)
            if raises:
                fail("not-restored-on-error", observed=f"after a block that raised: {_flag_text(after)}",
                     expected=f"the flags from before: {_flag_text(prior)}",
                     cause="the restoring code runs after the yield but not in a finally: an exception skips it",
                     where="wrap the yield in try/finally")
            fail("not-restored", observed=f"after the block: {', '.join(f'{n}={after[n]}' for n in changed)}",
                 expected=f"the flags from before: {_flag_text(prior)}", cause=cause,
                 where="the code after the yield", hint=cause_hint)
    if stop is not None:
        raise stop
    return "flags set inside, restored after (warn_only too), also when the block raises"
