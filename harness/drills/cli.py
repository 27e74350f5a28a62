"""`harness drill`: list, start, check, hint, reveal, daily sets, timed mock interviews, stats.

`check` imports neither torch nor the bank: it asks the warm checker (`harness.drills.server`), so a check
costs the answer's own work and little else. The other actions read the bank.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shlex
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.drills.progress import Progress, home
from harness.drills.topics import KINDS, TOPICS

if TYPE_CHECKING:
    from harness.drills.core import Drill


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
    hint = sub.add_parser("hint", help="show the next hint (a pass after a hint does not promote the drill)")
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
    sub.add_parser("stats", help="your progress, and your mock interviews")
    sub.add_parser("stop-checker", help="stop the warm checker that `check` started (it also leaves when idle)")


def _add_filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic", choices=TOPICS)
    parser.add_argument("--difficulty", type=int, choices=(1, 2, 3))
    parser.add_argument("--kind", choices=KINDS)


def _filtered(args: argparse.Namespace) -> list[Drill]:
    from harness.drills.core import all_drills

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


def answer_path(drill_id: str) -> Path:
    """Where `start` writes the drill's answer file."""
    return home() / "answers" / f"{drill_id.replace('-', '_')}.py"


def _order_path(drill_id: str) -> Path:
    return home() / "attempts" / f"{drill_id}.json"


def _shown_order(drill_id: str) -> list[int] | None:
    """The order the options of an explain drill were shown in by the last `start` (None: the bank's order)."""
    path = _order_path(drill_id)
    try:
        order = json.loads(path.read_text())["order"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return order if sorted(order) == [0, 1, 2, 3] else None


def _describe(drill: Drill) -> str:
    return f"{drill.id:34s} {drill.kind:8s} {'*' * drill.difficulty:3s}  {', '.join(drill.topics):20s} {drill.title}"


def _set_aside(path: Path) -> Path:
    """Move an old answer to answers/previous/ (kept, never overwritten); where it went."""
    kept = path.parent / "previous" / f"{path.stem}-{dt.datetime.now():%Y%m%d-%H%M%S-%f}.py"
    kept.parent.mkdir(parents=True, exist_ok=True)
    os.replace(path, kept)
    return kept


def _start(drill: Drill, *, edit: bool, fresh: bool = False) -> Path:
    """Write the answer file and show the prompt. The file starts from the starter for a new review (after a
    pass or a revealed solution), in a mock interview (`fresh`) and for every explain attempt (new option
    order); an answer in progress is kept. An old answer is set aside, never deleted."""
    path = answer_path(drill.id)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = Progress.load().records.get(drill.id)
    new_review = fresh or drill.kind == "explain" or (record is not None and record.last_result in ("pass", "revealed"))
    if path.exists() and new_review and path.read_text() != drill.starter:
        print(f"(your previous answer is kept in {_set_aside(path)})")
    if not path.exists() or new_review:
        path.write_text(drill.starter)
    prompt = drill.prompt
    if drill.choices is not None:
        from harness.drills.choices import render, shuffled_order

        order = shuffled_order(random.Random())
        _order_path(drill.id).parent.mkdir(parents=True, exist_ok=True)
        _order_path(drill.id).write_text(json.dumps({"order": order}))
        prompt = render(drill.prompt, drill.choices, order)
    print(f"== {drill.title} [{drill.id}] ({drill.kind}, difficulty {drill.difficulty})\n\n{prompt}\n")
    print(f"Your answer file: {path}\nCheck it with: harness drill check {drill.id}")
    editor = os.environ.get("EDITOR")
    if edit and editor:
        subprocess.run([*shlex.split(editor), str(path)], check=False)
    return path


def run_check(drill_id: str, path: Path) -> dict[str, Any]:
    """The verdict on the answer file `path` to `drill_id`: from the warm checker, or computed here when
    HARNESS_DRILL_CHECKER=inline."""
    order = _shown_order(drill_id)
    if os.environ.get("HARNESS_DRILL_CHECKER") == "inline":
        from harness.drills.checker import check_file
        from harness.drills.core import get_drill

        return check_file(get_drill(drill_id), path, order=tuple(order) if order else None).as_dict()
    from harness.drills.server import request_check

    return request_check(drill_id, path, order)


def _report(drill_id: str, result: dict[str, Any], mock: int | None = None) -> None:
    """Record the attempt and print the verdict, what the answer printed, and an explain drill's debrief."""
    progress = Progress.load()
    record = progress.record(drill_id, result["passed"], _today(), code=result["code"], mock=mock)
    if result.get("debrief") and not result["passed"]:
        record.revealed = True  # the debrief showed the right option: the next pass is graded as a revealed one
    progress.save()
    print(("PASSED: " if result["passed"] else "NOT YET: ") + result["message"].replace("<id>", drill_id))
    if result.get("output", "").strip():
        print(f"\nYour answer printed (never part of the verdict):\n{result['output'].rstrip()}")
    if result.get("debrief"):
        print("\n" + result["debrief"].replace("<id>", drill_id))


def _check(drill_id: str, path: Path, mock: int | None = None) -> dict[str, Any] | None:
    """Check and report; None (with the reason printed) when the drill does not exist."""
    result = run_check(drill_id, path)
    if "error" in result:
        print(result["error"])
        return None
    _report(drill_id, result, mock)
    return result


def _hint(drill: Drill, mock: int | None = None) -> str:
    progress = Progress.load()
    level = progress.hint(drill.id, len(drill.hints), mock=mock)
    progress.save()
    return f"Hint {level}/{len(drill.hints)} (a pass after a hint keeps the drill in its box): {drill.hints[level - 1]}"


def _solution(drill: Drill) -> str:
    """The reference solution; for an explain drill, the right letter in the order the options were shown."""
    if drill.choices is None:
        return drill.solution
    from harness.drills.choices import LETTERS

    order = _shown_order(drill.id) or list(range(len(LETTERS)))
    right = drill.choices.options[drill.choices.key]
    return f'answer = "{LETTERS[order.index(drill.choices.key)]}"  # {right.text}\n'


def _daily(count: int) -> list[Drill]:
    from harness.drills.core import all_drills

    progress, today = Progress.load(), _today()
    drills = all_drills()
    due = [d for d in drills if progress.is_due(d.id, today)]
    new = [d for d in drills if d.id not in progress.records]
    random.Random(today.toordinal()).shuffle(new)  # the same new drills all day
    return (due + new)[:count]


def _mock(args: argparse.Namespace) -> int:
    pool = _filtered(args)
    drills = random.Random(args.seed).sample(pool, min(args.count, len(pool)))
    progress = Progress.load()
    number = progress.start_mock([d.id for d in drills], args.minutes)
    progress.save()
    deadline = time.monotonic() + args.minutes * 60
    passed: list[str] = []
    seconds: dict[str, float] = {}
    print(f"Mock interview {number}: {len(drills)} drills in {args.minutes:g} minutes. "
          "Commands: check, hint, skip, quit.")
    ended = "done"
    for index, drill in enumerate(drills, 1):
        print(f"\n--- Drill {index}/{len(drills)}")
        path = _start(drill, edit=False, fresh=True)
        began = time.monotonic()
        ended = _interview(drill, path, deadline, number, passed)
        seconds[drill.id] = time.monotonic() - began
        if ended != "next":
            break
    ended = "done" if ended == "next" else ended
    progress = Progress.load()
    progress.end_mock(number, passed, seconds, ended)
    progress.save()
    print(_mock_summary(progress, number))
    return 0


def _interview(drill: Drill, path: Path, deadline: float, number: int, passed: list[str]) -> str:
    """One drill of a mock interview: "next" when it passed or was skipped, else "time up" or "quit"."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return "time up"
        try:
            command = input(f"[{int(left // 60)}:{int(left % 60):02d} left] > ").strip().lower()
        except EOFError:  # input closed: end the interview as if the candidate quit
            command = "quit"
        if command == "check":
            result = _check(drill.id, path, mock=number)
            if result and result["passed"]:
                passed.append(drill.id)
                return "next"
        elif command == "hint":
            print(_hint(drill, mock=number))
        elif command == "skip":
            return "next"
        elif command == "quit":
            return "quit"
        else:
            print("commands: check, hint, skip, quit")


def _mock_summary(progress: Progress, number: int) -> str:
    """A mock interview: result, and per drill its attempts, failed attempts' codes, hints and time."""
    mock = progress.mocks[number - 1]
    events = [e for e in progress.history if e.get("mock") == number]
    lines = [f"\nMock interview {number} ({mock['started']}, {mock['ended']}): "
             f"{len(mock['passed'])}/{len(mock['drills'])} passed."]
    for drill_id in mock["drills"]:
        checks = [e for e in events if e["drill"] == drill_id and e["event"] == "check"]
        failed = [e["code"] for e in checks if not e["passed"]]
        hints = sum(e["drill"] == drill_id and e["event"] == "hint" for e in events)
        spent = mock["seconds"].get(drill_id)
        lines.append(f"  {'PASS' if drill_id in mock['passed'] else '----'}  {drill_id:34s} "
                     f"{len(checks)} attempt(s)" + (f" (failed: {', '.join(failed)})" if failed else "")
                     + f", {hints} hint(s)" + (f", {spent:.0f} s" if spent is not None else ", not reached"))
    return "\n".join(lines)


def _stats() -> str:
    from harness.drills.core import all_drills

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
    hints = sum(e["event"] == "hint" for e in progress.history)
    reveals = sum(e["event"] == "reveal" for e in progress.history)
    lines.append(f"Hints seen: {hints}; solutions revealed: {reveals}.")
    if progress.mocks:
        lines.append(f"Mock interviews: {len(progress.mocks)}")
        lines += [_mock_summary(progress, mock["number"]) for mock in progress.mocks[-5:]]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Run one drill action."""
    if args.action == "check":  # the fast path: no torch, no bank in this process
        return 0 if (_check(args.drill, args.file or answer_path(args.drill)) or {}).get("passed") else 1
    if args.action == "stop-checker":
        from harness.drills.server import stop

        print("stopped the warm checker" if stop() else "no warm checker was running")
        return 0
    from harness.drills.core import get_drill

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
        _start(drill, edit=args.edit)
        return 0
    if args.action == "hint":
        print(_hint(get_drill(args.drill)))
        return 0
    if args.action == "solution":
        drill = get_drill(args.drill)
        progress = Progress.load()
        progress.reveal(drill.id, _today())
        progress.save()
        print(_solution(drill))
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
