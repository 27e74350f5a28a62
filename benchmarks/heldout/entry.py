"""One held-out entry: a student's solution cell for one check, written from the exercise text only."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    """A solution cell and what it should do under its visible check.

    task: the check's id; kind: "mistake" (the check should fail it) or "correct" (it should pass);
    story: what the student did; cause: what is actually wrong with the code (written before running it);
    source: the cell's code; names: the objects the test cell passes to `check`, in order.
    """

    task: str
    kind: str
    story: str
    cause: str
    source: str
    names: tuple[str, ...]
