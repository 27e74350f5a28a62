"""Registry, failure messages and hints shared by every lesson's checks.

A lesson's checks live in `harness/checks/lessonNN.py` and register themselves with `@register`; the
module is imported on first use from the task id's two leading digits ("04-train-step" -> lesson04),
so a notebook only pays for the lesson it grades.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, NoReturn


class CheckFailed(AssertionError):
    """A check observed behaviour that differs from the reference.

    `code` is a stable identifier of the failure (for example "missing-zero-grad"); the message teaches.
    It subclasses AssertionError so that nbgrader marks the test cell as failed.
    """

    def __init__(self, message: str, code: str = "failed") -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Check:
    """One task's check: `run(*objects, hidden=...)` raises CheckFailed or returns what it verified."""

    task_id: str
    run: Callable[..., str]
    hints: tuple[str, ...]


_REGISTRY: dict[str, Check] = {}
_hints_shown: dict[str, int] = {}


def register(task_id: str, *, hints: tuple[str, ...]) -> Callable[[Callable[..., str]], Callable[..., str]]:
    """Register the decorated function as the check of `task_id`, with hints from gentle to explicit."""
    if len(hints) < 2:
        raise ValueError(f"{task_id}: give at least two levels of hints, gentle first.")

    def decorate(run: Callable[..., str]) -> Callable[..., str]:
        if task_id in _REGISTRY and _REGISTRY[task_id].run.__qualname__ != run.__qualname__:
            raise ValueError(f"two checks registered for task {task_id!r}")
        _REGISTRY[task_id] = Check(task_id, run, tuple(hints))
        return run

    return decorate


def get(task_id: str) -> Check:
    """The registered check of `task_id`, importing its lesson module on first use."""
    if task_id not in _REGISTRY:
        lesson = task_id[:2]
        if not lesson.isdigit():
            raise KeyError(f"{task_id!r} is not a task id: task ids start with the lesson number, like '04-train-step'.")
        try:
            importlib.import_module(f"harness.checks.lesson{lesson}")
        except ModuleNotFoundError as error:
            raise KeyError(f"no checks exist for lesson {lesson} (looking up task {task_id!r})") from error
    if task_id not in _REGISTRY:
        known = ", ".join(sorted(t for t in _REGISTRY if t[:2] == task_id[:2]))
        raise KeyError(f"no check named {task_id!r}; this lesson's tasks are: {known}")
    return _REGISTRY[task_id]


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
    entry = get(task_id)
    try:
        verified = entry.run(*objects, hidden=hidden)
    except CheckFailed as failure:
        raise CheckFailed(f"{task_id} failed {failure}", code=failure.code) from None
    except Exception as error:  # the student's code raised: say so, in the same format
        raise CheckFailed(
            f"{task_id} failed [raised]\n"
            f"  Observed:      your code raised {type(error).__name__}: {error}\n"
            f"  Expected:      it runs on the check's inputs without an exception\n"
            f"  Likely cause:  see the traceback above this message\n"
            f"  Where to look: the cell that defines what you passed to check()",
            code="raised",
        ) from error
    print(f"\u2714 {task_id}{' (hidden tests)' if hidden else ''}: {verified}")


def hint(task_id: str, level: int | None = None) -> None:
    """Print the next hint for `task_id` (or the given level, 1 = gentlest)."""
    hints = get(task_id).hints
    if level is None:
        level = min(_hints_shown.get(task_id, 0) + 1, len(hints))
    if not 1 <= level <= len(hints):
        raise ValueError(f"{task_id} has hint levels 1 to {len(hints)}")
    _hints_shown[task_id] = max(_hints_shown.get(task_id, 0), level)
    more = " Call hint() again for a more explicit one." if level < len(hints) else ""
    print(f"Hint {level}/{len(hints)} for {task_id}: {hints[level - 1]}{more}")
