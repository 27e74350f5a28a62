"""Hints as policy (issue 38, item 2): the solution lines stay with the instructor, the course file releases them, a
graded kernel never shows one, and the hints a student asked for are on record."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from harness.checks import core
from harness.contract import registry
from harness.contract.registry import registered
from harness.grading import sandbox
from harness.grading.late import CourseFileError, read_course
from harness.grading.layout import REPO_ROOT, discover_assignments, graded_tasks
from harness.grading.solution_hints import (
    lesson_judges,
    released,
    released_lines,
    strip_solution_lines,
)

DUE = datetime(2026, 3, 2, 23, 59, tzinfo=UTC)


def _course(tmp_path: Path, hints: str | None, extension: str = "") -> object:
    line = f'solution_hints = "{hints}"\n' if hints else ""
    path = tmp_path / "course.toml"
    path.write_text(f"[assignments.04_training_loop]\ndue = {DUE.isoformat()}\n{line}{extension}")
    return read_course(path)


@pytest.mark.parametrize(("hints", "now", "expected"), [
    (None, DUE - timedelta(hours=1), False), (None, DUE + timedelta(hours=1), True),
    ("after_due", DUE + timedelta(hours=1), True), ("always", DUE - timedelta(days=9), True),
    ("never", DUE + timedelta(days=90), False),
])
def test_the_course_file_says_when_solution_lines_are_released(tmp_path, hints, now, expected):
    assert released("04_training_loop", _course(tmp_path, hints), now) is expected
    assert released("04_training_loop", _course(tmp_path, hints), now, practice=True)


def test_an_extension_keeps_them_until_the_last_due_date_and_no_date_keeps_them(tmp_path):
    course = _course(tmp_path, None, "[assignments.04_training_loop.extensions]\n\"1002\" = 2\n")
    assert not released("04_training_loop", course, DUE + timedelta(days=1))
    assert released("04_training_loop", course, DUE + timedelta(days=3))
    assert not released("05_optimizers", course, DUE + timedelta(days=300))


def test_an_unknown_policy_is_refused_with_the_choices(tmp_path):
    with pytest.raises(CourseFileError, match="solution_hints = 'later'.*'after_due', 'always', 'never'"):
        _course(tmp_path, "later")


def test_released_lines_are_the_registered_ones_of_released_assignments_only(tmp_path):
    lines = released_lines(["00_welcome", "04_training_loop"], _course(tmp_path, "always"), DUE)
    assert set(lines) == set(graded_tasks(REPO_ROOT / "solutions" / "04_training_loop"))
    assert all(text and text == registered()[task].hints.solution for task, text in lines.items())


def test_a_practice_release_carries_every_line_and_a_graded_one_none(tmp_path):
    course = _course(tmp_path, None)
    assert released_lines(["04_training_loop"], course, DUE - timedelta(days=1)) == {}
    assert set(released_lines(["04_training_loop"], course, DUE - timedelta(days=1), practice=True)) \
        == set(graded_tasks(REPO_ROOT / "solutions" / "04_training_loop"))


def test_every_lesson_judge_file_is_stripped_of_its_solution_lines():
    """Each lesson's judges, as the student tree writes them: still valid Python, no registered solution line left,
    and the rest of each file unchanged."""
    for assignment in discover_assignments():
        for task in graded_tasks(REPO_ROOT / "solutions" / assignment):
            core.get(task)
    solutions = {entry.hints.solution for entry in registered().values() if entry.hints and entry.hints.solution}
    assert len(solutions) > 80
    judges = lesson_judges(REPO_ROOT / "harness")
    assert len(judges) > 80 and {path.parent.name for path in judges} >= {"judges", "lesson04", "lesson16"}
    for path in judges:
        source = path.read_text(encoding="utf-8")
        stripped = strip_solution_lines(source)
        ast.parse(stripped)
        assert not [s for s in solutions if s in stripped], path
        assert stripped.replace('solution=""', "") == _without_solution_values(source), path


def _without_solution_values(source: str) -> str:
    """`source` with each `solution=<literal>` keyword removed, by ast (the reference for the stripping)."""
    tree = ast.parse(source)
    values = [k.value for node in ast.walk(tree) if isinstance(node, ast.Call) for k in node.keywords
              if k.arg == "solution" and isinstance(k.value, ast.Constant)]
    lines = source.splitlines(keepends=True)
    for value in sorted(values, key=lambda v: (v.lineno, v.col_offset), reverse=True):
        first, last = value.lineno - 1, value.end_lineno - 1
        keyword_start = lines[first].rindex("solution=", 0, value.col_offset)
        lines[first:last + 1] = [lines[first][:keyword_start] + lines[last][value.end_col_offset:]]
    return "".join(lines)


def test_hint_3_shows_a_released_line_or_says_who_releases_it(monkeypatch, tmp_path, capsys):
    entry = core.get("04-fit", judged=False)
    released_file = tmp_path / "released_hints.json"
    monkeypatch.setattr(core, "RELEASED", released_file)
    monkeypatch.setitem(registry._REGISTRY, "04-fit", replace(entry, hints=replace(entry.hints, solution="")))
    core.hint("04-fit", 3)
    assert "withheld: your instructor releases it after the due date" in capsys.readouterr().out
    released_file.write_text('{"04-fit": "the released line"}')
    core.hint("04-fit", 3)
    assert "Hint 3/3 for 04-fit: the released line" in capsys.readouterr().out


def test_a_graded_kernel_shows_no_hint_even_the_instructors_in_one_line_on_stdout(monkeypatch, capsys):
    """The judges declare the hints and a graded kernel holds none: `hint()` there says where hints show, on stdout
    (any stderr in a graded cell scores it 0), and no "Hint N/3" line that would count as a hint used."""
    monkeypatch.setattr(core, "graded_outside", True)
    for level in (None, 1, 3):
        core.hint("04-fit", level)
    out = capsys.readouterr()
    assert out.out.splitlines() == ["(the hints of 04-fit show in your own notebook, not while grading)"] * 3
    assert out.err == "" and core.get("04-fit").hints.solution not in out.out


@pytest.mark.skipif(sandbox.unavailable_reason() is not None, reason="bubblewrap cannot run here")
def test_a_graded_kernels_sandbox_holds_no_solution_line_and_its_probes_still_run(tmp_path):
    """The sandbox hides the judge side, where the hints live: no registered solution line is in any file a kernel
    can read (the drill bank's answers aside, issue 38 item 1), its checks hold no hints, a probe still runs and
    `hint()` says where hints show."""
    for assignment in discover_assignments():
        for task in graded_tasks(REPO_ROOT / "solutions" / assignment):
            core.get(task)
    lines = sorted({e.hints.solution for t, e in registered().items() if e.hints and e.hints.solution
                    and t[:2] != "11"})
    assert len(lines) > 70
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    spec = sandbox.Spec(memory_mb=0, threads=1, sandboxed=True, runtime_dir=str(runtime),
                        data_dir=str(tmp_path / "data"))
    code = ("import json, sys\nfrom pathlib import Path\nfrom harness.contract.registry import get\n"
            "from harness.checks import core\nfrom harness.contract.case import Case\n"
            f"harness = Path({str(sandbox.REPO_ROOT / 'harness')!r})\n"
            "texts = {p: p.read_text(errors='replace') for p in harness.rglob('*') if p.is_file()}\n"
            "print(sorted({str(p) for s in json.load(sys.stdin) for p, t in texts.items() if s in t}))\n"
            "entry = get('00-accuracy', judged=False)\nprint(entry.hints, entry.requires, entry.judge)\n"
            "print(sorted(entry.probe(lambda logits, labels: 0.5, case=Case(hidden=False))))\n"
            "core.graded_outside = True\ncore.hint('00-accuracy')\n")
    done = subprocess.run(sandbox.bwrap_command(spec, [sys.executable, "-c", code]), capture_output=True, text=True,
                          timeout=120, input=json.dumps(lines))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:2] == ["[]", "None None None"], done.stdout
    assert done.stdout.splitlines()[3:] == ["(the hints of 00-accuracy show in your own notebook, not while grading)"]
