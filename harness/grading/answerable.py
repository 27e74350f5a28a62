"""What the answerability audit may find (`harness.grading.answerability`): each hit declared, with its reason.

`ALLOWED`: (task, shipped object) -> why the course ships it although it passes that exercise's check (the lesson
says the library's function is the answer and the exercise asks for more, or later lessons need it).
`KNOWN_ANSWERABLE`: (task, shipped object) -> the work that will close it: hits that cannot be withheld yet (the
judges' references, which local checks need until issue 38 item 1 moves them). `tests/test_answerability.py` keeps
this table equal to what the audit finds: a new hit fails, and so does an entry the audit no longer finds.
`WITHHELD_DRILLS`: drills whose answers a graded student tree does not carry (lesson 11's graded drills, and drills
whose answer passes another lesson's exercise); a practice tree (`--practice`) carries them.
"""

from __future__ import annotations

from harness.drills.lesson import NOTEBOOK_DRILLS

ALLOWED: dict[tuple[str, str], str] = {}

KNOWN_ANSWERABLE: dict[tuple[str, str], str] = {}

# Lesson 11's graded drills; then the drills whose answers pass another lesson's exercise (the audit's hits).
WITHHELD_DRILLS: tuple[str, ...] = tuple(drill for _, drill in NOTEBOOK_DRILLS)
