"""`harness drill` end to end, in real subprocesses with scripted input, through the real warm checker."""

import json
import os
import re
import subprocess
import sys

import pytest

from harness.drills import get_drill


@pytest.fixture
def run(tmp_path):
    env = {**os.environ, "HARNESS_HOME": str(tmp_path / "home"), "COLUMNS": "80"}
    env.pop("EDITOR", None)
    env.pop("XDG_RUNTIME_DIR", None)
    env.pop("HARNESS_DRILL_CHECKER", None)

    def run(*args, stdin=""):
        return subprocess.run([sys.executable, "-m", "harness", "drill", *args], input=stdin, capture_output=True,
                              text=True, env=env, timeout=300)

    run.home = tmp_path / "home" / "drills"
    run.env = env
    yield run
    run("stop-checker")


GLOO_NOISE = ("[W1129 04:22:14.406703018 socket.cpp:207] [c10d] The hostname of the client socket cannot be "
              "retrieved. err=-3")


def _record(run, drill_id):
    return json.loads((run.home / "progress.json").read_text())["records"][drill_id]


def test_list_filters_by_topic_and_difficulty(run):
    out = run("list", "--topic", "tensors", "--difficulty", "1").stdout
    assert "tensors-pairwise-distances" in out
    assert "tensors-logsumexp" not in out  # difficulty 2
    assert "loop-train-step" not in out
    assert run("list", "--topic", "export").stdout.count("\n") >= 8


def test_start_check_wrong_then_right_hint_solution_and_stats(run):
    drill = get_drill("loop-train-step")
    started = run("start", drill.id)
    assert started.returncode == 0 and drill.prompt[:40] in started.stdout
    answer = run.home / "answers" / "loop_train_step.py"
    assert answer.read_text() == drill.starter

    source, code = drill.wrong_answers[0]
    answer.write_text(source + f"\nimport sys\nprint(('x' * 99 + '\\n') * 53_000, end='')\nsys.stdout.flush()\n"
                      f"print({GLOO_NOISE!r}, file=sys.stderr)\nprint('PASSED: trust me')\n")  # 5 MiB, noise
    wrong = run("check", drill.id)
    assert wrong.returncode == 1 and f"[{code}]" in wrong.stdout and wrong.stdout.startswith("NOT YET")
    printed = wrong.stdout.split("Your answer printed (never part of the verdict):\n")[1]
    assert printed.startswith("(the first ") and printed.endswith("xxx\nPASSED: trust me\n"), printed[-300:]
    assert len(printed) < 70_000 and "c10d" not in printed  # the last 64 KiB, cut at 80 columns; no noise
    assert max(map(len, wrong.stdout.splitlines())) <= 80

    assert "Hint 1/2" in run("hint", drill.id).stdout
    answer.write_text(drill.solution)
    right = run("check", drill.id)
    assert right.returncode == 0 and right.stdout.startswith("PASSED")
    assert run("check", drill.id).returncode == 0  # checked again the same day: graded once
    record = _record(run, drill.id)
    assert (record["attempts"], record["passes"], record["box"]) == (3, 2, 0)  # the hint kept it in box 0

    stats = run("stats").stdout
    assert "1 attempted, 1 passed at least once" in stats and "Hints seen: 1" in stats
    assert drill.solution in run("solution", drill.id).stdout
    assert _record(run, drill.id)["revealed"] and drill.id in run("list", "--due").stdout

    restarted = run("start", drill.id)  # a new review starts from the starter; the old answer is kept aside
    assert answer.read_text() == drill.starter
    kept = list((run.home / "answers" / "previous").glob("loop_train_step-*.py"))
    assert [p.read_text() for p in kept] == [drill.solution] and "previous answer is kept" in restarted.stdout

    progress = run.home / "progress.json"
    attempts = _record(run, drill.id)["attempts"]  # the backup, one save (the reveal) behind, counts as many
    progress.write_text(progress.read_text()[:200])  # a write cut short
    answer.write_text(drill.solution)
    torn = run("check", drill.id)  # the warm checker records the verdict anyway, and says what it did
    assert torn.returncode == 0 and "cannot be read as drill progress" in " ".join(torn.stderr.split()), torn.stderr
    assert _record(run, drill.id)["attempts"] == attempts + 1 and "Traceback" not in torn.stderr


def test_an_answer_in_progress_is_kept_by_start(run):
    drill = get_drill("tensors-logsumexp")
    run("start", drill.id)
    answer = run.home / "answers" / "tensors_logsumexp.py"
    answer.write_text(drill.wrong_answers[0][0])
    assert run("check", drill.id).returncode == 1
    run("start", drill.id)
    assert answer.read_text() == drill.wrong_answers[0][0]


def test_explain_options_are_shuffled_per_attempt_and_debriefed(run):
    drill = get_drill("tensors-broadcast-shape")
    right_text = drill.choices.options[drill.choices.key].text
    layouts = set()
    for _ in range(6):
        shown = run("start", drill.id).stdout
        options = dict(re.findall(r"^  \((\w)\) (.*)$", shown, re.MULTILINE))
        layouts.add(tuple(options.values()))
    assert len(layouts) > 1
    letter = next(k for k, v in options.items() if v == right_text)
    wrong = next(k for k in options if k != letter)
    (run.home / "answers" / "tensors_broadcast_shape.py").write_text(f'answer = "{wrong}"\n')
    failed = run("check", drill.id)
    assert failed.returncode == 1 and "[wrong-choice]" in failed.stdout and "Why each option" in failed.stdout
    assert max(map(len, failed.stdout.splitlines())) <= 80, failed.stdout
    assert "The experiment that proves it" in failed.stdout and "<id>" not in failed.stdout
    (run.home / "answers" / "tensors_broadcast_shape.py").write_text(f'answer = "{letter}"\n')
    assert run("check", drill.id).returncode == 0
    assert _record(run, drill.id)["box"] == 0  # the debrief showed the answer: this pass does not promote
    assert f'answer = "{letter}"' in run("solution", drill.id).stdout


def test_failed_drill_is_due_again_today_and_comes_first_in_daily(run):
    drill = get_drill("tensors-broadcast-shape")
    run("start", drill.id)
    (run.home / "answers" / "tensors_broadcast_shape.py").write_text("answer = None\n")
    assert run("check", drill.id).returncode == 1
    daily = run("daily", "--count", "3").stdout.splitlines()
    assert daily[0].startswith("Today's set") and daily[1].startswith("DRILL") and daily[3].startswith(drill.id)
    assert " due " in daily[3]


def test_mock_interview_records_attempts_hints_and_time(run):
    from harness.drills import all_drills

    pool = [d for d in all_drills() if "tensors" in d.topics and d.kind == "write" and d.difficulty == 2]
    for drill in pool:  # solved before: the mock must start from the starter anyway
        answer = run.home / "answers" / f"{drill.id.replace('-', '_')}.py"
        answer.parent.mkdir(parents=True, exist_ok=True)
        answer.write_text(drill.solution)
    out = run("mock", "--count", "1", "--seed", "0", "--topic", "tensors", "--kind", "write", "--difficulty", "2",
              stdin="check\nhint\nquit\n").stdout
    drill_id = re.search(r"^== .* \[([\w-]+)\]", out, re.MULTILINE).group(1)
    assert "Mock interview 1: 1 drills in 30 minutes" in out and "Hint 1/2" in out
    assert "Not started yet" in out  # the fresh starter: the prompt again, no attempt recorded
    assert re.search(rf"(----|self)  {drill_id}\s+0 attempt\(s\), 1 hint\(s\), \d+ s", out), out  # self: a self-check
    assert list((run.home / "answers" / "previous").glob(f"{drill_id.replace('-', '_')}-*.py"))
    stats = run("stats").stdout
    assert "Mock interviews: 1" in stats and "0 attempt(s)" in stats
    timed_out = run("mock", "--count", "2", "--minutes", "0", stdin="check\n").stdout
    assert "time up" in timed_out


def test_the_warm_checker_is_reused_and_refuses_an_older_harness(run, monkeypatch):
    from harness.drills import server

    drill = get_drill("tensors-pairwise-distances")
    answer = run.home / "answers" / "tensors_pairwise_distances.py"
    answer.parent.mkdir(parents=True)
    answer.write_text(drill.solution)
    assert run("check", drill.id).returncode == 0
    assert run("check", drill.id).returncode == 0
    log = (run.home / "checker.log").read_text()
    assert log.count("listening") == 1 and "Traceback" not in log  # one checker, started once
    monkeypatch.setenv("HARNESS_HOME", str(run.home.parent))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    reply, _ = server._exchange({"drill": drill.id, "path": str(answer), "order": None, "fingerprint": "older"}, 30)
    assert reply == {"stale": True}
    assert server.stop() is None  # the stale checker left
    assert "no drill named" in run("check", "no-such-drill").stdout


def test_explain_drill_experiment_runs(run):
    assert run("experiment", "tensors-broadcast-shape").stdout.strip()


@pytest.mark.parametrize("action", [["check", "tensors-logsumexp"], ["list"], ["daily"], ["stats"],
                                    ["start", "tensors-logsumexp"], ["hint", "tensors-logsumexp"],
                                    ["solution", "tensors-logsumexp"]], ids=lambda a: a[0])
def test_quick_commands_import_neither_torch_nor_the_bank(tmp_path, action):
    code = ("import sys, atexit\nfrom harness.cli import main\n"
            "atexit.register(lambda: print('IMPORTED' if [m for m in sys.modules if m == 'torch' or "
            "m.startswith('harness.drills.bank')] else 'LIGHT'))\n"
            f"sys.argv = ['harness', 'drill', *{action!r}]\nsys.exit(main())\n")
    env = {**os.environ, "HARNESS_HOME": str(tmp_path), "HARNESS_DRILL_CHECKER": "none"}
    if action[0] == "check":  # the starter, untouched: answered here, with the prompt again
        (tmp_path / "drills" / "answers").mkdir(parents=True)
        (tmp_path / "drills" / "answers" / "tensors_logsumexp.py").write_text(get_drill(action[1]).starter)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert done.stdout.rstrip().endswith("LIGHT"), done.stdout + done.stderr
    assert all(len(line) <= 80 for line in done.stdout.splitlines() if not line.startswith(" ")), done.stdout


def test_a_relative_file_is_read_from_the_callers_folder_and_a_missing_one_is_refused(run, tmp_path):
    drill = get_drill("tensors-pairwise-distances")
    first, second, empty = (tmp_path / name for name in ("first", "second", "empty"))
    for folder in (first, second, empty):
        folder.mkdir()
    (first / "answer.py").write_text(drill.solution)
    (second / "answer.py").write_text(drill.wrong_answers[1][0])

    def check_in(folder):
        return subprocess.run([sys.executable, "-m", "harness", "drill", "check", drill.id, "--file", "answer.py"],
                              capture_output=True, text=True, env=run.env, timeout=300, cwd=folder)

    assert check_in(first).returncode == 0  # this start of the warm checker is in `first`
    wrong = check_in(second)  # the same checker: the client sends second/answer.py as an absolute path
    assert wrong.returncode == 1 and f"[{drill.wrong_answers[1][1]}]" in wrong.stdout, wrong.stdout
    missing = check_in(empty)
    said = " ".join(missing.stdout.split())  # wrapped at 80 columns
    assert missing.returncode == 1 and f"no answer file at {empty / 'answer.py'}" in said, missing.stdout
    assert (run.home / "checker.log").read_text().count("listening") == 1


TAKEOVER = '''import json, os, socket
path = {path!r}
try:
    os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen()
    print("took the socket")
    if os.fork() == 0:  # a daemon, in its own session, that answers "passed" to every later check
        os.setsid()
        while True:
            connection, _ = server.accept()
            connection.sendall(json.dumps({{"passed": True, "code": "passed", "message": "forged"}}).encode())
            connection.close()
except OSError as error:
    print("refused:", error)
'''


@pytest.mark.slow
def test_a_daemon_an_answer_starts_cannot_take_over_the_checkers_socket(run):
    drill = get_drill("tensors-pairwise-distances")
    answer = run.home / "answers" / "tensors_pairwise_distances.py"
    answer.parent.mkdir(parents=True)
    answer.write_text(drill.solution)
    assert run("check", drill.id).returncode == 0  # the warm checker listens
    socket_path = run.home / "run" / "checker.sock"
    assert socket_path.exists()
    answer.write_text(TAKEOVER.format(path=str(socket_path)) + drill.wrong_answers[1][0])
    attack = run("check", drill.id)
    assert attack.returncode == 1, attack.stdout
    wrong = run("check", drill.id)  # a later check reaches a real checker, never the daemon's "passed"
    assert wrong.returncode == 1 and f"[{drill.wrong_answers[1][1]}]" in wrong.stdout, wrong.stdout
    answer.write_text(drill.solution)
    assert run("check", drill.id).stdout.startswith("PASSED")
    assert "forged" not in wrong.stdout + attack.stdout


def test_the_check_command_printed_runs_as_written_without_an_activated_venv(tmp_path, monkeypatch):
    """A student tree's shell has no `harness` on PATH unless .venv is activated: `drill start` must print a
    command that runs there as written (this Python's `-m harness`), and plain `harness` where it is on PATH."""
    import shlex
    import subprocess

    from harness.drills.cli import harness_command

    monkeypatch.setenv("PATH", str(tmp_path))  # no harness here
    command = harness_command()
    assert command.endswith(" -m harness"), command
    done = subprocess.run([*shlex.split(command), "drill", "--help"], capture_output=True, text=True, timeout=120,
                          env={"PATH": str(tmp_path)})
    assert done.returncode == 0 and "drill" in done.stdout, done.stderr
    (tmp_path / "harness").write_text("#!/bin/sh\n")
    (tmp_path / "harness").chmod(0o755)
    assert harness_command() == "harness"
