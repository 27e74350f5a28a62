"""The judge's own pieces: the grading secret, drawing hidden cases from it, verdicts from displayed bundles,
and the sandbox's refusal to grade where it cannot be made."""

from __future__ import annotations

import base64
import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from harness.contract.case import Case
from harness.contract.protocol import observe
from harness.grading import sandbox
from harness.judge.cases import draw_cases
from harness.judge.secret import SECRET_VARIABLE, load_or_create
from harness.judge.verdict import judge_task

NONCE = "ab" * 16


def test_the_secret_is_created_private_then_reused(tmp_path, monkeypatch):
    monkeypatch.delenv(SECRET_VARIABLE, raising=False)
    path = tmp_path / "config" / "grading-secret"
    secret, where = load_or_create(path)
    assert "created a new grading secret" in where and len(secret) == 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again, where = load_or_create(path)
    assert again == secret and "from" in where
    path.write_text("not hex")
    with pytest.raises(ValueError, match="not hex"):
        load_or_create(path)
    monkeypatch.setenv(SECRET_VARIABLE, "11" * 32)
    assert load_or_create(path)[0] == bytes([0x11] * 32)


def test_hidden_cases_depend_on_the_secret_the_student_and_the_task_and_repeat_on_regrade():
    first = draw_cases(b"s" * 32, "00_welcome", "ada", "00-accuracy")
    assert first[0] == Case(hidden=False, seed=0) and first[1].hidden and first[1].seed > 0
    assert draw_cases(b"s" * 32, "00_welcome", "ada", "00-accuracy") == first
    others = {draw_cases(secret, "00_welcome", student, task)[1].seed
              for secret in (b"s" * 32, b"t" * 32) for student in ("ada", "bob")
              for task in ("00-accuracy", "00-make-batch")}
    assert len(others) == 8


def _bundle(task: str, index: int, data: bytes, nonce: str = NONCE) -> dict:
    return {"task": task, "case": index, "nonce": nonce, "data": base64.b64encode(data).decode()}


def test_verdicts_pass_only_on_this_runs_observations_of_a_correct_answer():
    def accuracy(logits, targets):
        return (logits.argmax(dim=1) == targets).float().mean().item()

    task, cases = "00-accuracy", [Case(), Case(hidden=True, seed=77)]
    bundles = [_bundle(task, i, observe(task, (accuracy,), case)) for i, case in enumerate(cases)]
    verdict = judge_task(task, cases, bundles, NONCE)
    assert verdict.passed and verdict.message.startswith("\u2714 00-accuracy") and "hidden" in verdict.detail
    other_nonce = judge_task(task, cases, [{**b, "nonce": "cd" * 16} for b in bundles], NONCE)
    assert not other_nonce.passed and other_nonce.code == "forged-observation" and "nonce" in other_nonce.tamper
    swapped = judge_task(task, cases, [{**bundles[1], "case": 0}, {**bundles[0], "case": 1}], NONCE)
    assert not swapped.passed and swapped.code == "forged-observation"
    missing = judge_task(task, cases, bundles[:1], NONCE, "NameError: name 'accuracy' is not defined")
    assert not missing.passed and missing.code == "no-observation" and "NameError" in missing.tamper
    wrong = [_bundle(task, i, observe(task, (lambda logits, targets: 0.5,), case)) for i, case in enumerate(cases)]
    assert judge_task(task, cases, wrong, NONCE).code == "wrong-accuracy"


def test_a_hidden_failure_tells_the_student_its_code_but_not_its_inputs():
    def visible_only(logits, targets):
        return (logits.argmax(dim=1) == targets).float().mean().item() if len(targets) <= 16 else 0.0  # visible sizes

    task, cases = "00-accuracy", [Case(), Case(hidden=True, seed=77)]
    bundles = [_bundle(task, i, observe(task, (visible_only,), case)) for i, case in enumerate(cases)]
    verdict = judge_task(task, cases, bundles, NONCE)
    assert verdict.code == "wrong-accuracy" and "hidden tests" in verdict.message
    assert "Observed" not in verdict.message and "Observed" in verdict.detail and "seed 77" in verdict.detail


def test_grading_refuses_without_the_sandbox_and_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on it
    reason = sandbox.unavailable_reason()
    assert reason and "apt-get install bubblewrap" in reason and "--no-sandbox" in reason
    (tmp_path / "in" / "ada").mkdir(parents=True)
    (tmp_path / "in" / "ada" / "00_welcome.ipynb").write_text("{}")
    done = subprocess.run([sys.executable, "-m", "harness", "grade", str(tmp_path / "in"), "--assignment", "00_welcome",
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120,
                          env={"PATH": str(tmp_path), "HOME": str(tmp_path)})
    assert done.returncode == 2 and "bubblewrap" in done.stdout, done.stdout + done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(sandbox.unavailable_reason() is not None, reason="bubblewrap cannot run here")
def test_a_graded_kernel_holds_no_drill_answer(tmp_path):
    """Lesson 11 is graded from the drill bank: in the sandbox every drill has its probe side and nothing that
    answers it (no solution, judge, planted wrong answer or explain key, in memory or in any file)."""
    from harness.drills.core import all_drills

    runtime = tmp_path / "runtime"
    runtime.mkdir()
    spec = sandbox.Spec(memory_mb=0, threads=1, sandboxed=True, runtime_dir=str(runtime),
                        data_dir=str(tmp_path / "data"))
    solutions = [d.solution for d in all_drills() if d.kind != "explain"]
    code = ("import json, sys\nfrom pathlib import Path\n"
            "from harness.contract.registry import get\nfrom harness.drills.core import all_drills\n"
            "drills = all_drills()\n"
            "print(len(drills), sum(d.answered or d.judge is not None or d.choices is not None for d in drills),"
            " sum((d.probe or d.experiment) is not None for d in drills))\n"
            "print([get(t, judged=False).judge is None for t in ('11-train-step', '11-why-eval')])\n"
            f"texts = [p.read_text(errors='replace') for p in Path({str(sandbox.REPO_ROOT / 'harness')!r}).rglob('*')"
            " if p.is_file()]\n"
            "print(sum(any(s in t for t in texts) for s in json.load(sys.stdin)), len(texts) > 100)\n")
    done = subprocess.run(sandbox.bwrap_command(spec, [sys.executable, "-c", code]), capture_output=True, text=True,
                          timeout=120, input=json.dumps(solutions))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"{len(all_drills())} 0 {len(all_drills())}", "[True, True]", "0 True"]


@pytest.mark.skipif(sandbox.unavailable_reason() is not None, reason="bubblewrap cannot run here")
def test_the_sandbox_sees_no_repository_network_or_grader_and_writes_nothing_that_survives(tmp_path):
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    spec = sandbox.Spec(memory_mb=0, threads=1, sandboxed=True, runtime_dir=str(runtime),
                        data_dir=str(tmp_path / "data"))
    code = ("import os, socket, harness\n"
            f"root = {str(sandbox.REPO_ROOT)!r}\n"
            "print(sorted(os.listdir(root)), os.listdir(root + '/harness/judge'), os.getuid())\n"
            "print(sorted(os.environ))\n"
            "print(len([p for p in os.listdir('/proc') if p.isdigit()]))\n"
            "open('/tmp/work/mine', 'w').write('x')\n"
            "for target in (root + '/harness/checks/lesson00/accuracy.py', root + '/solutions/x'):\n"
            "    try:\n        open(target, 'a')\n    except OSError as error:\n        print(type(error).__name__)\n"
            "try:\n    socket.create_connection(('1.1.1.1', 80), timeout=2)\n"
            "except OSError:\n    print('no network')\n")
    done = subprocess.run(sandbox.bwrap_command(spec, [sys.executable, "-c", code]), capture_output=True, text=True,
                          timeout=120, env={**__import__("os").environ, "HARNESS_GRADING_SECRET": "ab" * 32})
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stderr
    visible = {"harness"} | ({".venv"} if Path(sys.prefix).is_relative_to(sandbox.REPO_ROOT) else set())
    assert lines[0] == f"{sorted(visible)} [] {sandbox.SANDBOX_UID}"  # no solutions/, no judge, not root
    assert "HARNESS_GRADING_SECRET" not in lines[1]
    assert lines[2] == "2"  # the sandbox's first process and python: nothing of the grader's
    # the harness refuses writes (read-only mount; as root, also the file's owner), no solutions/, no network
    assert lines[3] in ("OSError", "PermissionError") and lines[4:] == ["FileNotFoundError", "no network"], lines
    assert list(runtime.iterdir()) == []
