"""Load an answer's source into a fresh namespace (in the answer's own process: `harness.drills.runner`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from harness.contract.failure import CheckFailed

if TYPE_CHECKING:
    from harness.drills.core import Drill


def load_answer(drill: Drill, source: str, filename: str) -> dict[str, Any]:
    """Execute the answer's source in a fresh namespace; it must define `drill.entry`."""
    namespace: dict[str, Any] = {"__name__": f"drill_answer_{drill.id.replace('-', '_')}"}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 (running answers is the point)
    if drill.entry not in namespace:
        raise CheckFailed(
            f"[missing-entry]\n  Observed:      your answer defines no `{drill.entry}`\n"
            f"  Expected:      a definition of `{drill.entry}`, as in the starter\n"
            f"  Likely cause:  the name was changed or the definition deleted\n"
            f"  Where to look: the starter's first lines",
            code="missing-entry",
        )
    return namespace
