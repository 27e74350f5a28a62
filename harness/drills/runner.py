"""Check one answer file in a child process: `python -m harness.drills.runner DRILL_ID FILE`.

The CLI runs answers here, under a timeout, so an infinite loop or a crash in an answer never takes the
trainer down. Prints one JSON line: {"passed": bool, "code": str, "message": str}.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.checks.core import CheckFailed
from harness.drills.core import get_drill, run_check


def main(drill_id: str, answer: str) -> int:
    drill = get_drill(drill_id)
    try:
        verified = run_check(drill, Path(answer).read_text())
        result = {"passed": True, "code": "passed", "message": verified}
    except CheckFailed as failure:
        result = {"passed": False, "code": failure.code, "message": str(failure)}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:3]))
