"""Local drill progress with spaced repetition (Leitner boxes), and the history of every attempt.

A review is graded by how it went:
- a pass with no hint and no revealed solution moves the drill up one box and pushes its next review out
  (0, 1, 2, 4, 8, 16 days);
- a pass after a hint keeps the drill in its box, due tomorrow;
- a pass after the solution was revealed puts it in box 0, due tomorrow;
- a failure puts it in box 0, due today.
A drill is graded by its first pass of the day: passing it again that day changes nothing, so re-checking one
file never moves a drill more than one box a day.
Every check, hint and revealed solution is appended to the history, with the mock interview it belonged to;
mock interviews are recorded with their drills, time and result. Stored as JSON under $HARNESS_HOME (default
~/.harness)/drills/progress.json; the format of earlier versions (records only) is read as well. Every change is
a locked read-modify-write (`Progress.update`) written whole or not at all, with the last good file kept as a
backup (`harness.drills.store`): two terminals never lose each other's events, and a damaged file falls back
to the backup with a message.

Verdicts are recorded by the checker (`record_verdict`, called by the warm checker or the inline CLI after the
judge decided), never from what an answer or a client claims. A mock check after the interview's time is up,
or a pass after the debrief showed the answer, does not count. Every record, event and mock is signed with an
HMAC whose key (`progress.key`, 0600) sits next to the file, out of the sandboxed answer's sight; `stats`
marks whatever does not verify (edited by hand, or written by something that is not the harness), and a save
never signs it again.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import hmac
import json
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.drills import store
from harness.drills.index import get
from harness.drills.store import home

INTERVAL_DAYS = (0, 1, 2, 4, 8, 16)
FORMAT = 3
_SIGNED_FORMATS = (3,)
UNVERIFIED = "unverified"  # the signature saved with what did not verify: it never verifies


@dataclass
class Record:
    """One drill's schedule, and how its current review is going."""

    box: int = 0
    due: str = ""  # ISO date; "" = never seen (new)
    attempts: int = 0
    passes: int = 0
    hints_seen: int = 0  # hints shown in the current review
    last_result: str = ""
    reviewed_on: str = ""  # ISO date of the last pass that graded a review
    revealed: bool = False  # the solution was shown in the current review


@dataclass
class Progress:
    """Every drill's record, the history of attempts and the mock interviews, loaded from and saved to `path`.

    Change it inside `Progress.update()` (locked: no other process's update is lost). A file that cannot be read
    as progress (torn, malformed) is never fatal: the last good copy (`progress.json.bak`) is used instead, and
    `problem` says what happened and what was kept.
    """

    path: Path
    records: dict[str, Record] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    mocks: list[dict[str, Any]] = field(default_factory=list)
    unverified: set[str] = field(default_factory=set)  # "record:<id>", "event:<index>", "mock:<number>"
    problem: str = ""  # why the file on disk was not used, and what was used instead ("" when it was)
    damaged: bool = False  # the file on disk is damaged: set aside at the next save, never made the backup

    @classmethod
    def load(cls, path: Path | None = None) -> "Progress":
        """The progress at `path` (default: the drills home's), the backup's when the file is damaged."""
        path = path or home() / "progress.json"
        data = store.read(path)
        if data is None:
            return cls(path)
        try:
            return cls._parse(path, data)
        except ValueError as error:
            damage = str(error)
        backup = path.with_name(path.name + store.BACKUP_SUFFIX)
        try:
            saved = store.read(backup)
            progress = cls._parse(path, saved) if saved is not None else cls(path)
            used = f"the last good copy ({backup.name}) is used instead" if saved is not None else \
                "there is no good copy: your progress starts afresh"
        except ValueError:
            progress, used = cls(path), f"its copy {backup.name} is damaged too: your progress starts afresh"
        progress.problem = (f"{path} cannot be read as drill progress ({damage}): {used}; the damaged file is "
                            f"kept beside it as {path.name}.damaged-<time> when progress is next saved.")
        progress.damaged = True
        return progress

    @classmethod
    def _parse(cls, path: Path, data: bytes) -> "Progress":
        """The progress the bytes `data` hold; ValueError (saying why) when they are not drill progress."""
        try:
            raw = json.loads(data)
            if raw.get("format") in (2, *_SIGNED_FORMATS):
                progress = cls(path)
                signed = raw["format"] in _SIGNED_FORMATS
                for name, value in raw["records"].items():
                    sig = value.pop("sig", "")
                    progress.records[name] = Record(**value)
                    progress._verify(f"record:{name}", value, sig, signed)
                for index, event in enumerate(raw["history"]):
                    progress._verify(f"event:{index}", event, event.pop("sig", ""), signed)
                    progress.history.append(event)
                for mock in raw["mocks"]:
                    progress._verify(f"mock:{mock.get('number')}", mock, mock.pop("sig", ""), signed)
                    progress.mocks.append(mock)
                return progress
            progress = cls(path, {k: Record(**v) for k, v in raw.items()})  # the first format: records only
            progress.unverified = {f"record:{k}" for k in progress.records}
            return progress
        except (ValueError, TypeError, KeyError, AttributeError) as error:  # JSONDecodeError is a ValueError
            raise ValueError(f"{type(error).__name__}: {str(error)[:120]}") from error

    @classmethod
    @contextlib.contextmanager
    def update(cls, path: Path | None = None) -> Iterator["Progress"]:
        """The progress, loaded under the store's lock and saved before the lock is released: a
        read-modify-write no other harness process can interleave with."""
        path = path or home() / "progress.json"
        with store.locked(path):
            progress = cls.load(path)
            yield progress
            progress.save()

    def save(self) -> None:
        """Write atomically and durably, keeping the replaced file as the backup (a damaged one is set aside
        instead). What did not verify when loaded stays unverified: it is saved without a valid signature."""
        if self.damaged and self.path.is_file() and not self.path.is_symlink():
            store.set_aside(self.path)
        records = {k: {**asdict(v), "sig": self._seal(f"record:{k}", asdict(v))} for k, v in self.records.items()}
        history = [{**e, "sig": self._seal(f"event:{i}", e)} for i, e in enumerate(self.history)]
        mocks = [{**m, "sig": self._seal(f"mock:{m.get('number')}", m)} for m in self.mocks]
        data = json.dumps({"format": FORMAT, "records": records, "history": history, "mocks": mocks},
                          indent=1, sort_keys=True).encode()
        store.write(self.path, data, backup=not self.damaged)
        self.damaged = False

    def _seal(self, label: str, body: dict[str, Any]) -> str:
        """The signature saved with `label`: a valid one only for what verified (a hand-edited record is never
        re-signed by the next save)."""
        return UNVERIFIED if label in self.unverified else self._sign(label, body)

    def _key(self) -> bytes:
        """The signing key next to the progress file (made on first use, readable by the user alone)."""
        path = self.path.parent / "progress.key"
        key = store.read(path)
        if key is not None:
            return key
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            return store.read(path) or b""
        with os.fdopen(fd, "wb") as file:
            file.write(secrets.token_bytes(32))
        return store.read(path) or b""

    def _sign(self, label: str, body: dict[str, Any]) -> str:
        message = json.dumps([label, body], sort_keys=True).encode()
        return hmac.new(self._key(), message, hashlib.sha256).hexdigest()

    def _verify(self, label: str, body: dict[str, Any], sig: str, signed: bool) -> None:
        if not signed or not hmac.compare_digest(self._sign(label, body), str(sig)):
            self.unverified.add(label)

    def _log(self, drill_id: str, event: str, mock: int | None, **details: Any) -> None:
        self.history.append({"at": dt.datetime.now().isoformat(timespec="seconds"), "drill": drill_id,
                             "event": event, "mock": mock, **details})

    def record(self, drill_id: str, passed: bool, today: dt.date, *, code: str = "", mock: int | None = None) -> Record:
        """Record an attempt, grade the review it ends (if it passed) and reschedule the drill."""
        rec = self.records.setdefault(drill_id, Record())
        rec.attempts += 1
        rec.passes += passed
        rec.last_result = "pass" if passed else "fail"
        self._log(drill_id, "check", mock, passed=passed, code=code, hints=rec.hints_seen, revealed=rec.revealed)
        if not passed:
            rec.box, rec.due = 0, today.isoformat()
            return rec
        if rec.reviewed_on == today.isoformat():
            return rec  # graded already today
        if rec.revealed:
            rec.box, rec.due = 0, (today + dt.timedelta(days=1)).isoformat()
        elif rec.hints_seen:
            rec.due = (today + dt.timedelta(days=1)).isoformat()
        else:
            rec.box = min(rec.box + 1, len(INTERVAL_DAYS) - 1)
            rec.due = (today + dt.timedelta(days=INTERVAL_DAYS[rec.box])).isoformat()
        rec.reviewed_on = today.isoformat()
        rec.hints_seen, rec.revealed = 0, False  # the review is over
        return rec

    def hint(self, drill_id: str, available: int, *, mock: int | None = None) -> int:
        """Count one more hint in the drill's current review; the level to show (1-based, at most `available`)."""
        rec = self.records.setdefault(drill_id, Record())
        rec.hints_seen = min(rec.hints_seen + 1, available)
        self._log(drill_id, "hint", mock, level=rec.hints_seen)
        return rec.hints_seen

    def reveal(self, drill_id: str, today: dt.date) -> None:
        """Seeing the solution counts as not knowing it: back to box 0, due today, and this review is graded so."""
        rec = self.records.setdefault(drill_id, Record())
        rec.box, rec.due, rec.last_result, rec.revealed = 0, today.isoformat(), "revealed", True
        self._log(drill_id, "reveal", None)

    def is_due(self, drill_id: str, today: dt.date) -> bool:
        """Seen before and due today or earlier."""
        rec = self.records.get(drill_id)
        return rec is not None and rec.due != "" and dt.date.fromisoformat(rec.due) <= today

    def start_mock(self, drill_ids: list[str], minutes: float) -> int:
        """Open a mock interview in the history; its number. Its deadline is fixed now: checks after it do
        not count."""
        self.mocks.append({"number": len(self.mocks) + 1, "started": dt.datetime.now().isoformat(timespec="seconds"),
                           "deadline": time.time() + minutes * 60, "minutes": minutes, "drills": drill_ids,
                           "passed": [], "seconds": {}, "ended": ""})
        return len(self.mocks)

    def end_mock(self, number: int, seconds: dict[str, float], ended: str) -> None:
        """Close mock interview `number`: seconds spent per drill, and how it ended (what passed is recorded by
        the checker, `record_verdict`)."""
        mock = self.mocks[number - 1]
        mock.update(seconds={k: round(v, 1) for k, v in seconds.items()}, ended=ended)


def self_checked(drill_id: str) -> bool:
    """Whether `drill_id` is a self-check (`Drill.self_check`): its pass never counts in a mock score."""
    try:
        return get(drill_id).self_check
    except SystemExit:  # a drill the index does not know: not a self-check
        return False


@dataclass(frozen=True)
class Recorded:
    """What recording a verdict has to tell the candidate: why it did not count ("" when it did), and what went
    wrong with the progress file ("" when nothing did). The verdict itself is never lost."""

    note: str = ""
    problem: str = ""


def record_verdict(drill_id: str, result: dict[str, Any], *, mock: int | None = None,
                   today: dt.date | None = None, path: Path | None = None) -> Recorded:
    """Record the checker's verdict on one attempt (the checker's job, never the client's), under the store's
    lock. A damaged progress file, or one that cannot be written, is reported in `problem`, never raised."""
    try:
        with Progress.update(path) as progress:
            note = _apply_verdict(progress, drill_id, result, mock, today or dt.date.today())
        return Recorded(note, progress.problem)
    except (OSError, store.UnsafeHome) as error:
        return Recorded("", f"this verdict could not be saved in your progress ({error}): it is shown here, but "
                            "not counted; fix the cause and check again")
    except (KeyError, TypeError, ValueError, AttributeError) as error:  # a readable file with a mangled mock
        return Recorded("", f"this verdict could not be saved: your progress file holds a mock interview or an "
                            f"event the harness did not write ({type(error).__name__}: {error}); move the file away to "
                            "start afresh (its last good copy is progress.json.bak)")


def _apply_verdict(progress: Progress, drill_id: str, result: dict[str, Any], mock: int | None,
                   today: dt.date) -> str:
    """Apply one verdict to `progress`; the note for the candidate when it did not count in a mock interview."""
    note = ""
    interview = progress.mocks[mock - 1] if mock is not None and 0 < mock <= len(progress.mocks) else None
    if mock is not None and (interview is None or drill_id not in interview["drills"]
                             or f"mock:{mock}" in progress.unverified):
        note, interview = "this check is not part of a mock interview on record: it counts as practice", None
        mock = None
    if interview is not None and time.time() > float(interview.get("deadline", 0)):
        progress._log(drill_id, "check", mock, passed=result["passed"], code=result["code"], late=True)
        return "time is up: this check came after the interview's end and does not count"
    debriefed = interview is not None and any(
        e["event"] == "check" and e["drill"] == drill_id and e["mock"] == mock and e.get("debriefed")
        for e in progress.history)
    record = progress.record(drill_id, result["passed"], today, code=result["code"], mock=mock)
    if result.get("unsandboxed"):  # checked without the bubblewrap sandbox: the record says so
        progress.history[-1]["unsandboxed"] = result["unsandboxed"]
    if result.get("debrief") and not result["passed"]:
        record.revealed = True  # the debrief showed the right option: the next pass is graded as a revealed one
        progress.history[-1]["debriefed"] = True
    if interview is not None and result["passed"]:
        if debriefed:
            note = "the debrief showed the answer: this pass does not count in the mock interview"
        elif self_checked(drill_id):
            note = ("a self-check drill (its point is measured inside your answer's own process): this pass does "
                    "not count in the mock interview's score")
        elif drill_id not in interview["passed"]:
            interview["passed"].append(drill_id)
    return note
