"""Every exercise of every lesson has a requirement table next to its check, every requirement a planted bug,
every exercise at least five plausible mistakes, and hints that follow each failure (issue 19).

Reads the registry and each lesson's MISTAKES and CORRECT lists (tests/checks/test_lessonNN.py) without running
them: the lesson's own test file runs them.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from collections import Counter
from pathlib import Path

import nbformat
import pytest

from harness.checks.testing import Correct, Mistake
from harness.contract import registry
from harness.contract.failure import Hints, Requirement
from harness.grading.layout import REPO_ROOT, discover_assignments, graded_tasks

ASSIGNMENTS = discover_assignments()
# Lessons 07 on were audited with three correct variants per exercise (issue 29); 00-06 have one or two each
THREE_VARIANTS_FROM = "07"
GENERIC_CODES = {"raised"}  # the student's code raised: no requirement of its own, every exercise has it


def lesson_tests(assignment: str):
    """tests/checks/test_lessonNN.py of `assignment`, imported (defining its mistakes runs nothing).

    The module pytest collected is reused (under the name pytest gives it), so that what it caches, as lesson
    10's trained run, is made once per process.
    """
    path = REPO_ROOT / "tests" / "checks" / f"test_lesson{assignment[:2]}.py"
    loaded = sys.modules.get(path.stem)
    if loaded is not None and Path(getattr(loaded, "__file__", "")).resolve() == path.resolve():
        return loaded
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and pickling look a class's module up there
    spec.loader.exec_module(module)
    return module


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
            problems.append(f"{task}: no requirement table (register(..., requires={{code: Requirement(...)}}))")
        if entry.hints.section not in sections:
            problems.append(f"{task}: Hints.section {entry.hints.section!r} is not a heading of the lesson")
        for code, requirement in entry.requires.items():
            if not requirement.states.strip() or not requirement.hint.strip():
                problems.append(f"{task}: requirement {code!r} needs its text and its hint")
            if entry.hints.solution.strip() and entry.hints.solution.strip() in requirement.hint:
                problems.append(f"{task}: the hint after [{code}] gives the solution line away")
    assert not problems, "\n".join(problems)


def mistake_problems(tasks: list[str], mistakes: list[Mistake], correct: list[Correct], variants: int = 1) -> list[str]:
    """What the mutation set of `tasks` lacks: five mistakes per task, a planted bug per requirement, `variants`
    correct variants per task, and no mistake expecting a code outside its task's table."""
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


def test_the_lesson_tests_run_their_mistakes_and_correct_variants():
    """Each lesson's test file runs every entry of its lists (a list nobody runs proves nothing)."""
    for assignment in ASSIGNMENTS:
        source = (REPO_ROOT / "tests" / "checks" / f"test_lesson{assignment[:2]}.py").read_text()
        assert "assert_mistake(" in source and "assert_correct(" in source, assignment
        assert re.search(r"parametrize\(\s*\"mistake\",\s*MISTAKES", source), assignment
        assert re.search(r"parametrize\(\s*\"correct\",\s*CORRECT", source), assignment


def test_the_guards_of_this_test_can_fail():
    """A requirement no mistake plants, too few mistakes, a code outside the table, no correct variant: each
    reported."""
    registry.register("98-toy", hints=Hints("n", "c", "s", section="1. Toy"),
                  requires={"wrong-value": Requirement("doubles", "Multiply, do not add."),
                            "not-an-int": Requirement("returns an int", "What type does * give?")},
                  )(lambda f, *, case: {})
    registry.judges("98-toy")(lambda seen, *, case: "")
    try:
        mistakes = [Mistake("98-toy", "wrong-value", "", (), f"story {i}") for i in range(4)]
        mistakes.append(Mistake("98-toy", "made-up", "", (), "a code the table lacks"))
        problems = mistake_problems(["98-toy"], mistakes, [])
        assert problems == ["98-toy: requirement [not-an-int] has no planted bug",
                            "98-toy: a mistake expects [made-up], which is not in its requirement table",
                            "98-toy: no correct variant in CORRECT"]
        assert "4 planted" in "\n".join(mistake_problems(["98-toy"], mistakes[:4], [])), "too few is reported"
        one = [Correct("98-toy", (), "one variant")]
        assert "1 correct variants in CORRECT, at least 3" in "\n".join(mistake_problems(["98-toy"], [], one, 3))
        with pytest.raises(TypeError, match="Requirement"):
            registry.register("98-other", hints=Hints("n", "c", "s", section="x"), requires={})
    finally:
        registry._REGISTRY.pop("98-toy", None)
