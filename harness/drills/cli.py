"""`harness drill`: list, start, check, hint, reveal, daily sets, timed mock interviews, stats.

Only `experiment` imports torch and the bank: `check` asks the warm checker (`harness.drills.server`), which
also records the verdict; `list`, `daily`, `stats`, `start`, `hint` and `solution` read the bank's metadata
index (`harness.drills.index`), so they answer at once.
Everything fits the terminal's width (80 columns at least, `harness.drills.layout`): `list` shows one line per
drill, grouped by topic; prose wraps at words with a hanging indent, code breaks where Python allows. Output
piped into a command that stops reading (`| head`) ends quietly.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import functools
import io
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

from harness.drills.index import Entry, entries, get
from harness.drills.layout import clip, fit_code, fit_output, fit_prose, width
from harness.drills.progress import Progress, home, self_checked
from harness.drills.store import UnsafeHome
from harness.drills.topics import KINDS, TOPICS

Drill = Entry  # what the quick commands handle: a drill's metadata


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


def _filtered(args: argparse.Namespace, *, held: bool = True) -> list[Drill]:
    """The drills the filters of `args` keep (without the held ones unless `held`)."""
    drills = [d for d in entries() if held or d.id not in _held()]
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


def _load() -> Progress:
    """The progress, read-only; what was wrong with its file, if anything, told on stderr."""
    return _tell(Progress.load())


def _tell(progress: Progress) -> Progress:
    """Say on stderr what was wrong with the progress file, if anything (the backup was used); `progress`."""
    if progress.problem:
        print(fit_prose(f"Note: {progress.problem}"), file=sys.stderr)
    return progress


def _status(progress: Progress, drill_id: str, today: dt.date) -> str:
    """A drill's state in one short word: new, due, box N (next review date), with ? when unverified."""
    if drill_id in _held():
        return "held"
    record = progress.records.get(drill_id)
    if record is None or not record.due:
        return "new"
    mark = "?" if f"record:{drill_id}" in progress.unverified else ""
    if progress.is_due(drill_id, today):
        return f"due{mark}"
    return f"b{record.box} {record.due[5:]}{mark}"  # box 3, next review on 12-01


def _row(drill: Drill, progress: Progress, id_width: int, lead: str = "") -> str:
    """One drill in one line: id, kind and difficulty (w2), status, and as much of the title as fits."""
    line = (f"{lead}{drill.id:{id_width}s} {drill.kind[0]}{drill.difficulty} "
            f"{_status(progress, drill.id, _today()):9s} {drill.title}")
    return clip(line, width())


_LEGEND = "KD: w write, b bug hunt, e explain, difficulty 1-3; STATUS: new, due, bBOX MM-DD"


def _table(drills: list[Drill], progress: Progress) -> str:
    """Drills as a table, one line per drill, that fits the terminal (80 columns at least)."""
    id_width = max(len(d.id) for d in drills)
    return "\n".join([f"{'DRILL':{id_width}s} KD STATUS    TITLE", _LEGEND]
                     + [_row(drill, progress, id_width) for drill in drills] + _held_note(drills))


def _listing(drills: list[Drill], progress: Progress) -> str:
    """Drills grouped by their first topic (the bank's order), one line per drill under each topic's name."""
    topics: dict[str, list[Drill]] = {}
    for drill in drills:
        topics.setdefault(drill.topics[0], []).append(drill)
    lines = [_LEGEND]
    for topic, group in topics.items():
        id_width = max(len(d.id) for d in group)
        lines.append(f"{topic} ({len(group)})")
        lines += [_row(drill, progress, id_width, lead="  ") for drill in group]
    return "\n".join(lines + _held_note(drills))


def _held_note(drills: list[Drill]) -> list[str]:
    """What `held` means, under a listing that shows a held drill."""
    if not any(d.id in _held() for d in drills):
        return []
    return [fit_prose("held: its answer passes a graded exercise, so this copy of the course holds its solution and "
                      "check until your instructor releases them (`harness drill solution <id>` says which exercise)")]


def harness_command() -> str:
    """How this shell runs `harness`, as written: `harness` where it is on PATH (an activated .venv), else this
    Python's `-m harness` (a relative path where it lies below the current folder: `.venv/bin/python -m harness`)."""
    if shutil.which("harness"):
        return "harness"
    python = Path(sys.executable)
    with contextlib.suppress(ValueError):
        python = python.relative_to(Path.cwd())
    return f"{shlex.quote(str(python))} -m harness"


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
    record = _load().records.get(drill.id)
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
    print(fit_prose(f"== {drill.title} [{drill.id}] ({drill.kind}, difficulty {drill.difficulty})\n\n{prompt}\n"))
    reason = held_reason(drill.id)
    if reason is not None:
        print(fit_prose(f"Your answer file:\n  {path}\n(held: this copy of the course does not check it: {reason}.)"))
        return path
    print(f"Your answer file:\n  {path}\nCheck it with:\n  {harness_command()} drill check {drill.id}"
          + ("\n(in this mock interview: type answer <letter>)" if drill.choices is not None and fresh else ""))
    editor = os.environ.get("EDITOR")
    if edit and editor:
        subprocess.run([*shlex.split(editor), str(path)], check=False)
    return path


def run_check(drill_id: str, path: Path, mock: int | None = None) -> dict[str, Any]:
    """The verdict on the answer file `path` to `drill_id`, recorded by the checker that decided it: the warm
    checker, or one started for this check alone when HARNESS_DRILL_CHECKER=inline."""
    order = _shown_order(drill_id)
    path = Path(path).resolve()  # the checker runs elsewhere: it gets an absolute path
    from harness.drills.server import check_once, request_check

    ask = check_once if os.environ.get("HARNESS_DRILL_CHECKER") == "inline" else request_check
    return ask(drill_id, path, order, mock)


def _report(drill_id: str, result: dict[str, Any]) -> None:
    """Print the verdict, what the answer printed, an explain drill's debrief, why it did not count, and what
    went wrong with the progress file."""
    print(fit_prose(("PASSED: " if result["passed"] else "NOT YET: ") + result["message"].replace("<id>", drill_id)))
    if result.get("output", "").strip():
        print(f"\nYour answer printed (never part of the verdict):\n{fit_output(result['output'].rstrip())}")
    if result.get("debrief"):
        print("\n" + fit_prose(result["debrief"].replace("<id>", drill_id)))
    if result.get("note"):
        print(fit_prose(f"\n(Not counted: {result['note']}.)"))
    if result.get("problem"):
        print(fit_prose(f"Note: {result['problem']}"), file=sys.stderr)


def _untouched(drill_id: str, path: Path) -> bool:
    """Whether the answer file is still the starter (then the checker is not asked at all)."""
    try:
        return path.read_text() == get(drill_id).starter
    except (OSError, SystemExit):
        return False


def _check(drill_id: str, path: Path, mock: int | None = None) -> dict[str, Any] | None:
    """Check and report; None (with the reason printed) when the drill does not exist or was not started.
    A held drill is not checked: SystemExit says why."""
    reason = held_reason(drill_id)
    if reason is not None:
        raise SystemExit(fit_prose(f"{drill_id} is held, its check with it, until the course releases it: {reason}."))
    if _untouched(drill_id, path):
        drill = get(drill_id)
        print(fit_prose(f"Not started yet: your answer file is still the starter:\n  {path}\nThe drill again:\n\n"
                    f"{_prompt(drill)}"))
        return None
    try:
        result = run_check(drill_id, path, mock)
    except RuntimeError as error:  # the checker could not be reached or refused an unsafe socket
        print(f"The drill checker cannot be used: {error}")
        return None
    if "error" in result:
        print(result["error"])
        return None
    _report(drill_id, result)
    return result


def _prompt(drill: Drill) -> str:
    """The prompt, with the options in the order they were last shown."""
    if drill.choices is None:
        return drill.prompt
    from harness.drills.choices import render

    order = _shown_order(drill.id)
    return render(drill.prompt, drill.choices, tuple(order) if order else tuple(range(4)))


def _hint(drill: Drill, mock: int | None = None) -> str:
    with Progress.update() as progress:
        level = progress.hint(drill.id, len(drill.hints), mock=mock)
    _tell(progress)
    return fit_prose(f"Hint {level}/{len(drill.hints)} (a pass after a hint keeps the drill in its box): "
                 f"{drill.hints[level - 1]}")


@functools.cache
def _held() -> dict[str, list[str]]:
    """The held drills of this copy of the course, each with the graded exercises its answer passes
    (`harness/drills/withheld.json`, written into a graded student tree; none elsewhere)."""
    path = Path(__file__).with_name("withheld.json")
    return json.loads(path.read_text()) if path.is_file() else {}


def _held_whole() -> list[str]:
    """The held drills this copy of the course has no entry for: it holds them whole (prompt, starter and hints too,
    which give their answer away too nearly), and knows only their names and exercises."""
    known = {entry.id for entry in entries()}
    return [drill_id for drill_id in _held() if drill_id not in known]


def _held_whole_lines() -> list[str]:
    """The drills held whole, under an unfiltered listing: each one's name and the exercises it shares."""
    held = _held_whole()
    if not held:
        return []
    id_width = max(len(drill_id) for drill_id in held)
    return [f"held whole ({len(held)})",
            *(clip(f"  {drill_id:{id_width}s} shares {', '.join(_held()[drill_id])}", width()) for drill_id in held),
            fit_prose("held whole: its answer passes a graded exercise, so this copy of the course holds the drill "
                      "(prompt and hints too) until your instructor releases it")]


def _entry(drill_id: str) -> Drill:
    """The entry of `drill_id`; SystemExit saying why for a drill this copy of the course holds whole."""
    if drill_id in _held_whole():
        raise SystemExit(fit_prose(f"{drill_id} is held whole, its prompt and check with it, until the course releases "
                                   f"it: {held_reason(drill_id)}."))
    return get(drill_id)


def held_reason(drill_id: str) -> str | None:
    """Why `drill_id` is held in this copy of the course (the exercises its answer passes), None when it is not."""
    exercises = _held().get(drill_id)
    if exercises is None:
        return None
    named = " and ".join(f"{task} (lesson {task[:2]})" for task in exercises) or "a graded exercise"
    plural = "s" if len(exercises) > 1 else ""
    here = ("its prompt and starter give the answer away too nearly, so they wait with it" if drill_id in _held_whole()
            else f"its prompt and hints (`harness drill hint {drill_id}`) are here now")
    return (f"its answer passes the graded exercise{plural} {named} of this course. Your instructor releases it "
            f"after the due date (a practice copy of the course carries it whole); {here}")


def _solution(drill: Drill) -> str:
    """The reference solution; for an explain drill, the right letter in the order the options were shown."""
    reason = held_reason(drill.id)
    if reason is not None:
        raise SystemExit(fit_prose(f"The answer of {drill.id} is withheld until the course releases it: {reason}."))
    if drill.solution is None:
        raise SystemExit("the drills' answers are not installed here (harness/judges/drills/answers.json is missing): "
                         "reinstall the course's harness package")
    if drill.choices is None:
        return fit_code(drill.solution)
    from harness.drills.choices import LETTERS

    order = _shown_order(drill.id) or list(range(len(LETTERS)))
    right = drill.choices.options[drill.choices.key]
    why = "".join(f"{line}\n" for line in drill.solution.splitlines() if line.startswith("#"))  # the key's reason
    return fit_code(f'answer = "{LETTERS[order.index(drill.choices.key)]}"  # {right.text}\n{why}')


def _daily(count: int) -> list[Drill]:
    progress, today = _load(), _today()
    drills = [d for d in entries() if d.id not in _held()]
    due = [d for d in drills if progress.is_due(d.id, today)]
    new = [d for d in drills if d.id not in progress.records]
    random.Random(today.toordinal()).shuffle(new)  # the same new drills all day
    return (due + new)[:count]


def _mock(args: argparse.Namespace) -> int:
    pool = _filtered(args, held=False)
    drills = random.Random(args.seed).sample(pool, min(args.count, len(pool)))
    with Progress.update() as progress:
        number = progress.start_mock([d.id for d in drills], args.minutes)
    _tell(progress)
    deadline = time.monotonic() + args.minutes * 60
    seconds: dict[str, float] = {}
    print(fit_prose(f"Mock interview {number}: {len(drills)} drills in {args.minutes:g} minutes. "
                    "Commands: check, answer <letter> (multiple choice), hint, skip, quit."))
    ended = "done"
    for index, drill in enumerate(drills, 1):
        print(f"\n--- Drill {index}/{len(drills)}")
        path = _start(drill, edit=False, fresh=True)
        began = time.monotonic()
        ended = _interview(drill, path, deadline, number)
        seconds[drill.id] = time.monotonic() - began
        if ended != "next":
            break
    ended = "done" if ended == "next" else ended
    with Progress.update() as progress:
        progress.end_mock(number, seconds, ended)
    print(_mock_summary(progress, number))
    return 0


def _interview(drill: Drill, path: Path, deadline: float, number: int) -> str:
    """One drill of a mock interview: "next" when it passed or was skipped, else "time up" or "quit"."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            print("Time is up.")
            return "time up"
        try:
            command = input(f"[{int(left // 60)}:{int(left % 60):02d} left] > ").strip().lower()
        except EOFError:  # input closed: end the interview as if the candidate quit
            command = "quit"
        word, _, rest = command.partition(" ")
        if word == "answer" and drill.choices is not None and rest.strip().strip("()") in "abcd" and rest.strip():
            path.write_text(f'answer = "{rest.strip().strip("()")}"\n')
            word = "check"
        elif word == "answer":
            print("answer <letter> is for multiple-choice drills: a, b, c or d" if drill.choices is not None
                  else f"this drill is answered in {path}: edit it, then type check")
            continue
        if word == "check":
            result = _check(drill.id, path, mock=number)
            if result and result["passed"] and not result.get("note"):
                return "next"
            if result and result.get("note", "").startswith("time is up"):
                return "time up"
        elif word == "hint":
            print(_hint(drill, mock=number))
        elif word == "skip":
            return "next"
        elif word == "quit":
            return "quit"
        else:
            print("commands: check, answer <letter>, hint, skip, quit")


def _mock_summary(progress: Progress, number: int) -> str:
    """A mock interview: result, and per drill its attempts, failed attempts' codes, hints and time."""
    mock = progress.mocks[number - 1]
    events = [e for e in progress.history if e.get("mock") == number]
    mark = " (cannot be verified: edited outside the harness?)" if f"mock:{number}" in progress.unverified else ""
    scored = [d for d in mock["drills"] if not self_checked(d)]  # a self-check's pass never counts
    passed = [d for d in mock["passed"] if d in scored]
    lines = [f"\nMock interview {number} ({mock['started']}, {mock['ended']}): "
             f"{len(passed)}/{len(scored)} passed{mark}."]
    for drill_id in mock["drills"]:
        checks = [e for e in events if e["drill"] == drill_id and e["event"] == "check" and not e.get("late")]
        failed = [e["code"] for e in checks if not e["passed"]]
        late = sum(e["drill"] == drill_id and e["event"] == "check" and bool(e.get("late")) for e in events)
        hints = sum(e["drill"] == drill_id and e["event"] == "hint" for e in events)
        spent = mock["seconds"].get(drill_id)
        status = "self" if drill_id not in scored else "PASS" if drill_id in passed else "----"
        line = (f"  {status}  {drill_id:34s} "
                f"{len(checks)} attempt(s)" + (f" (failed: {', '.join(failed)})" if failed else "")
                + f", {hints} hint(s)" + (f", {spent:.0f} s" if spent is not None else ", not reached")
                + (f", {late} after time (not counted)" if late else ""))
        lines += textwrap.wrap(line, width(), subsequent_indent=" " * 8, break_long_words=False,
                               break_on_hyphens=False)
    if len(scored) < len(mock["drills"]):
        lines.append("  self: a self-check drill (measured inside the answer's own process), left out of the "
                     "score")
    return "\n".join(fit_prose(line) if not line.startswith("  ") else line for line in lines)


def _stats() -> str:
    progress, today = _load(), _today()
    drills = list(entries())
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
    boxes = Counter(progress.records[d.id].box for d in seen)
    lines.append("Boxes (a higher box comes back later): "
                 + ", ".join(f"box {box}: {boxes[box]}" for box in sorted(boxes)) if boxes else "Boxes: none yet.")
    if seen:
        lines += ["Next reviews:", _table(sorted(seen, key=lambda d: progress.records[d.id].due), progress)]
    hints = sum(e["event"] == "hint" for e in progress.history)
    reveals = sum(e["event"] == "reveal" for e in progress.history)
    lines.append(f"Hints seen: {hints}; solutions revealed: {reveals}.")
    if progress.unverified:
        lines.append(f"? {len(progress.unverified)} record(s) cannot be verified (not written by the harness "
                     "checker, or edited since): they are marked ? and may not be what you achieved.")
    lines = [fit_prose(line) if not line.startswith(" ") else line for line in lines]
    if progress.mocks:
        lines.append(f"Mock interviews: {len(progress.mocks)}")
        lines += [_mock_summary(progress, mock["number"]) for mock in progress.mocks[-5:]]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Run one drill action; its exit status. A closed pipe (`| head`) ends it quietly; a drills home that is
    not the user's alone is refused with a message."""
    try:
        status = _run(args)
        sys.stdout.flush()  # a closed pipe shows here, inside the try, not at the interpreter's exit
        return status
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to write to it
        return 0
    except UnsafeHome as error:
        print(fit_prose(str(error)), file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    if args.action == "check":  # the fast path: no torch, no bank in this process
        return 0 if (_check(args.drill, args.file or answer_path(args.drill)) or {}).get("passed") else 1
    if args.action == "stop-checker":
        from harness.drills.server import NotPrivate, stop

        try:
            pid = stop()
        except NotPrivate as error:
            print(error)
            return 1
        print(f"stopped the warm checker (process {pid})" if pid else "no warm checker was running")
        return 0
    if args.action == "list":
        progress, today = _load(), _today()
        shown = [d for d in _filtered(args) if not args.due or progress.is_due(d.id, today)]
        filtered = args.due or any(getattr(args, name, None) for name in ("topic", "difficulty", "kind"))
        print("\n".join([_listing(shown, progress) if shown else "no drill is due",
                         *([] if filtered else _held_whole_lines())]))
        return 0
    if args.action == "start":
        if args.drill:
            drill = _entry(args.drill)
        else:
            due = [d for d in _filtered(args, held=False) if _load().is_due(d.id, _today())]
            drill = random.choice(due or _filtered(args, held=False))
        _start(drill, edit=args.edit)
        return 0
    if args.action == "hint":
        print(_hint(_entry(args.drill)))
        return 0
    if args.action == "solution":
        drill = _entry(args.drill)
        solution = _solution(drill)  # a withheld answer stops here, before the progress records a reveal
        with Progress.update() as progress:
            progress.reveal(drill.id, _today())
        _tell(progress)
        print(solution)
        return 0
    if args.action == "experiment":
        from harness.drills.core import get_drill

        drill = get_drill(_entry(args.drill).id)
        if drill.experiment is None:
            raise SystemExit(f"{drill.id} is a {drill.kind} drill: only explain drills have an experiment")
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):  # its lines are prose of the bank's: wrapped to fit
            drill.experiment()
        print(fit_prose(printed.getvalue()), end="")
        return 0
    if args.action == "daily":
        drills = _daily(args.count)
        print(f"Today's set ({_today().isoformat()}): {len(drills)} drills, due ones first\n"
              + _table(drills, _load()) if drills else "Nothing due and nothing new: well done.")
        return 0
    if args.action == "mock":
        return _mock(args)
    print(_stats())
    return 0
