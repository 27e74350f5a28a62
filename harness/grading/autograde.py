"""Grade one submission in its own temporary course directory: `python -m harness.grading.autograde JOB RESULT`.

A job (a `harness.grading.jobs.GradeJob` record, JSON, written by `batch`) names the student, the
assignment, the submitted notebook (or why there is none), the template course directory (sources,
release, gradebook from GenerateAssignment), the limits and each task's cases (drawn by the parent from the
instructor's secret; the secret itself never reaches the worker). The worker copies the template, repairs
the submission's cells (`restore`), runs nbgrader's real Autograde with the kernel in the sandbox
(`sandbox`), the grader's cells (`execute`: the tamper guard and a probe cell after every test cell) and
`SandboxedExecute`, then hands each task's observations to the judge (`harness.judge.verdict`), which alone
decides the points: they replace nbgrader's in this job's private gradebook, and the judge's messages
replace the test cells' outputs before the feedback (hidden tests removed) is generated. A notebook that cannot
be read, or whose solution cells are all as released (a blank notebook: status "not attempted"), is never
run: its result scores 0 of the assignment's points and its feedback page says why and what to do. The result (a
`GradeResult` record, JSON): per-task points, failure codes, status and reasons. Nothing it does touches
another submission or the shared gradebook; the parent merges results. The worker reads nothing the
kernel could have written: the kernel's outputs arrive as messages, and the kernel's filesystem is its own.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import sys
import tempfile
import time
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

import nbformat

from harness.contract.case import Case
from harness.grading import cgroup, sandbox
from harness.grading.decoy import decoy_folder
from harness.grading.execute import error_output
from harness.grading.feedback import feedback_sections, polish_feedback, write_unjudged_feedback
from harness.grading.hints_used import hints_used
from harness.grading.instructor_text import capped
from harness.grading.jobs import NOT_ATTEMPTED, GradeJob, GradeResult
from harness.grading.layout import REPO_ROOT, course_config, exercise_titles, put_environment_tools_on_path
from harness.grading.restore import restore_cells
from harness.grading.runtime_folder import filled, runtime_folder
from harness.grading.scan import FORBIDDEN_CODE, Finding, scan_notebook
from harness.grading.sealed import Cases, seal_cases
from harness.judge.verdict import Verdict, judge_task

# The folder of the output where each student's observations are kept (`observations`), for regrades.
OBSERVATIONS = "observations"
MAX_REASONS = 100  # a result's reasons, each capped: a result stays well under a few MB


def _config(course: Path, job: GradeJob, cases: Cases, report: Path, nonce: str, deadline: float) -> Any:
    """nbgrader's configuration for this job: the repository's, with the grading pipeline swapped in.

    `deadline` (time.monotonic()) is when the whole-submission limit stops execution.
    """
    from nbconvert.preprocessors import ClearMetadataPreprocessor
    from nbgrader.preprocessors import (
        AssignLatePenalties,
        CheckCellMetadata,
        IgnorePattern,
        LimitOutput,
        SaveAutoGrades,
    )

    from harness.grading.execute import InjectGuard, SandboxedExecute, StripGuard

    lesson = f"harness.checks.lesson{job.assignment[:2]}"
    checks = REPO_ROOT / "harness" / "checks" / f"lesson{job.assignment[:2]}"
    has_checks = checks.is_dir() or checks.with_suffix(".py").exists()
    return course_config(
        course,
        Autograde={"autograde_preprocessors": [InjectGuard, SandboxedExecute, StripGuard, IgnorePattern,
                                               ClearMetadataPreprocessor, LimitOutput, SaveAutoGrades,
                                               AssignLatePenalties, CheckCellMetadata]},
        **feedback_sections(),
        SandboxedExecute={"timeout": job.timeout, "kernel_name": sandbox.KERNEL_NAME, "deadline": deadline,
                          "submission_seconds": job.submission_seconds,
                          "report_path": str(report), "max_output_bytes": job.max_output_bytes,
                          "runtime_dir": str(course / "runtime")},
        InjectGuard={"lesson_module": lesson if has_checks else "", "nonce": nonce, "cases": json.dumps(cases)},
        StripGuard={"report_path": str(report)},
        LimitOutput={"max_lines": 1000},
    )


def _read_submission(path: Path) -> nbformat.NotebookNode:
    """The submitted notebook, or ValueError saying why it cannot be graded."""
    try:
        notebook = nbformat.reads(path.read_text(encoding="utf-8", errors="replace"), as_version=4)
    except Exception as error:  # nbformat raises several types for unreadable JSON
        raise ValueError(f"the notebook is not valid notebook JSON "
                         f"({type(error).__name__}: {str(error)[:120]})") from None
    if not isinstance(notebook.get("cells"), list):
        raise ValueError("the notebook has no list of cells")
    return notebook


def _reasons(execution: dict[str, Any], nonce: str) -> list[str]:
    """Sentences for the grades CSV from the execution report and the guard's heartbeats."""
    reasons = [f"{cell}: timed out after the per-cell limit" for cell in execution.get("timeout", [])]
    reasons += [f"{cell}: the kernel ignored the interrupt and was killed; later cells not run"
                for cell in execution.get("kernel_hung", [])]
    reasons += [f"{cell}: the kernel died (crash, os._exit or memory); earlier cells kept their points"
                for cell in execution.get("kernel_died", [])]
    reasons += [f"{cell}: the whole-submission limit was reached here; this cell and the later ones were not run, "
                "earlier cells kept their points" for cell in execution.get("submission_limit", [])]
    reasons += [f"{cell}: ran out of the per-submission memory limit" for cell in execution.get("memory", [])]
    reasons += [f"{cell}: output truncated (flood)" for cell in execution.get("output_truncated", [])]
    reasons += [f"processes that left the kernel were still running at the end, killed with the sandbox: {what}"
                for what in execution.get("daemons", [])]
    reasons += [f"{what} (the process cap is {sandbox.PROCESSES}; they slow the classmates graded beside it), "
                "killed with the sandbox" for what in execution.get("processes", [])]
    reasons += [f"the sandbox's {what} was full at the end (ENOSPC or SIGBUS inside; freed with the sandbox)"
                for what in execution.get("tmpfs_full", [])]
    guards = execution.get("guard_cells", [])
    ran = [g for g in guards if g["outcome"] == "ok" and g["role"] != "install"]
    failed = [g for g in guards if g["outcome"] != "ok" and "NotExecuted" not in g["outcome"]]
    reasons += [f"tamper guard before {g['role']} failed ({g['outcome']}): review by hand" for g in failed]
    beats = [beat for g in ran for beat in g["heartbeats"] if isinstance(beat, dict) and beat.get("nonce") == nonce]
    if len(beats) < len(ran):
        reasons.append("tamper guard heartbeat missing: the guard was bypassed; review by hand")
    found = sorted({str(item) for beat in beats for item in beat.get("found", [])})
    if found:
        reasons.append("tampering neutralised before the probes ran: " + "; ".join(found))
    return reasons


def observations(execution: dict[str, Any], cases: Cases, nonce: str) -> dict[str, Any]:
    """What the judge decides from, as data: the run's nonce, and per task its cases (the judge's, `sealed`) and
    what its probe cell displayed. Kept beside the grades (`OBSERVATIONS`), so a regrade re-runs judges without
    running a kernel."""
    probes = execution.get("probes", {})
    return {"nonce": nonce, "tasks": {
        task: {"cases": fields, **probes.get(task, {"bundles": [], "error": "the probe cell was not run"})}
        for task, fields in cases.items()}}


def judge_observed(task: str, observed: dict[str, Any], nonce: str) -> Verdict:
    """The judge's verdict on one task from its stored observation (`observations`)."""
    cases = [Case(hidden=bool(f["hidden"]), seed=int(f["seed"]), inputs=str(f.get("inputs", "")))
             for f in observed["cases"]]
    return judge_task(task, cases, observed["bundles"], nonce, observed["error"])


def _verdicts(observed: dict[str, Any]) -> dict[str, Verdict]:
    """The judge's verdict on every graded task, from what the probe cells displayed."""
    verdicts = {}
    for task, seen in observed["tasks"].items():
        verdicts[task] = judge_observed(task, seen, observed["nonce"])
        print(f"[judge] {task}: {'passed' if verdicts[task].passed else verdicts[task].code}\n{verdicts[task].detail}")
    return verdicts


def failure_cause(error: str) -> str:
    """One line a grader understands for nbgrader's failed autograde, from its error text (never a fragment)."""
    if missing := re.findall(r"No module named '([^']+)'", error):
        return (f"the kernel could not start: the package {missing[-1]!r} is not importable inside the sandbox "
                "(install it in the course's environment, or check that the sandbox binds it)")
    if bwrap := re.findall(r"bwrap: ([^\n]+)", error):
        return f"the kernel could not start: bubblewrap refused ({bwrap[-1].strip()[:160]})"
    if re.search(r"MemoryError|Cannot allocate memory|Resource temporarily unavailable", error):
        return "the kernel could not start within the per-submission limits (memory or processes)"
    if re.search(r"Kernel died before replying|kernel_info|Kernel didn't respond|DeadKernelError", error):
        return "the kernel could not start inside the sandbox (it died before answering); see this student's log"
    last = next((line.strip() for line in reversed(error.splitlines()) if line.strip()), "no message")
    return f"nbgrader could not grade the notebook: {last[:200]}"


def forbid(verdicts: dict[str, Verdict], findings: list[Finding]) -> dict[str, Verdict]:
    """`verdicts` with every exercise that has a scan finding failed (`FORBIDDEN_CODE`), whatever its probe said."""
    failed = dict(verdicts)
    for finding in findings:
        if finding.task in failed:
            message = (f"{FORBIDDEN_CODE}: {finding.what} ({finding.cell}, line {finding.line}); this exercise earns "
                       "nothing")
            failed[finding.task] = Verdict(finding.task, False, FORBIDDEN_CODE, message, message)
    return failed


def untouched_tasks(restored: nbformat.NotebookNode, release: nbformat.NotebookNode) -> list[str]:
    """The tasks whose solution cell (`<task>-code`) is exactly as released: not attempted."""
    def solutions(notebook: nbformat.NotebookNode) -> dict[str, str]:
        found = {}
        for cell in notebook.cells:
            nbgrader = cell.get("metadata", {}).get("nbgrader", {})
            if nbgrader.get("solution") and str(nbgrader.get("grade_id", "")).endswith("-code"):
                found[nbgrader["grade_id"].removesuffix("-code")] = cell.source.strip()
        return found

    theirs = solutions(restored)
    return [task for task, source in solutions(release).items() if theirs.get(task) == source]


def _record_verdicts(course: Path, job: GradeJob, verdicts: dict[str, Verdict]) -> None:
    """Write the judge's points into the job's gradebook and its messages into the autograded test cells."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "pytorch-training-lab") as gradebook:
        submission = gradebook.find_submission(job.assignment, job.student)
        for notebook in submission.notebooks:
            for grade in notebook.grades:
                verdict = verdicts.get(grade.name)
                grade.auto_score = float(grade.max_score) if verdict is not None and verdict.passed else 0.0
                grade.needs_manual_grade = False
        gradebook.db.commit()
    for path in (course / "autograded" / job.student / job.assignment).glob("*.ipynb"):
        path.chmod(0o644)  # nbgrader leaves it read-only: only a root grader could write it otherwise
        notebook = nbformat.read(path, as_version=4)
        for cell in notebook.cells:
            verdict = verdicts.get(cell.get("metadata", {}).get("nbgrader", {}).get("grade_id"))
            if verdict is not None and cell.cell_type == "code":
                cell.outputs = ([nbformat.v4.new_output("stream", name="stdout", text=verdict.message + "\n")]
                                if verdict.passed else [error_output("CheckFailed", verdict.message)])
        nbformat.write(notebook, path)


def _scores(course: Path, job: GradeJob) -> dict[str, list[float]]:
    """Per graded cell: [score, max score], from this job's private gradebook."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "pytorch-training-lab") as gradebook:
        submission = gradebook.find_submission(job.assignment, job.student)
        return {grade.name: [float(grade.score), float(grade.max_score)]
                for notebook in submission.notebooks for grade in notebook.grades}


def unjudged(job: GradeJob, status: str, reason: str, untouched: list[str] | None = None) -> GradeResult:
    """The result of a submission nothing is judged for (no kernel runs): 0 of the assignment's points, and its
    feedback page saying `reason` and what to do (`feedback.write_unjudged_feedback`)."""
    result = job.stamp(GradeResult(job.student, job.assignment, status, reasons=[reason, *job.notes],
                                   untouched=untouched or []))
    write_unjudged_feedback(Path(job.out), result, reason)
    return result


def grade(job: GradeJob) -> GradeResult:
    """Grade the job's submission; return its result (never raises for a bad submission)."""
    started = time.perf_counter()
    if job.problem:
        return unjudged(job, job.problem["status"], job.problem["reason"])
    put_environment_tools_on_path()
    # in the batch's folder: if the parent has to kill this worker, the batch's end still removes the copy
    bounds = cgroup.Bounds(memory_mb=job.memory_mb and job.memory_mb + sandbox.Spec.tmp_mb + sandbox.Spec.shm_mb,
                           processes=sandbox.PROCESSES + 64)  # the bound of RLIMIT_NPROC, plus the launchers
    template = Path(job.template)
    release_dir = template / "notebooks" / job.assignment
    notebook_name = next(release_dir.glob("*.ipynb")).name
    with tempfile.TemporaryDirectory(prefix="harness-grade-", dir=job.scratch or None) as tmp, \
            cgroup.kernel_group(bounds) if job.sandboxed else nullcontext() as group, \
            runtime_folder(Path(tmp) / "runtime", on_tmpfs=job.private_mounts) as runtime, \
            decoy_folder(Path(tmp) / "decoy", job.assignment, release_dir / notebook_name, job.private_mounts) as decoy:
        course = Path(tmp)
        shutil.copy(template / "gradebook.db", course / "gradebook.db")
        shutil.copytree(template / "solutions" / job.assignment, course / "solutions" / job.assignment)
        try:
            submitted = _read_submission(Path(job.notebook))
        except ValueError as error:
            return unjudged(job, "invalid", str(error))
        release = nbformat.read(release_dir / notebook_name, as_version=4)
        restored, repairs = restore_cells(submitted, release)
        untouched = [task for task in untouched_tasks(restored, release) if task in job.cases]
        if job.cases and len(untouched) == len(job.cases):  # a blank notebook: no kernel starts for it
            return unjudged(job, NOT_ATTEMPTED, "not attempted: every solution cell is as released (a blank "
                            "notebook); it was not run", untouched)
        findings = scan_notebook(restored, release)
        target = course / "submitted" / job.student / job.assignment / notebook_name
        target.parent.mkdir(parents=True)
        nbformat.write(restored, target)
        report = course / "execution.json"
        inputs = course / "inputs"
        inputs.mkdir(mode=0o755)
        kernel_cases, judge_cases = seal_cases(job.cases, inputs)
        spec = sandbox.Spec(memory_mb=job.memory_mb, threads=job.threads, sandboxed=job.sandboxed,
                            runtime_dir=str(runtime), data_dir=job.data_dir, inputs_dir=str(inputs),
                            decoy_dir=str(decoy.folder) if job.sandboxed else "", cgroup=group.folders if group else ())
        sandbox.write_kernelspec(course / "jupyter", spec)
        os.environ["JUPYTER_PATH"] = str(course / "jupyter")
        nonce = secrets.token_hex(16)
        from nbgrader.apps import NbGraderAPI

        deadline = time.monotonic() - (time.perf_counter() - started) + job.submission_seconds
        api = NbGraderAPI(config=_config(course, job, kernel_cases, report, nonce, deadline))
        decoy.watch()
        outcome = api.autograde(job.assignment, job.student, force=True, create=True)
        looked = decoy.opened()
        limits_hit = [*(group.hits() if group else []), *filter(None, [filled(runtime)])]
        if not outcome["success"]:
            print(outcome["error"])  # the whole text, for the log
            return GradeResult(job.student, job.assignment, "error",
                               reasons=[failure_cause(outcome["error"]), *limits_hit],
                               seconds=time.perf_counter() - started)
        execution = json.loads(report.read_text()) if report.exists() else {}
        observed = observations(execution, judge_cases, nonce)
        verdicts = forbid(_verdicts(observed), findings)
        _record_verdicts(course, job, verdicts)
        feedback = api.generate_feedback(job.assignment, job.student, force=True)
        reasons = repairs + _reasons(execution, nonce) + limits_hit + job.notes
        reasons += [f"forbidden code: {finding.sentence()}" for finding in findings]
        reasons += [f"{task}: {v.tamper}" for task, v in verdicts.items() if v.tamper]
        if looked:
            reasons.append("the kernel opened the decoy solutions/ folder placed where the instructor's "
                           "solutions would be (a folder no other process on the machine can see)")
        if not feedback["success"]:
            reasons.append(f"feedback not generated: {feedback['error'][-200:]}")
        titles = exercise_titles(release)
        for page in (course / "feedback" / job.student / job.assignment).glob("*.html"):
            page.chmod(0o644)  # as the autograded notebook
            page.write_text(polish_feedback(page.read_text(encoding="utf-8"), titles), encoding="utf-8")
        failures = {task: v.code for task, v in verdicts.items() if not v.passed}
        scores = _scores(course, job)
        out = Path(job.out)
        (out / OBSERVATIONS).mkdir(parents=True, exist_ok=True)
        (out / OBSERVATIONS / f"{job.student}.json").write_text(json.dumps(observed), encoding="utf-8")
        for kind in ("autograded", "feedback"):
            source = course / kind / job.student / job.assignment
            if source.exists():
                shutil.copytree(source, out / kind / job.student / job.assignment, dirs_exist_ok=True)
    return GradeResult(job.student, job.assignment, "flagged" if reasons else "ok", scores, failures, reasons,
                       time.perf_counter() - started, untouched, hints=hints_used(submitted, release, job.cases))


def main(argv: list[str] | None = None) -> int:
    """Worker entry point: read the job file, write the result file."""
    job_path, result_path = (argv or sys.argv[1:])[:2]
    job = GradeJob.from_json(Path(job_path).read_text(encoding="utf-8"))
    try:
        result = grade(job)
    except Exception as error:  # any failure is this student's error row, never the batch's end
        import traceback

        traceback.print_exc()  # the whole story goes to the student's log
        result = GradeResult(job.student, job.assignment, "error",
                             reasons=[f"the grader failed on this submission ({type(error).__name__}: "
                                      f"{str(error)[:160]}); see logs/{job.student}.log"])
    bounded = replace(result, reasons=[capped(reason) for reason in result.reasons[:MAX_REASONS]])
    Path(result_path).write_text(bounded.to_json(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
