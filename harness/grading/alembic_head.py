"""nbgrader's gradebook schema version, without the `alembic heads` subprocess nbgrader starts for it.

Every new gradebook (each `build_course`: each grading batch, each release) asks `nbgrader.api.
get_alembic_version`, which runs `alembic heads` in a new Python process: about 2 s of CPU for a constant
of the installed nbgrader. For the versions listed here the answer is known; any other version asks alembic
as nbgrader does. tests/test_grading_units.py checks the listed head against alembic's own answer.
"""

from __future__ import annotations

# nbgrader version -> the head revision of its gradebook migrations (`alembic heads` in its alembic folder)
KNOWN_HEADS = {"0.9.6": "e43177bfe90b"}


def use_known_alembic_head() -> None:
    """Make nbgrader read the gradebook's schema version from `KNOWN_HEADS` when its version is listed."""
    import nbgrader
    import nbgrader.api

    head = KNOWN_HEADS.get(nbgrader.__version__)
    if head is not None:
        nbgrader.api.get_alembic_version = lambda: head
