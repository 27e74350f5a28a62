"""Every drill command's output fits 80 columns (run through the real CLI entry, in this process), `list` shows
one line per drill grouped by topic, a closed pipe ends quietly, and the README counts the bank as it is."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from harness.cli import main
from harness.drills.index import entries
from harness.drills.layout import clip, fit_code, fit_prose

ROOT = Path(__file__).resolve().parents[1]
EXPLAIN = [e for e in entries() if e.kind == "explain"]


@pytest.fixture
def drill(monkeypatch, capsys):
    """`harness drill ...` in this process, at 80 columns; its stdout, every line checked to fit. The home's
    path is short, as `~/.harness` is (an answer file's path is printed whole)."""
    home = tempfile.mkdtemp(prefix="h")
    monkeypatch.setenv("HARNESS_HOME", home)
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("HARNESS_DRILL_CHECKER", "none")

    def run(*args: str) -> str:
        assert main(["drill", *args]) == 0
        out = capsys.readouterr().out
        assert [line for line in out.splitlines() if len(line) > 80] == []
        return out

    yield run
    shutil.rmtree(home)


def test_list_is_one_line_per_drill_grouped_by_topic(drill):
    lines = drill("list").splitlines()
    ids = [line.split()[0] for line in lines if line.startswith("  ")]
    assert ids == [e.id for e in entries()]
    topics = [line for line in lines[1:] if not line.startswith("  ")]
    assert len(topics) == len({e.topics[0] for e in entries()}) and len(lines) == 1 + len(topics) + len(ids)


def test_every_explain_drills_options_fit_and_no_word_is_broken(drill):
    for entry in EXPLAIN:
        shown = drill("start", entry.id)
        options = re.findall(r"^  \(\w\) (.*(?:\n {6}\S.*)*)", shown, re.MULTILINE)
        assert sorted(" ".join(o.split()) for o in options) == sorted(" ".join(o.split()) for o in entry.options)


def test_solutions_hints_and_stats_fit(drill):
    for entry in entries()[::4]:
        drill("solution", entry.id)
    for entry in entries()[1::7]:
        drill("hint", entry.id)
    drill("stats")
    drill("daily", "--count", "20")


def test_experiments_print_within_80_columns(drill):
    for drill_id in ("tensors-view-after-transpose", "autograd-inference-mode", "modules-why-eval"):
        assert drill("experiment", drill_id).strip()  # each printed lines over 80 columns before


def test_explain_failures_and_debriefs_fit(capsys, monkeypatch):
    from harness.drills.checker import check_source
    from harness.drills.cli import _report
    from harness.drills.core import get_drill

    monkeypatch.setenv("COLUMNS", "80")
    for entry in EXPLAIN:
        wrong = next(letter for letter in "abcd" if letter != "abcd"[entry.key])
        result = check_source(get_drill(entry.id), f'answer = "{wrong}"\n')
        assert not result.passed
        _report(entry.id, result.as_dict())
    out = capsys.readouterr().out
    assert out.count("NOT YET: [wrong-choice]") == len(EXPLAIN)
    assert [line for line in out.splitlines() if len(line) > 80] == []


def test_code_is_broken_only_where_python_allows_it():
    for entry in entries():
        fitted = fit_code(entry.solution)
        assert max(map(len, fitted.splitlines())) <= 80, entry.id  # fit_code keeps a line it cannot break safely
    assert fit_code("x = 1\n") == "x = 1\n"
    assert fit_code("y = f(aaaaaaaaaa, bbbbbbbbbb)\n", 20) == "y = f(aaaaaaaaaa,\n        bbbbbbbbbb)\n"


def test_prose_hangs_under_its_label():
    message = "  Likely cause:  " + "a cause in many words " * 6
    lines = fit_prose(message, 40).splitlines()
    assert len(lines) > 3 and all(line.startswith(" " * 17) and line[17] != " " for line in lines[1:])
    assert clip("one two three", 10) == "one two…" and clip("short", 10) == "short"


def test_a_closed_pipe_ends_the_command_quietly(tmp_path):
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line is written, as `| head` can be
    env = {**os.environ, "HARNESS_HOME": str(tmp_path), "HARNESS_DRILL_CHECKER": "none"}
    done = subprocess.run([sys.executable, "-m", "harness", "drill", "list"], stdout=write_end, stderr=subprocess.PIPE,
                          text=True, env=env, timeout=60)
    os.close(write_end)
    assert (done.returncode, done.stderr) == (0, "")


def test_the_readme_counts_the_bank():
    counted = re.search(r"A bank of (\d+) drills", (ROOT / "README.md").read_text())
    assert counted is not None and int(counted.group(1)) == len(entries())
