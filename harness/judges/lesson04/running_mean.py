"""04-running-mean, the judge.

`cls()` has update(value, n) and compute(): a sample-weighted mean that never syncs or keeps graphs.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.checks.lesson04.common import META, one_thread
from harness.checks.lesson04.running_mean import running_mean_inputs
from harness.contract.case import Case
from harness.contract.compare import isclose_number, malformed
from harness.contract.failure import Hints, Requirement, fail, raised_failure
from harness.contract.registry import judges
from harness.judges.lesson04.common import SAME, _copies, _scalar_or_fail, _sync_calls


def _require_device(seen: Any, task: str, what: str, cause: str, where: str) -> None:
    """Fail "not-on-device" unless the run on the meta device left `what` on meta; report what it raised."""
    if not isinstance(seen, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in seen.items()):
        malformed("other_device is not a record of a run")
    if "raised" in seen:
        raise raised_failure(task, f"{seen['raised']}\n  (on a device your code did not expect: meta, "
                             "which holds no values and cannot be read on the host)")
    if seen.get("device") != f"a tensor on {META}":
        fail(
            "not-on-device",
            observed=f"with inputs on another device (meta), {what} returned {seen.get('device')}",
            expected=f"{what} returns a tensor on the device of its inputs (meta here; cuda on a GPU)",
            cause=cause,
            where=where,
        )


@judges(
    "04-running-mean",
    hints=Hints(
        nudge="Keep a running *sum* of value * n and a running count, both as tensors; divide only in compute().",
        concept="A device-side metric never leaves the device until you ask for it: accumulate value * n "
        "(detached) and n, and divide once, in compute(). Each instance owns its state.",
        solution="`self.total = self.total + value.detach() * n` and `self.count += n` in update (state set in "
        "__init__: `self.total = torch.zeros(())`, `self.count = 0`); compute() returns `self.total / self.count`.",
        section="3. Metrics without a sync at every step",
    ),
    requires={
        "host-sync-per-update": Requirement(
            "never syncs with the host (no .item(), float() or comparison on a tensor)",
            hint="Which of your lines turns a tensor into a Python number? The total can stay a tensor."),
        "keeps-graph": Requirement(
            "does not keep the graph of the values it is given (stores value.detach())",
            hint="The values you are given are live losses. What does adding one into your total keep alive?"),
        "unweighted-mean": Requirement(
            "weights each update by its number of samples n",
            hint="Your mean treats a batch of 1 sample like a batch of 32. What should each value count for?"),
        "wrong-mean": Requirement(
            "compute() is sum(value * n) / sum(n) over every update",
            hint="Work the mean out by hand for two updates (1.0 over 2 samples, 4.0 over 1) and compare."),
        "shared-state": Requirement(
            "keeps its state per instance (set in __init__)",
            hint="Make two RunningMean objects and update one: does the other change? Where does the state live?"),
        "not-a-scalar": Requirement(
            "compute() returns a single number, a 0-dim tensor",
            hint="What shape does compute() return? The mean over all samples is one number."),
        "not-on-device": Requirement(
            "compute() returns a tensor on the device of the values (the total follows them: out-of-place add)",
            hint="Your total starts on the CPU. Does `+=` move it to the device of the value, or keep it where it is?"),
    },
)
@one_thread()
def judge_running_mean(seen: dict, *, case: Case) -> str:
    """`cls()` has update(value, n) and compute(): a sample-weighted mean that never syncs or keeps graphs."""
    values, counts = running_mean_inputs(case)
    weights = torch.tensor(counts, dtype=torch.float32)
    expected = float((torch.stack(values) * weights).sum() / weights.sum())
    unweighted = float(torch.stack(values).mean())
    where = "your RunningMean class: update() and compute()"
    count, calls = _sync_calls(seen)
    result = seen["result"]
    if count:
        fail(
            "host-sync-per-update",
            observed=f"{_copies(count)} ({', '.join(calls)}) during "
            f"{len(counts)} updates and one compute()",
            expected="no host sync at all: the running state stays a tensor on the device",
            cause=f"a conversion to a Python value ({', '.join(calls)}) inside update() or compute()",
            where=where,
        )
    if isinstance(result, torch.Tensor) and result.requires_grad:
        fail(
            "keeps-graph",
            observed="compute() returns a tensor that requires grad: the running total holds the graph of every batch",
            expected="a plain tensor: update() stores `value.detach()`",
            cause="update() adds the value without .detach(): the total then chains every batch's graph (and "
            "its activations), so memory grows with every step",
            where=where,
        )
    observed = _scalar_or_fail(result, "compute()", where)
    if isclose_number(observed, unweighted, **SAME) and not isclose_number(unweighted, expected, **SAME):
        fail(
            "unweighted-mean",
            observed=f"compute() = {observed:.5f}, the plain mean of the batch values",
            expected=f"{expected:.5f}, the mean weighted by the number of samples n of each update "
            f"(counts {counts})",
            cause="averaging batch means ignores that the last batch is often smaller",
            where=where,
        )
    if not isclose_number(observed, expected, **SAME):
        fail(
            "wrong-mean",
            observed=f"compute() = {observed:.5f} after updates with counts {counts}",
            expected=f"{expected:.5f} = sum(value * n) / sum(n)",
            cause="the running sum or the running count is not accumulated as value * n and n",
            where=where,
        )
    fresh = _scalar_or_fail(seen["fresh"], "compute()", where)
    if not isclose_number(fresh, 1.0, **SAME):
        fail(
            "shared-state",
            observed=f"a new RunningMean that saw one update of 1.0 reports {fresh:.4f}",
            expected="1.0: every instance starts from zero",
            cause="the total and count live on the class (class attributes) or in a shared default "
            "argument, so every instance adds into the same state",
            where="RunningMean.__init__",
        )
    _require_device(seen["other_device"], "04-running-mean", "compute()",
                    "the total stays on the CPU where __init__ made it: either it is updated in place "
                    "(`self.total += ...` writes into the CPU tensor, and fails on a GPU), or it is created or moved "
                    "to a fixed device; `self.total = self.total + ...` follows the value's device", where)
    return f"sample-weighted mean over {len(counts)} updates, no host sync, no graph kept, stays on the values' device"
