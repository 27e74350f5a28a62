"""09-no-sync, the judge.

One all-reduce per optimizer step; the update must equal one process on the whole batch, computed here.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from harness.checks.lesson09.common import MODEL_SEED, WORLD, detached_state, make_model
from harness.checks.lesson09.no_sync import accumulation_settings, rank_micro_batches
from harness.contract.case import Case
from harness.contract.compare import close_state, malformed, tensor_dict
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.judges.lesson09.common import TOLERANCE, _hang_row, _ranks, _same_layout, _state_max_difference


def _accumulation_reference(micro: int, steps: int, seed: int, model_seed: int) -> dict[str, torch.Tensor]:
    """One process, one plain SGD step per optimizer step on all ranks' micro-batches at once."""
    model = make_model(model_seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        batches = [batch for rank in range(WORLD) for batch in rank_micro_batches(seed, step, rank, micro)]
        loss = nn.functional.mse_loss(model(torch.cat([x for x, _ in batches])), torch.cat([y for _, y in batches]))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return detached_state(model.state_dict())


def _fail_if_synced_early(synced_after: Any, micro: int, states: list[dict[str, torch.Tensor]]) -> None:
    """Fail [ranks-differ] naming the micro-batch whose backward all-reduced, when one per step did and it was not
    the last (`synced_after`: per all-reduce, how many forwards of its optimizer step had run)."""
    if not (isinstance(synced_after, list) and all(type(count) is int for count in synced_after)):
        malformed("the all-reduce positions are not a list of ints")
    early = next((count for count in synced_after if 0 < count < micro), None)
    if early is None:
        return
    fail("ranks-differ",
         observed=f"the ranks' parameters differ by {_state_max_difference(states[0], states[1]):.2e}; the gradient "
         f"all-reduce ran in the backward of micro-batch {early} of {micro}, not the last",
         expected="identical parameters: the all-reduce in the last micro-batch's backward, after every gradient "
         "has been accumulated",
         cause=f"micro-batch {early}'s backward ran outside no_sync and the later ones inside it: their gradients "
         "were added locally after the all-reduce, so each rank stepped on its own, unaveraged sum",
         where="run every micro-batch but the last inside `with model.no_sync():`",
         hint="Which micro-batch's backward runs outside no_sync? The last one's all-reduce is the only one that "
         "sees every micro-batch's gradient.")


@judges(
    "09-no-sync",
    hints=Hints(
        nudge="DDP all-reduces gradients in every backward. Inside `with model.no_sync():` it does not; the gradients "
        "just accumulate locally. Which backward must synchronise?",
        concept="gradients add up in .grad across backward calls; no_sync only skips the communication, so the last "
        "backward, outside it, all-reduces the whole accumulated sum once",
        solution="for i, (x, y) in enumerate(micro_batches): last = i == len(micro_batches) - 1; "
        "with (nullcontext() if last else model.no_sync()): (loss_fn(model(x), y) / len(micro_batches)).backward(); "
        "then optimizer.step(); optimizer.zero_grad(set_to_none=True)",
        section="6. Gradient accumulation with `no_sync`"),
    requires={
        "never-synced": Requirement("the last micro-batch's backward synchronises",
                                    hint="No all-reduce happened at all: is every backward inside no_sync?"),
        "missing-no-sync": Requirement("only the last micro-batch's backward synchronises: one all-reduce per step",
                                       hint="Every micro-batch's backward communicated: which context skips that?"),
        "ranks-differ": Requirement("one step, on the averaged gradient: identical weights on every rank",
                                    hint="The ranks' weights differ: did a step run before the synchronised backward?"),
        "wrong-update": Requirement(
            "each loss divided by the number of micro-batches, one step per call, gradients cleared after it",
            hint="The ranks agree, but the step differs from one process on the whole batch: check the loss's "
            "scaling and what is left in .grad for the next call."),
        **_hang_row("DDP's gradient all-reduce"),
    },
)
def judge_no_sync(seen: dict, *, case: Case) -> str:
    """One all-reduce per optimizer step; the update must equal one process on the whole batch, computed here."""
    for (micro, steps, seed), run in zip(accumulation_settings(case), seen["runs"], strict=True):
        results = _ranks(run)
        reductions = results[0]["reductions"]
        if not isinstance(reductions, int) or isinstance(reductions, bool):
            malformed("the all-reduce count is not an int")
        if reductions == 0:
            fail("never-synced", observed="no gradient all-reduce happened",
                 expected=f"one per optimizer step ({steps})",
                 cause="every backward ran inside no_sync, the last one included, so the ranks never average",
                 where="run the last micro-batch's backward outside no_sync")
        if reductions > steps:
            fail("missing-no-sync",
                 observed=f"{reductions} gradient all-reduces for {steps} optimizer steps of {micro} micro-batches",
                 expected=f"{steps}: one per optimizer step", cause="every micro-batch's backward synchronises: "
                 "communication is paid micro-batch times for the same result",
                 where="wrap all but the last micro-batch's forward and backward in `with model.no_sync():`")
        reference = _accumulation_reference(micro, steps, seed, case.seeded(MODEL_SEED))
        states = [tensor_dict(result["state"], "a rank's state") for result in results]
        if not all(_same_layout(state, reference) for state in states):
            malformed("the ranks' states are not the model's state_dict")
        if not close_state(states[0], states[1], rtol=TOLERANCE, atol=TOLERANCE, dtype=False):
            _fail_if_synced_early(results[0].get("synced_after"), micro, states)
            fail("ranks-differ",
                 observed=f"the ranks' parameters differ by {_state_max_difference(states[0], states[1]):.2e}",
                 expected="identical parameters",
                 cause="an optimizer step happened on gradients that were not averaged",
                 where="step once, after the last (synchronised) backward")
        if not close_state(states[0], reference, rtol=TOLERANCE, atol=TOLERANCE, dtype=False):
            fail("wrong-update", observed="parameters differ from one process on the whole batch by "
                 f"{_state_max_difference(states[0], reference):.2e}",
                 expected=f"the same parameters within {TOLERANCE:g}",
                 cause="the accumulated gradient is not the whole batch's mean gradient: divide each micro-batch "
                 "loss by the number of micro-batches, step once per call, and clear the gradients after stepping",
                 where="loss / len(micro_batches); optimizer.step(); optimizer.zero_grad(set_to_none=True)")
    return "one all-reduce per optimizer step; the update equals one process on the whole batch"
