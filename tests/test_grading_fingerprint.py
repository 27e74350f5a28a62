"""A task's fingerprint (`harness.grading.fingerprint`): the same in every process, and changed by an edit of any
module that decides the task, a judge's helper included, and by nothing else."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from harness.grading.fingerprint import closure, defining_modules, fingerprint, fingerprints
from harness.grading.layout import REPO_ROOT

# a task of each kind: probe and judge apart, with shared helpers on both sides, and a drill handed over at run time
TASKS = ["00-accuracy", "04-fit", "11-train-step"]


def _copy_of_harness(into: Path) -> Path:
    shutil.copytree(REPO_ROOT / "harness", into / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    return into


def test_fingerprints_are_the_same_in_fresh_interpreters_with_other_hash_seeds():
    script = ("import json; from harness.grading.fingerprint import fingerprints; "
              f"print(json.dumps(fingerprints({TASKS})))")
    runs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT,
                             env={**os.environ, "PYTHONHASHSEED": seed, "OMP_NUM_THREADS": "1"})
            for seed in ("1", "2")]
    printed = [json.loads(run.communicate(timeout=300)[0]) for run in runs]
    assert all(run.returncode == 0 for run in runs)
    assert printed[0] == printed[1] == fingerprints(TASKS)


def test_a_judge_helper_and_the_drill_count_in_the_fingerprint():
    assert {"harness.judges.lesson04.common", "harness.checks.lesson04.common"} <= closure(
        defining_modules("04-fit")).keys()
    assert {"harness.drills.bank.loop", "harness.judges.drills.loop"} <= closure(
        defining_modules("11-train-step")).keys()


def test_editing_a_judge_helper_changes_the_fingerprint_of_the_tasks_it_decides_only(tmp_path):
    root = _copy_of_harness(tmp_path)
    assert fingerprints(TASKS, root) == fingerprints(TASKS)  # a copy elsewhere: the same digests
    helper = root / "harness" / "judges" / "lesson04" / "common.py"
    helper.write_text(helper.read_text() + "\n# a fixed reference\n")
    assert fingerprint("04-fit", root) != fingerprint("04-fit")
    assert fingerprint("00-accuracy", root) == fingerprint("00-accuracy")
    probe = root / "harness" / "checks" / "lesson00" / "accuracy.py"
    probe.write_text(probe.read_text() + "\n# a changed check\n")
    assert fingerprint("00-accuracy", root) != fingerprint("00-accuracy")
    assert fingerprint("00-count-params", root) == fingerprint("00-count-params")
