"""Every exercise of every lesson has a requirement table with its judge, every requirement a planted bug,
every exercise at least five plausible mistakes, and hints that follow each failure (issue 19).

Reads the registry and each lesson's MISTAKES and CORRECT lists (tests/checks/test_lessonNN.py) without running
them: tests/checks/test_every_exercise.py runs them.
"""

from __future__ import annotations

import re
from collections import Counter

import nbformat
import pytest

from harness.checks.testing import Correct, Mistake
from harness.contract import registry
from harness.contract.failure import Hints, Requirement
from harness.grading.layout import REPO_ROOT, graded_tasks
from tests.exercises import ASSIGNMENTS, correct_variants, lesson_tests, mistakes, tasks

# Lessons 07 on were audited with three correct variants per exercise (issue 29); 00-06 have one or two each
THREE_VARIANTS_FROM = "07"
GENERIC_CODES = {"raised"}  # the student's code raised: no requirement of its own, every exercise has it


def headings(assignment: str) -> set[str]:
    """The markdown headings of the assignment's solution notebook, without their #."""
    found = set()
    for path in (REPO_ROOT / "solutions" / assignment).glob("*.ipynb"):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "markdown":
                found |= {m.group(1).strip() for m in re.finditer(r"^#+\s+(.*)$", cell.source, re.MULTILINE)}
    return found


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_exercise_has_a_requirement_table_and_hints_that_follow_it(assignment):
    problems = []
    sections = headings(assignment)
    for task in graded_tasks(REPO_ROOT / "solutions" / assignment):
        entry = registry.get(task)
        if not entry.requires:
            problems.append(f"{task}: no requirement table (judges(..., requires={{code: Requirement(...)}}))")
        if entry.hints.section not in sections:
            problems.append(f"{task}: Hints.section {entry.hints.section!r} is not a heading of the lesson")
        for code, requirement in entry.requires.items():
            if not requirement.states.strip() or not requirement.hint.strip():
                problems.append(f"{task}: requirement {code!r} needs its text and its hint")
            if entry.hints.solution.strip() and entry.hints.solution.strip() in requirement.hint:
                problems.append(f"{task}: the hint after [{code}] gives the solution line away")
    assert not problems, "\n".join(problems)


def mistake_problems(tasks: list[str], mistakes: list[Mistake], correct: list[Correct], variants: int = 1) -> list[str]:
    """What the mutation set of `tasks` lacks: five mistakes per task, a planted bug per requirement, the one
    mistake per task marked planted (the pipeline test plants it in the notebook), `variants` correct variants per
    task, and no mistake expecting a code outside its task's table."""
    per_task = Counter(m.task for m in mistakes)
    written = Counter(c.task for c in correct)
    problems = [f"{m}: not a task of this lesson" for m in [*mistakes, *correct] if m.task not in tasks]
    for task in tasks:
        requires = registry.get(task).requires
        if per_task[task] < 5:
            problems.append(f"{task}: {per_task[task]} planted mistakes in MISTAKES, at least 5 wanted")
        covered = {m.code for m in mistakes if m.task == task}
        problems += [f"{task}: requirement [{code}] has no planted bug" for code in requires if code not in covered]
        problems += [f"{task}: a mistake expects [{code}], which is not in its requirement table"
                     for code in sorted(covered - set(requires) - GENERIC_CODES)]
        if not any(m.planted for m in mistakes if m.task == task):
            problems.append(f"{task}: no mistake marked planted=True (its solution cell, which the pipeline test "
                            "plants in the notebook)")
        if not written[task]:
            problems.append(f"{task}: no correct variant in CORRECT")
        elif written[task] < variants:
            problems.append(f"{task}: {written[task]} correct variants in CORRECT, at least {variants} wanted "
                            "(written in other styles than the solution)")
    return problems


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_requirement_has_a_planted_bug_and_every_exercise_five(assignment):
    module = lesson_tests(assignment)
    problems = mistake_problems(graded_tasks(REPO_ROOT / "solutions" / assignment),
                                getattr(module, "MISTAKES", []), getattr(module, "CORRECT", []),
                                variants=3 if assignment >= THREE_VARIANTS_FROM else 1)
    assert not problems, "\n".join(problems)


def test_the_runner_runs_every_listed_mistake_and_correct_variant():
    """Every entry of every lesson's lists is run by tests/checks/test_every_exercise.py, which finds them through
    the registry's tasks (a list nobody runs proves nothing)."""
    listed = {id(case) for assignment in ASSIGNMENTS for name in ("MISTAKES", "CORRECT")
              for case in getattr(lesson_tests(assignment), name, [])}
    run = {id(case) for task in tasks() for case in [*mistakes(task), *correct_variants(task)]}
    assert listed == run, f"{len(listed - run)} listed mistakes or variants of no registered task"


def test_the_guards_of_this_test_can_fail():
    """A requirement no mistake plants, too few mistakes, a code outside the table, no correct variant: each
    reported."""
    registry.register("98-toy")(lambda f, *, case: {})
    registry.judges("98-toy", hints=Hints("n", "c", "s", section="1. Toy"),
                    requires={"wrong-value": Requirement("doubles", "Multiply, do not add."),
                              "not-an-int": Requirement("returns an int", "What type does * give?")},
                    )(lambda seen, *, case: "")
    try:
        mistakes = [Mistake("98-toy", "wrong-value", "", (), f"story {i}") for i in range(4)]
        mistakes.append(Mistake("98-toy", "made-up", "", (), "a code the table lacks"))
        problems = mistake_problems(["98-toy"], mistakes, [])
        assert problems == ["98-toy: requirement [not-an-int] has no planted bug",
                            "98-toy: a mistake expects [made-up], which is not in its requirement table",
                            "98-toy: no mistake marked planted=True (its solution cell, which the pipeline test "
                            "plants in the notebook)",
                            "98-toy: no correct variant in CORRECT"]
        assert "4 planted" in "\n".join(mistake_problems(["98-toy"], mistakes[:4], [])), "too few is reported"
        one = [Correct("98-toy", (), "one variant")]
        assert "1 correct variants in CORRECT, at least 3" in "\n".join(mistake_problems(["98-toy"], [], one, 3))
        with pytest.raises(TypeError, match="Requirement"):
            registry.judges("98-other", hints=Hints("n", "c", "s", section="x"), requires={})
    finally:
        registry._REGISTRY.pop("98-toy", None)
