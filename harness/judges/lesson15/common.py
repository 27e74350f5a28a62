"""Lesson 15: what several of its judges share: the tolerance their comparisons use."""

from __future__ import annotations

from functools import partial

from harness.contract.compare import close_values

matches = partial(close_values, rtol=1e-4, atol=1e-4, dtype=False, expected_nan=True)
"""`compare.close_values` at lesson 15's tolerance, in float64 whatever the dtypes; NaN matches only where the
reference has NaN (the references of some wrong answers hold NaN, those of right answers never do)."""
