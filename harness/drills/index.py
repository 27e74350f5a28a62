"""The bank's metadata without the bank: what `list`, `daily`, `stats`, `start`, `hint` and `solution` need.

The bank's modules import torch (seconds); these commands must answer in a fraction of one. `index.json`, shipped
in the package, holds every drill's id, title, kind, topics, difficulty, prompt, starter, hints and, for explain
drills, the options' texts. What answers a drill (the solution, an explain drill's key) is in the judge side's
`harness/judges/drills/answers.json`, which a graded kernel never mounts. `python -m harness.drills.index`
rewrites both from the bank; `tests/test_drills_index.py` fails when they no longer match.
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.drills.choices import Choices, Option

INDEX_PATH = Path(__file__).with_name("index.json")
ANSWERS_PATH = Path(__file__).parents[1] / "judges" / "drills" / "answers.json"


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
    hints: tuple[str, ...]
    options: tuple[str, ...] = ()  # explain drills: the options' texts, in the bank's order
    self_check: bool = False  # a pass that does not count in a mock interview (`Drill.self_check`)
    solution: str | None = None  # from answers.json (None where the judge side is not installed)
    key: int = -1  # explain drills, from answers.json: the index of the right option

    @property
    def choices(self) -> Choices | None:
        """The options (their texts; the why of each is on the judge side) for an explain drill, else None."""
        if not self.options:
            return None
        return Choices(tuple(Option(text, "") for text in self.options), self.key)


def build() -> tuple[list[dict], dict[str, dict]]:
    """The index and the answers (solution, key) by drill id, from the bank (imports torch)."""
    from harness.drills.core import all_drills

    index, answers = [], {}
    for drill in all_drills():
        choices = drill.choices
        entry = asdict(Entry(
            id=drill.id, title=drill.title, kind=drill.kind, topics=drill.topics, difficulty=drill.difficulty,
            prompt=drill.prompt, starter=drill.starter, hints=drill.hints,
            options=tuple(o.text for o in choices.options) if choices else (), self_check=drill.self_check))
        index.append({name: value for name, value in entry.items() if name not in ("solution", "key")})
        answers[drill.id] = {"solution": drill.solution, "key": choices.key if choices else -1}
    return json.loads(json.dumps(index)), answers


@functools.cache
def entries() -> tuple[Entry, ...]:
    """Every drill's entry, in the bank's order (topic, difficulty, id)."""
    try:
        raw = json.loads(INDEX_PATH.read_text())
    except (OSError, ValueError) as error:
        raise SystemExit(f"the drill index {INDEX_PATH} cannot be read ({error}): rebuild it with "
                         "`python -m harness.drills.index`") from None
    answers = json.loads(ANSWERS_PATH.read_text()) if ANSWERS_PATH.is_file() else {}
    return tuple(Entry(**{**e, "topics": tuple(e["topics"]), "hints": tuple(e["hints"]),
                          "options": tuple(e["options"]), **answers.get(e["id"], {})}) for e in raw)


def get(drill_id: str) -> Entry:
    """The entry of `drill_id`; SystemExit naming close ids when there is none."""
    for entry in entries():
        if entry.id == drill_id:
            return entry
    close = [e.id for e in entries() if drill_id.split("-")[0] in e.id][:5]
    raise SystemExit(f"no drill named {drill_id!r}" + (f"; did you mean {', '.join(close)}?" if close else ""))


if __name__ == "__main__":
    built_index, built_answers = build()
    INDEX_PATH.write_text(json.dumps(built_index, indent=1, ensure_ascii=False) + "\n")
    ANSWERS_PATH.write_text(json.dumps(built_answers, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {INDEX_PATH} and {ANSWERS_PATH}")
