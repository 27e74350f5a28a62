"""The progress store survives two terminals and a damaged file: no event lost when many processes record at
once, a torn file gives a message and keeps the new verdict, a hand-edited record stays marked, the home is
private and a planted link is refused, and an answer's output costs the checker 64 KiB at most."""

import json
import os
import stat
import subprocess
import sys

import pytest

from harness.drills import store
from harness.drills.printed import KEEP_BYTES, Tail, collect, shown
from harness.drills.progress import Progress, record_verdict

WRITERS, EVENTS = 8, 10
WRITER = """
import sys
from pathlib import Path
from harness.drills.progress import Progress
path, name = Path(sys.argv[1]), sys.argv[2]
for _ in range({events}):
    with Progress.update(path) as progress:
        progress.hint(name, 3)
"""


def _cli(home, *args):
    env = {**os.environ, "HARNESS_HOME": str(home), "HARNESS_DRILL_CHECKER": "none", "COLUMNS": "80"}
    return subprocess.run([sys.executable, "-m", "harness", "drill", *args], capture_output=True, text=True,
                          env=env, timeout=60)


def test_many_processes_recording_at_once_lose_no_event(tmp_path):
    path = tmp_path / "progress.json"
    code = WRITER.format(events=EVENTS)
    writers = [subprocess.Popen([sys.executable, "-c", code, str(path), f"drill-{n}"]) for n in range(WRITERS)]
    assert [w.wait(timeout=120) for w in writers] == [0] * WRITERS
    progress = Progress.load(path)
    assert len(progress.history) == WRITERS * EVENTS  # an unlocked read-modify-write loses most of them
    assert {name: r.hints_seen for name, r in progress.records.items()} == {f"drill-{n}": 3 for n in range(WRITERS)}
    assert progress.unverified == set() and progress.problem == ""


def test_a_torn_file_gives_a_message_falls_back_to_the_backup_and_keeps_the_new_verdict(tmp_path):
    path = tmp_path / "progress.json"
    record_verdict("first", {"passed": True, "code": "passed"}, path=path)
    record_verdict("second", {"passed": False, "code": "wrong-value"}, path=path)  # the first save is the backup
    whole = path.read_bytes()
    path.write_bytes(whole[:len(whole) // 2])  # a write cut short
    recorded = record_verdict("third", {"passed": True, "code": "passed"}, path=path)
    assert "cannot be read as drill progress" in recorded.problem and "progress.json.bak" in recorded.problem
    progress = Progress.load(path)
    assert set(progress.records) == {"first", "third"} and progress.problem == ""  # the backup, and the verdict
    assert progress.unverified == set()
    assert [p.read_bytes() for p in tmp_path.glob("progress.json.damaged-*")] == [whole[:len(whole) // 2]]


def test_a_torn_file_gives_a_message_not_a_traceback_in_the_command(tmp_path):
    home = tmp_path / "home"
    (home / "drills").mkdir(parents=True)
    (home / "drills" / "progress.json").write_text('{"format": 3, "records": {"d": {"box"')
    done = _cli(home, "hint", "tensors-logsumexp")
    assert done.returncode == 0 and "Hint 1/" in done.stdout, done.stdout + done.stderr
    assert "cannot be read as drill progress" in " ".join(done.stderr.split()) and "Traceback" not in done.stderr


def test_a_readable_file_with_a_mangled_mock_gives_a_message_not_an_exception(tmp_path):
    path = tmp_path / "progress.json"
    path.write_text(json.dumps({"format": 3, "records": {}, "history": [], "mocks": [{"number": 1}]}))
    recorded = record_verdict("d", {"passed": True, "code": "passed"}, mock=1, path=path)
    assert "the harness did not write (KeyError" in recorded.problem


def test_a_hand_edited_record_stays_marked_after_the_next_save(tmp_path):
    path = tmp_path / "progress.json"
    record_verdict("d", {"passed": False, "code": "wrong-value"}, path=path)
    raw = json.loads(path.read_text())
    raw["records"]["d"].update(box=5, passes=9)  # a forged promotion
    path.write_text(json.dumps(raw))
    record_verdict("other", {"passed": True, "code": "passed"}, path=path)  # a save by the harness
    record_verdict("d", {"passed": True, "code": "passed"}, path=path)  # even one of the forged record itself
    assert Progress.load(path).unverified == {"record:d"}


def test_the_home_is_made_private_and_a_loose_one_is_tightened(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "new" / "home"))
    drills = store.home()
    assert stat.S_IMODE(drills.stat().st_mode) == 0o700 and stat.S_IMODE(drills.parent.stat().st_mode) == 0o700
    drills.chmod(0o755)
    store.home()
    assert stat.S_IMODE(drills.stat().st_mode) == 0o700


def test_a_link_in_place_of_the_progress_file_or_the_home_is_refused(tmp_path):
    home = tmp_path / "home"
    (home / "drills").mkdir(parents=True)
    target = tmp_path / "someone-elses-file"
    target.write_text("theirs")
    (home / "drills" / "progress.json").symlink_to(target)
    done = _cli(home, "hint", "tensors-logsumexp")
    assert done.returncode == 1 and "symbolic link" in " ".join(done.stderr.split()), done.stderr
    assert "Traceback" not in done.stderr
    assert target.read_text() == "theirs"
    recorded = record_verdict("d", {"passed": True, "code": "passed"}, path=home / "drills" / "progress.json")
    assert "symbolic link" in recorded.problem and target.read_text() == "theirs"  # said, never raised

    linked = tmp_path / "linked"
    (linked).mkdir()
    (linked / "drills").symlink_to(home / "drills")
    done = _cli(linked, "list")
    assert done.returncode == 1 and "is a link or not a folder" in " ".join(done.stderr.split()), done.stderr


def test_an_answers_output_is_drained_and_only_its_last_64_kib_kept(tmp_path):
    report_read, report_write = os.pipe()
    output_read, output_write = os.pipe()
    size = 5 << 20
    code = (f"import os, sys\nsys.stdout.buffer.write(b'x' * {size} + b'THE END')\nsys.stdout.flush()\n"
            f"os.write({report_write}, b'report')\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=output_write, pass_fds=(report_write,))
    os.close(report_write)
    os.close(output_write)
    try:
        report, timed_out, tail = collect(report_read, output_read, 60.0, 1 << 20)
    finally:
        os.close(report_read)
        os.close(output_read)
    assert child.wait(timeout=60) == 0
    assert (report, timed_out, tail.total) == (b"report", False, size + len(b"THE END"))
    assert len(tail.kept()) == KEEP_BYTES and tail.kept().endswith(b"THE END")
    assert len(tail.data) <= 2 * KEEP_BYTES  # what the checker ever held, whatever the answer printed
    assert shown(tail).startswith(f"(the first {size + 7 - KEEP_BYTES} bytes of the output are not kept)")


def test_the_sandboxs_gloo_warning_is_not_shown_as_the_answers_output():
    tail = Tail()
    tail.add(b"[W1129 04:22:14.406703018 socket.cpp:207] [c10d] The hostname of the client socket cannot be "
             b"retrieved. err=-3\nmine\n")
    assert shown(tail) == "mine"


@pytest.mark.parametrize("keep", [4, 10])
def test_the_tail_keeps_exactly_the_last_bytes(keep):
    tail = Tail(keep)
    for chunk in (b"abc", b"defghij", b"klmnopqrstu", b"v"):
        tail.add(chunk)
    assert tail.kept() == b"abcdefghijklmnopqrstuv"[-keep:] and tail.total == 22
