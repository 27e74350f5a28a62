"""The grading-time budget switch (harness.budget)."""

import pytest

from harness.budget import budget, is_grading


def test_full_budget_outside_nbgrader(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.delenv("HARNESS_BUDGET", raising=False)
    assert not is_grading()
    assert budget(full=20, grading=2) == 20


def test_grading_budget_when_nbgrader_executes(monkeypatch):
    monkeypatch.delenv("HARNESS_BUDGET", raising=False)
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert is_grading()
    assert budget(full=20, grading=2) == 2


@pytest.mark.parametrize(("forced", "expected"), [("full", 20), ("grading", 2), ("GRADING", 2)])
def test_environment_override(monkeypatch, forced, expected):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    monkeypatch.setenv("HARNESS_BUDGET", forced)
    assert budget(full=20, grading=2) == expected


def test_unknown_override_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("HARNESS_BUDGET", "tiny")
    with pytest.raises(ValueError, match="use 'full' or 'grading'"):
        is_grading()
