"""The decoy solutions flag only this submission's kernel (issue 38, item 6): a host process listing the decoy folder
during grading flags nobody. The worker's side of the decoy, in the mount namespace a root grader's worker gets
(`unshare --mount`), with the host and a process of that namespace listing it; and one honest submission graded
while the host lists every folder of the batch (the attack that reads the decoy stays flagged:
tests/fixtures/submissions/hostile.py, `read-solution`)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import nbformat
import pytest

from harness.grading.batch import Limits, grade_batch
from harness.grading.decoy import Decoy, decoy_folder, private_namespace
from harness.grading.layout import REPO_ROOT
from harness.grading.runtime_folder import private_mounts_available, worker_prefix
from harness.grading.submissions import collect

RELEASE = REPO_ROOT / "notebooks" / "00_welcome" / "00_welcome.ipynb"
WORKER = """
import subprocess, sys
from pathlib import Path
from harness.grading.decoy import decoy_folder
with decoy_folder(Path(sys.argv[1]), "00_welcome", Path(sys.argv[2]), private=True) as decoy:
    decoy.watch()
    print(decoy.watched, flush=True)
    sys.stdin.readline()  # the host lists the folder meanwhile
    host = decoy.opened()
    decoy.watch()
    subprocess.run(["ls", "-R", str(decoy.folder)], capture_output=True)  # as the kernel would, in this namespace
    print(host, decoy.opened(), flush=True)
"""


def _list(folder: Path) -> list[str]:
    """Everything a host `ls -R` (and a reader of every file) sees under `folder`."""
    subprocess.run(["ls", "-R", str(folder)], capture_output=True, check=True)
    files = [path for path in folder.rglob("*") if path.is_file()]
    for path in files:
        path.read_bytes()
    return [str(path.relative_to(folder)) for path in folder.rglob("*")]


@pytest.mark.skipif(not private_mounts_available(), reason="a root grader's private mounts (root, util-linux)")
def test_a_host_listing_the_decoy_flags_nobody_and_the_kernels_side_does(tmp_path):
    folder = tmp_path / "decoy"
    worker = subprocess.Popen([*worker_prefix(True), sys.executable, "-c", WORKER, str(folder), str(RELEASE)],
                              cwd=REPO_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert worker.stdout.readline().strip() == "True"  # on the worker's own tmpfs, watched
        assert _list(folder) == []  # the host sees an empty folder: the decoy is the worker's alone
        worker.stdin.write("\n")
        worker.stdin.flush()
        assert worker.stdout.readline().split() == ["False", "True"]
    finally:
        worker.communicate(timeout=30)
    assert worker.returncode == 0


def test_a_decoy_the_grader_cannot_keep_private_is_not_watched(tmp_path):
    """An ordinary user's grader (no private mounts), or a worker in its grader's mount namespace: nothing counts."""
    for private in (False, True):
        if private and private_namespace():
            continue  # this test process has mounts of its own: covered above
        with decoy_folder(tmp_path / f"decoy-{private}", "00_welcome", RELEASE, private=private) as decoy:
            decoy.watch()
            assert not decoy.watched and _list(decoy.folder) == ["00_welcome", "00_welcome/00_welcome.ipynb"]
            assert not decoy.opened()
            before = Decoy(decoy.folder, watched=True)  # as every decoy was watched before: the host's listing flagged
            before.watch()
            _list(decoy.folder)
            assert before.opened()


@pytest.mark.slow
def test_an_honest_student_graded_while_the_host_lists_every_folder_keeps_every_point_and_no_flag(
        tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("hostile", REPO_ROOT / "tests/fixtures/submissions/hostile.py")
    hostile = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hostile)
    release = nbformat.read(REPO_ROOT / "notebooks" / hostile.ASSIGNMENT / f"{hostile.ASSIGNMENT}.ipynb", as_version=4)
    solution = nbformat.read(REPO_ROOT / "solutions" / hostile.ASSIGNMENT / f"{hostile.ASSIGNMENT}.ipynb", as_version=4)
    hostile.write_submissions(tmp_path, release, solution, names=["perfect"], repo=REPO_ROOT)
    # the batch's folders, the decoy's among them, where the sandbox finds them (not under pytest's 0700 folder)
    scratch = Path(tempfile.mkdtemp(prefix="harness-decoy-test-"))
    scratch.chmod(0o755)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    stop, seen = threading.Event(), []

    def host_lists() -> None:  # another program on the machine: a backup, an indexer, an instructor's `ls -R`
        while not stop.is_set():
            seen.append(subprocess.run(["ls", "-R", str(scratch)], capture_output=True, text=True).stdout)
            stop.wait(0.1)

    lister = threading.Thread(target=host_lists)
    lister.start()
    try:
        [result] = grade_batch(collect(tmp_path / "in", hostile.ASSIGNMENT), hostile.ASSIGNMENT, tmp_path / "out",
                               workers=1, limits=Limits(cell_timeout=30, submission_seconds=240), secret=bytes(32))
    finally:
        stop.set()
        lister.join()
        shutil.rmtree(scratch)
    assert any("/decoy:" in listing for listing in seen)  # the host listed the decoy's folder while it existed
    assert result["status"] == "ok", result["reasons"]
    assert sum(score for score, _ in result["scores"].values()) == 5.0 and not result["reasons"]
