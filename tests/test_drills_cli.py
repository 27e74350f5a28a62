"""`harness drill` end to end, in real subprocesses with scripted input."""

import json
import os
import subprocess
import sys

import pytest

from harness.drills import get_drill


@pytest.fixture
def run(tmp_path):
    env = {**os.environ, "HARNESS_HOME": str(tmp_path / "home")}
    env.pop("EDITOR", None)

    def run(*args, stdin=""):
        return subprocess.run([sys.executable, "-m", "harness", "drill", *args], input=stdin, capture_output=True,
                              text=True, env=env, timeout=300)

    run.home = tmp_path / "home" / "drills"
    return run


def test_list_filters_by_topic_and_difficulty(run):
    out = run("list", "--topic", "tensors", "--difficulty", "1").stdout
    assert "tensors-pairwise-distances" in out
    assert "tensors-logsumexp" not in out  # difficulty 2
    assert "loop-train-step" not in out


@pytest.mark.slow
def test_start_check_wrong_then_right_hint_solution_and_stats(run):
    drill = get_drill("loop-train-step")
    started = run("start", drill.id)
    assert started.returncode == 0 and drill.prompt[:40] in started.stdout
    answer = run.home / "answers" / "loop_train_step.py"
    assert answer.read_text() == drill.starter

    answer.write_text(drill.wrong_answers[0])
    wrong = run("check", drill.id)
    assert wrong.returncode == 1 and "missing-zero-grad" in wrong.stdout

    assert "Hint 1/2" in run("hint", drill.id).stdout
    assert "Hint 2/2" in run("hint", drill.id).stdout

    answer.write_text(drill.solution)
    right = run("check", drill.id)
    assert right.returncode == 0 and right.stdout.startswith("PASSED")

    progress = json.loads((run.home / "progress.json").read_text())[drill.id]
    assert (progress["attempts"], progress["passes"], progress["box"]) == (2, 1, 1)
    stats = run("stats").stdout
    assert "1 attempted, 1 passed at least once" in stats

    assert drill.solution in run("solution", drill.id).stdout
    assert json.loads((run.home / "progress.json").read_text())[drill.id]["box"] == 0  # revealed: comes back
    assert drill.id in run("list", "--due").stdout


def test_failed_drill_is_due_again_today_and_comes_first_in_daily(run):
    drill = get_drill("tensors-broadcast-shape")
    run("start", drill.id)
    (run.home / "answers" / "tensors_broadcast_shape.py").write_text('answer = "a"\n')
    assert run("check", drill.id).returncode == 1
    assert run("daily", "--count", "3").stdout.splitlines()[0].startswith(drill.id)


def test_timed_mock_interview_with_scripted_input(run):
    out = run("mock", "--count", "2", "--seed", "0", "--topic", "tensors", stdin="hint\nskip\nquit\n").stdout
    assert "Mock interview: 2 drills in 30 minutes" in out and "Hint 1/2" in out and "Mock result: 0/2" in out
    timed_out = run("mock", "--count", "2", "--minutes", "0", stdin="check\n").stdout
    assert "Time is up." in timed_out


def test_an_infinite_loop_answer_times_out_without_hanging(run, tmp_path):
    from harness.drills.cli import check_answer

    loop = tmp_path / "loop.py"
    loop.write_text("while True:\n    pass\n")
    result = check_answer(get_drill("tensors-logsumexp"), loop, timeout_s=5)
    assert result == {"passed": False, "code": "timeout",
                      "message": "your answer ran longer than 5 s (an infinite loop?)"}


def test_explain_drill_experiment_runs(run):
    assert "accumulate" in run("experiment", "loop-forget-zero-grad").stdout
