"""Planted bugs for the checks of lesson 04 (the training loop): every failure code is reached by a wrong
implementation, and two different correct implementations pass, visible, hidden and on a drawn hidden case."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from harness.checks import CheckFailed, wire
from harness.checks.core import decide, observe
from harness.checks.lesson04 import HostSyncCounter
from harness.checks.testing import DRAWN_CASE, assert_check_fails, assert_check_passes

# ---------------------------------------------------------------------------------------------------- running mean


class RunningMean:
    def __init__(self):
        self.total = torch.zeros(())
        self.count = 0

    def update(self, value, n):
        self.total = self.total + value.detach() * n
        self.count += n

    def compute(self):
        return self.total / self.count


class ListMean:
    """Correct too: keeps the weighted values and sums them at the end, all as tensors."""

    def __init__(self):
        self.values, self.weights = [], []

    def update(self, value, n):
        self.values.append(value.detach() * n)
        self.weights.append(n)

    def compute(self):
        return torch.stack(self.values).sum() / sum(self.weights)


class ItemMean(RunningMean):
    def update(self, value, n):
        self.total = self.total + value.item() * n
        self.count += n


class GraphMean(RunningMean):
    def update(self, value, n):
        self.total = self.total + value * n
        self.count += n


class UnweightedMean(RunningMean):
    def update(self, value, n):
        self.total = self.total + value.detach()
        self.count += 1


class CountOnlyMean(RunningMean):
    def compute(self):
        return self.total / (self.count + 1)


class SharedMean:
    total = torch.zeros(())
    count = 0

    def update(self, value, n):
        SharedMean.total = SharedMean.total + value.detach() * n
        SharedMean.count += n

    def compute(self):
        return SharedMean.total / SharedMean.count


class VectorMean(RunningMean):
    def compute(self):
        return (self.total / self.count).repeat(2)


@pytest.mark.parametrize("cls", [RunningMean, ListMean])
def test_running_mean_passes(cls, capsys):
    assert_check_passes("04-running-mean", cls, capsys=capsys)


@pytest.mark.parametrize(
    "cls, code, phrase",
    [
        (ItemMean, "host-sync-per-update", "device-to-host"),
        (GraphMean, "keeps-graph", "graph of every batch"),
        (UnweightedMean, "unweighted-mean", "plain mean"),
        (CountOnlyMean, "wrong-mean", "sum(value * n) / sum(n)"),
        (SharedMean, "shared-state", "class attributes"),
        (VectorMean, "not-a-scalar", "single number"),
    ],
)
def test_running_mean_rejects(cls, code, phrase):
    assert_check_fails("04-running-mean", cls, code=code, phrase=phrase)


# ---------------------------------------------------------------------------------------------------- train step


def train_step(model, batch, loss_fn, optimizer):
    x, y = batch
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.detach()


def train_step_zero_grad_at_end(model, batch, loss_fn, optimizer):
    """Correct too: clears after the step (gradients start out empty), and zeros instead of None."""
    model.train(True)
    output = model(batch[0])
    loss = loss_fn(output, batch[1])
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=False)
    return loss.detach().clone()


def step_without_zero_grad(model, batch, loss_fn, optimizer):
    model.train()
    loss = loss_fn(model(batch[0]), batch[1])
    loss.backward()
    optimizer.step()
    return loss.detach()


def step_before_backward(model, batch, loss_fn, optimizer):
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(batch[0]), batch[1])
    optimizer.step()
    loss.backward()
    return loss.detach()


def step_then_clear_then_backward(model, batch, loss_fn, optimizer):
    model.train()
    loss = loss_fn(model(batch[0]), batch[1])
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    return loss.detach()


def step_in_eval_mode(model, batch, loss_fn, optimizer):
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(batch[0]), batch[1])
    loss.backward()
    optimizer.step()
    return loss.detach()


def step_with_sum(model, batch, loss_fn, optimizer):
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss = nn.functional.cross_entropy(model(batch[0]), batch[1], reduction="sum")
    loss.backward()
    optimizer.step()
    return loss.detach() / len(batch[1])


def step_with_l2(model, batch, loss_fn, optimizer):
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(batch[0]), batch[1]) + 0.01 * sum(p.pow(2).sum() for p in model.parameters())
    loss.backward()
    optimizer.step()
    return loss.detach()


def step_twice(model, batch, loss_fn, optimizer):
    train_step(model, batch, loss_fn, optimizer)
    return train_step(model, batch, loss_fn, optimizer)


def step_returning_item(model, batch, loss_fn, optimizer):
    return train_step(model, batch, loss_fn, optimizer).item()


def step_returning_live_loss(model, batch, loss_fn, optimizer):
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(batch[0]), batch[1])
    loss.backward()
    optimizer.step()
    return loss


def step_returning_list(model, batch, loss_fn, optimizer):
    return [train_step(model, batch, loss_fn, optimizer)]


def step_returning_loss_after_update(model, batch, loss_fn, optimizer):
    train_step(model, batch, loss_fn, optimizer)
    with torch.no_grad():
        return loss_fn(model(batch[0]), batch[1])


@pytest.mark.parametrize("fn", [train_step, train_step_zero_grad_at_end])
def test_train_step_passes(fn, capsys):
    assert_check_passes("04-train-step", fn, capsys=capsys)


@pytest.mark.parametrize(
    "fn, code, phrase",
    [
        (step_without_zero_grad, "missing-zero-grad", "never calls optimizer.zero_grad()"),
        (step_before_backward, "step-before-backward", "missing (None or all zero)"),
        (step_then_clear_then_backward, "step-before-backward", "before loss.backward()"),
        (step_in_eval_mode, "eval-mode-in-training", "model.train()"),
        (step_with_sum, "sum-not-mean", "batch size"),
        (step_with_l2, "wrong-gradients", "differ from those of loss_fn"),
        (step_twice, "wrong-step-count", "exactly one optimizer.step() per call"),
        (step_returning_item, "host-sync-per-step", "item"),
        (step_returning_live_loss, "returns-graph", "detach"),
        (step_returning_list, "not-a-scalar", "list"),
        (step_returning_loss_after_update, "wrong-loss", "before the update"),
    ],
)
def test_train_step_rejects(fn, code, phrase):
    assert_check_fails("04-train-step", fn, code=code, phrase=phrase)


# ---------------------------------------------------------------------------------------------------- train epoch


def train_epoch(model, loader, loss_fn, optimizer):
    mean = RunningMean()
    for x, y in loader:
        mean.update(train_step(model, (x, y), loss_fn, optimizer), len(y))
    return mean.compute()


def train_epoch_stacked(model, loader, loss_fn, optimizer):
    """Correct too: collects per-sample-weighted losses and returns a float after the loop (one sync)."""
    losses, sizes = [], []
    for batch in loader:
        losses.append(train_step_zero_grad_at_end(model, batch, loss_fn, optimizer) * len(batch[1]))
        sizes.append(len(batch[1]))
    return float(torch.stack(losses).sum() / sum(sizes))


def epoch_unweighted(model, loader, loss_fn, optimizer):
    return torch.stack([train_step(model, batch, loss_fn, optimizer) for batch in loader]).mean()


def epoch_sum(model, loader, loss_fn, optimizer):
    total = torch.zeros(())
    for x, y in loader:
        total = total + train_step(model, (x, y), loss_fn, optimizer) * len(y)
    return total


def epoch_last_loss(model, loader, loss_fn, optimizer):
    for batch in loader:
        loss = train_step(model, batch, loss_fn, optimizer)
    return loss


def epoch_item_per_step(model, loader, loss_fn, optimizer):
    total, n = 0.0, 0
    for x, y in loader:
        total += train_step(model, (x, y), loss_fn, optimizer).item() * len(y)
        n += len(y)
    return total / n


def epoch_drop_last(model, loader, loss_fn, optimizer):
    mean = RunningMean()
    for x, y in loader:
        if len(y) == loader.batch_size:
            mean.update(train_step(model, (x, y), loss_fn, optimizer), len(y))
    return mean.compute()


def epoch_without_train_mode(model, loader, loss_fn, optimizer):
    mean = RunningMean()
    for x, y in loader:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        mean.update(loss, len(y))
    return mean.compute()


@pytest.mark.parametrize("fn", [train_epoch, train_epoch_stacked])
def test_train_epoch_passes(fn, capsys):
    assert_check_passes("04-train-epoch", fn, capsys=capsys)


@pytest.mark.parametrize(
    "fn, code, phrase",
    [
        (epoch_unweighted, "unweighted-mean", "last batch"),
        (epoch_sum, "sum-not-mean", "sum of the per-sample losses"),
        (epoch_last_loss, "wrong-loss", "sample-weighted mean"),
        (epoch_item_per_step, "host-sync-per-step", "item"),
        (epoch_drop_last, "wrong-step-count", "one step per batch"),
        (epoch_without_train_mode, "eval-mode-in-training", "eval mode"),
    ],
)
def test_train_epoch_rejects(fn, code, phrase):
    assert_check_fails("04-train-epoch", fn, code=code, phrase=phrase)


# ---------------------------------------------------------------------------------------------------- evaluate


def evaluate(model, loader, loss_fn):
    model.eval()
    mean, correct, count = RunningMean(), torch.zeros(()), 0
    with torch.no_grad():
        for x, y in loader:
            out = model(x)
            mean.update(loss_fn(out, y), len(y))
            correct += (out.argmax(1) == y).sum()
            count += len(y)
    return {"loss": float(mean.compute()), "accuracy": float(correct / count)}


@torch.inference_mode()
def evaluate_inference_mode(model, loader, loss_fn):
    """Correct too: inference_mode, per-sample losses summed, tensors returned."""
    model.train(False)
    sums = torch.zeros(2)
    count = 0
    for x, y in loader:
        out = model(x)
        sums += torch.stack([nn.functional.cross_entropy(out, y, reduction="sum"), (out.argmax(1) == y).sum()])
        count += len(y)
    loss, accuracy = sums / count
    return {"loss": loss, "accuracy": accuracy}


def evaluate_in_train_mode(model, loader, loss_fn):
    with torch.no_grad():
        return _scores(model, loader, loss_fn)


def evaluate_with_graph(model, loader, loss_fn):
    model.eval()
    return _scores(model, loader, loss_fn)


def _scores(model, loader, loss_fn):
    mean, correct, count = RunningMean(), torch.zeros(()), 0
    for x, y in loader:
        out = model(x)
        mean.update(loss_fn(out, y), len(y))
        correct += (out.argmax(1) == y).sum()
        count += len(y)
    return {"loss": float(mean.compute()), "accuracy": float(correct / count)}


def evaluate_with_decay(model, loader, loss_fn):
    scores = evaluate(model, loader, loss_fn)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.99)
    return scores


def evaluate_item_per_batch(model, loader, loss_fn):
    model.eval()
    total, correct, count = 0.0, 0, 0
    with torch.no_grad():
        for x, y in loader:
            out = model(x)
            total += loss_fn(out, y).item() * len(y)
            correct += int((out.argmax(1) == y).sum())
            count += len(y)
    return {"loss": total / count, "accuracy": correct / count}


def evaluate_tuple(model, loader, loss_fn):
    scores = evaluate(model, loader, loss_fn)
    return scores["loss"], scores["accuracy"]


def evaluate_sum(model, loader, loss_fn):
    scores = evaluate(model, loader, loss_fn)
    return {"loss": scores["loss"] * len(loader.dataset), "accuracy": scores["accuracy"]}


def evaluate_mean_of_batches(model, loader, loss_fn):
    model.eval()
    with torch.no_grad():
        losses = torch.stack([loss_fn(model(x), y) for x, y in loader])
        correct = sum((model(x).argmax(1) == y).sum() for x, y in loader)
    return {"loss": float(losses.mean()), "accuracy": float(correct / len(loader.dataset))}


def evaluate_loss_off(model, loader, loss_fn):
    scores = evaluate(model, loader, loss_fn)
    return {"loss": scores["loss"] * 1.1, "accuracy": scores["accuracy"]}


def evaluate_count(model, loader, loss_fn):
    scores = evaluate(model, loader, loss_fn)
    return {"loss": scores["loss"], "accuracy": round(scores["accuracy"] * len(loader.dataset))}


def evaluate_accuracy_off(model, loader, loss_fn):
    scores = evaluate(model, loader, loss_fn)
    return {"loss": scores["loss"], "accuracy": scores["accuracy"] + 0.05}


@pytest.mark.parametrize("fn", [evaluate, evaluate_inference_mode])
def test_evaluate_passes(fn, capsys):
    assert_check_passes("04-evaluate", fn, capsys=capsys)


@pytest.mark.parametrize(
    "fn, code, phrase",
    [
        (evaluate_in_train_mode, "train-mode-in-eval", "model.eval()"),
        (evaluate_with_graph, "builds-graph", "torch.no_grad()"),
        (evaluate_with_decay, "changes-weights", "changed during evaluate"),
        (evaluate_item_per_batch, "host-sync-per-batch", "not one per batch"),
        (evaluate_tuple, "wrong-return", '"loss" and "accuracy"'),
        (evaluate_sum, "sum-not-mean", "never divided"),
        (evaluate_mean_of_batches, "unweighted-mean", "smaller last batch"),
        (evaluate_loss_off, "wrong-loss", "mean loss over the loader"),
        (evaluate_count, "count-not-fraction", "fraction correct"),
        (evaluate_accuracy_off, "wrong-accuracy", "argmax"),
    ],
)
def test_evaluate_rejects(fn, code, phrase):
    assert_check_fails("04-evaluate", fn, code=code, phrase=phrase)


# ---------------------------------------------------------------------------------------------------- fit


def make_fit(*, monitor="val_loss", restore="copy", compare=lambda waited, patience: waited >= patience,
             epoch_fn=train_epoch, use_min_delta=True, evaluate_fn=evaluate, row=None):
    """A fit with one knob per planted bug; the defaults give the correct behaviour."""

    def fit(model, train_loader, val_loader, *, loss_fn, optimizer, max_epochs, patience, min_delta=0.0):
        history, best, best_state, waited = [], float("inf"), None, 0
        delta = min_delta if use_min_delta else 0.0
        for epoch in range(1, max_epochs + 1):
            train_loss = float(epoch_fn(model, train_loader, loss_fn, optimizer))
            scores = evaluate_fn(model, val_loader, loss_fn)
            entry = {"epoch": epoch, "train_loss": train_loss, "val_loss": float(scores["loss"]),
                     "val_accuracy": float(scores["accuracy"])}
            history.append(row(entry) if row else entry)
            value = entry[monitor]
            if value < best - delta:
                best, waited = value, 0
                best_state = copy.deepcopy(model.state_dict()) if restore == "copy" else model.state_dict()
            else:
                waited += 1
                if compare(waited, patience):
                    break
        if restore != "none":
            model.load_state_dict(best_state)
        return history

    return fit


def fit_with_early_stopping_object(model, train_loader, val_loader, *, loss_fn, optimizer, max_epochs, patience,
                                   min_delta=0.0):
    """Correct too: harness's EarlyStopping tracks the rule, the best state is kept as cloned tensors."""
    from harness.early_stopping import EarlyStopping

    stopper = EarlyStopping(metric="val_loss", patience=patience, min_delta=min_delta)
    history, best_state = [], None
    for epoch in range(max_epochs):
        train_loss = train_epoch_stacked(model, train_loader, loss_fn, optimizer)
        scores = evaluate_inference_mode(model, val_loader, loss_fn)
        history.append({"train_loss": train_loss, "val_loss": float(scores["loss"])})
        if stopper.update(float(scores["loss"]), epoch):
            best_state = {k: v.clone() for k, v in model.state_dict().items()}
        if stopper.should_stop:
            break
    model.load_state_dict(best_state)
    return history


def fit_without_validation(model, train_loader, val_loader, *, loss_fn, optimizer, max_epochs, patience, min_delta=0.0):
    return [{"train_loss": float(train_epoch(model, train_loader, loss_fn, optimizer)), "val_loss": 0.0}
            for _ in range(max_epochs)]


def epoch_with_item(model, loader, loss_fn, optimizer):
    return epoch_item_per_step(model, loader, loss_fn, optimizer)


def drop_val_loss(entry):
    return {k: v for k, v in entry.items() if k != "val_loss"}


def rounded_val_loss(entry):
    return entry | {"val_loss": round(entry["val_loss"], 2)}


def numpy_row(entry):
    return {k: np.float32(v) for k, v in entry.items()}


def fit_returning_frame(*args, **kwargs):
    """Correct too: the history as a DataFrame."""
    return pd.DataFrame(make_fit()(*args, **kwargs))


@pytest.mark.parametrize(
    "fn", [make_fit(), fit_with_early_stopping_object, make_fit(row=numpy_row), fit_returning_frame]
)
def test_fit_passes(fn, capsys):
    assert_check_passes("04-fit", fn, capsys=capsys)


@pytest.mark.parametrize(
    "fn, code, phrase",
    [
        (make_fit(monitor="train_loss"), "early-stop-on-train-loss", "training* loss"),
        (make_fit(compare=lambda waited, patience: waited > patience), "wrong-stop-epoch", "patience="),
        (make_fit(use_min_delta=False), "wrong-stop-epoch", "min_delta="),
        (make_fit(restore="none"), "best-weights-not-restored", "best epoch"),
        (make_fit(restore="reference"), "best-weights-not-restored", "deepcopy"),
        (make_fit(epoch_fn=epoch_with_item), "host-sync-per-step", "every step"),
        (make_fit(epoch_fn=epoch_without_train_mode, evaluate_fn=evaluate), "eval-mode-in-training", "eval mode"),
        (make_fit(row=drop_val_loss), "wrong-history", "missing"),
        (make_fit(row=rounded_val_loss), "wrong-history", "val_loss in the history"),
        (fit_without_validation, "no-validation", "never saw the validation batch"),
    ],
)
def test_fit_rejects(fn, code, phrase):
    assert_check_fails("04-fit", fn, code=code, phrase=phrase)


# ---------------------------------------------------------------------------------------------------- the judges decide


def _scaled(state, factor):
    return {k: v * factor if v.is_floating_point() else v for k, v in state.items()}


def _set(key, value):
    return lambda seen: seen.__setitem__(key, value)


def _fit_run(change):
    return lambda seen: change(seen["runs"][0])


@pytest.mark.parametrize(
    "task, solution, change, code",
    [
        ("04-running-mean", RunningMean, _set("result", torch.tensor(1.5)), "wrong-mean"),
        ("04-running-mean", RunningMean, _set("fresh", torch.tensor(2.0)), "shared-state"),
        ("04-train-step", train_step, lambda seen: seen.__setitem__("losses", [2 * v for v in seen["losses"]]),
         "wrong-loss"),
        ("04-train-step", train_step, lambda seen: seen["steps"][1].__setitem__("params", seen["steps"][0]["params"]),
         "wrong-gradients"),
        ("04-train-step", train_step, lambda seen: seen.update(steps=[], steps_after_call=[0, 0]),
         "wrong-step-count"),
        ("04-train-epoch", train_epoch, lambda seen: seen.__setitem__("params", seen["params"][::-1]), "wrong-loss"),
        ("04-evaluate", evaluate, lambda seen: seen["result"].__setitem__("accuracy", 1.0), "wrong-accuracy"),
        ("04-evaluate", evaluate, lambda seen: seen.__setitem__("state_after", _scaled(seen["state_after"], 2)),
         "changes-weights"),
        ("04-fit", make_fit(), _fit_run(lambda run: run.__setitem__("final", _scaled(run["final"], 1.01))),
         "best-weights-not-restored"),
        ("04-fit", make_fit(), _fit_run(lambda run: run.__setitem__("snapshots", run["snapshots"][::-1])),
         "wrong-history"),
    ],
)
def test_judges_decide_from_what_they_recompute(task, solution, change, code):
    """A correct solution's observation, altered after the probe, fails: the judge recomputes every value."""
    seen = wire.decode(observe(task, (solution,), DRAWN_CASE))
    change(seen)
    with pytest.raises(CheckFailed) as failure:
        decide(task, wire.encode(seen), DRAWN_CASE)
    assert failure.value.code == code, str(failure.value)


@pytest.mark.parametrize(
    "task, forged",
    [
        ("04-running-mean", {"syncs": 0, "sync_calls": [], "result": "1.0", "fresh": 1.0}),
        ("04-train-step", {"steps": [{"grads": [], "params": []}], "steps_after_call": [1]}),
        ("04-train-epoch", {"params": [[torch.zeros(1)]], "training": [True], "syncs": 0}),
        ("04-evaluate", {"state_after": {}, "training": [], "grad_enabled": []}),
        ("04-fit", {"runs": []}),
    ],
)
def test_judges_reject_forged_observations(task, forged):
    """Observations no probe writes end in a failure or an exception, never in a pass."""
    data = wire.encode(forged | {"__case__": DRAWN_CASE.digest()})
    with pytest.raises((CheckFailed, ValueError, KeyError)):
        decide(task, data, DRAWN_CASE)


# ---------------------------------------------------------------------------------------------------- the sync counter


def test_host_sync_counter_counts_conversions_and_ignores_optimizer_internals():
    parameter = nn.Parameter(torch.ones(3))
    optimizer = torch.optim.Adam([parameter], lr=0.1)  # Adam reads its CPU step counter with .item()
    (parameter * 2).sum().backward()
    loss = parameter.detach().sum()
    with HostSyncCounter() as syncs:
        optimizer.step()
        loss.item()
        float(loss)
        if loss > 0:
            loss.tolist()
        f"{loss:.2f}"
    assert syncs.calls == ["item", "__float__", "__bool__", "tolist", "__format__"]
