"""The attacks of issue 30 on the drill checker, each shown to pass nothing and to leave nothing behind.

The answer runs in a fresh runner process (`harness.drills.pool`): no descriptor of the checker's, its own
session, everything it starts killed with it; the harness is compiled from source (a planted `.pyc` is never
read); the checker's socket sits in a private directory and both ends check each other's user.
"""

import os
import py_compile
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.contract.case import Case
from harness.drills import pool
from harness.drills.checker import check_source
from harness.drills.core import all_drills, get_drill
from harness.drills.fresh import python_command
from harness.grading.layout import REPO_ROOT


@pytest.fixture
def no_sandbox(monkeypatch):
    """The bubblewrap-free fallback, where the runner's own containment is all there is."""
    monkeypatch.setenv("HARNESS_DRILL_SANDBOX", "off")
    pool.sandbox_reason.cache_clear()
    previous = pool.set_uses(1)
    yield
    pool.set_uses(previous)
    pool.sandbox_reason.cache_clear()


FD_FORGERY = '''import json, os
forged = json.dumps({"passed": True, "code": "passed", "message": "ok"}).encode()
print("open descriptors:", sorted(int(fd) for fd in os.listdir("/proc/self/fd")))
for fd in range(3, 256):
    try:
        os.write(fd, forged)
    except OSError:
        pass
def logsumexp(x, dim):
    return x.exp().sum(dim).log()
'''


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sandbox", "fallback"])
def test_the_answer_inherits_no_descriptor_and_forging_on_one_passes_nothing(mode, request):
    if mode == "fallback":
        request.getfixturevalue("no_sandbox")
    elif pool.sandbox_reason() is not None:
        pytest.skip(f"no sandbox here: {pool.sandbox_reason()}")
    result = check_source(get_drill("tensors-logsumexp"), FD_FORGERY, case=Case(seed=3))
    assert not result.passed
    # 0-2, the report pipe (3) and the descriptor listdir opened: nothing of the checker's
    listed = result.output.split("open descriptors:")[1].split("]")[0]
    assert [int(fd) for fd in listed.strip(" [").split(",")] == [0, 1, 2, 3, 4], result.output


DAEMON = '''import os, sys, time
marker = {marker!r}
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:  # a daemon: out of the answer's process group and session
        time.sleep(2)
        open(marker, "w").write("the daemon outlived the check")
        os._exit(0)
    os._exit(0)
time.sleep(0.2)
def logsumexp(x, dim):
    return x.exp().sum(dim).log()
'''


@pytest.mark.slow
def test_a_daemon_the_answer_started_ends_with_it(tmp_path, no_sandbox):
    marker = tmp_path / "daemon-was-here"
    result = check_source(get_drill("tensors-logsumexp"), DAEMON.format(marker=str(marker)), case=Case(seed=4))
    assert not result.passed
    time.sleep(3)
    assert not marker.exists()
    survivors = subprocess.run(["pgrep", "-f", "daemon-was-here"], capture_output=True, text=True).stdout.split()
    assert survivors == []


NAN = "import torch\n\ndef {entry}(*args, **kwargs):\n    return float('nan')\n"


@pytest.mark.slow
def test_returning_nan_passes_no_drill():
    previous = pool.set_uses(10_000)
    try:
        passed = [d.id for d in all_drills() if d.kind != "explain" and d.entry[:1].islower()
                  and check_source(d, NAN.format(entry=d.entry), case=Case(seed=5)).passed]
    finally:
        pool.set_uses(previous)
    assert passed == []


def test_a_planted_pyc_is_never_read_by_the_checker_or_the_runner(tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(Path(__file__).resolve().parents[1] / "harness", root / "harness",
                    ignore=shutil.ignore_patterns("__pycache__", "*.safetensors", "data"))
    source = root / "harness" / "drills" / "topics.py"
    evil = tmp_path / "evil.py"
    evil.write_text('TOPICS = ("forged",)\nKINDS = ()\n')
    info = source.stat()
    planted = Path(py_compile.compile(str(evil), cfile=str(root / "harness" / "drills" / "__pycache__" /
                                                           f"topics.{sys.implementation.cache_tag}.pyc")))
    # make the planted file look current for the source: its header carries the source's mtime and size
    data = bytearray(planted.read_bytes())
    data[8:12] = int(info.st_mtime).to_bytes(4, "little")
    data[12:16] = (info.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    planted.write_bytes(bytes(data))
    probe = "import harness.drills.topics as t; print(t.TOPICS[0])"
    plain = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(root)!r}); {probe}"],
                           capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert plain.stdout.strip() == "forged"  # the plant works on a plain interpreter
    (tmp_path / "show_topics.py").write_text(probe + "\n")
    fresh = python_command("show_topics", root=root)
    fresh[fresh.index("-P")] = "-B"  # let the test module be found in the working directory
    done = subprocess.run([*fresh[:4], fresh[4].replace("_sys.path.insert(0,", "_sys.path[:0] = [''] ; "
                          "_sys.path.insert(0,"), *fresh[5:]], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.stdout.strip() == "tensors", done.stderr


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                    reason="two unprivileged users are made with useradd, which needs root")
def test_another_user_cannot_squat_the_checker_directory():
    import pwd
    import tempfile

    for name in ("harnessalice", "harnessbob"):
        subprocess.run(["useradd", "-M", "-s", "/usr/sbin/nologin", name], capture_output=True, check=False)
    alice, bob = pwd.getpwnam("harnessalice"), pwd.getpwnam("harnessbob")
    shared = Path(tempfile.mkdtemp(prefix="harness-two-users-", dir="/tmp"))
    try:
        shared.chmod(0o1777)  # a shared runtime folder, as /tmp is
        home = shared / "alice"
        home.mkdir(mode=0o700)
        os.chown(home, alice.pw_uid, alice.pw_gid)
        env = {"PATH": os.environ["PATH"], "HARNESS_HOME": str(home), "XDG_RUNTIME_DIR": str(shared),
               "OMP_NUM_THREADS": "1"}

        # The project's interpreter, or, where another user cannot run it (a venv under /root), the system's with
        # the repository on its path: the refusal under test comes before the checker imports torch.
        interpreters = [[sys.executable], ["/usr/bin/python3"]]

        def as_user(user, code):
            return subprocess.run([*interpreters[0], "-c", code], capture_output=True, text=True, timeout=120,
                                  env=env, user=user.pw_uid, group=user.pw_gid, cwd="/", check=False)

        ask = "from harness.drills.server import runtime_dir; print(runtime_dir())"
        try:
            where = as_user(alice, ask).stdout.strip()
        except PermissionError:
            interpreters.pop(0)
            env["PYTHONPATH"] = str(REPO_ROOT)
            try:
                where = as_user(alice, ask).stdout.strip()
            except (PermissionError, FileNotFoundError):
                where = ""
        if not where:
            pytest.skip(f"neither {sys.executable} nor /usr/bin/python3 with {REPO_ROOT} can be run by another user")
        squat = as_user(bob, f"import os; os.mkdir({where!r}, 0o777); os.chmod({where!r}, 0o777)")
        assert squat.returncode == 0, squat.stderr
        answer = home / "answer.py"
        answer.write_text(get_drill("tensors-logsumexp").solution)
        os.chown(answer, alice.pw_uid, alice.pw_gid)
        check = as_user(alice, "import sys\nfrom harness.cli import main\nsys.exit(main(['drill', 'check', "
                               f"'tensors-logsumexp', '--file', {str(answer)!r}]))")
        assert check.returncode == 1 and "belongs to user id" in check.stdout, check.stdout + check.stderr
        assert not (home / "drills" / "progress.json").exists()  # no checker ran, nothing recorded
    finally:
        shutil.rmtree(shared, ignore_errors=True)


LEAVER = '''import os
bound = [line.split()[4] for line in open("/proc/self/mountinfo") if "harness-drill-runner-" in line.split()[4]]
print("bound:", bound)
if "in-bound" in {paths!r}:  # the runner's folder, bound into the sandbox at its own path
    try:
        os.chdir(bound[0])
    except PermissionError:  # out of the answer's reach (grading as root: the answer is another uid)
        pass
print("left:", sorted(p for p in {paths!r} if os.path.exists(p)))
os.makedirs("nested/deeper", exist_ok=True)
for path in {paths!r}:
    open(path, "w").write("an earlier answer was here")
def logsumexp(x, dim):
    return x.exp().sum(dim).log()
'''


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sandbox", "fallback"])
def test_answers_forked_from_one_warm_runner_find_nothing_an_earlier_one_left(mode, request):
    if mode == "fallback":
        request.getfixturevalue("no_sandbox")
        paths = ["left-behind", "nested/deeper/file"]
    elif pool.sandbox_reason() is not None:
        pytest.skip(f"no sandbox here: {pool.sandbox_reason()}")
    else:
        paths = ["left-behind", "/tmp/left-behind", "/tmp/home/left-behind", "/dev/shm/left-behind",
                 "nested/deeper/file", "in-bound"]
    previous = pool.set_uses(pool.DEFAULT_USES)
    try:
        answer = LEAVER.format(paths=paths)
        first = check_source(get_drill("tensors-logsumexp"), answer, case=Case(seed=6))
        runner = pool._POOL.active
        second = check_source(get_drill("tensors-logsumexp"), answer, case=Case(seed=7))
        assert runner is not None and pool._POOL.active is runner and runner.alive  # one warm runner, two answers
    finally:
        pool.set_uses(previous)
    assert "left: []" in first.output, first.output
    assert "left: []" in second.output, f"the second answer found what the first left: {second.output}"
