"""`benchmarks/exercise_lines.py`, the hand-written lines per exercise (issue 42 item 6): its rule on a scratch
lesson whose every line is known, and its figures on this repository, for every task the registry registers."""

import importlib.util
import json
import statistics
import sys
from pathlib import Path

import pytest

from tests import exercises

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "exercise_lines.py"


def _load():
    spec = importlib.util.spec_from_file_location("exercise_lines", SCRIPT)
    module = sys.modules["exercise_lines"] = importlib.util.module_from_spec(spec)  # dataclasses look it up there
    spec.loader.exec_module(module)
    return module


lines = _load()

# A scratch lesson 99: two tasks sharing a common function; alpha also has a judge module, whose table
# and helper are its own. Line counts are in the comments (non-blank lines).
SCRATCH = {
    "harness/drills/lesson.py": "NOTEBOOK_DRILLS: tuple[tuple[str, str], ...] = ()\n",
    "harness/checks/lesson99/__init__.py":  # header 2
        '"""Lesson 99."""\n\nfrom harness.checks.lesson99 import alpha, beta  # noqa: F401\n',
    "harness/checks/lesson99/common.py":  # header 2, shared 4 (a comment, def, docstring, return)
        '"""Common."""\n\nimport torch\n\n\n# the case\'s inputs\ndef inputs(case):\n'
        '    """Inputs."""\n    return torch.ones(3)\n',
    "harness/checks/lesson99/alpha.py":  # header 2, probe 3
        "from harness.checks.lesson99.common import inputs\nfrom harness.contract.registry import register\n\n\n"
        '@register("99-alpha")\ndef probe(f, *, case):\n    return {"y": f(inputs(case))}\n',
    "harness/checks/lesson99/beta.py":  # header 1, probe 3
        "from harness.checks.lesson99 import common\n\n\n"
        '@register("99-beta")\ndef probe(f, *, case):\n    return {"y": f(common.inputs(case))}\n',
    "harness/judges/lesson99/alpha.py":  # header 1, judge 2 (the helper) + 3 (the judge)
        "from harness.contract.registry import judges\n\n\ndef _helper(seen):\n    return seen\n\n\n"
        '@judges("99-alpha")\ndef judge(seen, *, case):\n    return _helper(seen)\n',
    "tests/checks/test_lesson99.py":  # header 1; alpha: 2 (wrong) + 2 (its mistake, with its comment); beta: 1;
        # the list's first and last lines and the behavioural test (2) in no task
        "from harness.checks.testing import Mistake\n\n\ndef wrong(x):\n    return -x\n\n\nMISTAKES = [\n"
        '    # 99-alpha\n    Mistake("99-alpha", "wrong", "sign", (wrong,)),\n'
        '    Mistake("99-beta", "wrong", "sign", (abs,)),\n]\n\n\ndef test_behaviour():\n    assert wrong(1) == -1\n',
}
NOTEBOOK = [  # alpha's text: the heading and 1 line, then its solution cell (2); beta's: 1 + 1
    ("markdown", None, "## 1. A section (not counted)\n\n### Exercise 1 — `a` (`99-alpha`, 1 point)\n\nWrite a."),
    ("code", "99-alpha-code", "def a(x):\n    return x"),
    ("code", "99-alpha", 'check("99-alpha", a)'),
    ("markdown", None, "### Exercise 2 — `b` (`99-beta`, 1 point)"),
    ("code", "99-beta-code", "b = abs"),
    ("code", "99-beta", 'check("99-beta", b)'),
]


def _scratch(root: Path, files: dict[str, str]) -> Path:
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    cells = [{"cell_type": kind, "source": source, "metadata": {"nbgrader": {"grade_id": grade_id}} if grade_id else {}}
             for kind, grade_id, source in NOTEBOOK]
    (root / "solutions/99_scratch").mkdir(parents=True, exist_ok=True)
    (root / "solutions/99_scratch/99_scratch.ipynb").write_text(json.dumps({"cells": cells}))
    return root


def test_each_unit_is_charged_to_the_tasks_that_reach_it_and_shared_ones_are_divided(tmp_path):
    counted = lines.count(_scratch(tmp_path, SCRATCH))
    assert list(counted.shares) == ["99-alpha", "99-beta"]
    alpha, beta = counted.parts("99-alpha"), counted.parts("99-beta")
    # common.inputs (4) reached by both, through a name and through the module: 2 each
    assert alpha["probe"] == 3 + 2 and beta["probe"] == 3 + 2
    assert alpha["judge"] == 5 and beta["judge"] == 0
    assert alpha["tests"] == 4 and beta["tests"] == 1
    assert alpha["text"] == 4 and beta["text"] == 2
    # headers: __init__ 2 (the lesson's: 1 each), common 2 (1 each), the task's own modules, the tests' 1 (0.5 each)
    assert alpha["headers"] == 1 + 1 + 2 + 1 + 0.5 and beta["headers"] == 1 + 1 + 1 + 0.5
    assert alpha["shared"] == 2 + 1 + 1 + 0.5
    assert counted.apart == {"99": 4}
    # every non-blank line of the lesson's modules is in a task or apart
    written = sum(1 for path, text in SCRATCH.items() if "99" in path for line in text.splitlines() if line.strip())
    charged = sum(counted.parts(task)[part] for task in counted.shares for part in ("probe", "judge", "tests",
                                                                                    "headers"))
    assert charged + sum(counted.apart.values()) == written


def test_a_scratch_task_changes_the_count_as_the_rule_says(tmp_path):
    before = lines.count(_scratch(tmp_path / "before", SCRATCH))
    gamma = {"harness/checks/lesson99/gamma.py":  # a third task on the common function, with a 2-line helper
             "from harness.checks.lesson99.common import inputs\n\n\ndef _twice(x):\n    return 2 * x\n\n\n"
             '@register("99-gamma")\ndef probe(f, *, case):\n    return {"y": _twice(f(inputs(case)))}\n'}
    after = lines.count(_scratch(tmp_path / "after", {**SCRATCH, **gamma}))
    assert list(after.shares) == ["99-alpha", "99-beta", "99-gamma"]
    assert after.parts("99-gamma")["probe"] == 2 + 3 + 4 / 3  # its helper, its probe, a third of the common one
    assert after.parts("99-alpha")["probe"] == before.parts("99-alpha")["probe"] - 2 + 4 / 3
    assert after.parts("99-gamma")["text"] == 0  # no exercise in the notebook yet
    # the headers of the lesson's __init__ and of common (2 lines each) are now divided by three
    assert after.parts("99-beta")["headers"] == pytest.approx(before.parts("99-beta")["headers"] - 2 * (1 - 2 / 3))


def test_a_tasks_lines_are_also_given_by_kind_the_words_a_student_reads_apart(tmp_path):
    judge = ("from harness.contract.registry import judges\n\n\n"  # header 1
             '@judges("99-alpha")\ndef judge(seen, *, case):\n    if not seen:\n'  # code 3
             '        fail("wrong",\n             observed="nothing",\n             expected="something")\n'  # words 3
             "    return seen\n")  # code 1
    counted = lines.count(_scratch(tmp_path, {**SCRATCH, "harness/judges/lesson99/alpha.py": judge}))
    alpha = counted.parts("99-alpha")
    assert alpha["judge"] == 7 and alpha["words"] == 3
    assert alpha["code"] == 5 + 4  # the probe's (with its half of common) and the judge's but its words
    assert alpha["records"] == 2 and alpha["answers"] == 2  # its Mistake (with its comment) and `wrong`
    assert lines.kept_lines(alpha) == 3 + 2 + 4  # words, records, text
    assert sum(alpha[kind] for kind in (*lines.KINDS, "text", "headers")) == lines.total(alpha)
    printed = lines.report(counted)
    # the medians of alpha and beta (3 and 0, 2 and 1, 4 and 2, 2 and 0, 9 and 5, 5.5 and 3.5), half to even
    assert "median by kind over all tasks: words 2, records 2, text 3, answers 1, code 7, headers 4" in printed
    # alpha keeps 9 and beta 1 + 2 (its record, its text): median 6; the rest: alpha 16.5, beta 8.5
    assert "median of what issue 42 keeps as it is (words, records, text): 6; of the rest " \
           "(answers, code and headers): 12" in printed
    assert "the median task must lose 0% of the rest; over 200 on what is kept alone: 0 tasks, with their " \
           "answers: 0" in printed  # both are under 200 already


def test_on_this_repository_every_registered_task_is_counted_and_the_median_is_the_tables():
    counted = lines.count(ROOT)
    registered = exercises.tasks()
    assert sorted(counted.shares) == registered, (
        f"benchmarks/exercise_lines.py parses other tasks than the registry registers: it misses "
        f"{sorted(set(registered) - set(counted.shares))} and adds {sorted(set(counted.shares) - set(registered))}; "
        "teach its find_tasks how these are registered")
    for task in counted.shares:
        parts = counted.parts(task)
        assert parts["probe"] > 0 and parts["judge"] > 0 and parts["tests"] > 0, (
            f"{task}: no lines found in a part ({parts}): where do its probe, judge or mistakes live now?")
        assert (parts["text"] > 0) == (task not in counted.drill_backed), (
            f"{task}: exercise text {parts['text']}: a lesson task's heading and solution cell are in its solution "
            "notebook, a drill-backed task's in the bank")
    printed = lines.report(counted)
    median = statistics.median(lines.total(counted.parts(task)) for task in counted.shares)
    assert f"median lines per exercise, all tasks ({len(counted.shares)}): {median:.0f}\n" in printed
    assert all(f"| {task}" in printed for task in counted.shares)


def test_the_command_prints_the_table_and_one_tasks_units(tmp_path, capsys):
    root = str(_scratch(tmp_path, SCRATCH))
    assert lines.main(["--root", root]) == 0
    printed = capsys.readouterr().out
    # alpha: 5.5 headers, 23.5 in all, 4.5 shared; beta 11.5; shown rounded (half to even)
    assert "| 99-alpha | 5 | 5 | 4 | 4 | 6 | 24 | 4 |" in printed
    assert "median lines per exercise, all tasks (2): 18\n" in printed  # (23.5 + 11.5) / 2
    assert lines.main(["--root", root, "--task", "99-beta"]) == 0
    printed = capsys.readouterr().out
    assert "| harness/checks/lesson99/common.py:4 | probe | 4 | 1/2 | 2.0 |" in printed and "total: 12" in printed
    with pytest.raises(SystemExit):
        lines.main(["--root", root, "--task", "99-gamma"])
    assert "no task '99-gamma': the tasks are 99-alpha, 99-beta" in capsys.readouterr().err
