"""Judges of lesson 11 (interview drills): each task's verdict is its drill's (`harness.checks.lesson11`).

A write or bughunt task is judged by the drill's own judge; an explain task by the bank's key and options, on the
letter or on an option copied as the notebook prints it.
"""

from __future__ import annotations

import re

from harness.contract.case import Case
from harness.contract.failure import fail
from harness.contract.registry import judges
from harness.drills.choices import LETTERS, Choices, letter_of
from harness.drills.core import get_drill
from harness.drills.lesson import NOTEBOOK_DRILLS, answer_name

_MARKED = re.compile(r"\(?([a-d])\)\s*(.*)", re.IGNORECASE | re.DOTALL)  # "(b) text" or "b) text"


def _plain(text: str) -> str:
    """`text` compared loosely: case, runs of white space and a final full stop ignored."""
    return " ".join(text.lower().split()).rstrip(".")


def _chosen_letter(answer: str, choices: Choices) -> str | None:
    """The letter `answer` chooses: a letter as `letter_of` reads it, or an option's text as the notebook prints
    it, after its "(b) " marker (whose letter must be that option's) or without it; None for anything else."""
    letter = letter_of(answer)
    if letter is not None:
        return letter
    text = answer.strip().removeprefix("-").strip()  # a line of the notebook's list: "- (b) ..."
    marked = _MARKED.fullmatch(text)
    texts = [_plain(option.text) for option in choices.options]
    if marked:
        letter = marked.group(1).lower()
        return letter if _plain(marked.group(2)) == texts[LETTERS.index(letter)] else None
    return LETTERS[texts.index(_plain(text))] if _plain(text) in texts else None


def _no_choice_cause(answer: object) -> str:
    """Why `answer` chooses no option, from what it is."""
    if not isinstance(answer, str):
        return f"the answer is {type(answer).__name__}, not a string: the starter's answer was not replaced"
    if _MARKED.fullmatch(answer.strip().removeprefix("-").strip()):
        return "the text after the letter is not that option's text: write the letter alone"
    return "more or less than one letter, and not an option's text"


def _judge_drill(task_id: str, drill_id: str) -> None:
    """Judge `task_id` with the drill's own judge."""

    def judge(seen: dict, *, case: Case) -> str:
        """The drill's judge."""
        return get_drill(drill_id).judge(seen, case=case)  # type: ignore[misc]

    judges(task_id)(judge)


def _judge_explain(task_id: str, drill_id: str) -> None:
    """Judge `task_id`'s answer variable as one of the bank's letters."""
    variable = answer_name(task_id)

    def judge(seen: dict, *, case: Case) -> str:
        """The bank's key and options, on the letter ("b", "B", "(b)" or "b)"; "ab" is no choice) or on an option
        copied as the notebook prints it ("(b) dropout stops dropping; ...", with or without its letter)."""
        choices = get_drill(drill_id).choices
        assert choices is not None  # an answered explain drill has them (Drill checks it)
        answer = seen.get("answer")
        letter = _chosen_letter(answer, choices) if isinstance(answer, str) else None
        if letter is None:
            fail("no-choice", observed=f"answer = {answer!r}"[:160],
                 expected=f"one letter: {', '.join(repr(c) for c in LETTERS)}",
                 cause=_no_choice_cause(answer), where=f"the line `{variable} = ...`")
        chosen = LETTERS.index(letter)
        if chosen != choices.key:
            fail("wrong-choice", observed=f"you chose {answer!r}: {choices.options[chosen].text}",
                 expected="another choice", cause=choices.options[chosen].why,
                 where="the experiment below the test cell, and what it prints")
        return choices.options[choices.key].why

    judges(task_id)(judge)


for _task_id, _drill_id in NOTEBOOK_DRILLS:
    (_judge_explain if get_drill(_drill_id).kind == "explain" else _judge_drill)(_task_id, _drill_id)
