"""What a graded student tree holds back of the drill bank (issue 38 item 1): the answers of the held drills.

A held drill's answer passes a graded exercise (`answerable.WITHHELD_DRILLS`: drill -> those exercises). Its
solution and planted wrong answers are in `harness/judges/drills/held`, which a graded tree does not ship; its judge
stays in its topic's module, so lesson 11's local checks run, and the one held reference a judge recomputes (the
warmup-cosine factor) is there as its values on the visible case (`harness/judges/drills/recorded.json`). The tree's
`answers.json` loses their answers, and `harness/drills/withheld.json` lists them with their exercises, for
`harness drill` to say why they are held. A held drill that lesson 11's notebook does not hold leaves whole: its record
(prompt, starter, hints: a bug hunt's starter is its answer with a line or two moved) is in `harness/drills/bank/held`,
which the tree does not ship either, and the tree's `index.json` loses its entry. A practice tree (no held drills)
keeps everything.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

DRILLS = Path("harness") / "judges" / "drills"
HELD = DRILLS / "held"
HELD_RECORDS = Path("harness") / "drills" / "bank" / "held"  # the bank side of the drills that leave whole
INDEX = Path("harness") / "drills" / "index.json"
WITHHELD_LIST = Path("harness") / "drills" / "withheld.json"  # read by `harness drill`


def held_answers(repo_root: Path) -> set[str]:
    """The drills whose answers `harness/judges/drills/held` registers (read from its source)."""
    return {drill for path in sorted((repo_root / HELD).glob("*.py"))
            for drill in re.findall(r'drill_id="([^"]+)"', path.read_text(encoding="utf-8"))}


def held_records(repo_root: Path) -> set[str]:
    """The drills whose records (prompt, starter, hints) `harness/drills/bank/held` holds (read from its source)."""
    return {drill for path in sorted((repo_root / HELD_RECORDS).glob("*.py"))
            for drill in re.findall(r'^ +id="([^"]+)"', path.read_text(encoding="utf-8"), re.MULTILINE)}


def withhold_drills(target: Path, drills: Mapping[str, tuple[str, ...]], repo_root: Path) -> None:
    """Hold the answers of `drills` (drill -> the graded exercises its answer passes) back from the tree `target`.

    Raises:
        KeyError: a drill the bank does not hold.
        ValueError: `harness/judges/drills/held` holds the answers of a drill not among `drills` (the tree would
            lose them without saying why), or `harness/drills/bank/held` does not hold exactly the records of the
            drills among `drills` that lesson 11's notebook does not hold.
    """
    answers_path = target / DRILLS / "answers.json"
    answers = json.loads(answers_path.read_text(encoding="utf-8"))
    unknown = sorted(set(drills) - set(answers))
    if unknown:
        raise KeyError(f"withheld drills {', '.join(unknown)} are not in the drill bank's answers")
    kept = {drill: answer for drill, answer in answers.items() if drill not in drills}
    answers_path.write_text(json.dumps(kept, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    (target / WITHHELD_LIST).write_text(json.dumps({drill: list(drills[drill]) for drill in sorted(drills)}) + "\n")
    if not drills:
        return
    stray = sorted(held_answers(repo_root) - set(drills))
    if stray:
        raise ValueError(f"harness/judges/drills/held holds the answers of {', '.join(stray)}, which the tree does not "
                         "withhold: add them to WITHHELD_DRILLS (harness/grading/answerable.py), or move their answers "
                         "back to their topic's module")
    from harness.drills.lesson import NOTEBOOK_DRILLS

    whole = set(drills) - {drill for _, drill in NOTEBOOK_DRILLS}
    records = held_records(repo_root)
    if records != whole:
        raise ValueError(
            "harness/drills/bank/held must hold the records of exactly the held drills that lesson 11's notebook does "
            f"not hold: it lacks {', '.join(sorted(whole - records)) or 'none'} (move their Drill there from their "
            f"topic's module) and holds {', '.join(sorted(records - whole)) or 'no other'}, which the tree does not "
            "withhold (add them to WITHHELD_DRILLS, harness/grading/answerable.py, or move them back)")
    from harness.judges.drills.held import recorded_values

    shutil.rmtree(target / HELD)
    shutil.rmtree(target / HELD_RECORDS)
    index = json.loads((target / INDEX).read_text(encoding="utf-8"))
    (target / INDEX).write_text(json.dumps([entry for entry in index if entry["id"] not in whole], indent=1,
                                           ensure_ascii=False) + "\n", encoding="utf-8")
    (target / DRILLS / "recorded.json").write_text(json.dumps(recorded_values(), indent=1) + "\n", encoding="utf-8")
