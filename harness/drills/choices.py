"""Explain drills: four options, shuffled for each attempt, and an answer read as a plain string.

The answer file is never run. Its `answer = "b"` line is read with `ast` (a string literal, nothing else), so no
object of the candidate's can take part in the comparison. Each option carries why it is right or wrong; all of
them are shown after an attempt, with the experiment that proves the answer.
"""

from __future__ import annotations

import ast
import inspect
import random
import textwrap
from dataclasses import dataclass
from typing import Callable

from harness.contract.failure import fail

LETTERS = "abcd"


@dataclass(frozen=True)
class Option:
    """One option: its text, and why it is right or wrong."""

    text: str
    why: str


@dataclass(frozen=True)
class Choices:
    """The options in the bank's order (a, b, c, d) and the index of the right one."""

    options: tuple[Option, ...]
    key: int

    def __post_init__(self) -> None:
        if len(self.options) != len(LETTERS) or not 0 <= self.key < len(LETTERS):
            raise ValueError("an explain drill has four options and one key among them")


def shuffled_order(rng: random.Random) -> tuple[int, ...]:
    """A new order of the four options for one attempt: position i shows option order[i]."""
    order = list(range(len(LETTERS)))
    rng.shuffle(order)
    return tuple(order)


def bank_order() -> tuple[int, ...]:
    """The bank's own order (notebook 11, and an answer checked without `start`)."""
    return tuple(range(len(LETTERS)))


def render(question: str, choices: Choices, order: tuple[int, ...], answer_line: bool = True) -> str:
    """The question with its options lettered in `order` (and how to answer, unless `answer_line` is False)."""
    lines = [question.rstrip(), ""]
    lines += [f"  ({letter}) {choices.options[index].text}" for letter, index in zip(LETTERS, order, strict=True)]
    return "\n".join(lines) + ('\n\nAnswer with answer = "<letter>".' if answer_line else "")


def read_answer(source: str) -> str | None:
    """The letter the source assigns to `answer` as a string literal (the last such line), normalised; None when
    there is no such line. The source is parsed, never run."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    letter = None
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "answer"):
            value = node.value
            letter = value.value if isinstance(value, ast.Constant) and isinstance(value.value, str) else None
    return None if letter is None else letter_of(letter)


def letter_of(text: str) -> str | None:
    """`text` as an option's letter, as it may be written: "b", "B", "(b)" or "b)" give "b"; None otherwise."""
    letter = text.strip().strip("()").strip().lower()
    return letter if len(letter) == 1 and letter in LETTERS else None


def judge_choice(source: str, choices: Choices, order: tuple[int, ...]) -> str:
    """What passed, or CheckFailed ([no-choice], [wrong-choice]) for the answer `source` under the shown `order`."""
    letter = read_answer(source)
    if letter is None:
        fail("no-choice", observed="no line `answer = \"<letter>\"` with one of a, b, c, d as a string literal",
             expected='answer = "a", "b", "c" or "d" (a plain string, nothing computed)',
             cause="the starter's answer was not replaced, or the answer is not a string literal",
             where="the line `answer = ...`")
    chosen = order[LETTERS.index(letter)]
    if chosen != choices.key:
        fail("wrong-choice", observed=f"you chose ({letter}) {choices.options[chosen].text}",
             expected="another choice", cause=choices.options[chosen].why,
             where="run the experiment (`harness drill experiment <id>`) and read what it prints")
    return choices.options[choices.key].why


def debrief(choices: Choices, order: tuple[int, ...], experiment: Callable[[], None] | None) -> str:
    """Every option with why it is right or wrong, in the order shown, and where the proof is."""
    lines = ["Why each option is right or wrong:"]
    for letter, index in zip(LETTERS, order, strict=True):
        option = choices.options[index]
        mark = "right" if index == choices.key else "wrong"
        lines.append(f"  ({letter}) {mark}: {option.why}")
    if experiment is not None:
        lines.append("The experiment that proves it (run it with `harness drill experiment <id>`):")
        lines.append(textwrap.indent(textwrap.dedent(inspect.getsource(experiment)).rstrip(), "    "))
    return "\n".join(lines)
