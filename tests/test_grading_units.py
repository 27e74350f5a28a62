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


def test_lms_names_keep_the_user_id_and_late_flag(tmp_path):
    from harness.grading.submissions import lms_identity

    canvas = lms_identity("doejane_LATE_1001_5678_00_welcome-1.ipynb")
    assert (canvas.system, canvas.user_id, canvas.name, canvas.late, canvas.prefix) == (
        "canvas", "1001", "doejane", True, "doejane_LATE_1001_5678")
    assert not lms_identity("doejane_1001_5678_00_welcome.ipynb").late
    moodle = lms_identity("Jane Doe_12345_assignsubmission_file_")
    assert (moodle.system, moodle.user_id, moodle.name) == ("moodle", "12345", "Jane Doe")
    blackboard = lms_identity("Lesson 00_jdoe7_attempt_2024-02-01-10-30-00_00_welcome.ipynb")
    assert (blackboard.system, blackboard.user_id) == ("blackboard", "jdoe7")
    assert lms_identity("alice") is None
    folder = tmp_path / "moodle"
    (folder / "Jane Doe_12345_assignsubmission_file_").mkdir(parents=True)
    (folder / "Jane Doe_12345_assignsubmission_file_" / "00_welcome.ipynb").write_text("{}")
    (folder / "Li Wei_777_assignsubmission_file_00_welcome.ipynb").write_text("{}")
    found = {s.student: s.lms for s in collect(folder, "00_welcome")}
    assert {k: (v.system, v.user_id) for k, v in found.items()} == {"Jane-Doe": ("moodle", "12345"),
                                                                    "Li-Wei": ("moodle", "777")}


def test_gradescope_folders_are_named_by_their_metadata(tmp_path):
    (tmp_path / "submission_111").mkdir()
    (tmp_path / "submission_111" / "00_welcome.ipynb").write_text("{}")
    (tmp_path / "submission_metadata.yml").write_text(
        "submission_111:\n  :submitters:\n  - :name: Ada Amos\n    :sid: '4242'\n    :email: ada@example.org\n")
    [found] = collect(tmp_path, "00_welcome")
    assert found.student == "Ada-Amos" and (found.lms.system, found.lms.user_id) == ("gradescope", "4242")


def test_roster_matching_by_id_then_name_reports_ambiguity(tmp_path):
    from harness.grading.lms import match_roster, read_roster

    (tmp_path / "roster.csv").write_text("Identifier,Full name,Email address\nParticipant 12,Jane Doe,j@x\n"
                                         "Participant 13,Sam Lee,s1@x\nParticipant 14,Sam Lee,s2@x\n")
    roster = read_roster(tmp_path / "roster.csv")
    assert roster[0].user_id == "12" and roster[0].email == "j@x"
    results = [{"student": "doejane", "lms": {"name": "doejane"}}, {"student": "Sam-Lee", "lms": {}},
               {"student": "x", "lms": {"user_id": "13", "name": "x"}}, {"student": "nobody", "lms": {}}]
    matching = match_roster(results, roster)
    assert matching.how == {"doejane": "name", "Sam-Lee": "unmatched", "x": "lms id", "nobody": "unmatched"}
    assert matching.ambiguous == {"Sam-Lee": ["Sam Lee", "Sam Lee"]} and matching.unmatched == ["nobody"]
    assert matching.absent == ["Sam Lee"]
    with pytest.raises(ValueError, match="no name column"):
        (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
        read_roster(tmp_path / "bad.csv")


def test_item_analysis_discrimination_is_the_correlation_with_the_rest():
    from harness.grading.mistakes import item_analysis

    def result(a, b, c, status="ok"):
        return {"status": status, "scores": {"t-a": [a, 1.0], "t-b": [b, 1.0], "t-c": [c, 1.0]}}

    results = [result(1, 1, 1), result(1, 1, 0), result(0, 0, 1, "flagged"), result(0, 0, 0)]
    blank = [result(0, 0, 0, status) for status in ("not attempted", "invalid", "missing", "error")]  # left out
    items = {i.task: i for i in item_analysis(results + blank, ["t-a", "t-b", "t-c"],
                                              {"t-a": 1, "t-b": 1, "t-c": 1})}
    assert items["t-a"].pass_rate == 0.5 and items["t-a"].discrimination == pytest.approx(2 / (2 * 2 ** 0.5 * 1))
    assert items["t-c"].discrimination == pytest.approx(0.0)
    constant = item_analysis([result(1, 0, 0), result(1, 1, 0), result(0, 0, 0, "not attempted")], ["t-a"],
                             {"t-a": 1})
    assert constant[0].discrimination is None


def test_feedback_index_names_exercises_and_messages_wrap():
    from harness.grading.feedback import polish_feedback
    from harness.grading.layout import exercise_titles

    titles = exercise_titles(RELEASE)
    assert titles["00-accuracy"] == "Exercise 3 \u2014 accuracy"
    html = polish_feedback('<head></head><li><a href="#00-accuracy">Test cell</a> (Score: 0 / 2)</li>', titles)
    assert '<a href="#00-accuracy">Exercise 3 \u2014 accuracy (<code>00-accuracy</code>)</a>' in html
    assert "white-space: pre-wrap; overflow-wrap: anywhere" in html
    assert polish_feedback(html, titles) == html


def test_the_known_alembic_head_is_the_one_alembic_reports_for_the_installed_nbgrader():
    """harness.grading.alembic_head spares each new gradebook a 2-second `alembic heads` subprocess: its answer
    for the installed nbgrader must be alembic's own (asked here as nbgrader asks), and the pinned nbgrader must
    be listed."""
    import nbgrader
    import nbgrader.api
    from nbgrader.dbutil import _temp_alembic_ini

    from harness.grading.alembic_head import KNOWN_HEADS, use_known_alembic_head
    from harness.grading.layout import put_environment_tools_on_path

    put_environment_tools_on_path()  # the `alembic` command of this environment
    with _temp_alembic_ini("sqlite:////tmp/gradebook.db") as alembic_ini:
        reported = subprocess.check_output(["alembic", "-c", alembic_ini, "heads"], text=True).split()[0]
    assert KNOWN_HEADS.get(nbgrader.__version__) == reported, f"nbgrader {nbgrader.__version__}: its head is {reported}"
    use_known_alembic_head()
    assert nbgrader.api.get_alembic_version() == reported


def test_a_regrade_grades_again_the_new_and_changed_notebooks_or_the_students_asked_for(tmp_path):
    from harness.grading.jobs import GradeResult
    from harness.grading.regrade import ASKED, NEW, RESUBMITTED, UNRECORDED, reruns
    from harness.grading.submissions import Submission, notebook_sha256

    names = ("same", "fixed", "new", "old", "late")
    for name in names:
        (tmp_path / f"{name}.ipynb").write_text("{ }" if name == "fixed" else "{}")
    submissions = [Submission(name, tmp_path / f"{name}.ipynb") for name in names]
    submissions.append(Submission("absent", None, {"status": "missing", "reason": "no notebook"}))
    digest = notebook_sha256(submissions[0])
    graded = {name: GradeResult(name, "00_welcome", "ok", notebook_sha256=digest) for name in ("same", "fixed")}
    graded["absent"] = GradeResult("absent", "00_welcome", "missing")
    graded["late"] = GradeResult("late", "00_welcome", "missing")  # had no notebook, now has one
    graded["old"] = GradeResult("old", "00_welcome", "ok")  # graded before digests were kept
    assert reruns(graded, submissions, set()) == {"fixed": RESUBMITTED, "new": NEW, "old": UNRECORDED,
                                                  "late": RESUBMITTED}
    assert reruns(graded, submissions, {"same"}) == {"same": ASKED}


def test_an_unjudged_submission_gets_a_page_with_what_was_wrong_its_score_and_what_to_do(tmp_path):
    from harness.grading.feedback import write_unjudged_feedback
    from harness.grading.jobs import GradeResult

    result = GradeResult("ann", "00_welcome", "invalid", scores={"00-a": [0.0, 2.0], "00-b": [0.0, 3.0]})
    page = write_unjudged_feedback(tmp_path, result, "not JSON near <script>alert(1)</script>").read_text()
    assert page.count("<script>") == 0 and "&lt;script&gt;" in page  # the reason is text, never markup
    assert "Score: 0 / 5" in page and "submit the notebook file itself, 00_welcome.ipynb" in page
    assert (tmp_path / "feedback" / "ann" / "00_welcome" / "00_welcome.html").is_file()
