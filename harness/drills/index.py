"""The bank's metadata without the bank: what `list`, `daily`, `stats`, `start`, `hint` and `solution` need.

The bank's modules import torch (seconds); these commands must answer in a fraction of one. `index.json`, shipped
in the package, holds every drill's id, title, kind, topics, difficulty, prompt, starter, solution, hints and,
for explain drills, the options' texts and the key. `python -m harness.drills.index` rewrites it from the bank;
`tests/test_drills_index.py` fails when it no longer matches.
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.drills.choices import Choices, Option

INDEX_PATH = Path(__file__).with_name("index.json")


@dataclass(frozen=True)
class Entry:
    """One drill as the quick commands see it."""

    id: str
    title: str
    kind: str
    topics: tuple[str, ...]
    difficulty: int
    prompt: str
    starter: str
    solution: str
    hints: tuple[str, ...]
    options: tuple[str, ...] = ()  # explain drills: the options' texts, in the bank's order
    key: int = -1  # explain drills: the index of the right option
    self_check: bool = False  # a pass that does not count in a mock interview (`Drill.self_check`)

    @property
    def choices(self) -> Choices | None:
        """The options (their texts; the why of each is in the bank) for an explain drill, else None."""
        if not self.options:
            return None
        return Choices(tuple(Option(text, "") for text in self.options), self.key)


def build() -> list[dict]:
    """The index, from the bank (imports torch)."""
    from harness.drills.core import all_drills

    entries = []
    for drill in all_drills():
        choices = drill.choices
        entries.append(asdict(Entry(
            id=drill.id, title=drill.title, kind=drill.kind, topics=drill.topics, difficulty=drill.difficulty,
            prompt=drill.prompt, starter=drill.starter, solution=drill.solution, hints=drill.hints,
            options=tuple(o.text for o in choices.options) if choices else (), key=choices.key if choices else -1,
            self_check=drill.self_check)))
    return json.loads(json.dumps(entries))


@functools.cache
def entries() -> tuple[Entry, ...]:
    """Every drill's entry, in the bank's order (topic, difficulty, id)."""
    try:
        raw = json.loads(INDEX_PATH.read_text())
    except (OSError, ValueError) as error:
        raise SystemExit(f"the drill index {INDEX_PATH} cannot be read ({error}): rebuild it with "
                         "`python -m harness.drills.index`") from None
    return tuple(Entry(**{**e, "topics": tuple(e["topics"]), "hints": tuple(e["hints"]),
                          "options": tuple(e["options"])}) for e in raw)


def get(drill_id: str) -> Entry:
    """The entry of `drill_id`; SystemExit naming close ids when there is none."""
    for entry in entries():
        if entry.id == drill_id:
            return entry
    close = [e.id for e in entries() if drill_id.split("-")[0] in e.id][:5]
    raise SystemExit(f"no drill named {drill_id!r}" + (f"; did you mean {', '.join(close)}?" if close else ""))


if __name__ == "__main__":
    INDEX_PATH.write_text(json.dumps(build(), indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {INDEX_PATH}")
