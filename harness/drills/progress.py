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
~/.harness)/drills/progress.json; the format of earlier versions (records only) is read as well.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

INTERVAL_DAYS = (0, 1, 2, 4, 8, 16)
FORMAT = 2


def home() -> Path:
    """The drills workspace: answers, progress and the warm checker's files."""
    return Path(os.environ.get("HARNESS_HOME", Path.home() / ".harness")) / "drills"


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
    """Every drill's record, the history of attempts and the mock interviews, loaded from and saved to `path`."""

    path: Path
    records: dict[str, Record] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    mocks: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path | None = None) -> "Progress":
        path = path or home() / "progress.json"
        if not path.exists():
            return cls(path)
        try:
            raw = json.loads(path.read_text())
            if raw.get("format") == FORMAT:
                records = {k: Record(**v) for k, v in raw["records"].items()}
                return cls(path, records, list(raw["history"]), list(raw["mocks"]))
            return cls(path, {k: Record(**v) for k, v in raw.items()})  # the first format: records only
        except (json.JSONDecodeError, TypeError, KeyError, AttributeError) as error:
            raise ValueError(f"{path} is not a drill progress file ({error}); move it away to start afresh") from error

    def save(self) -> None:
        """Write atomically, so an interrupted save never loses the history."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"format": FORMAT, "records": {k: asdict(v) for k, v in self.records.items()},
                                   "history": self.history, "mocks": self.mocks}, indent=1, sort_keys=True))
        os.replace(tmp, self.path)

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
        """Open a mock interview in the history; its number."""
        self.mocks.append({"number": len(self.mocks) + 1, "started": dt.datetime.now().isoformat(timespec="seconds"),
                           "minutes": minutes, "drills": drill_ids, "passed": [], "seconds": {}, "ended": ""})
        return len(self.mocks)

    def end_mock(self, number: int, passed: list[str], seconds: dict[str, float], ended: str) -> None:
        """Close mock interview `number`: what passed, seconds spent per drill, and how it ended."""
        mock = self.mocks[number - 1]
        mock.update(passed=passed, seconds={k: round(v, 1) for k, v in seconds.items()}, ended=ended)
