"""`harness grade` on hostile and broken submissions: each gets a recorded, explained result; good ones are untouched.

One parallel batch (2 workers) grades every fixture of tests/fixtures/submissions/hostile.py with small limits
(10 s per cell, 1.5 GiB per kernel, 100 kB of output per cell); the tests read its results, CSV, summary and
gradebook. A smaller batch of the attacks is graded again by an ordinary user. Elsewhere: a kernel reading the
drill bank's answers (`test_judge.py`), a regenerated held-out set (`test_grading_sealed.py`), a cgroup's bounds
(`test_grading_cgroup.py`).
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import nbformat
import pytest

from harness.grading.batch import RESULTS, Limits, grade_batch
from harness.grading.layout import REPO_ROOT
from harness.grading.runtime_folder import private_mounts_available
from harness.grading.submissions import collect
from harness.grading.summary import write_summary

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("hostile")]
_spec = importlib.util.spec_from_file_location("hostile", REPO_ROOT / "tests/fixtures/submissions/hostile.py")
hostile = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hostile)
ASSIGNMENT = hostile.ASSIGNMENT
SECRET = bytes(range(32))


LESSON_CHECKS = REPO_ROOT / "harness" / "checks" / "lesson00" / "accuracy.py"


# CI grades the whole batch a second time as an ordinary user (`.ci/run`: HARNESS_TEST_GRADER=unprivileged); the
# attacks that need a root grader's cgroup or private mounts to be stopped are left out of that pass.
UNPRIVILEGED_GRADER = os.environ.get("HARNESS_TEST_GRADER") == "unprivileged"
EXPECTED = {name: entry for name, entry in hostile.SUBMISSIONS.items()
            if not (UNPRIVILEGED_GRADER and name in hostile.ROOT_GRADER_ONLY)}
LIMITS = Limits(cell_timeout=10, submission_seconds=240, memory_mb=1536, max_output_bytes=100_000)


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, dict], Path]:
    root = tmp_path_factory.mktemp("hostile")
    checks_before = LESSON_CHECKS.read_bytes()
    release = nbformat.read(REPO_ROOT / "notebooks" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    solution = nbformat.read(REPO_ROOT / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    hostile.write_submissions(root, release, solution, names=list(EXPECTED), repo=REPO_ROOT)
    hostile.write_entries(root, REPO_ROOT)
    if UNPRIVILEGED_GRADER:
        results = _grade_as_ordinary_user(root)
    else:
        results = grade_batch(collect(root / "in", ASSIGNMENT), ASSIGNMENT, root / "out", workers=2, limits=LIMITS,
                              secret=SECRET)
    write_summary(results, root / "out", ASSIGNMENT)
    # the escape attack's background process starts before its job ends and writes 4 s later: wait until 6 s after
    escaped_by = (root / "out" / RESULTS / "escape.json").stat().st_mtime + 6
    time.sleep(max(0.0, escaped_by - time.time()))
    assert LESSON_CHECKS.read_bytes() == checks_before, "a submission changed harness/checks/lesson00/accuracy.py"
    return {r["student"]: r for r in results}, root / "out"


@pytest.mark.parametrize("name", list(EXPECTED))  # the odd entries: test_links_are_refused...
def test_each_submission_gets_an_explained_result(batch, name):
    results, _ = batch
    _, _, status, total, phrases = EXPECTED[name]
    result = results[name]
    reasons = " | ".join(result["reasons"])
    assert result["status"] == status, (result["status"], reasons)
    assert sum(score for score, _ in result["scores"].values()) == total, result
    for phrase in phrases:
        if phrase in hostile.ROOT_GRADER_PHRASES and (UNPRIVILEGED_GRADER or not private_mounts_available()):
            assert phrase not in reasons, f"{name}: {phrase!r} in {reasons}, though no process could be named"
            continue
        assert phrase in reasons, f"{name}: {phrase!r} not in {reasons}"
    for task, code in hostile.expected_failures().get(name, {}).items():
        assert result["failures"].get(task) == code, result["failures"]


def test_links_are_refused_unread_and_odd_names_are_graded_apart(batch):
    """A link to the solutions or to a root-only file earns nothing and quotes nothing; a 249-byte name and
    lookalike ids are each graded (full marks: they are perfect notebooks) under bounded, flagged ids."""
    results, out = batch
    for name in (hostile.LINKED_TO_SOLUTIONS, hostile.LINKED_TO_SHADOW):
        result = results[name]
        assert result["status"] == "invalid" and "symbolic link" in result["reasons"][0], result
        assert sum(score for score, _ in result["scores"].values()) == 0
    csv_text = (out / "grades.csv").read_text()
    assert "root:" not in csv_text and "BEGIN SOLUTION" not in csv_text
    [long] = [r for s, r in results.items() if s.startswith("张")]
    assert len(long["student"].encode()) <= 64 and hostile.LONG_NAME in " ".join(long["reasons"])
    lookalikes = [r for s, r in results.items() if s != "alice" and not s.startswith("张") and
                  any("reads the same" in x or "make the same id" in x for x in r["reasons"])]
    assert len(lookalikes) == 2, sorted(results)
    for result in [long, results["alice"], *lookalikes]:
        assert result["status"] == "flagged" and sum(s for s, _ in result["scores"].values()) == 5.0, result
    feedback = " ".join(p.read_text() for p in (out / "feedback" / "root-read").rglob("*.html"))
    assert "root:" not in feedback and "def grade_batch" not in feedback


def test_grades_csv_and_gradebook_agree(batch):
    from nbgrader.api import Gradebook

    results, out = batch
    rows = {row["student"]: row for row in csv.DictReader((out / "grades.csv").open())}
    assert rows.keys() == results.keys()
    assert rows["perfect"]["total"] == "5.0" and rows["perfect"]["00-accuracy"] == "2.0"
    assert rows["missing"]["status"] == "missing" and "no notebook" in rows["missing"]["reasons"]
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}", "pytorch-training-lab") as gradebook:
        for name, result in results.items():
            expected = sum(score for score, _ in result["scores"].values())
            assert gradebook.find_submission(ASSIGNMENT, name).score == pytest.approx(expected), name


def test_attacks_leave_other_submissions_the_grades_and_the_course_untouched(batch):
    """The escape attack's writes and its background process reach nothing outside its sandbox."""
    from nbgrader.api import Gradebook

    results, out = batch
    root = out.parent
    perfect = (root / "in" / "perfect" / f"{ASSIGNMENT}.ipynb").read_text()
    assert "FORGED-BY-ESCAPE" not in perfect and nbformat.reads(perfect, as_version=4).cells
    assert "FORGED-BY-ESCAPE" not in (out / "grades.csv").read_text()
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}", "pytorch-training-lab") as gradebook:
        assert gradebook.find_submission(ASSIGNMENT, "perfect").score == 5.0
    assert results["perfect"]["status"] == "ok" and not results["perfect"]["reasons"]


def test_the_student_feedback_holds_the_judges_messages_and_no_hidden_case(batch):
    _, out = batch
    # root-read answers 00-accuracy with a constant, and nothing the scan forbids: the judge's message is its feedback
    html = (out / "feedback" / "root-read" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    assert "wrong-accuracy" in html and "Observed" in html  # the visible case's teaching message
    assert "check(&quot;00-accuracy&quot;, accuracy, hidden=True)" not in html and "hidden=True" not in html


def test_a_garbage_gradebook_in_the_output_folder_is_kept_aside_not_fatal(tmp_path):
    from nbgrader.api import Gradebook

    from harness.grading.batch import merge_into_gradebook
    from harness.grading.release import build_course

    template = tmp_path / "template"
    build_course(template, [ASSIGNMENT])
    db = tmp_path / "out" / "gradebook.db"
    db.parent.mkdir()
    db.write_text("not a database")
    result = {"student": "ada", "assignment": ASSIGNMENT, "scores": {"00-accuracy": [2.0, 2.0]}}
    note = merge_into_gradebook(db, template, [result])
    assert note and "moved to gradebook.db.unreadable-" in note
    assert list(db.parent.glob("gradebook.db.unreadable-*"))[0].read_text() == "not a database"
    with Gradebook(f"sqlite:///{db}", "pytorch-training-lab") as gradebook:
        assert gradebook.find_submission(ASSIGNMENT, "ada").score == 2.0
    assert not list(db.parent.glob(".gradebook.db.*.tmp"))


def test_summary_reports_pass_rates_distribution_and_flags(batch):
    results, out = batch
    rates = {row["task"]: float(row["passed_share"]) for row in csv.DictReader((out / "pass_rates.csv").open())}
    judged = [r for r in results.values() if r["status"] in ("ok", "flagged")]  # blank, missing, invalid left out
    passed = sum(r["scores"]["00-count-params"][0] == 2 for r in judged)
    assert rates["00-count-params"] == pytest.approx(round(passed / len(judged), 3))
    assert (out / "distribution.png").stat().st_size > 1000
    summary = (out / "summary.md").read_text()
    assert "**hung** (flagged)" in summary and "**invalid-json** (invalid)" in summary
    assert "**perfect**" not in summary


def test_every_student_gets_feedback_the_unjudged_a_page_saying_what_to_do(batch):
    _, out = batch
    students = {p.parts[-3] for p in (out / "feedback").glob(f"*/{ASSIGNMENT}/*.html")}
    assert {"perfect", "hung", "os-exit", "resources-tamper", "missing", "invalid-json", "untouched"} <= students
    page = (out / "feedback" / "invalid-json" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    assert "not valid notebook JSON" in page and "What to do" in page and "Score: 0 / 5" in page


def test_nan_training_gets_an_explained_result(tmp_path):
    """A lesson-04 submission whose training step produces NaN is graded: its exercise fails with a code, the
    others keep their points. (That one submission spares those graded beside it is the main batch's test: its
    good notebooks keep full marks beside every attack; lesson 04's solution gets full marks in the pipeline.)"""
    from harness.grading.release import answered_release
    from harness.grading.submissions import Submission

    assignment = "04_training_loop"
    nan_step = ("def train_step(model, batch, loss_fn, optimizer):\n    x, y = batch\n    model.train()\n"
                "    optimizer.zero_grad(set_to_none=True)\n    loss = loss_fn(model(x), y) * float('nan')\n"
                "    loss.backward()\n    optimizer.step()\n    return loss.detach()\n")
    path = tmp_path / "in" / "nan" / f"{assignment}.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(answered_release(assignment, {"04-train-step": nan_step}), path)
    [nan] = grade_batch([Submission("nan", path)], assignment, tmp_path / "out", workers=1,
                        limits=Limits(cell_timeout=120, submission_seconds=600), secret=SECRET)
    assert nan["status"] == "ok", nan["reasons"]
    assert nan["scores"]["04-train-step"][0] == 0 and nan["failures"].get("04-train-step"), nan
    kept = {task for task, (score, maximum) in nan["scores"].items() if score == maximum}
    assert kept and "04-train-step" not in kept, nan


# Attacks whose outcome could hang on who the grader is (the uid the kernel runs as, the process cap it counts
# against, where it can write): a clean notebook, a root-only read, a fork bomb and the sandbox escape. The main
# batch grades them as root (as CI does); here an ordinary user does.
UNPRIVILEGED = ("perfect", "root-read", "fork-bomb", "escape")


def _reachable_python(tmp_path: Path) -> list[str]:
    """A command prefix under which another user can run this Python: where it lives below a folder closed to
    others (a pyenv under /root), a private mount namespace shows that folder open, holding only the way to it."""
    closed = next((p for p in reversed(Path(sys.base_prefix).parents) if p.stat().st_mode & 0o001 == 0), None)
    if closed is None:
        return []
    inside = Path(sys.base_prefix).relative_to(closed).parts[0]
    view = tmp_path / "view"
    (view / inside).mkdir(parents=True)
    view.chmod(0o711)
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            f'mount --bind "{closed / inside}" "{view / inside}" && mount --rbind "{view}" "{closed}" && exec "$@"',
            "sh"]


def _grade_as_ordinary_user(root: Path) -> list[dict]:
    """`harness grade` on `root`/in, run by an ordinary user (made with useradd): its sandbox maps the kernel in a
    user namespace (no setpriv, no cgroup, no runtime tmpfs). The results, as grade_batch returns them."""
    import pwd

    subprocess.run(["useradd", "-M", "-s", "/usr/sbin/nologin", "harnessgrader"], capture_output=True, check=False)
    grader = pwd.getpwnam("harnessgrader")
    root.chmod(0o755)
    # pytest's temporary folders are 0700, and so is a clone made with mktemp -d: let the grader through to its own
    # folder and to this environment's Python
    for folder in [*root.parents, *Path(sys.prefix).parents]:
        if folder.stat().st_uid == 0 and folder.stat().st_mode & 0o077 == 0 and str(folder).startswith("/tmp/"):
            folder.chmod(0o711)
    home = root / "home"
    home.mkdir()
    for path in [root, *root.rglob("*")]:
        os.chown(path, grader.pw_uid, grader.pw_gid, follow_symlinks=False)  # never the targets of the links
    code = ("import json\nfrom pathlib import Path\nfrom harness.grading.batch import Limits, grade_batch\n"
            "from harness.grading.submissions import collect\n"
            f"root = Path({str(root)!r})\n"
            f"results = grade_batch(collect(root / 'in', {ASSIGNMENT!r}), {ASSIGNMENT!r}, root / 'out', workers=2,\n"
            f"                      limits=Limits(**{asdict(LIMITS)!r}), secret={SECRET!r})\n"
            "print(json.dumps(results))\n")
    as_grader = ["setpriv", f"--reuid={grader.pw_uid}", f"--regid={grader.pw_gid}", "--clear-groups", "env", "-i",
                 f"PATH={os.environ['PATH']}", f"HOME={home}", "OMP_NUM_THREADS=1", sys.executable, "-c", code]
    done = subprocess.run([*_reachable_python(root), *as_grader], capture_output=True, text=True, timeout=1200,
                          cwd=home)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "no cgroup per kernel can be made here" in done.stdout  # said once, then per-process limits
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None or shutil.which("unshare") is None,
                    reason="the unprivileged grader is made with useradd, which needs root")
def test_an_unprivileged_grader_gets_the_same_results(tmp_path):
    """The attacks whose outcome could hang on who the grader is, graded by an ordinary user: each still earns
    nothing unearned and is explained as under root (CI grades the whole batch so too)."""
    root = tmp_path / "batch"
    root.mkdir()
    release = nbformat.read(REPO_ROOT / "notebooks" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    solution = nbformat.read(REPO_ROOT / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    hostile.write_submissions(root, release, solution, names=list(UNPRIVILEGED), repo=REPO_ROOT)
    results = {r["student"]: r for r in _grade_as_ordinary_user(root)}
    for name in UNPRIVILEGED:
        _, _, status, total, phrases = hostile.SUBMISSIONS[name]
        reasons = " | ".join(results[name]["reasons"])
        assert results[name]["status"] == status, (name, reasons)
        assert sum(score for score, _ in results[name]["scores"].values()) == total, (name, results[name])
        assert all(phrase in reasons for phrase in phrases), (name, reasons)
    assert "root:" not in " ".join(p.read_text() for p in (root / "out" / "feedback").rglob("*.html"))
