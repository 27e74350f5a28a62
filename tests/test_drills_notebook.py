"""Notebook 11 is built from the drill bank: the committed source equals what the builder makes."""

import nbformat

from harness.drills.notebook import NOTEBOOK, build


def test_committed_notebook_matches_the_bank():
    committed = nbformat.read(NOTEBOOK, as_version=4)
    built = build()
    assert [c.source for c in committed.cells] == [c.source for c in built.cells]
    assert [c.metadata for c in committed.cells] == [c.metadata for c in built.cells]
