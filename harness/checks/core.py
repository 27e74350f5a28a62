"""Registry, failure messages and hints shared by every lesson's checks, and the check contract.

A check is cut in two (CONTRIBUTING.md, "A check"):

- the **probe** runs where the student's objects live (the notebook's kernel, a sandbox when graded): it
  builds the case's inputs, calls the student's objects with instrumentation, and returns an observation
  of plain data (numbers, strings, tensors; `harness.checks.wire`);
- the **judge** runs wherever it is trusted (the same notebook for instant feedback, the grader's own
  process when graded): it rebuilds the case's inputs, recomputes what the result must be, compares it
  with the observation, and explains. The judge never sees a student's object, only data.

`check(task, *objects)` in a notebook runs both, with the observation passed through the wire format, so
the feedback a student sees comes from exactly the code that grades. When graded, the probe runs in the
sandbox on cases drawn from the instructor's secret, and the judge decides every point outside it
(in the grader's own process). A failure the probe itself reports (something only visible inside, such as a call
order) can cost points, never earn them.

A lesson's checks live in `harness/checks/lessonNN.py`; the module is imported on first use from the task
id's two leading digits ("04-train-step" -> lesson04), so a notebook only pays for the lesson it checks.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib
import inspect
import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

import numpy as np
import torch

from harness.checks import wire
from harness.checks.errors import explain

# The MIME type of an observation a graded notebook's probe cell displays for the judge.
OBSERVATION_MIME = "application/vnd.harness.observation+json"
# The seed offset of visible cases and of hidden cases run locally (an instructor's solution run, tests).
# When graded, hidden cases use an offset drawn from the instructor's secret.
LOCAL_SEED = 0


class CheckFailed(AssertionError):
    """A check observed behaviour that differs from the reference.

    `code` is a stable identifier of the failure (for example "missing-zero-grad"); the message teaches.
    It subclasses AssertionError so that nbgrader marks the test cell as failed.
    """

    def __init__(self, message: str, code: str = "failed") -> None:
        super().__init__(message)
        self.code = code

    def _render_traceback_(self) -> list[str]:
        """How IPython shows it: the teaching message alone, without the check's own frames (the message
        already names the student's line where there is one)."""
        return [f"{type(self).__name__}: {self}"]


@dataclass(frozen=True)
class Case:
    """One set of inputs a check runs on: visible or hidden, and a seed offset.

    Checks derive every input from `hidden` (which family of inputs: the hidden ones add other shapes and
    edge cases) and `seed` (added to the check's own seeds: 0 for the visible case, drawn at grade time for
    hidden ones), so the probe and the judge build identical inputs independently.
    """

    hidden: bool = False
    seed: int = LOCAL_SEED

    def seeded(self, base: int) -> int:
        """The seed to use where the check used `base`: `base` shifted by this case's offset."""
        return base + self.seed

    def digest(self) -> str:
        """A short fingerprint of the case, echoed by the probe so the judge can match observations."""
        return hashlib.sha256(f"{int(self.hidden)}:{self.seed}".encode()).hexdigest()[:16]


Probe = Callable[..., dict[str, Any]]
Judge = Callable[..., str]


@dataclass(frozen=True)
class Requirement:
    """One thing an exercise's text asks for ("must", "returns", "do not call", "in place", "on device").

    Its violation fails the check with the failure code it is registered under; `hint` is the first hint a
    student gets after that failure: a nudge about that mistake, never the solution.
    """

    states: str
    hint: str


@dataclass(frozen=True)
class Hints:
    """Three levels of help for an exercise: a nudge, the concept (with the lesson's section to reread), and
    the solution line. After a failure, the first level is that failure's own hint (`Requirement.hint`)."""

    nudge: str
    concept: str
    solution: str
    section: str  # the heading of the lesson's section that teaches it, as written in the notebook


@dataclass
class Check:
    """One task's check: `probe(*objects, case=...)` -> observation, `judge(observation, case=...)` -> verdict.

    `requires` is the exercise's requirement table: failure code -> the requirement its violation breaks.
    """

    task_id: str
    probe: Probe
    hints: Hints
    requires: Mapping[str, Requirement] = field(default_factory=dict)
    judge: Judge | None = None


_REGISTRY: dict[str, Check] = {}
_hints_shown: dict[str, int] = {}
_last_failure: dict[str, str] = {}
# Set by the grader's first cell in a graded notebook: the test cells then leave checking to the judge.
graded_outside = False


def register(task_id: str, *, hints: Hints, requires: Mapping[str, Requirement]) -> Callable[[Probe], Probe]:
    """Register the decorated function as the probe of `task_id`, with its hints and requirement table.

    The probe takes the student's objects and a keyword `case`, and returns an observation (a dict of
    data). Attach its judge with `@judges(task_id)`. `requires` maps each failure code the judge can give
    to the requirement of the exercise's text that it enforces (tests/checks plant a bug for each).
    """
    if not isinstance(hints, Hints):
        raise TypeError(f"{task_id}: hints are Hints(nudge, concept, solution, section)")
    if not requires or not all(isinstance(r, Requirement) for r in requires.values()):
        raise TypeError(f"{task_id}: requires maps failure codes to Requirement(states, hint), one per requirement")

    def decorate(probe: Probe) -> Probe:
        if "case" not in inspect.signature(probe).parameters:
            raise TypeError(f"{task_id}: a probe takes the student's objects and a keyword argument `case`")
        if task_id in _REGISTRY and _REGISTRY[task_id].probe.__qualname__ != probe.__qualname__:
            raise ValueError(f"two checks registered for task {task_id!r}")
        judge = _REGISTRY[task_id].judge if task_id in _REGISTRY else None
        _REGISTRY[task_id] = Check(task_id, probe, hints, dict(requires), judge)
        return probe

    return decorate


def judges(task_id: str) -> Callable[[Judge], Judge]:
    """Register the decorated function as the judge of `task_id` (registered before with `@register`).

    The judge takes the observation (data only) and a keyword `case`; it raises CheckFailed (through
    `fail`) or returns what it verified, in a few words.
    """

    def decorate(judge: Judge) -> Judge:
        if task_id not in _REGISTRY:
            raise ValueError(f"register the probe of {task_id!r} before its judge")
        _REGISTRY[task_id].judge = judge
        return judge

    return decorate


def get(task_id: str) -> Check:
    """The registered check of `task_id`, importing its lesson module on first use."""
    if task_id not in _REGISTRY:
        lesson = task_id[:2]
        if not lesson.isdigit():
            raise KeyError(f"{task_id!r} is not a task id: task ids start with the lesson number, "
                           "like '04-train-step'.")
        try:
            importlib.import_module(f"harness.checks.lesson{lesson}")
        except ModuleNotFoundError as error:
            raise KeyError(f"no checks exist for lesson {lesson} (looking up task {task_id!r})") from error
    if task_id not in _REGISTRY:
        known = ", ".join(sorted(t for t in _REGISTRY if t[:2] == task_id[:2]))
        raise KeyError(f"no check named {task_id!r}; this lesson's tasks are: {known}")
    entry = _REGISTRY[task_id]
    if entry.judge is None:
        raise KeyError(f"the check of {task_id!r} has a probe but no judge (@judges({task_id!r}))")
    return entry


def fail(code: str, *, observed: str, expected: str, cause: str, where: str) -> NoReturn:
    """Raise CheckFailed with the course's four-part teaching message."""
    __tracebackhide__ = True
    raise CheckFailed(
        f"[{code}]\n"
        f"  Observed:      {observed}\n"
        f"  Expected:      {expected}\n"
        f"  Likely cause:  {cause}\n"
        f"  Where to look: {where}",
        code=code,
    )


def raised_failure(task_id: str, explained: str) -> CheckFailed:
    """The failure reported when the student's code raised; `explained` is `errors.explain` of the exception."""
    return CheckFailed(
        f"{task_id} failed [raised]\n"
        f"  Observed:      your code raised {explained}\n"
        f"  Expected:      it runs on the check's inputs without an exception\n"
        f"  Where to look: the line named above, in the cell that defines what you passed to check()",
        code="raised",
    )


@contextlib.contextmanager
def preserved_state() -> Iterator[None]:
    """Leave the student's session as it was: every RNG (Python, NumPy, torch CPU and CUDA), the default
    dtype and the grad mode are restored after a check, whatever the check or the student's code did."""
    python, numpy, cpu = random.getstate(), np.random.get_state(), torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    dtype, grad = torch.get_default_dtype(), torch.is_grad_enabled()
    try:
        yield
    finally:
        random.setstate(python)
        np.random.set_state(numpy)
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
        torch.set_default_dtype(dtype)
        torch.set_grad_enabled(grad)


def _probe(entry: Check, objects: tuple[Any, ...], case: Case) -> Any:
    """The probe's observation, or what it reported: its own failure (`__failed__`, `__message__`) or an
    exception of the student's code (`__raised__`, explained), each as data."""
    try:
        return entry.probe(*objects, case=case)
    except CheckFailed as failure:
        return {"__failed__": failure.code, "__message__": str(failure)}
    except Exception as error:  # the student's code raised: the judge says so
        return {"__raised__": explain(error)[:2000]}


def observe(task_id: str, objects: tuple[Any, ...], case: Case) -> bytes:
    """Run the probe of `task_id` on the student's objects; the observation as wire bytes."""
    with preserved_state():
        return _sealed(task_id, _probe(get(task_id), objects, case), case)


def _sealed(task_id: str, observation: Any, case: Case) -> bytes:
    """The observation, stamped with its case, as wire bytes."""
    if not isinstance(observation, dict):
        observation = {"__raised__": f"the probe of {task_id} returned {type(observation).__name__}, not a dict"}
    observation["__case__"] = case.digest()
    try:
        return wire.encode(observation)
    except wire.WireError as error:
        return wire.encode({"__raised__": f"the observation could not be sent ({error})", "__case__": case.digest()})


def emit(task_id: str, objects: Callable[[], list[Any]], cases: list[dict[str, Any]], nonce: str) -> None:
    """The grader's probe cell: probe the student's objects on each case and display the observations.

    Runs in the graded kernel; decides nothing. `objects` returns what the test cell passes to check()
    (a NameError there, for an exercise left undefined, is reported like any exception of the student's
    code). Each observation is displayed as `OBSERVATION_MIME` data for the judge, with `nonce`.
    """
    from IPython.display import display

    for index, fields in enumerate(cases):
        case = Case(hidden=bool(fields["hidden"]), seed=int(fields["seed"]))
        try:
            data = observe(task_id, tuple(objects()), case)
        except Exception as error:  # the objects could not even be named
            data = _sealed(task_id, {"__raised__": explain(error)[:2000]}, case)
        payload = {"task": task_id, "case": index, "nonce": nonce, "data": base64.b64encode(data).decode()}
        display({OBSERVATION_MIME: payload}, raw=True)


def decide(task_id: str, data: bytes, case: Case) -> str:
    """Judge an observation of `task_id` on `case`: what was verified, or CheckFailed.

    Raises:
        CheckFailed: the behaviour differs from the reference (or the probe or the student's code reported
            a failure); the message names the task.
        wire.WireError: the bytes are not an observation of this case (forged or corrupted).
    """
    __tracebackhide__ = True
    entry = get(task_id)
    seen = wire.decode(data)
    if seen.pop("__case__", None) != case.digest():
        raise wire.WireError(f"the observation of {task_id} is not of the case it was judged on")
    if "__raised__" in seen:
        raise raised_failure(task_id, str(seen["__raised__"]))
    if "__failed__" in seen:
        message = str(seen.get("__message__", ""))
        raise CheckFailed(f"{task_id} failed {message}", code=str(seen["__failed__"]))
    try:
        return entry.judge(seen, case=case)
    except CheckFailed as failure:
        raise CheckFailed(f"{task_id} failed {failure}", code=failure.code) from None


def check(task_id: str, *objects: Any, hidden: bool = False) -> None:
    """Run the check of `task_id` on the student's objects; print what passed or raise CheckFailed.

    Args:
        task_id: the exercise's id, as in the notebook ("04-train-step").
        *objects: what the exercise asks for (a function, a class, a module...).
        hidden: run the hidden variant (other seeds, shapes and edge cases) used by the graders.

    Raises:
        CheckFailed: the behaviour differs from the reference; the message says what to fix. An exception
            raised by the student's own code is reported as a CheckFailed that names it.
    """
    __tracebackhide__ = True
    if graded_outside:
        print(f"{task_id}: checked by the grader's judge (its verdict replaces this cell's output)")
        return
    try:
        verified = _run(task_id, objects, hidden)
    except CheckFailed as failure:
        if _last_failure.get(task_id) != failure.code:
            _hints_shown.pop(task_id, None)  # a new mistake: the next hint starts again, about it
        _last_failure[task_id] = failure.code
        raise
    _last_failure.pop(task_id, None)
    print(f"\u2714 {task_id}{' (hidden tests)' if hidden else ''}: {verified}")


def _run(task_id: str, objects: tuple[Any, ...], hidden: bool) -> str:
    """Probe, wire and judge `objects` on the visible (or hidden) case: what was verified, or CheckFailed."""
    case = Case(hidden=hidden)
    with preserved_state():  # the judge's references draw from the RNGs too, in the student's session
        return decide(task_id, _sealed(task_id, _probe(get(task_id), objects, case), case), case)


def demonstrate(task_id: str, *objects: Any) -> CheckFailed | None:
    """Run the check of `task_id` on a lesson's own example and print its verdict, without counting it as the
    student's attempt: their hints for the task are left as they were.

    Returns:
        The failure (for a demonstration of a bug), or None when the example passes.
    """
    try:
        verified = _run(task_id, objects, hidden=False)
    except CheckFailed as failure:
        print(failure)
        return failure
    print(f"\u2714 {task_id}: {verified}")
    return None


def hint(task_id: str, level: int | None = None) -> None:
    """Print the next hint for `task_id`: after a failed check, first the hint for that failure, then the
    concept (and the section to reread), then the solution line.

    Args:
        task_id: the exercise's id.
        level: show this level (1 to 3) without counting it as used: for a lesson's own demonstrations.
    """
    entry = get(task_id)
    if level is None:
        level = min(_hints_shown.get(task_id, 0) + 1, 3)
        _hints_shown[task_id] = level
    elif not 1 <= level <= 3:
        raise ValueError(f"{task_id} has hint levels 1 to 3")
    hints, code = entry.hints, _last_failure.get(task_id)
    after = entry.requires.get(code) if code else None
    text = {1: after.hint if after else hints.nudge,
            2: f"{hints.concept} (Reread the section \"{hints.section}\".)",
            3: hints.solution}[level]
    about = f" (after [{code}])" if level == 1 and after else ""
    more = " Call hint() again for a more explicit one." if level < 3 else ""
    print(f"Hint {level}/3 for {task_id}{about}: {text}{more}")
