"""Local drill progress with spaced repetition (Leitner boxes): drills you fail come back soon.

A pass moves a drill up one box and pushes its next review out (0, 1, 2, 4, 8, 16 days); a failure, or
a revealed solution, puts it back in box 0, due today. Stored as JSON under $HARNESS_HOME (default
~/.harness)/drills/progress.json.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

INTERVAL_DAYS = (0, 1, 2, 4, 8, 16)


def home() -> Path:
    """The drills workspace: answers and progress."""
    return Path(os.environ.get("HARNESS_HOME", Path.home() / ".harness")) / "drills"


@dataclass
class Record:
    """One drill's history."""

    box: int = 0
    due: str = ""  # ISO date; "" = never seen (new)
    attempts: int = 0
    passes: int = 0
    hints_seen: int = 0
    last_result: str = ""


@dataclass
class Progress:
    """Every drill's record, loaded from and saved to `path`."""

    path: Path
    records: dict[str, Record] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path | None = None) -> "Progress":
        path = path or home() / "progress.json"
        if not path.exists():
            return cls(path)
        try:
            raw = json.loads(path.read_text())
            return cls(path, {k: Record(**v) for k, v in raw.items()})
        except (json.JSONDecodeError, TypeError) as error:
            raise ValueError(f"{path} is not a drill progress file ({error}); move it away to start afresh") from error

    def save(self) -> None:
        """Write atomically, so an interrupted save never loses the history."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({k: asdict(v) for k, v in self.records.items()}, indent=1, sort_keys=True))
        os.replace(tmp, self.path)

    def record(self, drill_id: str, passed: bool, today: dt.date) -> Record:
        """Record an attempt and reschedule the drill."""
        rec = self.records.setdefault(drill_id, Record())
        rec.attempts += 1
        rec.passes += passed
        rec.last_result = "pass" if passed else "fail"
        rec.box = min(rec.box + 1, len(INTERVAL_DAYS) - 1) if passed else 0
        rec.due = (today + dt.timedelta(days=INTERVAL_DAYS[rec.box])).isoformat()
        return rec

    def reveal(self, drill_id: str, today: dt.date) -> None:
        """Seeing the solution counts as not knowing it: back to box 0, due today."""
        rec = self.records.setdefault(drill_id, Record())
        rec.box, rec.due, rec.last_result = 0, today.isoformat(), "revealed"

    def is_due(self, drill_id: str, today: dt.date) -> bool:
        """Seen before and due today or earlier."""
        rec = self.records.get(drill_id)
        return rec is not None and rec.due != "" and dt.date.fromisoformat(rec.due) <= today
