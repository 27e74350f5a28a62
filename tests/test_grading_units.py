"""Fast unit tests of the grading pieces: cell repair, submission collection, hidden-test stripping,
nbgrader's IgnorePattern, the kernel's memory limit and the tamper guard."""

from __future__ import annotations

import copy
import subprocess
import sys
import zipfile

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_output

from harness.grading import tamper
from harness.grading.feedback import StripHiddenTests, without_hidden_tests
from harness.grading.layout import REPO_ROOT, course_config
from harness.grading.restore import restore_cells
from harness.grading.submissions import collect, student_id

RELEASE = nbformat.read(REPO_ROOT / "notebooks" / "00_welcome" / "00_welcome.ipynb", as_version=4)


def ids(notebook):
    return [c.metadata.get("nbgrader", {}).get("grade_id") for c in notebook.cells]


def test_untouched_release_needs_no_repair():
    restored, repairs = restore_cells(copy.deepcopy(RELEASE), RELEASE)
    assert repairs == [] and restored.cells == RELEASE.cells


def test_moved_and_deleted_cells_are_restored_in_release_order():
    student = copy.deepcopy(RELEASE)
    test_cell = student.cells.pop(ids(student).index("00-accuracy"))
    student.cells.insert(0, test_cell)
    del student.cells[ids(student).index("00-make-batch")]
    student.cells[ids(student).index("00-count-params-code")].source = (
        "def count_trainable_parameters(m):\n    return 1")
    restored, repairs = restore_cells(student, RELEASE)
    graded = [i for i in ids(restored) if i]
    assert graded == [i for i in ids(RELEASE) if i]
    assert any("moved" in r for r in repairs) and any("deleted cell '00-make-batch'" in r for r in repairs)
    assert restored.cells[ids(restored).index("00-count-params-code")].source.endswith("return 1")


def test_student_cells_keep_their_place():
    student = copy.deepcopy(RELEASE)
    position = ids(student).index("00-make-batch") + 1
    student.cells.insert(position, new_code_cell("print('my own experiment')"))
    restored, repairs = restore_cells(student, RELEASE)
    assert repairs == [] and restored.cells[position].source == "print('my own experiment')"


def test_collects_folders_flat_lms_files_and_zips(tmp_path):
    (tmp_path / "in" / "alice").mkdir(parents=True)
    (tmp_path / "in" / "alice" / "00_welcome.ipynb").write_text("{}")
    (tmp_path / "in" / "alice" / "notes.txt").write_text("x")
    (tmp_path / "in" / "doejane_1234_5678_00_welcome.ipynb").write_text("{}")
    (tmp_path / "in" / "bob smith").mkdir()
    found = {s.student: s for s in collect(tmp_path / "in", "00_welcome")}
    assert found.keys() == {"alice", "doejane", "bob-smith"}
    assert found["alice"].notes == ["extra files ignored: notes.txt"]
    assert found["bob-smith"].problem["status"] == "missing"
    with zipfile.ZipFile(tmp_path / "export.zip", "w") as archive:
        archive.write(tmp_path / "in" / "doejane_1234_5678_00_welcome.ipynb", "doejane_1234_5678_00_welcome.ipynb")
    zipped = collect(tmp_path / "export.zip", "00_welcome", tmp_path / "extract")
    assert [s.student for s in zipped] == ["doejane"] and zipped[0].notebook.exists()


def test_zip_members_escaping_the_folder_are_refused(tmp_path):
    with zipfile.ZipFile(tmp_path / "evil.zip", "w") as archive:
        archive.writestr("../../escaped.ipynb", "{}")
    with pytest.raises(ValueError, match="outside the extraction folder"):
        collect(tmp_path / "evil.zip", "00_welcome", tmp_path / "extract")
    assert student_id("../x y") == "x-y"


def _test_cell(outputs):
    cell = new_code_cell('check("00-x", f)\n### BEGIN HIDDEN TESTS\ncheck("00-x", f, hidden=True)\n'
                         '### END HIDDEN TESTS')
    cell.metadata["nbgrader"] = {"grade": True, "solution": False, "grade_id": "00-x", "points": 1}
    cell.outputs = outputs
    return cell


def test_feedback_strips_hidden_code_output_and_traceback():
    passed_visible = new_output("stream", name="stdout", text="\u2714 00-x: ok\n")
    hidden_error = new_output("error", ename="CheckFailed", evalue="00-x failed [wrong-shape]\n  Observed: (7, 3)",
                              traceback=['check("00-x", f, hidden=True)', "CheckFailed: secret input (7, 3)"])
    cell, _ = StripHiddenTests().preprocess_cell(_test_cell([passed_visible, hidden_error]), {}, 0)
    text = repr(cell)
    assert "hidden=True" not in text and "(7, 3)" not in text and "HIDDEN" not in cell.source
    assert cell.outputs[-1].ename == "HiddenTestsFailed" and "[wrong-shape]" in cell.outputs[-1].evalue
    visible_error = new_output("error", ename="CheckFailed", evalue="00-x failed [not-a-tensor] teach",
                               traceback=['----> 1 check("00-x", f)', '      3 check("00-x", f, hidden=True)'])
    cell, _ = StripHiddenTests().preprocess_cell(_test_cell([visible_error]), {}, 0)
    assert "not-a-tensor] teach" in cell.outputs[0].evalue and "hidden=True" not in repr(cell.outputs)
    assert without_hidden_tests("a\n### BEGIN HIDDEN TESTS\nb\n### END HIDDEN TESTS\nc") == "a\nc"


def test_ignore_pattern_drops_warnings_tqdm_and_logging_but_keeps_errors(tmp_path):
    from nbgrader.preprocessors import IgnorePattern

    pattern = course_config(tmp_path).IgnorePattern.pattern
    noise = ["/x.py:3: UserWarning: deprecated\n  warnings.warn(", " 40%|████      | 4/10 [00:01<00:02, 3.1it/s]",
             "INFO:harness:epoch 1", "WARNING: something"]
    kept = ["Traceback (most recent call last):\nValueError: bad", "my debugging output"]
    cell = new_code_cell("x")
    cell.outputs = [new_output("stream", name="stderr", text=t) for t in noise + kept]
    cell.outputs.append(new_output("error", ename="ValueError", evalue="bad", traceback=[]))
    cell, _ = IgnorePattern(pattern=pattern, enabled=True).preprocess_cell(cell, {}, 0)
    assert [o.get("text") for o in cell.outputs if o.output_type == "stream"] == kept
    assert cell.outputs[-1].output_type == "error"


@pytest.mark.slow
def test_sandbox_memory_limit_raises_memory_error_not_oom(tmp_path):
    code = ("from harness.grading.sandbox import apply_limits; apply_limits(1024); import torch\n"
            "try:\n    torch.ones(2**29)\nexcept RuntimeError as e:\n    print('refused', 'allocate' in str(e))\n"
            "print(torch.ones(1000).sum().item())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["refused", "True", "1000.0"], done.stderr


@pytest.mark.slow
def test_tamper_guard_restores_and_reports():
    code = """
import builtins, math, torch
import harness.checks
from harness.checks import check
from harness.grading import tamper
tamper.install("harness.checks.lesson00")
assert harness.checks.core.graded_outside  # test cells now leave checking to the judge
namespace = {"check": check}
assert tamper.verify(namespace, "00-a", "n") == []
harness.checks.check = namespace["check"] = lambda *a, **k: None
builtins.AssertionError = ValueError
torch.allclose = lambda *a, **k: True
found = tamper.verify(namespace, "00-b", "n")
print(sorted(found))
print(torch.allclose(torch.zeros(1), torch.ones(1)), namespace["check"] is check, builtins.AssertionError is ValueError)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    lines = done.stdout.splitlines()  # outside a kernel, each heartbeat bundle is printed as its repr
    assert len(lines) == 4, done.stderr
    assert [line.count(tamper.GUARD_MIME) for line in (lines[0], lines[1])] == [1, 1]
    assert "'nonce': 'n'" in lines[0] and "'found': []" in lines[0] and "torch.allclose" in lines[1]
    for phrase in ("builtins.AssertionError", "harness.checks.check", "torch.allclose", "notebook's 'check'"):
        assert phrase in lines[2]
    assert lines[3] == "False True False"
