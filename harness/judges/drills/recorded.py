"""A held reference's values on the visible case, for a judge in a graded student tree.

A held drill's judge that recomputes a reference which answers a graded exercise (the warmup-cosine factor answers
07-warmup-cosine and 11-warmup-cosine) imports it from `harness.judges.drills.held` inside the function that calls it,
so the regrade fingerprint follows it. A graded student tree does not ship that package: there the import fails
(`held_away`) and the judge reads the value `recorded`, when the tree was written, for each call the visible case
makes (`recorded.json`, from `harness.judges.drills.held.recorded_values`): lesson 11's local checks run on that case.
Any other call raises `Unrecorded` saying so.

The calls are filed as the judges' `@recorded` references file theirs (`harness.contract.recorded`: a digest of the
arguments, each value in the wire format); only the table is the drills' own (see that module for why).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from harness.contract.recorded import Unrecorded, decoded, digest, encoded, lookup

RECORDED_PATH = Path(__file__).with_name("recorded.json")
HELD = "harness.judges.drills.held"


def held_away(error: ModuleNotFoundError) -> bool:
    """Whether `error` says the held answers are not installed here (a graded student tree), not another module."""
    return error.name is not None and (error.name == HELD or error.name.startswith(f"{HELD}."))


def values_on(references: dict[str, tuple[Callable[..., Any], Iterable[tuple[Any, ...]]]]) -> dict[str, dict[str, str]]:
    """What each reference (name -> (function, its visible calls)) returns on its calls, as `recorded.json` holds it."""
    return encoded({name: {digest(tuple(arguments), {}): function(*arguments) for arguments in calls}
                    for name, (function, calls) in references.items()})


@functools.cache
def _table() -> dict[str, dict[str, Any]]:
    return decoded(json.loads(RECORDED_PATH.read_text(encoding="utf-8"))) if RECORDED_PATH.is_file() else {}


def recorded(name: str, *arguments: Any) -> Any:
    """The value of the held reference `name` ("<topic>.<function>") on `arguments`, as recorded on the visible case.

    Raises:
        Unrecorded: the call was not recorded (only the visible case's are).
    """
    try:
        return lookup(_table(), name, tuple(arguments), {})
    except Unrecorded:
        raise Unrecorded(f"{name}{tuple(arguments)} is a reference held with your instructor: this copy of the course "
                         "holds its values on the visible case only (the one check() runs), and this call is not "
                         "among them") from None
