"""Drill checks without bubblewrap (every macOS user; here `HARNESS_DRILL_SANDBOX=off`): every verdict says it was
unsandboxed, in what the candidate reads and in the progress record; where Linux allows, the runner has its own
namespaces (`harness.drills.pool.namespaces`): the answer sees no drills folder and DDP's loopback still works.
"""

import contextlib
import io
import json
import os
from pathlib import Path

import pytest

from harness.cli import main
from harness.contract.case import Case
from harness.drills import pool
from harness.drills.checker import check_source
from harness.drills.core import get_drill

pytestmark = pytest.mark.slow


@pytest.fixture
def no_sandbox(monkeypatch, tmp_path):
    monkeypatch.setenv("HARNESS_DRILL_SANDBOX", "off")
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    pool.sandbox_reason.cache_clear()
    previous = pool.set_uses(pool.DEFAULT_USES)
    yield tmp_path / "home"
    pool.set_uses(previous)
    pool.sandbox_reason.cache_clear()


def test_an_unsandboxed_verdict_says_so_to_the_candidate_and_in_the_progress_record(no_sandbox, monkeypatch):
    monkeypatch.setenv("HARNESS_DRILL_CHECKER", "inline")
    answer = no_sandbox.parent / "answer.py"
    answer.write_text(get_drill("tensors-logsumexp").solution)
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown):
        code = main(["drill", "check", "tensors-logsumexp", "--file", str(answer)])
    assert code == 0 and shown.getvalue().startswith("PASSED"), shown.getvalue()
    assert "[unsandboxed] checked without the bubblewrap sandbox (HARNESS_DRILL_SANDBOX=off)" in \
        " ".join(shown.getvalue().split()), shown.getvalue()
    history = json.loads((no_sandbox / "drills" / "progress.json").read_text())["history"]
    assert history[-1]["event"] == "check" and "HARNESS_DRILL_SANDBOX=off" in history[-1]["unsandboxed"], history[-1]


PEEK = '''import os
home = {home!r}
print("sees:", sorted(os.listdir(home)) if os.path.isdir(home) else "no folder")
def logsumexp(x, dim):
    return x.exp().sum(dim).log()
'''


def test_without_the_sandbox_the_answer_cannot_see_the_drills_folder_where_namespaces_exist(no_sandbox):
    if not pool.namespaces():
        pytest.skip("no namespaces here (unshare missing or refused): the answer runs in its own session only")
    (no_sandbox / "drills").mkdir(parents=True)
    (no_sandbox / "drills" / "progress.key").write_text("secret")
    result = check_source(get_drill("tensors-logsumexp"), PEEK.format(home=str(no_sandbox / "drills")),
                          case=Case(seed=8))
    assert "sees: []" in result.output, result.output
    assert "own PID, network and mount namespaces" in result.unsandboxed
    assert (no_sandbox / "drills" / "progress.key").read_text() == "secret"  # hidden inside only
    assert os.path.isdir(Path(no_sandbox) / "drills")


def test_a_ddp_drill_passes_without_the_sandbox(no_sandbox):
    drill = get_drill("ddp-global-accuracy")
    result = check_source(drill, drill.solution, case=Case(seed=9))
    assert result.passed, result.message
    assert "[unsandboxed]" in result.message and result.unsandboxed
