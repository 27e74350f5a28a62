"""Regrading after a check changed: `harness grade --regrade OUT` re-judges only the tasks whose check changed.

A grading records, with its grades, a fingerprint of each task's check (`grading.json`): a hash of the
source of the task's probe and judge, of every function and class of the check modules they use (followed
through the names their code refers to, so a helper such as `_inputs` counts, wherever the check modules
are reorganised later), and of the requirement table and hints. Each student's observations (what the
probe cells displayed, decided on outside the sandbox: `autograde.observations`) are kept in
`observations/`, so a regrade runs no kernel: the changed tasks' judges run again on the stored
observations, with the stored cases and nonce. Every student whose points or failure codes moved is
reported, from what to what, and their feedback is generated again with the new verdicts (`refresh_feedback`);
every other task, student and file stays as it was. A task failed for forbidden code (the source scan, which
no check change affects) stays failed.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import types
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.grading.autograde import OBSERVATIONS, judge_observed
from harness.grading.batch import RESULTS
from harness.grading.feedback import regenerate_feedback
from harness.grading.jobs import GradeResult, write_atomically
from harness.grading.scan import FORBIDDEN_CODE
from harness.judge.verdict import Verdict

RECORD = "grading.json"
# modules whose functions count towards a check's fingerprint: the checks and the contract they judge with
CHECK_MODULES = ("harness.checks", "harness.contract")


def _referenced(code: types.CodeType) -> set[str]:
    """The global names `code` and the functions nested in it refer to."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _referenced(constant)
    return names


def _sources(function: Any, seen: dict[str, str], top: bool = False) -> None:
    """Add the source of `function` (a probe or judge: `top`) and of every check-module function or class it
    uses to `seen`."""
    function = inspect.unwrap(function)
    key = f"{function.__module__}.{function.__qualname__}"
    if key in seen or not (top or str(function.__module__).startswith(CHECK_MODULES)):
        return
    try:
        seen[key] = inspect.getsource(function)
    except (OSError, TypeError):
        seen[key] = repr(function)
    code = getattr(function, "__code__", None)
    if code is None:  # a class: its methods
        for member in vars(function).values():
            if inspect.isfunction(member):
                _sources(member, seen)
        return
    module = inspect.getmodule(function)
    for name in sorted(_referenced(code)):
        used = getattr(module, name, None)
        if inspect.isfunction(used) or inspect.isclass(used):
            _sources(used, seen)
        elif used is not None and not inspect.ismodule(used) and isinstance(used, (int, float, str, tuple, frozenset)):
            seen[f"{function.__module__}.{name}"] = repr(used)


def fingerprint(task: str) -> str:
    """A hash of everything that decides `task`'s verdict: its probe, judge, their helpers, requirements, hints."""
    from harness.checks.core import get

    check = get(task)
    seen: dict[str, str] = {}
    _sources(check.probe, seen, top=True)
    _sources(check.judge, seen, top=True)
    digest = hashlib.sha256()
    for key in sorted(seen):
        digest.update(key.encode() + b"\0" + seen[key].encode() + b"\0")
    digest.update(repr(sorted((code, r.states, r.hint) for code, r in check.requires.items())).encode())
    digest.update(repr(check.hints).encode())
    return digest.hexdigest()[:16]


def fingerprints(tasks: list[str]) -> dict[str, str]:
    """Each task's `fingerprint`."""
    return {task: fingerprint(task) for task in tasks}


def write_record(out: Path, assignment: str, tasks: list[str]) -> None:
    """Record which assignment `out` holds and the fingerprint of each task's check (`grading.json`)."""
    write_atomically(out / RECORD, json.dumps({"assignment": assignment, "fingerprints": fingerprints(tasks)},
                                              indent=1))


def read_record(out: Path) -> dict[str, Any] | None:
    """The grading record of `out`, or None if `out` holds no grading."""
    path = out / RECORD
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


@dataclass(frozen=True)
class Change:
    """One student's result that a regrade moved."""

    student: str
    before: dict[str, Any]  # {"points": total, "failures": {task: code}}
    after: dict[str, Any]
    verdicts: dict[str, Verdict] = field(default_factory=dict)  # the re-judged tasks' new verdicts

    def line(self) -> str:
        """`alice: 5 -> 3 points; 00-accuracy: passed -> wrong-accuracy`."""
        parts = [f"{self.before['points']:g} -> {self.after['points']:g} points"]
        before, after = self.before["failures"], self.after["failures"]
        parts += [f"{task}: {before.get(task, 'passed')} -> {after.get(task, 'passed')}"
                  for task in sorted(before.keys() | after.keys()) if before.get(task) != after.get(task)]
        return f"{self.student}: {'; '.join(parts)}"


@dataclass
class Regraded:
    """What a regrade did: the tasks re-judged, the new results, and the students whose results moved."""

    assignment: str
    rejudged: list[str]
    results: list[GradeResult]
    changes: list[Change] = field(default_factory=list)
    no_observations: list[str] = field(default_factory=list)  # graded students without stored observations


def _summary(result: GradeResult) -> dict[str, Any]:
    return {"points": sum(score for score, _ in result.scores.values()), "failures": dict(result.failures)}


def _rejudge(result: GradeResult, observed: dict[str, Any], tasks: list[str]) -> tuple[GradeResult, dict[str, Verdict]]:
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


def regrade(out: Path) -> Regraded:
    """Re-judge, in the grading at `out`, the tasks whose check changed since; write the results back.

    Raises:
        FileNotFoundError: `out` holds no grading with results (graded before regrades were possible, or not
            a grading folder).
    """
    record = read_record(out)
    if record is None or not (out / RESULTS).is_dir():
        raise FileNotFoundError(f"{out} holds no grading to regrade (no {RECORD} or {RESULTS}/): grade into it "
                                "first with harness grade")
    now = fingerprints(list(record["fingerprints"]))
    changed = [task for task, print_ in record["fingerprints"].items() if now[task] != print_]
    regraded = Regraded(record["assignment"], changed, [])
    for path in sorted((out / RESULTS).glob("*.json")):
        result = GradeResult.from_json(path.read_text(encoding="utf-8"))
        observed_path = out / OBSERVATIONS / f"{result.student}.json"
        verdicts: dict[str, Verdict] = {}
        if changed and result.scores and observed_path.is_file():
            new, verdicts = _rejudge(result, json.loads(observed_path.read_text(encoding="utf-8")), changed)
        else:
            new = result
            if changed and result.scores:
                regraded.no_observations.append(result.student)
        if (_summary(new)) != _summary(result):
            regraded.changes.append(Change(result.student, _summary(result), _summary(new), verdicts))
            write_atomically(path, new.to_json())
        regraded.results.append(new)
    return regraded


def refresh_feedback(out: Path, template: Path, regraded: Regraded) -> list[str]:
    """Generate again the feedback of every student whose results `regraded` moved (`regenerate_feedback`);
    `out`/gradebook.db must already hold the new points. Returns why a student's feedback could not be."""
    problems = []
    for change in regraded.changes:
        if problem := regenerate_feedback(out, template, regraded.assignment, change.student, change.verdicts):
            problems.append(problem)
    return problems
