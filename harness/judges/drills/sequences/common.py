"""What several sequence drill groups share: how close a result must be to a reference to count as it."""

from __future__ import annotations

# How close a result must be to a reference (in float64, whatever its dtype) to count as it
CLOSE = {"atol": 1e-5, "rtol": 1e-4, "dtype": False}
