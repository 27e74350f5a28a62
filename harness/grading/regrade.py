"""Regrading by content: re-judge the tasks whose check changed, re-run the notebooks that changed, nothing else.

A grading records, with its grades, which assignment it holds, where its submissions came from and each
task's fingerprint (`grading.json`; `fingerprint`: a digest of the source of every module that decides the
task). Each result keeps its notebook's SHA-256 (`GradeResult.notebook_sha256`) and each student's
observations (what the probe cells displayed, decided on outside the sandbox: `autograde.observations`) are
kept in `observations/`. A regrade then does two things, and says why for every student it touched:

- a task whose fingerprint changed is judged again on the stored observations, with the stored cases and
  nonce (no kernel runs), for every student; a task failed for forbidden code (the source scan, which no check
  change affects) stays failed. Those whose points or failure codes moved get their feedback generated again
  (`refresh_feedback`);
- a submission that is new, or whose notebook's digest differs from the graded one (`reruns`), is graded
  again from its notebook, as is one asked for by name.

Every student whose result was redone is reported, from what to what and why (`Change`), on the console and in
`regrade.md` beside the grades (`write_report`, a section per regrade); every other student, task and file
stays as it was.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.grading.autograde import OBSERVATIONS, judge_observed
from harness.grading.batch import RESULTS
from harness.grading.feedback import regenerate_feedback
from harness.grading.fingerprint import fingerprints
from harness.grading.jobs import GradeResult, write_atomically
from harness.grading.mistakes import JUDGED
from harness.grading.scan import FORBIDDEN_CODE
from harness.grading.submissions import Submission, notebook_sha256
from harness.judge.verdict import Verdict

RECORD = "grading.json"
REPORT = "regrade.md"
CHECK_CHANGED = "check changed"
RESUBMITTED = "resubmitted"
NEW = "new submission"
UNRECORDED = "graded before notebook digests were kept"
ASKED = "regraded on request"


def write_record(out: Path, assignment: str, tasks: list[str], source: Path | None) -> None:
    """Record which assignment `out` holds, where its submissions came from (None: unknown) and the fingerprint of
    each task's check (`grading.json`)."""
    write_atomically(out / RECORD, json.dumps({"assignment": assignment, "fingerprints": fingerprints(tasks),
                                               "source": str(source.resolve()) if source else None}, indent=1))


def read_record(out: Path) -> dict[str, Any] | None:
    """The grading record of `out`, or None if `out` holds no grading."""
    path = out / RECORD
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def changed_tasks(record: dict[str, Any]) -> list[str]:
    """The tasks of `record` whose fingerprint differs from their check's now."""
    now = fingerprints(list(record["fingerprints"]))
    return [task for task, recorded in record["fingerprints"].items() if now[task] != recorded]


def points(result: GradeResult) -> float:
    """The points of `result`, all tasks together."""
    return sum(score for score, _ in result.scores.values())


@dataclass(frozen=True)
class Change:
    """One student's result that a regrade redid: before (None for a first grading), after and why."""

    student: str
    before: GradeResult | None
    after: GradeResult
    why: str  # CHECK_CHANGED, RESUBMITTED, NEW, UNRECORDED or ASKED
    verdicts: dict[str, Verdict] = field(default_factory=dict)  # the re-judged tasks' new verdicts

    def moves(self) -> list[str]:
        """`task: before -> after` for each task whose outcome changed (a new student's failures)."""
        before = self.before.failures if self.before else {}
        after = self.after.failures
        return [f"{task}: {before.get(task, 'passed')} -> {after.get(task, 'passed')}"
                for task in sorted(before.keys() | after.keys()) if before.get(task) != after.get(task)]

    def scores(self) -> tuple[str, str]:
        """The total before ('none' for a first grading) and after."""
        return (f"{points(self.before):g}" if self.before else "none"), f"{points(self.after):g}"

    def line(self) -> str:
        """`carla: 11 -> 14 points (resubmitted); 00-accuracy: wrong-accuracy -> passed`."""
        before, after = self.scores()
        return "; ".join([f"{self.student}: {before} -> {after} points ({self.why})", *self.moves()])


def reruns(graded: dict[str, GradeResult], submissions: list[Submission], asked: set[str]) -> dict[str, str]:
    """Student -> why, for each submission to grade again: the students `asked` for (when any), else each new
    student and each whose notebook's digest differs from the one graded (or was not kept)."""
    if asked:
        return {s.student: ASKED for s in submissions if s.student in asked}
    why = {}
    for submission in submissions:
        before = graded.get(submission.student)
        if before is None:
            why[submission.student] = NEW
        elif before.notebook_sha256 != notebook_sha256(submission):
            why[submission.student] = RESUBMITTED if before.notebook_sha256 or before.status == "missing" else \
                UNRECORDED
    return why


def _rejudged(result: GradeResult, observed: dict[str, Any], tasks: list[str]) -> tuple[GradeResult,
                                                                                       dict[str, Verdict]]:
    """`result` with `tasks` judged again on the stored observations, and their new verdicts."""
    scores, failures = dict(result.scores), dict(result.failures)
    verdicts = {}
    for task in tasks:
        if task not in observed["tasks"] or task not in scores or failures.get(task) == FORBIDDEN_CODE:
            continue
        verdict = verdicts[task] = judge_observed(task, observed["tasks"][task], observed["nonce"])
        scores[task] = [scores[task][1] if verdict.passed else 0.0, scores[task][1]]
        failures.pop(task, None)
        if not verdict.passed:
            failures[task] = verdict.code
    order = [task for task in result.scores if task in failures]
    return replace(result, scores=scores, failures={task: failures[task] for task in order}), verdicts


@dataclass
class Rejudged:
    """What judging changed tasks again did: the results that moved, and who had no stored observations."""

    changes: list[Change] = field(default_factory=list)
    no_observations: list[str] = field(default_factory=list)


def rejudge(out: Path, graded: dict[str, GradeResult], tasks: list[str]) -> Rejudged:
    """Judge `tasks` again, from the observations stored in `out`, for each of the `graded` results; write back
    (`out`/results) those whose points or failure codes moved."""
    rejudged = Rejudged()
    for student, result in graded.items() if tasks else ():
        observed_path = out / OBSERVATIONS / f"{student}.json"
        if result.status not in JUDGED:  # nothing was judged: not attempted, missing, invalid, error
            continue
        if not observed_path.is_file():
            rejudged.no_observations.append(student)
            continue
        new, verdicts = _rejudged(result, json.loads(observed_path.read_text(encoding="utf-8")), tasks)
        if (points(new), new.failures) != (points(result), result.failures):
            rejudged.changes.append(Change(student, result, new, CHECK_CHANGED, verdicts))
            write_atomically(out / RESULTS / f"{student}.json", new.to_json())
    return rejudged


@dataclass
class Regrade:
    """A regrade's outcome: every student's result after it, the results redone, and what was done (sentences)."""

    assignment: str
    source: Path | None  # the submissions looked at (None: none recorded)
    results: dict[str, GradeResult]
    changes: list[Change]
    done: list[str]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def write_report(out: Path, changes: list[Change], done: list[str]) -> Path:
    """Add this regrade's section to `out`/regrade.md: what was done (`done`, sentences), then a row per student
    whose result was redone: points before and after, why, and which tasks moved."""
    path = out / REPORT
    lines = [] if path.is_file() else ["# Regrades", "", "Each regrade adds a section: the students whose result "
                                       "was redone, their points before and after, and why.", ""]
    lines += [f"## {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}", "", *(f"- {line}" for line in done), ""]
    if changes:
        lines += ["| student | before | after | why | tasks that moved |", "|---|---|---|---|---|"]
        lines += [f"| {_cell(c.student)} | {c.scores()[0]} | {c.scores()[1]} | {c.why} | "
                  f"{_cell('; '.join(c.moves())) or 'none'} |" for c in changes]
    else:
        lines.append("No student's result moved.")
    with path.open("a", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n\n")
    return path


def refresh_feedback(out: Path, template: Path, assignment: str, changes: list[Change]) -> list[str]:
    """Generate again the feedback of every student whose result re-judging moved (`regenerate_feedback`);
    `out`/gradebook.db must already hold the new points. Returns why a student's feedback could not be."""
    problems = []
    for change in changes:
        if problem := regenerate_feedback(out, template, assignment, change.student, change.verdicts):
            problems.append(problem)
    return problems
