"""The exchange between the two halves of a check: `observe` on the probe side, `decide` on the judge side.

The probe's observation crosses as wire bytes (`harness.contract.wire`) stamped with its case. Before any
judge sees it, `decide` refuses an observation with a NaN or an infinity in a leaf the task did not declare
(`Check.nonfinite`): every comparison downstream then works on finite numbers, and a NaN answer can never
satisfy one.
"""

from __future__ import annotations

import base64
import contextlib
import math
import random
from collections.abc import Callable, Iterator
from fnmatch import fnmatchcase
from typing import Any

import numpy as np
import torch

from harness.contract import wire
from harness.contract.case import Case
from harness.contract.errors import explain
from harness.contract.failure import NOT_FINITE, CheckFailed, fail, raised_failure
from harness.contract.registry import Check, get

# The MIME type of an observation a graded notebook's probe cell displays for the judge.
OBSERVATION_MIME = "application/vnd.harness.observation+json"


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


def run_probe(entry: Check, objects: tuple[Any, ...], case: Case) -> Any:
    """The probe's observation, or what it reported: its own failure (`__failed__`, `__message__`) or an
    exception of the student's code (`__raised__`, explained), each as data."""
    try:
        return entry.probe(*objects, case=case)
    except CheckFailed as failure:
        return {"__failed__": failure.code, "__message__": str(failure), "__hint__": failure.hint or ""}
    except Exception as error:  # the student's code raised: the judge says so
        return {"__raised__": explain(error)[:2000]}


def seal(task_id: str, observation: Any, case: Case) -> bytes:
    """The observation, stamped with its case, as wire bytes."""
    if not isinstance(observation, dict):
        observation = {"__raised__": f"the probe of {task_id} returned {type(observation).__name__}, not a dict"}
    observation["__case__"] = case.digest()
    try:
        return wire.encode(observation)
    except wire.WireError as error:
        return wire.encode({"__raised__": f"the observation could not be sent ({error})", "__case__": case.digest()})


def observe(task_id: str, objects: tuple[Any, ...], case: Case) -> bytes:
    """Run the probe of `task_id` on the student's objects; the observation as wire bytes."""
    with preserved_state():
        return seal(task_id, run_probe(get(task_id, judged=False), objects, case), case)


def emit(task_id: str, objects: Callable[[], list[Any]], cases: list[dict[str, Any]], nonce: str) -> None:
    """The grader's probe cell: probe the student's objects on each case and display the observations.

    Runs in the graded kernel; decides nothing. `objects` returns what the test cell passes to check()
    (a NameError there, for an exercise left undefined, is reported like any exception of the student's
    code). Each observation is displayed as `OBSERVATION_MIME` data for the judge, with `nonce`.
    """
    from IPython.display import display

    for index, fields in enumerate(cases):
        case = Case(hidden=bool(fields["hidden"]), seed=int(fields["seed"]), inputs=str(fields.get("inputs", "")))
        try:
            data = observe(task_id, tuple(objects()), case)
        except Exception as error:  # the objects could not even be named
            data = seal(task_id, {"__raised__": explain(error)[:2000]}, case)
        payload = {"task": task_id, "case": index, "nonce": nonce, "data": base64.b64encode(data).decode()}
        display({OBSERVATION_MIME: payload}, raw=True)


def _nonfinite_leaves(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """(path, what) for every leaf of an observation that holds a NaN or an infinity."""
    if isinstance(value, bool):
        return
    if isinstance(value, float) and not math.isfinite(value):
        yield path, repr(value)
    elif isinstance(value, torch.Tensor) and (value.is_floating_point() or value.is_complex()):
        if value.device.type != "meta" and value.numel() and not bool(torch.isfinite(value).all()):
            bad = "nan" if bool(torch.isnan(value).any()) else "inf"
            yield path, f"a tensor of shape {tuple(value.shape)} holding {bad}"
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _nonfinite_leaves(item, f"{path}/{key}" if path else str(key))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _nonfinite_leaves(item, f"{path}/{index}" if path else str(index))


def refuse_nonfinite(seen: dict[str, Any], allowed: tuple[str, ...] = ()) -> None:
    """Fail `[not-finite]` when a leaf of the observation holds NaN or infinity and is not `allowed`.

    Args:
        seen: the decoded observation.
        allowed: glob patterns of leaf paths ("losses/*", "steps/*/grads"; `*` spans levels) where
            non-finite values are part of the expected behaviour (an injected overflow, a NaN to find).
    """
    __tracebackhide__ = True
    for path, what in _nonfinite_leaves(seen, ""):
        if not any(fnmatchcase(path, pattern) for pattern in allowed):
            fail(NOT_FINITE, observed=f"{path.replace('/', ' -> ')} is {what}",
                 expected="finite numbers: no NaN or infinity where the reference has none",
                 cause="a value that overflowed or became NaN (a division or log of zero, an exp of a large "
                 "number), or a NaN returned in place of an answer",
                 where="the computation that produces this value in your code")


def decide(task_id: str, data: bytes, case: Case) -> str:
    """Judge an observation of `task_id` on `case`: what was verified, or CheckFailed.

    Raises:
        CheckFailed: the behaviour differs from the reference (or the probe or the student's code reported
            a failure, or a leaf is not finite); the message names the task.
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
        message, hint = str(seen.get("__message__", "")), str(seen.get("__hint__", ""))[:500]
        raise CheckFailed(f"{task_id} failed {message}", code=str(seen["__failed__"]), hint=hint or None)
    try:
        refuse_nonfinite(seen, entry.nonfinite)
        return entry.judge(seen, case=case)
    except CheckFailed as failure:
        raise CheckFailed(f"{task_id} failed {failure}", code=failure.code, hint=failure.hint) from None
