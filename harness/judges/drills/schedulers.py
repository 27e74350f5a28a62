"""The judge side of the schedulers drills (`harness.drills.bank.schedulers`): judges and the references
they recompute, reference solutions, planted wrong answers, explain drills' options and keys.

A graded kernel never mounts this package (`harness.judges`). schedulers-warmup-cosine is held (its answer passes
07-warmup-cosine and 11-warmup-cosine): its judge is here, its answers and reference in `held.schedulers`.
"""

from __future__ import annotations

import torch
from torch import nn

from harness.contract.case import Case
from harness.contract.compare import close_tensors, isclose_number, isclose_numbers, malformed
from harness.contract.failure import fail
from harness.drills.bank.schedulers import (
    GRAN_EPOCHS,
    GRANULARITY_STARTER,
    ONECYCLE_STARTER,
    PLATEAU_EPOCHS,
    PLATEAU_STARTER,
    RESUME_AT,
    RESUME_LATER,
    RESUME_STARTER,
    gran_setup,
    group_setup,
    onecycle_setup,
    plateau_data,
    plateau_metric_model,
    plateau_run,
    resume_batches,
    resume_objects,
    resume_step,
    warmup_configs,
    warmup_queries,
    warmup_setup,
)
from harness.drills.core import Answers, add_judge, choice_answers
from harness.drills.support import edited
from harness.judges.drills.recorded import held_away, recorded
from harness.judges.drills.whys import add_answers


def _lrs(steps: object, groups: int = 1) -> list[list[float]]:
    """The recorded learning rates (one list per optimizer step), validated."""
    if not isinstance(steps, list) or not all(
            isinstance(s, list) and len(s) == groups and all(isinstance(v, float) for v in s) for s in steps):
        malformed("recorded learning rates malformed")
    return steps


def _rounded(values: list[float]) -> list[float]:
    return [float(f"{v:.5g}") for v in values]


# ---------------------------------------------------------------------------------------------------------------
# schedulers-warmup-cosine


def _expected_factor(step: int, warmup: int, total: int) -> dict:
    """The held reference at (step, warmup, total): {"want": the factor, "slips": {slip: the factor it gives}}; in a
    graded student tree, as recorded on the visible case."""
    try:
        from harness.judges.drills.held.schedulers import warmup_cosine_expected
    except ModuleNotFoundError as error:
        if not held_away(error):
            raise
        return recorded("schedulers.warmup_cosine_expected", step, warmup, total)
    return warmup_cosine_expected(step, warmup, total)


def require_warmup_cosine_factor(got: float, step: int, warmup: int, total: int) -> None:
    """Fail unless `got` is the reference factor at (step, warmup, total), with a code naming the phase."""
    expected = _expected_factor(step, warmup, total)
    want = expected["want"]
    if not isclose_number(got, want, rel_tol=1e-6, abs_tol=1e-9):
        phase, code = (("warmup", "wrong-warmup") if step < warmup else ("after the end", "not-clamped")
                       if step > total else ("cosine decay", "wrong-decay"))
        fail(code, observed=f"warmup_cosine({step}, {warmup}, {total}) = {got:.6f} ({phase})",
             expected=f"{want:.6f}", cause=_warmup_cosine_cause(got, expected["slips"]),
             where=f"the {phase} branch")


def _warmup_cosine_cause(got: float, slips: dict[str, float | None]) -> str:
    """The slip whose formula gives `got` (`slips`: each slip's value at the step), else the rule itself."""
    named = [slip for slip, value in slips.items() if value is not None and isclose_number(got, value, rel_tol=1e-6,
                                                                                         abs_tol=1e-9)]
    return named[0] if named else ("linear warmup reaches 1 at the last warmup step ((step+1)/warmup); the cosine "
                                   "runs from 1 at step=warmup to 0 at step=total and stays 0 after")


def _judge_warmup_cosine(seen: dict, *, case: Case) -> str:
    values, queries = seen.get("values"), warmup_queries(case)
    if not isinstance(values, list) or len(values) != len(queries) or not all(isinstance(v, float) for v in values):
        malformed("values malformed")
    for got, (step, warmup, total) in zip(values, queries, strict=True):
        require_warmup_cosine_factor(got, step, warmup, total)
    warmup, total = warmup_configs(case)[0]
    got = [lr[0] for lr in _lrs(seen.get("lrs"))]
    want = [0.1 * _expected_factor(s, warmup, total)["want"] for s in range(warmup + 3)]
    if not isclose_numbers(got, want):
        fail("wrong-lambdalr", observed=f"LambdaLR with your factor gave {_rounded(got)}", expected=f"{_rounded(want)}",
             cause="the factor depends on something other than its arguments", where="warmup_cosine")
    return "matches the closed form in warmup, decay and after the end, and plugs into LambdaLR"


add_judge("schedulers-warmup-cosine", _judge_warmup_cosine)  # its answers and reference: held.schedulers


def _judge_granularity(seen: dict, *, case: Case) -> str:
    lr, n_batches = gran_setup(case)
    got = [v[0] for v in _lrs(seen.get("lrs"))]
    want = [lr * 0.1 ** (epoch // 2) for epoch in range(GRAN_EPOCHS) for _ in range(n_batches)]
    if len(got) != len(want):
        fail("step-count", observed=f"{len(got)} optimizer steps", expected=f"{len(want)} ({GRAN_EPOCHS} epochs of "
             f"{n_batches} batches)", cause="the batch loop was changed",
             where="the optimizer.step() calls in the batch loop")
    if not isclose_numbers(got, want):
        first_epoch_decayed = any(v < lr * (1 - 1e-6) for v in got[:n_batches])
        fail("scheduler-per-batch" if first_epoch_decayed else "wrong-schedule",
             observed=f"learning rates per optimizer step ({n_batches} per epoch): {_rounded(got)}",
             expected=f"{_rounded(want)}",
             cause="a per-epoch scheduler stepped once per batch decays len(batches) times too fast"
             if first_epoch_decayed else "the scheduler steps at the start of the epoch: each epoch gets the next "
             "epoch's learning rate", where="where scheduler.step() is called")
    return "a per-epoch scheduler stepped once per epoch, after the epoch's optimizer steps"


def _plateau_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(model(x), y)


def _with_params(case: Case, params: object) -> nn.Sequential:
    model = plateau_metric_model(case)
    shapes = [p.shape for p in model.parameters()]
    if (not isinstance(params, list) or len(params) != len(shapes)
            or any(not isinstance(t, torch.Tensor) or t.shape != s for t, s in zip(params, shapes, strict=True))):
        malformed("recorded parameters malformed")
    with torch.no_grad():
        for p, value in zip(model.parameters(), params, strict=True):
            p.copy_(value)
    return model


def _judge_plateau(seen: dict, *, case: Case) -> str:
    records, before_steps = seen.get("scheduler_steps"), seen.get("optimizer_params")
    if not isinstance(records, list) or not isinstance(before_steps, list):
        malformed("records missing")
    train_batches, val_batches = plateau_data(case)
    n_train = len(train_batches)
    if len(records) != PLATEAU_EPOCHS:
        fail("plateau-step-count", observed=f"scheduler.step() ran {len(records)} times in {PLATEAU_EPOCHS} epochs",
             expected=f"{PLATEAU_EPOCHS}: once per epoch, after validation", cause="stepping it per batch makes "
             "`patience` count batches", where="after the validation loop")
    if len(before_steps) != PLATEAU_EPOCHS * n_train:
        fail("step-count", observed=f"{len(before_steps)} optimizer steps", expected=f"{PLATEAU_EPOCHS * n_train}",
             cause="the training loop was changed", where="the optimizer.step() calls in the training loop")
    with torch.no_grad():
        for epoch, record in enumerate(records):
            if not isinstance(record, dict) or not isinstance(record.get("metric"), (int, float)):
                malformed("scheduler record malformed")
            metric = float(record["metric"])
            at_end = _with_params(case, record.get("params"))
            val = float(sum(_plateau_loss(at_end, x, y) for x, y in val_batches) / len(val_batches))
            if isclose_number(metric, val, rel_tol=1e-5, abs_tol=1e-7):
                continue
            epoch_losses = [float(_plateau_loss(_with_params(case, before_steps[epoch * n_train + i]), *batch))
                            for i, batch in enumerate(train_batches)]
            if isclose_number(metric, sum(epoch_losses) / n_train, rel_tol=1e-5, abs_tol=0.0):
                code, cause = "plateau-on-train-loss", ("the scheduler watches the mean training loss, which keeps "
                                                        "falling while the model memorises: it never plateaus")
            elif isclose_number(metric, epoch_losses[-1], rel_tol=1e-5, abs_tol=0.0):
                code, cause = "plateau-on-last-batch-loss", ("the scheduler watches the loss of the last training "
                                                             "batch: a noisy number, and not the validation metric")
            else:
                code, cause = "wrong-metric", "the number given to the scheduler is not the epoch's validation loss"
            fail(code, observed=f"epoch {epoch}: scheduler.step({metric:.5f})",
                 expected=f"the epoch's validation loss, {val:.5f}", cause=cause,
                 where="the scheduler.step call and what it receives")
    return "ReduceLROnPlateau follows the validation loss, once per epoch"


def _onecycle_reference(max_lr: float, total: int) -> list[float]:
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=max_lr, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=max_lr, total_steps=total)
    lrs = []
    for _ in range(total):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return lrs


def _judge_onecycle(seen: dict, *, case: Case) -> str:
    max_lr, n_batches, epochs = onecycle_setup(case)
    got, want = [v[0] for v in _lrs(seen.get("lrs"))], _onecycle_reference(max_lr, epochs * n_batches)
    if len(got) != len(want):
        fail("step-count", observed=f"{len(got)} optimizer steps", expected=f"{len(want)}",
             cause="the batch loop was changed", where="the optimizer.step() calls in the batch loop")
    if not isclose_numbers(got, want):
        per_epoch = [want[e] for e in range(epochs) for _ in range(n_batches)]
        if isclose_numbers(got, per_epoch):
            code, cause = "scheduler-per-epoch", ("OneCycleLR's total_steps counts batches: stepped once per epoch "
                                                  "it never leaves its warm-up")
        elif isclose_numbers(got[:-1], want[1:]):
            code, cause = "lr-shifted", ("scheduler.step() before optimizer.step(): each batch runs with the next "
                                         "batch's learning rate, and the first value of the schedule is skipped")
        else:
            code, cause = "wrong-schedule", "the scheduler is not stepped exactly once after each optimizer step"
        fail(code, observed=f"learning rate at each step: {_rounded(got)}", expected=f"{_rounded(want)}",
             cause=cause, where="where scheduler.step() is called")
    return "OneCycleLR stepped once per batch, after the optimizer"


_ONECYCLE_SOLUTION = edited(ONECYCLE_STARTER,
                            ("            optimizer.step()\n        scheduler.step()\n",
                             "            optimizer.step()\n            scheduler.step()\n"))


def _judge_plateau_mode(seen: dict, *, case: Case) -> str:
    got = seen.get("lrs")
    if not isinstance(got, list) or not all(isinstance(v, float) for v in got):
        malformed("learning rates malformed")
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau
    want = plateau_run(lambda o: plateau(o, mode="max", factor=0.5, patience=2), case)
    if isclose_numbers(got, want):
        return "halves the LR after 2 epochs without a better validation accuracy, and only then"
    for code, make, cause in (
        ("wrong-mode", lambda o: plateau(o, mode="min", factor=0.5, patience=2), "mode='min' (the default) treats a "
         "rising accuracy as no improvement: the LR drops while the model is still getting better"),
        ("wrong-patience", lambda o: plateau(o, mode="max", factor=0.5), "the default patience is 10 epochs"),
        ("wrong-factor", lambda o: plateau(o, mode="max", patience=2), "the default factor is 0.1, not 0.5"),
    ):
        if isclose_numbers(got, plateau_run(make, case)):
            fail(code, observed=f"learning rate after each epoch: {_rounded(got)}", expected=f"{_rounded(want)}",
                 cause=cause, where="ReduceLROnPlateau(optimizer, mode='max', factor=0.5, patience=2)")
    fail("wrong-schedule", observed=f"learning rate after each epoch: {_rounded(got)}", expected=f"{_rounded(want)}",
         cause="the scheduler does not halve the LR after exactly 2 epochs without a higher accuracy",
         where="ReduceLROnPlateau(optimizer, mode='max', factor=0.5, patience=2)")


_PLATEAU_MODE_SOLUTION = '''import torch


def make_scheduler(optimizer):
    return torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="max", factor=0.5, patience=2)
'''


def _judge_linear_warmup(seen: dict, *, case: Case) -> str:
    warmup, bases = warmup_setup(case)
    got = _lrs(seen.get("lrs"), groups=2)
    if len(got) != warmup + 4:
        malformed("wrong number of recorded steps")
    for k, step_lrs in enumerate(got):
        for group, (lr, base) in enumerate(zip(step_lrs, bases, strict=True)):
            want = base * min(1.0, (k + 1) / warmup)
            if isclose_number(lr, want, rel_tol=1e-6, abs_tol=0.0):
                continue
            if k == 0 and lr == 0:
                code, cause = "warmup-starts-at-zero", ("the factor is step / warmup: the first optimizer step runs "
                                                        "with lr 0 and is wasted, and the warm-up ends one step late")
            elif k >= warmup and lr > base * (1 + 1e-6):
                code, cause = "no-plateau", "the factor is not capped at 1 after the warm-up: the LR keeps growing"
            else:
                code, cause = "wrong-warmup", ("the LR does not rise in equal steps of base/warmup from base/warmup "
                                               "at the first step to base at step warmup-1")
            fail(code, observed=f"group {group} at optimizer step {k}: lr {lr:.6g}", expected=f"{want:.6g} "
                 f"(base {base} x min(1, (k + 1) / {warmup}))", cause=cause,
                 where="LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))")
    return "linear warm-up to each group's own base LR, then constant"


_LINEAR_WARMUP_SOLUTION = '''import torch


def make_warmup(optimizer, warmup):
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
'''


def _judge_param_group_lrs(seen: dict, *, case: Case) -> str:
    lr, warmup = group_setup(case)
    groups = seen.get("groups")
    if not isinstance(groups, list) or not all(isinstance(g, list) for g in groups):
        malformed("groups malformed")
    want_groups = [["backbone.weight", "backbone.bias"], ["head.weight", "head.bias"]]
    if len(groups) != 2:
        fail("one-group" if len(groups) == 1 else "wrong-groups", observed=f"{len(groups)} param group(s): {groups}",
             expected=f"2 groups: {want_groups}", cause="model.parameters() passed as one group: one LR for all",
             where="AdamW([{'params': model.backbone.parameters(), 'lr': lr / 10}, "
             "{'params': model.head.parameters(), 'lr': lr}])")
    if [sorted(g) for g in groups] != [sorted(g) for g in want_groups]:
        fail("wrong-groups", observed=f"groups {groups}", expected=f"{want_groups}, in that order",
             cause="parameters assigned to the wrong group", where="the params of each group")
    if seen.get("kind") != "AdamW":
        fail("wrong-optimizer", observed=f"a {seen.get('kind')} optimizer", expected="AdamW",
             cause="the prompt asks for AdamW", where="torch.optim.AdamW")
    got = _lrs(seen.get("lrs"), groups=2)
    factors = [min(1.0, (k + 1) / warmup) for k in range(warmup + 2)]
    for group, base in enumerate((lr / 10, lr)):
        series = [s[group] for s in got]
        want = [base * f for f in factors]
        if isclose_numbers(series, want):
            continue
        name = ("backbone", "head")[group]
        if group == 0 and isclose_numbers(series[1:], [lr * f for f in factors[1:]]):
            code, cause = "base-lr-lost", ("the backbone's LR was changed after the scheduler was built: LambdaLR "
                                           "scales each group's initial_lr, recorded at construction, and overwrites "
                                           "the group's lr at every step")
        else:
            formula = "lr / 10" if group == 0 else "lr"
            code, cause = "wrong-group-lr", f"the {name}'s base LR is not {base:.6g} ({formula})"
        fail(code, observed=f"{name} LR per step: {_rounded(series)}", expected=f"{_rounded(want)}", cause=cause,
             where="set each group's lr when you build the optimizer, then build the scheduler")
    return "two groups with their own base LRs, both warmed up by one LambdaLR"


_GROUPS_SOLUTION = '''import torch


def make_optimizer(model, lr, warmup):
    optimizer = torch.optim.AdamW([
        {"params": model.backbone.parameters(), "lr": lr / 10},
        {"params": model.head.parameters(), "lr": lr},
    ])
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
    return optimizer, scheduler
'''


def _resume_reference(case: Case) -> tuple[list[list[torch.Tensor]], list[float]]:
    """Parameters before each step of the uninterrupted run (and after the last), and each step's LR."""
    model, optimizer, scheduler = resume_objects(case, 81)
    params, lrs = [], []
    for batch in resume_batches(case):
        params.append([p.detach().clone() for p in model.parameters()])
        lrs.append(optimizer.param_groups[0]["lr"])
        resume_step(model, optimizer, scheduler, batch)
    params.append([p.detach().clone() for p in model.parameters()])
    return params, lrs


def _judge_resume(seen: dict, *, case: Case) -> str:
    ref_params, ref_lrs = _resume_reference(case)
    loaded = seen.get("loaded")
    if not isinstance(loaded, list) or len(loaded) != len(ref_params[RESUME_AT]):
        malformed("the recorded parameters")
    if not close_tensors(loaded, ref_params[RESUME_AT], rtol=1e-5, atol=1e-7, dtype=False):
        later = close_tensors(loaded, ref_params[RESUME_AT + RESUME_LATER], rtol=1e-5, atol=1e-7, dtype=False)
        fail("checkpoint-aliases-live-weights" if later else "wrong-weights",
             observed="the weights restored from the snapshot are those of "
             + (f"step {RESUME_AT + RESUME_LATER}, after training went on" if later else "no step of the run"),
             expected=f"the weights of step {RESUME_AT}, when the snapshot was taken",
             cause="state_dict() returns references to the live tensors: training after the snapshot changes it "
             "in place" if later else "the model's state is not saved or not loaded",
             where="the checkpoint dict save_checkpoint returns")
    got_lrs = [v[0] for v in _lrs(seen.get("lrs"))]
    want_lrs = ref_lrs[RESUME_AT:]
    if len(got_lrs) != len(want_lrs):
        malformed("wrong number of recorded steps")
    if not isclose_numbers(got_lrs, want_lrs):
        if isclose_numbers(got_lrs, ref_lrs[RESUME_AT + 1:] + [got_lrs[-1]]):
            code, cause = "schedule-shifted", ("the scheduler was stepped after loading its state: the resumed run is "
                                               "one step ahead of the schedule")
        elif not isclose_number(got_lrs[0], want_lrs[0], rel_tol=1e-6, abs_tol=0.0):
            code, cause = "optimizer-state-lost", ("the first resumed step ran at the fresh optimizer's LR: the "
                                                   "current LR lives in optimizer.state_dict()['param_groups'] (and "
                                                   "Adam's moments in its 'state'): the optimizer's state is not "
                                                   "restored")
        else:
            code, cause = "scheduler-state-lost", ("the scheduler's state (its step count) is not restored: a fresh "
                                                   "StepLR counts from 0, so the next decay comes at the wrong step")
        fail(code, observed=f"learning rates after resuming: {_rounded(got_lrs)}", expected=f"{_rounded(want_lrs)}",
             cause=cause, where="save_checkpoint and load_checkpoint")
    steps = seen.get("params")
    if not isinstance(steps, list) or len(steps) != len(want_lrs):
        malformed("recorded steps malformed")
    for i, params in enumerate(steps):
        if not isinstance(params, list) or len(params) != len(ref_params[RESUME_AT + i]):
            malformed("the recorded parameters")
        if not close_tensors(params, ref_params[RESUME_AT + i], rtol=1e-5, atol=1e-7, dtype=False):
            fail("optimizer-state-lost", observed=f"the resumed run's weights differ from the uninterrupted run's "
                 f"at step {RESUME_AT + i}", expected="the same trajectory as without the interruption",
                 cause="Adam's moments (exp_avg, exp_avg_sq) and step counts are not restored, or were restored from "
                 "a snapshot that kept changing (optimizer.state_dict() references the live state tensors)",
                 where="what the checkpoint holds for the optimizer, and what load_checkpoint restores")
    return "the snapshot is a copy; model, optimizer and scheduler resume exactly where it was taken"


_LOAD_MODEL = '    model.load_state_dict(checkpoint["model"])\n'
_RESUME_COPY = ('    return {"model": model.state_dict()}\n',
                '    return copy.deepcopy({"model": model.state_dict()})\n')
_RESUME_OPTIMIZER = (('"model": model.state_dict()}', '"model": model.state_dict(),\n'
                      '            "optimizer": optimizer.state_dict()}'),
                     (_LOAD_MODEL, _LOAD_MODEL + '    optimizer.load_state_dict(checkpoint["optimizer"])\n'))
_RESUME_SCHEDULER = (('model.state_dict()', 'model.state_dict(), "scheduler": scheduler.state_dict()'),
                     (_LOAD_MODEL, _LOAD_MODEL + '    scheduler.load_state_dict(checkpoint["scheduler"])\n'))


def _resume_fixed(*fixes: tuple[str, str]) -> str:
    return edited(RESUME_STARTER, ("import torch\n", "import copy\n\nimport torch\n"), *fixes)


add_answers(
    Answers(
        drill_id="schedulers-wrong-granularity",
        solution=edited(GRANULARITY_STARTER,
                        ("            optimizer.step()\n            scheduler.step()\n",
                         "            optimizer.step()\n"
                         "        scheduler.step()  # once per epoch\n")),
        wrong_answers=(
            (edited(GRANULARITY_STARTER,
                    ("            optimizer.step()\n            scheduler.step()\n",
                     "            scheduler.step()\n            optimizer.step()\n")),
             "scheduler-per-batch"),
            (edited(GRANULARITY_STARTER,
                    ("        model.train()\n", "        model.train()\n        scheduler.step()\n"),
                    ("            optimizer.step()\n            scheduler.step()\n",
                     "            optimizer.step()\n")),
             "wrong-schedule"),
        ),
        judge=_judge_granularity,
    )
)


add_answers(
    Answers(
        drill_id="schedulers-plateau-metric",
        solution=edited(PLATEAU_STARTER,
                        ("scheduler.step(total / len(train_batches))", "scheduler.step(val_loss)")),
        wrong_answers=(
            (edited(PLATEAU_STARTER,
                    ("scheduler.step(total / len(train_batches))", "scheduler.step(loss)")),
             "plateau-on-last-batch-loss"),
            (edited(PLATEAU_STARTER,
                    ("        scheduler.step(total / len(train_batches))\n", ""),
                    ("            total += loss.detach()\n",
                     "            total += loss.detach()\n"
                     "            scheduler.step(loss)\n")), "plateau-step-count"),
        ),
        judge=_judge_plateau,
    )
)


add_answers(
    Answers(
        drill_id="schedulers-onecycle-per-batch",
        solution=_ONECYCLE_SOLUTION,
        wrong_answers=(
            (edited(_ONECYCLE_SOLUTION,
                    ("            optimizer.step()\n            scheduler.step()\n",
                     "            scheduler.step()\n            optimizer.step()\n")), "lr-shifted"),
            (_ONECYCLE_SOLUTION + "        scheduler.step()\n", "raised"),
        ),
        judge=_judge_onecycle,
    )
)


add_answers(
    Answers(
        drill_id="schedulers-plateau-mode",
        solution=_PLATEAU_MODE_SOLUTION,
        wrong_answers=(
            (edited(_PLATEAU_MODE_SOLUTION, ('mode="max", ', "")), "wrong-mode"),
            (edited(_PLATEAU_MODE_SOLUTION, (", patience=2", "")), "wrong-patience"),
            (edited(_PLATEAU_MODE_SOLUTION, (", factor=0.5", "")), "wrong-factor"),
        ),
        judge=_judge_plateau_mode,
    )
)


add_answers(
    Answers(
        drill_id="schedulers-linear-warmup",
        solution=_LINEAR_WARMUP_SOLUTION,
        wrong_answers=(
            (edited(_LINEAR_WARMUP_SOLUTION,
                    ("min(1.0, (step + 1) / warmup)", "min(1.0, step / warmup)")),
             "warmup-starts-at-zero"),
            (edited(_LINEAR_WARMUP_SOLUTION, ("min(1.0, (step + 1) / warmup)", "(step + 1) / warmup")), "no-plateau"),
            ("import torch\n\ndef make_warmup(optimizer, warmup):\n    return torch.optim.lr_scheduler.LinearLR(\n"
             "        optimizer, start_factor=1 / warmup, total_iters=warmup)\n", "wrong-warmup"),
        ),
        judge=_judge_linear_warmup,
    )
)


add_answers(
    Answers(
        drill_id="schedulers-param-group-lrs",
        solution=_GROUPS_SOLUTION,
        wrong_answers=(
            ("import torch\n\ndef make_optimizer(model, lr, warmup):\n"
             "    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)\n"
             "    return optimizer, torch.optim.lr_scheduler.LambdaLR(\n"
             "        optimizer, lambda step: min(1.0, (step + 1) / warmup))\n", "one-group"),
            ("import torch\n\ndef make_optimizer(model, lr, warmup):\n"
             "    optimizer = torch.optim.AdamW([{'params': model.backbone.parameters()},\n"
             "                                   {'params': model.head.parameters()}], lr=lr)\n"
             "    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup))\n"
             "    optimizer.param_groups[0]['lr'] = lr / 10\n    return optimizer, scheduler\n", "base-lr-lost"),
            (edited(_GROUPS_SOLUTION, ('"lr": lr / 10', '"lr": lr * 10')), "wrong-group-lr"),
        ),
        judge=_judge_param_group_lrs,
    )
)


add_answers(
    Answers(
        drill_id="checkpointing-resume-schedule",
        solution=_resume_fixed(_RESUME_COPY, *_RESUME_OPTIMIZER, *_RESUME_SCHEDULER),
        wrong_answers=(
            (_resume_fixed(_RESUME_COPY, *_RESUME_OPTIMIZER), "scheduler-state-lost"),
            (_resume_fixed(_RESUME_COPY, *_RESUME_SCHEDULER), "optimizer-state-lost"),
            (_resume_fixed(*_RESUME_OPTIMIZER, *_RESUME_SCHEDULER), "checkpoint-aliases-live-weights"),
            (edited(_resume_fixed(_RESUME_COPY, *_RESUME_OPTIMIZER, *_RESUME_SCHEDULER),
                    ('    optimizer.load_state_dict(checkpoint["optimizer"])\n',
                     '    optimizer.load_state_dict(checkpoint["optimizer"])\n'
                     '    scheduler.step()  # resume at the next step\n')),
             "schedule-shifted"),
        ),
        judge=_judge_resume,
    )
)


add_answers(
    choice_answers(
        "schedulers-order",
        options=(
            ("PyTorch warns, and the schedule's first value is skipped",
             "right: the scheduler advances the LR before the optimizer ever used it, and torch warns about the order"),
            ("nothing: the two calls are independent, so their order does not matter",
             "the scheduler writes the LR the next optimizer.step() uses: calling it first shifts the whole schedule"),
            ("an exception: the scheduler checks the optimizer has stepped",
             "torch only warns (UserWarning); the training goes on with a shifted schedule"),
            ("the scheduler call is ignored until the optimizer has stepped once",
             "it is not ignored: it advances the LR right away, which is exactly the problem"),
        ),
        key="a",
    )
)
