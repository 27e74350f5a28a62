"""The judge fuzz test (issue 27): a right answer's observation, broken one leaf at a time, never passes.

For every graded task, the observation of a correct answer on a drawn hidden case is decoded; then one leaf at
a time is replaced by NaN, +inf, -inf, zeros (where it is not already about zero), or, for a tensor, an empty
tensor of its dtype, an integer tensor (where truncating changes it) and a meta tensor; re-encoded as the wire
sends it, and judged. A NaN or an infinity in a leaf the task does not declare expected must fail `[not-finite]`
(the contract's gate, before any judge); in a declared leaf, and for the other mutations, the judge must refuse it
(any failure: a check failure, or the refusal of an observation it cannot use, as `harness.judge.verdict` does),
unless the task declares the leaf unjudged (`Check.unjudged`: read for messages or dtypes only).
Every drill's reference observation gets the same treatment through the checker's judge.

Leaves are sampled (at most `LEAVES` per observation, spread over it) to keep the suite fast.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.checks.testing import DRAWN_CASE, _built
from harness.contract import wire
from harness.contract.case import Case
from harness.contract.failure import NOT_FINITE, CheckFailed
from harness.contract.protocol import decide, observe
from harness.contract.registry import get
from harness.grading.layout import REPO_ROOT, discover_assignments, graded_tasks
from tests.fuzzing import NONFINITE, declared, mutations, replaced, sampled
from tests.test_requirements import lesson_tests


def _tasks() -> list[tuple[str, Any]]:
    """(task, a correct answer's objects builder) for every graded task with a correct variant."""
    found = []
    for assignment in discover_assignments():
        corrects = {}
        for correct in getattr(lesson_tests(assignment), "CORRECT", []):
            corrects.setdefault(correct.task, correct)
        for task in graded_tasks(REPO_ROOT / "solutions" / assignment):
            if task in corrects:
                found.append((task, corrects[task]))
    return found


TASKS = _tasks()


def test_every_task_is_fuzzed():
    tasks = {task for assignment in discover_assignments()
             for task in graded_tasks(REPO_ROOT / "solutions" / assignment)}
    assert tasks == {task for task, _ in TASKS}, "a task without a correct variant in tests/checks"


@pytest.mark.parametrize("task,correct", [
    pytest.param(task, correct, id=task, marks=[pytest.mark.xdist_group("lesson10")] if task.startswith("10-") else [])
    for task, correct in TASKS])  # lesson 10's with tests/checks/test_lesson10.py: its trained run is made once
def test_a_broken_leaf_never_passes(task, correct):
    case = DRAWN_CASE
    honest = wire.decode(observe(task, _built(correct.objects), case))
    assert "__raised__" not in honest and "__failed__" not in honest, honest
    decide(task, wire.encode(dict(honest)), case)  # the honest observation passes
    passed = []
    for path, leaf in sampled(honest):
        for name, broken in mutations(leaf):
            try:
                decide(task, wire.encode(replaced(honest, path, broken)), case)
            except CheckFailed as failure:
                nonfinite = name in NONFINITE and not declared(get(task).nonfinite, path)
                if nonfinite and failure.code != NOT_FINITE:
                    passed.append(f"{name} at {path}: [{failure.code}], not [{NOT_FINITE}]")
                continue
            except Exception:  # refused as an observation the judge cannot use
                continue
            if declared(get(task).unjudged, path):
                continue
            passed.append(f"{name} at {'/'.join(map(str, path))} passed")
    assert not passed, "\n".join(passed)


def test_the_gate_names_the_leaf_and_its_code():
    task, correct = TASKS[0]
    honest = wire.decode(observe(task, _built(correct.objects), Case()))
    path, leaf = sampled(honest)[0]
    with pytest.raises(CheckFailed) as failure:
        decide(task, wire.encode(replaced(honest, path, next(mutations(leaf))[1])), Case())
    assert failure.value.code == NOT_FINITE and " -> ".join(map(str, path)) in str(failure.value)
