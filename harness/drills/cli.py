"""`harness drill`: list, start, check, hint, reveal, daily sets, timed mock interviews, stats."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shlex
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from harness.drills.core import TOPICS, Drill, all_drills, get_drill
from harness.drills.progress import Progress, Record, home

CHECK_TIMEOUT_S = 120


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the drill subcommands."""
    sub = parser.add_subparsers(dest="action", required=True)
    listing = sub.add_parser("list", help="list drills, filtered by topic, difficulty or kind")
    _add_filters(listing)
    listing.add_argument("--due", action="store_true", help="only drills due for review")
    start = sub.add_parser("start", help="write a drill's starter file and show its prompt")
    start.add_argument("drill", nargs="?", help="drill id (default: a random one, due drills first)")
    _add_filters(start)
    start.add_argument("--edit", action="store_true", help="open the answer file in $EDITOR")
    check = sub.add_parser("check", help="check your answer file")
    check.add_argument("drill")
    check.add_argument("--file", type=Path, help="answer file (default: the one `start` wrote)")
    hint = sub.add_parser("hint", help="show the next hint")
    hint.add_argument("drill")
    solution = sub.add_parser("solution", help="reveal the reference solution (the drill comes back soon)")
    solution.add_argument("drill")
    experiment = sub.add_parser("experiment", help="run the experiment behind an explain drill")
    experiment.add_argument("drill")
    daily = sub.add_parser("daily", help="today's set: due drills first, then new ones")
    daily.add_argument("--count", type=int, default=5)
    mock = sub.add_parser("mock", help="a timed mock interview, driven from the terminal")
    mock.add_argument("--count", type=int, default=5)
    mock.add_argument("--minutes", type=float, default=30.0)
    mock.add_argument("--seed", type=int, default=None)
    _add_filters(mock)
    sub.add_parser("stats", help="your progress")


def _add_filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic", choices=TOPICS)
    parser.add_argument("--difficulty", type=int, choices=(1, 2, 3))
    parser.add_argument("--kind", choices=("write", "bughunt", "explain"))


def _filtered(args: argparse.Namespace) -> list[Drill]:
    drills = all_drills()
    if getattr(args, "topic", None):
        drills = [d for d in drills if args.topic in d.topics]
    if getattr(args, "difficulty", None):
        drills = [d for d in drills if d.difficulty == args.difficulty]
    if getattr(args, "kind", None):
        drills = [d for d in drills if d.kind == args.kind]
    if not drills:
        raise SystemExit("no drill matches these filters")
    return drills


def _today() -> dt.date:
    return dt.date.today()


def answer_path(drill: Drill) -> Path:
    """Where `start` writes the drill's answer file."""
    return home() / "answers" / f"{drill.id.replace('-', '_')}.py"


def _describe(drill: Drill) -> str:
    return f"{drill.id:34s} {drill.kind:8s} {'*' * drill.difficulty:3s}  {', '.join(drill.topics):20s} {drill.title}"


def _start(drill: Drill, edit: bool) -> Path:
    path = answer_path(drill)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        path.write_text(drill.starter)
    print(f"== {drill.title} [{drill.id}] ({drill.kind}, difficulty {drill.difficulty})\n\n{drill.prompt}\n")
    print(f"Your answer file: {path}\nCheck it with: harness drill check {drill.id}")
    editor = os.environ.get("EDITOR")
    if edit and editor:
        subprocess.run([*shlex.split(editor), str(path)], check=False)
    return path


def check_answer(drill: Drill, path: Path, timeout_s: float = CHECK_TIMEOUT_S) -> dict:
    """Run the drill's check on `path` in a child process, under a timeout."""
    if not path.exists():
        return {"passed": False, "code": "no-answer",
                "message": f"no answer file at {path}: run `harness drill start {drill.id}`"}
    command = [sys.executable, "-m", "harness.drills.runner", drill.id, str(path)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"passed": False, "code": "timeout",
                "message": f"your answer ran longer than {timeout_s:.0f} s (an infinite loop?)"}
    lines = done.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        return {"passed": False, "code": "crashed", "message": f"the check crashed:\n{done.stderr[-2000:]}"}


def _record(drill: Drill, result: dict) -> None:
    progress = Progress.load()
    progress.record(drill.id, result["passed"], _today())
    progress.save()
    print(("PASSED: " if result["passed"] else "NOT YET: ") + result["message"])


def _hint(drill: Drill) -> str:
    progress = Progress.load()
    rec = progress.records.setdefault(drill.id, Record())
    rec.hints_seen = min(rec.hints_seen + 1, len(drill.hints))
    progress.save()
    return f"Hint {rec.hints_seen}/{len(drill.hints)}: {drill.hints[rec.hints_seen - 1]}"


def _daily(count: int) -> list[Drill]:
    progress, today = Progress.load(), _today()
    drills = all_drills()
    due = [d for d in drills if progress.is_due(d.id, today)]
    new = [d for d in drills if d.id not in progress.records]
    random.Random(today.toordinal()).shuffle(new)  # the same new drills all day
    return (due + new)[:count]


def _mock(args: argparse.Namespace) -> int:
    pool = _filtered(args)
    drills = random.Random(args.seed).sample(pool, min(args.count, len(pool)))
    deadline = time.monotonic() + args.minutes * 60
    passed: list[str] = []
    print(f"Mock interview: {len(drills)} drills in {args.minutes:g} minutes. Commands: check, hint, skip, quit.")
    for number, drill in enumerate(drills, 1):
        print(f"\n--- Drill {number}/{len(drills)}")
        path = _start(drill, edit=False)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return _mock_summary(drills, passed, timed_out=True)
            try:
                command = input(f"[{int(left // 60)}:{int(left % 60):02d} left] > ").strip().lower()
            except EOFError:  # input closed: end the interview as if the candidate quit
                command = "quit"
            if command == "check":
                result = check_answer(drill, path)
                _record(drill, result)
                if result["passed"]:
                    passed.append(drill.id)
                    break
            elif command == "hint":
                print(_hint(drill))
            elif command == "skip":
                break
            elif command == "quit":
                return _mock_summary(drills, passed, timed_out=False)
            else:
                print("commands: check, hint, skip, quit")
    return _mock_summary(drills, passed, timed_out=False)


def _mock_summary(drills: list[Drill], passed: list[str], timed_out: bool) -> int:
    print(("\nTime is up. " if timed_out else "\n") + f"Mock result: {len(passed)}/{len(drills)} passed.")
    for drill in drills:
        print(f"  {'PASS' if drill.id in passed else '----'}  {drill.id}")
    return 0


def _stats() -> str:
    progress, today = Progress.load(), _today()
    drills = all_drills()
    seen = [d for d in drills if d.id in progress.records and progress.records[d.id].attempts]
    passed = [d for d in seen if progress.records[d.id].passes]
    due = [d for d in drills if progress.is_due(d.id, today)]
    lines = [f"Drills: {len(drills)} in the bank, {len(seen)} attempted, {len(passed)} passed at least once, "
             f"{len(due)} due today."]
    attempts = Counter(t for d in seen for t in d.topics)
    wins = Counter(t for d in passed for t in d.topics)
    for topic in TOPICS:
        if attempts[topic]:
            lines.append(f"  {topic:14s} {wins[topic]}/{attempts[topic]} passed")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Run one drill action."""
    if args.action == "list":
        today, progress = _today(), Progress.load()
        for drill in _filtered(args):
            if not args.due or progress.is_due(drill.id, today):
                print(_describe(drill))
        return 0
    if args.action == "start":
        if args.drill:
            drill = get_drill(args.drill)
        else:
            due = [d for d in _filtered(args) if Progress.load().is_due(d.id, _today())]
            drill = random.choice(due or _filtered(args))
        _start(drill, args.edit)
        return 0
    if args.action == "check":
        drill = get_drill(args.drill)
        result = check_answer(drill, args.file or answer_path(drill))
        _record(drill, result)
        return 0 if result["passed"] else 1
    if args.action == "hint":
        print(_hint(get_drill(args.drill)))
        return 0
    if args.action == "solution":
        drill = get_drill(args.drill)
        progress = Progress.load()
        progress.reveal(drill.id, _today())
        progress.save()
        print(drill.solution)
        return 0
    if args.action == "experiment":
        drill = get_drill(args.drill)
        if drill.experiment is None:
            raise SystemExit(f"{drill.id} is a {drill.kind} drill: only explain drills have an experiment")
        drill.experiment()
        return 0
    if args.action == "daily":
        for drill in _daily(args.count):
            print(_describe(drill))
        return 0
    if args.action == "mock":
        return _mock(args)
    print(_stats())
    return 0
