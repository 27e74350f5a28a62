"""The early-stopping drill."""

from __future__ import annotations

from typing import Any

import torch

from harness.contract import expect
from harness.contract.case import Case
from harness.contract.compare import malformed, same_values
from harness.contract.failure import fail
from harness.contract.wire import describe
from harness.drills.bank.loop import (
    es_plan,
    es_setup,
)
from harness.drills.core import Answers
from harness.drills.support import edited
from harness.judges.drills.loop.common import NOT_A_LOSS
from harness.judges.drills.whys import add_answers


def _es_replay(values: list[float], patience: int, *, ties_improve: bool = False,
               stop_after: int = 0) -> tuple[int, int]:
    """(epochs run, best epoch) of early stopping on `values`; the keywords replay two mistakes: a tie counted
    as a new best (`<=`), and a stop one epoch late (`stop_after=patience + 1`, the test `> patience`)."""
    best, best_epoch, bad = float("inf"), 0, 0
    for epoch, value in enumerate(values, start=1):
        if value < best or (ties_improve and value == best):
            best, best_epoch, bad = value, epoch, 0
        else:
            bad += 1
            if bad >= (stop_after or patience):
                return epoch, best_epoch
    return len(values), best_epoch


def _es_judge_run(seen: Any, case: Case, scenario: str) -> tuple[int, int]:
    """Judge one run of fit; (epochs it must run, its best epoch). "runs_out" is judged after "stops" passed."""
    patience, max_epochs, values, tie = es_plan(case, scenario)
    _, _, trajectory, _ = es_setup(case, scenario)
    runs, best_epoch = _es_replay(values, patience)
    if not isinstance(seen, dict):
        malformed("run")
    got = seen.get("history")
    if not isinstance(got, (list, tuple)):
        fail("not-a-list", observed=f"fit returned {describe(got)}", expected="the list of validation losses, "
             "one per epoch run", cause="returning the best loss only, or nothing", where="the return line")
    got = [expect.finite_number("an entry of the returned history", v, where="the return line", cause=NOT_A_LOSS)
           for v in got]
    if seen.get("trained") != len(got) or seen.get("validated") != len(got):
        fail("epoch-count", observed=f"{describe(seen.get('trained'))} calls of train_one_epoch and "
             f"{describe(seen.get('validated'))} of validate for {len(got)} history entries",
             expected="one training epoch and one validation per entry", cause="validating twice per epoch, or "
             "an entry appended without training", where="the body of the epoch loop")
    want = (f"stop after epoch {runs}: the best epoch was {best_epoch} and patience is {patience}" if runs < max_epochs
            else f"all {max_epochs} epochs (max_epochs): never {patience} in a row without a new best")
    if len(got) < runs:
        fail("stopped-early", observed=f"training stopped after {len(got)} epochs", expected=want,
             cause="the count of epochs without improvement is not reset when a new best arrives",
             where="reset the counter to 0 on every new best")
    if len(got) > runs:
        if tie and len(got) == _es_replay(values, patience, ties_improve=True)[0]:
            fail("tie-counted-as-best", observed=f"training ran {len(got)} epochs: epoch {tie}'s validation loss "
                 f"equals the best ({values[tie - 1]:.6g}, epoch {best_epoch}) and restarted the count", expected=want,
                 cause="`val_loss <= best_loss` counts a tie as an improvement; only a strictly lower loss is a "
                 "new best", where="the comparison: val_loss < best_loss")
        if len(got) == _es_replay(values, patience, stop_after=patience + 1)[0]:
            fail("stopped-late", observed=f"training ran {len(got)} epochs, one more than patience allows",
                 expected=want, cause="an off-by-one in the patience test (`> patience` instead of `>= patience`)",
                 where="the stopping condition")
        fail("stopped-late", observed=f"training ran {len(got)} epochs", expected=want,
             cause="epochs without a new best are not counted, or the count is not tested each epoch",
             where="the stopping condition")
    if not all(abs(g - w) <= 1e-6 * max(1.0, abs(w)) for g, w in zip(got, values[:runs], strict=True)):
        fail("wrong-history", observed=f"validation losses {[round(g, 4) for g in got]}",
             expected=f"{[round(w, 4) for w in values[:runs]]}", cause="validate called before train_one_epoch, or "
             "another value recorded", where="train, then validate, then append")
    final = seen.get("final")
    if not isinstance(final, torch.Tensor) or final.shape != trajectory[0].shape:
        malformed("final weights missing")
    if not same_values(final, trajectory[best_epoch - 1], dtype=False):
        restored_last = same_values(final, trajectory[runs - 1], dtype=False)
        if scenario == "runs_out" and restored_last:
            fail("not-restored-at-max-epochs", observed=f"a run that reached max_epochs={max_epochs} ends with the "
                 "weights of its last epoch (a run stopped by patience got its best weights back)",
                 expected=f"the weights of epoch {best_epoch}, the best validation loss", cause="the best weights "
                 "are loaded back only on the early-stopping branch, before `break`; a run that ends at max_epochs "
                 "never reaches it", where="model.load_state_dict(best) after the loop, on every path")
        fail("best-not-restored", observed="the model ends with the weights of the last epoch" if restored_last
             else "the model ends with weights of no epoch's best", expected=f"the weights of epoch {best_epoch}, "
             "the best validation loss", cause="model.state_dict() returns references to the live tensors: "
             "kept without copy.deepcopy (or a clone of each tensor), the 'best' weights are overwritten by every "
             "later epoch; or they were never loaded back", where="best = copy.deepcopy(model.state_dict()); "
             "model.load_state_dict(best) before returning")
    return runs, best_epoch


def _judge_early_stopping(seen: dict, *, case: Case) -> str:
    runs, best_epoch = _es_judge_run(seen.get("stops"), case, "stops")
    _es_judge_run(seen.get("runs_out"), case, "runs_out")
    return (f"stopped after epoch {runs} (best epoch {best_epoch}, a tie not counted as a new best) with its "
            "weights; a run that reached max_epochs also got its best weights back")


_ES_SOLUTION = '''import copy

import torch


def fit(model, train_one_epoch, validate, max_epochs, patience):
    history = []
    best_loss, best_state, bad_epochs = float("inf"), None, 0
    for _ in range(max_epochs):
        train_one_epoch(model)
        val_loss = validate(model)
        history.append(val_loss)
        if val_loss < best_loss:
            best_loss, bad_epochs = val_loss, 0
            best_state = copy.deepcopy(model.state_dict())
        else:
            bad_epochs += 1
            if bad_epochs >= patience:
                break
    if best_state is not None:
        model.load_state_dict(best_state)
    return history
'''


add_answers(
    Answers(
        drill_id="loop-early-stopping",
        solution=_ES_SOLUTION,
        wrong_answers=(
            (edited(_ES_SOLUTION,
                    ("    if best_state is not None:\n        model.load_state_dict(best_state)\n", "")),
             "best-not-restored"),
            (edited(_ES_SOLUTION, ("copy.deepcopy(model.state_dict())", "model.state_dict()")), "best-not-restored"),
            (edited(_ES_SOLUTION, ("best_loss, bad_epochs = val_loss, 0", "best_loss = val_loss")), "stopped-early"),
            (edited(_ES_SOLUTION, ("bad_epochs >= patience", "bad_epochs > patience")), "stopped-late"),
            (edited(_ES_SOLUTION, ("val_loss < best_loss", "val_loss <= best_loss")), "tie-counted-as-best"),
            (edited(_ES_SOLUTION,
                    ("    if best_state is not None:\n        model.load_state_dict(best_state)\n", ""),
                    ("                break\n",
                     "                model.load_state_dict(best_state)\n                break\n")),
             "not-restored-at-max-epochs"),
        ),
        judge=_judge_early_stopping,
    )
)
