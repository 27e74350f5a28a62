"""Assertions for testing a check (CONTRIBUTING.md): each planted bug fails with its code and message, and
correct variants pass both the visible and the hidden tests. Used by tests/checks/ for every lesson."""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from harness.checks import wire
from harness.checks.core import Case, CheckFailed, check, decide, observe

# A hidden case as the grader draws one: another seed offset than the local runs use.
DRAWN_CASE = Case(hidden=True, seed=7919)


def assert_check_fails(task: str, *objects: Any, code: str, phrase: str, hidden: bool = False) -> str:
    """Assert that `check(task, *objects)` fails with failure `code` and a message containing `phrase`.

    Returns:
        The failure message, for further assertions.
    """
    with pytest.raises(CheckFailed) as failure:
        check(task, *objects, hidden=hidden)
    assert failure.value.code == code, str(failure.value)
    assert phrase in str(failure.value), str(failure.value)
    return str(failure.value)


def assert_check_passes(task: str, *objects: Any, capsys: pytest.CaptureFixture[str] | None = None) -> None:
    """Assert that the visible and the hidden checks of `task` pass on `objects`, also on a drawn hidden case.

    With `capsys`, also assert that both printed their tick and nothing reached stderr (which nbgrader
    would score as a failed cell).
    """
    check(task, *objects)
    check(task, *objects, hidden=True)
    decide(task, observe(task, objects, DRAWN_CASE), DRAWN_CASE)
    if capsys is not None:
        out = capsys.readouterr()
        assert out.out.count(f"\u2714 {task}") == 2 and "(hidden tests)" in out.out, out.out
        assert out.err == "", out.err


def shortened(observation: Any) -> Iterator[Any]:
    """Every copy of an observation with one list or tuple in it (at any depth) missing its last element:
    forgeries a judge must refuse (fail or raise), never pass."""
    if isinstance(observation, dict):
        for key, item in observation.items():
            for variant in shortened(item):
                yield {**observation, key: variant}
    elif isinstance(observation, (list, tuple)):
        if observation:
            yield type(observation)(observation[:-1])
        for index, item in enumerate(observation):
            for variant in shortened(item):
                yield type(observation)([*observation[:index], variant, *observation[index + 1:]])


def assert_forgeries_refused(task: str, *objects: Any, case: Case) -> None:
    """Assert that the judge of `task` passes the honest observation of `objects` on `case`, and refuses (fails
    or raises on) every copy of it with one list or tuple shortened."""
    data = observe(task, objects, case)
    decide(task, data, case)
    forgeries = list(shortened(wire.decode(data)))
    assert forgeries, "the observation has no list or tuple to shorten"
    for forged in map(wire.encode, forgeries):
        with pytest.raises(Exception):
            decide(task, forged, case)
