"""Declare where you decide (issue 42 item 1): the probe side registers only its instrument; what a task enforces
(requirement table, hints, non-finite and unjudged leaves) is declared by its judge, in the file that raises the
codes. Read by parsing the sources, not importing them: a module that never runs still counts."""

from __future__ import annotations

import ast
from pathlib import Path

from harness.grading.layout import REPO_ROOT

CHECKS = REPO_ROOT / "harness" / "checks"
JUDGE_SIDE = ("hints", "requires", "nonfinite", "unjudged")


def judge_side_arguments(source: str) -> list[tuple[int, str]]:
    """(line, keyword) of every argument a `register(...)` call in `source` passes that the judge declares."""
    return [(node.lineno, keyword.arg) for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
            and ast.unparse(node.func).split(".")[-1] == "register" for keyword in node.keywords
            if keyword.arg in JUDGE_SIDE]


def solution_lines(source: str) -> list[int]:
    """The lines of `source` where a call passes `solution=` (a level-3 hint, an answer)."""
    return [keyword.value.lineno for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
            for keyword in node.keywords if keyword.arg == "solution"]


def _probe_modules() -> list[Path]:
    return sorted(path for path in CHECKS.rglob("*.py") if "__pycache__" not in path.parts)


def test_no_probe_registers_what_its_judge_enforces():
    found = [f"{path.relative_to(REPO_ROOT)}:{line}: register(..., {keyword}=...)" for path in _probe_modules()
             for line, keyword in judge_side_arguments(path.read_text(encoding="utf-8"))]
    assert not found, ("a probe registers what its judge enforces; move it to the judge's "
                       "@judges(task, hints=..., requires=..., nonfinite=..., unjudged=...):\n" + "\n".join(found))


def test_no_probe_module_holds_a_solution_line():
    """A graded kernel reads harness/checks as it is (no copy without the solution lines is bound over it)."""
    found = [f"{path.relative_to(REPO_ROOT)}:{line}" for path in _probe_modules()
             for line in solution_lines(path.read_text(encoding="utf-8"))]
    assert not found, "a probe module holds a `solution=` (a level-3 hint belongs to the judge's Hints):\n" + \
        "\n".join(found)


def test_the_scans_find_a_planted_declaration_and_pass_the_new_shape():
    planted = ('@register("99-x", hints=Hints("a", "b", solution="return 2 * x", section="1."),\n'
               '          requires={"w": Requirement("a", "b")})\ndef probe(f, *, case): ...\n'
               'checks.register("99-y", unjudged=("x",))(probe)\n')
    assert judge_side_arguments(planted) == [(1, "hints"), (1, "requires"), (4, "unjudged")]
    assert solution_lines(planted) == [1]
    shaped = ('@register("99-x", inputs_as_data=build)\ndef probe(f, *, case): ...\n'
              '@judges("99-x", hints=Hints("a", "b", solution="return 2 * x", section="1."), nonfinite=("v",),\n'
              '        requires={"w": Requirement("a", "b")})\ndef judge(seen, *, case): ...\n')
    assert judge_side_arguments(shaped) == []
