"""Resume torture, a few trials: real training subprocesses (DataLoader workers included) killed with SIGKILL
at random moments, resumed until they finish, and compared bit for bit with an uninterrupted run.

The same code runs many trials in `benchmarks/resume_torture.py` (`--trials 20 --workers 0 2`)."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "resume_torture.py"


def _torture():
    spec = importlib.util.spec_from_file_location("resume_torture", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


torture = _torture()


@pytest.mark.slow
def test_runs_killed_at_random_moments_resume_bit_for_bit(tmp_path):
    # lesson 03's make_loaders(num_workers=2): persistent workers, shuffled; test_resume_exact covers the rest
    setup = torture.Setup(workers=2, persistent=True, shuffle=True, interval="step", precision="bf16")
    try:
        reference, train_seconds = torture.reference(setup, tmp_path)
        result = torture.trial(setup, tmp_path, reference, train_seconds, random.Random(1), max_kills=2)
    finally:
        torture.kill_children()
    assert result.kills >= 1
    assert result.matched, f"{setup.name()}, resumed from epochs {result.resumed_from}: {result.detail}"
