"""The drill record and the bank's registry.

A "write" or "bughunt" drill is checked in two halves, as the course's exercises are (CONTRIBUTING.md, "A
check"): `probe(answer, *, case)` runs in a child process next to the candidate's code and returns data only
(`harness.contract.wire`); `judge(seen, *, case)` runs in the checker's own process, rebuilds the inputs from the
case, recomputes every expected value and decides. An "explain" drill is never run: its answer is read as a
string (`harness.drills.choices`).

A drill lives in two modules, as a course check does. `harness.drills.bank.<topic>` holds what may run beside an
answer: the prompt, the starter, the hints, the probe and the experiment. `harness.judges.drills.<topic>` holds
what answers or decides: the reference solution, the planted wrong answers, the judge and the references it
recomputes, an explain drill's options and key (`Answers`); a large topic's is a package with a module per group
of drills, which its `__init__` imports. A graded kernel never mounts `harness.judges`, so there a drill has no
answer side; everywhere else `get_drill` joins the two.

A held drill (its answer passes a graded exercise: `harness.grading.answerable.WITHHELD_DRILLS`) keeps its solution
and planted wrong answers in `harness.judges.drills.held.<topic>`, which a graded student tree does not ship
(`harness.grading.held_drills`). One of lesson 11's notebook drills keeps its judge in the topic's module
(`add_judge`: lesson 11's local checks use it); any other held drill leaves the graded tree whole, its record
(prompt, starter, hints) in `harness.drills.bank.held.<topic>` and its judge joined with its answers.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field, replace
from typing import Callable, Literal

from harness.contract.judged import Judge, Judged
from harness.drills.choices import LETTERS, Choices, Option
from harness.drills.topics import TOPICS

Kind = Literal["write", "bughunt", "explain"]
# What a self-check drill's prompt and pass say (`Drill.self_check`), where its own text does not already.
SELF_CHECK_NOTE = ("This is a self-check: part of what it checks is measured inside your answer's own process, "
                   "which your code could rewrite, so a pass does not count in a mock interview.")


@dataclass(frozen=True)
class Drill(Judged):
    """One drill: the contract's probe and judge (`Judged`, the record course checks share) with a prompt, a
    starter and a reference solution.

    The candidate's answer is Python source that defines `entry` (a function or a class; for "explain" drills
    the line `answer = "<letter>"`). `experiment`, for "explain" drills, runs and prints the evidence. The
    judge side (`judge`, `solution`, `wrong_answers`, `choices`) is joined from the drill's `Answers` where
    `harness.judges` is installed, and absent in a graded kernel (`answered` is False there).
    """

    id: str
    title: str
    kind: Kind
    topics: tuple[str, ...]
    difficulty: int  # 1 easy, 2 medium, 3 hard (multi-part, realistic)
    prompt: str
    entry: str
    starter: str
    hints: tuple[str, ...]
    experiment: Callable[[], None] | None = field(default=None, compare=False)
    # The drill's point is a measurement only the answer's own process makes (host syncs, call records) and no
    # output shows: its prompt says so, and its pass does not count in a mock interview's score
    self_check: bool = False
    # The judge side, from `Answers` (see the class's docstring)
    solution: str | None = None
    wrong_answers: tuple[tuple[str, str], ...] = ()
    choices: Choices | None = None

    @property
    def answered(self) -> bool:
        """Whether the drill's answers are joined (False in a graded kernel, which never mounts the judge side, and
        for a held drill in a graded student tree, which has its judge alone)."""
        return self.solution is not None

    def __post_init__(self) -> None:
        if self.self_check and "self-check" not in self.prompt:  # the candidate reads it before answering
            object.__setattr__(self, "prompt", f"{self.prompt} {SELF_CHECK_NOTE}")
        unknown = set(self.topics) - set(TOPICS)
        if unknown or not self.topics:
            raise ValueError(f"drill {self.id}: topics must be among {TOPICS}, got {self.topics}")
        if len(self.hints) < 2:
            raise ValueError(f"drill {self.id}: give at least two levels of hints")
        if self.difficulty not in (1, 2, 3):
            raise ValueError(f"drill {self.id}: difficulty is 1, 2 or 3")
        if self.kind == "explain" and self.experiment is None:
            raise ValueError(f"drill {self.id}: an explain drill needs an experiment that shows the answer")
        if self.kind != "explain" and self.probe is None:
            raise ValueError(f"drill {self.id}: a {self.kind} drill needs a probe")
        if not self.answered:
            return
        if len(self.wrong_answers) < 2 or not all(isinstance(w, tuple) and len(w) == 2 for w in self.wrong_answers):
            raise ValueError(f"drill {self.id}: give at least two plausible wrong answers as (source, code)")
        if self.kind == "explain" and self.choices is None:
            raise ValueError(f"drill {self.id}: an explain drill's answers need its choices")
        if self.kind != "explain" and self.judge is None:
            raise ValueError(f"drill {self.id}: a {self.kind} drill's answers need its judge")


@dataclass(frozen=True)
class Answers:
    """A drill's judge side, kept in `harness.judges.drills.<topic>`: what answers it and what decides.

    `solution` is the reference answer, `wrong_answers` the plausible mistakes (at least two) the tests prove the
    check rejects, each with the failure code it must get: `(source, code)`. A write or bughunt drill has its
    `judge`; an explain drill its `choices` (`choice_answers` writes all of them).
    """

    drill_id: str
    solution: str
    wrong_answers: tuple[tuple[str, str], ...]
    judge: Judge | None = None  # a held drill's is joined by its topic's module (`add_judge`)
    choices: Choices | None = None


def choice_answers(drill_id: str, *, options: tuple[tuple[str, str], ...], key: str) -> Answers:
    """An explain drill's judge side: four `(text, why it is right or wrong)` options in the bank's order, `key` the
    letter of the right one there (the bank's keys are balanced: a test checks it). Each attempt shows the options
    in a new order; the three other letters are the planted wrong answers."""
    wrong = tuple((f'answer = "{letter}"\n', "wrong-choice") for letter in LETTERS if letter != key)
    return Answers(drill_id=drill_id, solution=f'answer = "{key}"\n', wrong_answers=wrong,
                   choices=Choices(tuple(Option(text, why) for text, why in options), LETTERS.index(key)))


_BANK: dict[str, Drill] = {}


def add(*drills: Drill) -> None:
    """Add drills to the bank (bank modules call this at import)."""
    for drill in drills:
        if drill.id in _BANK:
            raise ValueError(f"two drills named {drill.id!r}")
        _BANK[drill.id] = drill


def add_answers(*answers: Answers) -> None:
    """Join each drill's judge side to its drill (`harness.judges.drills` modules call this at import)."""
    for answer in answers:
        drill = _BANK.get(answer.drill_id)
        if drill is None:
            raise ValueError(f"answers for {answer.drill_id!r}, which the bank does not hold")
        if drill.answered:
            raise ValueError(f"two sets of answers for {answer.drill_id!r}")
        if answer.judge is not None and drill.judge is not None:
            raise ValueError(f"two judges for {answer.drill_id!r}")
        _BANK[answer.drill_id] = replace(drill, solution=answer.solution, wrong_answers=answer.wrong_answers,
                                         judge=answer.judge or drill.judge, choices=answer.choices)


def add_judge(drill_id: str, judge: Judge) -> None:
    """Join a held drill's judge alone (its topic's module calls this at import): its solution and wrong answers
    are joined by `harness.judges.drills.held.<topic>` where that is installed (not in a graded student tree)."""
    drill = _BANK.get(drill_id)
    if drill is None:
        raise ValueError(f"a judge for {drill_id!r}, which the bank does not hold")
    if drill.judge is not None:
        raise ValueError(f"two judges for {drill_id!r}")
    _BANK[drill_id] = replace(drill, judge=judge)


def _import_if_installed(module: str) -> None:
    """Import `module` unless it, or a package above it, is not installed (an error inside it still raises)."""
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as error:
        parents = [module.rsplit(".", depth)[0] for depth in range(module.count("."))]
        if error.name not in parents:
            raise


def load_judge_side(topic: str) -> None:
    """Import the judge side of the bank module `topic`: its judges, then its held drills' answers, each where it
    is installed (a graded kernel has neither; a graded student tree has no held answers)."""
    for module in (f"harness.judges.drills.{topic}", f"harness.judges.drills.held.{topic}"):
        _import_if_installed(module)


def _load_bank() -> None:
    """Import every bank module once (importing one module directly registers only its own drills), then its held
    drills (`harness.drills.bank.held.<topic>`, not in a graded student tree), then its judge side where it is
    installed (a graded kernel has none)."""
    import harness.drills.bank as bank

    for module in pkgutil.iter_modules(bank.__path__):
        if module.name == "held":
            continue
        importlib.import_module(f"{bank.__name__}.{module.name}")
        _import_if_installed(f"{bank.__name__}.held.{module.name}")
        load_judge_side(module.name)


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
