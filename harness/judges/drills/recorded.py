"""A held reference, called by a judge: run where it is installed, else read as recorded on the visible case.

A held drill's judge that recomputes a reference which answers a graded exercise (the warmup-cosine factor answers
07-warmup-cosine and 11-warmup-cosine) calls it as `held("schedulers.warmup_cosine_expected", step, warmup, total)`.
In the instructor's repository and a practice tree this runs the function of `harness.judges.drills.held`; a graded
student tree does not ship that package, and reads the value recorded, when the tree was written, for each call the
visible case makes (`recorded.json`, from `harness.judges.drills.held.recorded_values`): lesson 11's local checks run
on that case. Any other call raises LookupError saying so.
"""

from __future__ import annotations

import functools
import importlib
import json
from pathlib import Path
from typing import Any

RECORDED_PATH = Path(__file__).with_name("recorded.json")
_HELD = "harness.judges.drills.held"


def held(name: str, *arguments: Any) -> Any:
    """The held reference `name` ("<topic>.<function>") on `arguments`: computed where the held answers are
    installed, else as recorded on the visible case (LookupError for a call that was not recorded)."""
    topic, function = name.rsplit(".", 1)
    try:
        module = importlib.import_module(f"{_HELD}.{topic}")
    except ModuleNotFoundError as error:
        if error.name not in (_HELD, f"{_HELD}.{topic}"):
            raise
        return _recorded(name, list(arguments))
    return getattr(module, function)(*arguments)


@functools.cache
def _table() -> dict[str, dict[str, Any]]:
    return json.loads(RECORDED_PATH.read_text(encoding="utf-8")) if RECORDED_PATH.is_file() else {}


def _recorded(name: str, arguments: list[Any]) -> Any:
    values = _table().get(name, {})
    key = json.dumps(arguments)
    if key not in values:
        raise LookupError(f"{name}{tuple(arguments)} is a reference held with your instructor: this copy of the course "
                          "holds its values on the visible case only (the one check() runs), and this call is not "
                          "among them")
    return values[key]
