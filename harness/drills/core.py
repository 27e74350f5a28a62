"""The drill record, the bank's registry, and running an answer against its check."""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from harness.checks.core import CheckFailed

Kind = Literal["write", "bughunt", "explain"]
TOPICS = (
    "tensors", "autograd", "modules", "loop", "data", "amp", "clipping",
    "schedulers", "checkpointing", "ddp", "repro", "performance",
)


@dataclass(frozen=True)
class Drill:
    """One drill.

    The candidate's answer is Python source that defines `entry` (a function, a class, or for "explain"
    drills a plain value such as `answer = "b"`). `check(answer_namespace)` raises CheckFailed with a
    teaching message or returns what it verified. `wrong_answers` are plausible mistakes the tests
    prove the check rejects. `experiment`, for "explain" drills, runs and prints the evidence.
    """

    id: str
    title: str
    kind: Kind
    topics: tuple[str, ...]
    difficulty: int  # 1 easy, 2 medium, 3 hard
    prompt: str
    entry: str
    starter: str
    solution: str
    hints: tuple[str, ...]
    check: Callable[[dict[str, Any]], str]
    wrong_answers: tuple[str, ...] = field(default=())
    experiment: Callable[[], None] | None = None

    def __post_init__(self) -> None:
        unknown = set(self.topics) - set(TOPICS)
        if unknown or not self.topics:
            raise ValueError(f"drill {self.id}: topics must be among {TOPICS}, got {self.topics}")
        if len(self.hints) < 2:
            raise ValueError(f"drill {self.id}: give at least two levels of hints")
        if self.difficulty not in (1, 2, 3):
            raise ValueError(f"drill {self.id}: difficulty is 1, 2 or 3")
        if not self.wrong_answers:
            raise ValueError(f"drill {self.id}: give at least one plausible wrong answer")
        if self.kind == "explain" and self.experiment is None:
            raise ValueError(f"drill {self.id}: an explain drill needs an experiment that shows the answer")


_BANK: dict[str, Drill] = {}


def add(*drills: Drill) -> None:
    """Add drills to the bank (bank modules call this at import)."""
    for drill in drills:
        if drill.id in _BANK:
            raise ValueError(f"two drills named {drill.id!r}")
        _BANK[drill.id] = drill


def _load_bank() -> None:
    """Import every bank module once (importing one module directly registers only its own drills)."""
    import harness.drills.bank as bank

    for module in pkgutil.iter_modules(bank.__path__):
        importlib.import_module(f"{bank.__name__}.{module.name}")


def all_drills() -> list[Drill]:
    """Every drill, ordered by topic then difficulty then id."""
    _load_bank()
    return sorted(_BANK.values(), key=lambda d: (TOPICS.index(d.topics[0]), d.difficulty, d.id))


def get_drill(drill_id: str) -> Drill:
    """The drill named `drill_id`; a KeyError lists close names when there is none."""
    _load_bank()
    if drill_id not in _BANK:
        close = [d for d in _BANK if drill_id.split("-")[0] in d][:5]
        raise KeyError(f"no drill named {drill_id!r}" + (f"; did you mean {', '.join(close)}?" if close else ""))
    return _BANK[drill_id]


def load_answer(source: str, drill: Drill) -> dict[str, Any]:
    """Execute the answer's source in a fresh namespace and return it; it must define `drill.entry`."""
    namespace: dict[str, Any] = {"__name__": f"drill_answer_{drill.id.replace('-', '_')}"}
    exec(compile(source, f"<answer to {drill.id}>", "exec"), namespace)  # noqa: S102 (running answers is the point)
    if drill.entry not in namespace:
        raise CheckFailed(
            f"[missing-entry]\n  Observed:      your answer defines no `{drill.entry}`\n"
            f"  Expected:      a definition of `{drill.entry}`, as in the starter\n"
            f"  Likely cause:  the name was changed or the definition deleted\n"
            f"  Where to look: the starter's first lines",
            code="missing-entry",
        )
    return namespace


def run_check(drill: Drill, source: str) -> str:
    """Run `source` against the drill's check; return what passed or raise CheckFailed.

    An exception from the answer itself (including NotImplementedError from an untouched starter) is
    reported as a CheckFailed with code "raised".
    """
    __tracebackhide__ = True
    try:
        namespace = load_answer(source, drill)
        return drill.check(namespace)
    except CheckFailed:
        raise
    except Exception as error:
        raise CheckFailed(
            f"[raised]\n  Observed:      your answer raised {type(error).__name__}: {error}\n"
            f"  Expected:      it runs on the check's inputs\n"
            f"  Likely cause:  an unfinished starter or a bug the traceback points to\n"
            f"  Where to look: your answer file",
            code="raised",
        ) from error
