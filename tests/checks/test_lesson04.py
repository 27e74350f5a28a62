"""The mutation set of lesson 04 (the training loop): plausible wrong answers, each violating one requirement of
its exercise and failing with that requirement's code and message, and right answers written differently from
the solution, passing visible, hidden and drawn hidden checks. Then: the judges decide from what they recompute,
refuse forged observations, and the sync counter counts what it should."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from harness.checks import CheckFailed
from harness.checks.lesson04.evaluate import evaluate_inputs
from harness.checks.lesson04.train_epoch import train_epoch_inputs
from harness.checks.testing import DRAWN_CASE, Correct, Mistake, assert_check_fails, assert_check_passes, solution_cell
from harness.contract import wire
from harness.contract.case import Case
from harness.contract.instruments import HostSyncCounter
from harness.contract.protocol import decide, observe
from tests.exercises import notebook_namespace

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


class LazyMean:
    """Correct too: no state until the first value, then created on its device (in-place from there on)."""

    def __init__(self):
        self.total, self.count = None, 0

    def update(self, value, n):
        weighted = value.detach() * n
        if self.total is None:
            self.total = torch.zeros((), device=value.device, dtype=value.dtype)
        self.total += weighted
        self.count += n

    def compute(self):
        return self.total / self.count


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


class UpdatesCountMean(RunningMean):
    def update(self, value, n):
        self.total = self.total + value.detach() * n
        self.count += 1


def shared_mean() -> type:
    """A running mean whose state is class attributes, a new class per call: the state every instance shares must
    not outlive one check (a run on the meta device leaves meta tensors in it)."""

    class SharedMean:
        total = torch.zeros(())
        count = 0

        def update(self, value, n):
            SharedMean.total = SharedMean.total + value.detach() * n
            SharedMean.count += n

        def compute(self):
            return SharedMean.total / SharedMean.count

    return SharedMean


class UnsummedListMean(ListMean):
    def compute(self):
        return torch.stack(self.values) / sum(self.weights)


class InPlaceMean(RunningMean):
    def update(self, value, n):
        self.total += value.detach() * n
        self.count += n


# ---------------------------------------------------------------------------------------------------- train step

device = torch.device("cpu")  # a notebook's global device, as lesson 04's first cell defines one


def on_model(model, batch):
    """The batch on the device of the model's parameters."""
    where = next(model.parameters()).device
    return tuple(t.to(where) for t in batch)


def train_step(model, batch, loss_fn, optimizer):
    x, y = on_model(model, batch)
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.detach()


def train_step_clear_after(model, batch, loss_fn, optimizer):
    """Correct too: clears after the step (gradients start out empty), with model.zero_grad() (frees them)."""
    model.train(True)
    parameter = next(model.parameters())
    output = model(batch[0].to(parameter.device))
    loss = loss_fn(output, batch[1].to(parameter.device))
    loss.backward()
    optimizer.step()
    model.zero_grad()
    return loss.detach().clone()


def train_step_grads_to_none(model, batch, loss_fn, optimizer):
    """Correct too: frees the gradients by hand, and moves the batch with the device of the first parameter."""
    for p in model.parameters():
        p.grad = None
    model.train()
    x, y = batch
    x, y = x.to(next(model.parameters()).device), y.to(next(model.parameters()).device)
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.detach()


def step_without_zero_grad(model, batch, loss_fn, optimizer):
    x, y = on_model(model, batch)
    model.train()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.detach()


def step_before_backward(model, batch, loss_fn, optimizer):
    x, y = on_model(model, batch)
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    optimizer.step()
    loss.backward()
    return loss.detach()


def step_then_clear_then_backward(model, batch, loss_fn, optimizer):
    x, y = on_model(model, batch)
    model.train()
    loss = loss_fn(model(x), y)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    return loss.detach()


def step_clearing_between_backward_and_step(model, batch, loss_fn, optimizer):
    x, y = on_model(model, batch)
    model.train()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.zero_grad(set_to_none=True)
    optimizer.step()
    return loss.detach()


def step_in_eval_mode(model, batch, loss_fn, optimizer):
    x, y = on_model(model, batch)
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.detach()


def step_with_sum(model, batch, loss_fn, optimizer):
    x, y = on_model(model, batch)
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss = nn.functional.cross_entropy(model(x), y, reduction="sum")
    loss.backward()
    optimizer.step()
    return loss.detach() / len(y)


def step_with_l2(model, batch, loss_fn, optimizer):
    x, y = on_model(model, batch)
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y) + 0.01 * sum(p.pow(2).sum() for p in model.parameters())
    loss.backward()
    optimizer.step()
    return loss.detach()


def step_twice(model, batch, loss_fn, optimizer):
    train_step(model, batch, loss_fn, optimizer)
    return train_step(model, batch, loss_fn, optimizer)


def step_returning_item(model, batch, loss_fn, optimizer):
    return train_step(model, batch, loss_fn, optimizer).item()


def step_printing_loss(model, batch, loss_fn, optimizer):
    loss = train_step(model, batch, loss_fn, optimizer)
    print(f"loss {loss:.4f}", end="\r")
    return loss


def step_returning_live_loss(model, batch, loss_fn, optimizer):
    x, y = on_model(model, batch)
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


def step_returning_list(model, batch, loss_fn, optimizer):
    return [train_step(model, batch, loss_fn, optimizer)]


def step_returning_loss_after_update(model, batch, loss_fn, optimizer):
    train_step(model, batch, loss_fn, optimizer)
    with torch.no_grad():
        return loss_fn(model(on_model(model, batch)[0]), on_model(model, batch)[1])


def step_zero_filled(model, batch, loss_fn, optimizer):
    x, y = on_model(model, batch)
    model.train()
    optimizer.zero_grad(set_to_none=False)
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.detach()


def step_zeroing_by_hand(model, batch, loss_fn, optimizer):
    x, y = on_model(model, batch)
    model.train()
    for p in model.parameters():
        if p.grad is not None:
            p.grad.zero_()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.detach()


def step_unmoved_batch(model, batch, loss_fn, optimizer):
    x, y = batch
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.detach()


def step_global_device(model, batch, loss_fn, optimizer):
    x, y = batch[0].to(device), batch[1].to(device)
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.detach()


# ---------------------------------------------------------------------------------------------------- train epoch


def train_epoch(model, loader, loss_fn, optimizer):
    mean = RunningMean()
    for x, y in loader:
        mean.update(train_step(model, (x, y), loss_fn, optimizer), len(y))
    return mean.compute()


def train_epoch_stacked(model, loader, loss_fn, optimizer):
    """Correct too: collects per-sample-weighted losses and stacks them after the loop, a tensor still."""
    losses, sizes = [], []
    for batch in loader:
        losses.append(train_step_clear_after(model, batch, loss_fn, optimizer) * len(batch[1]))
        sizes.append(len(batch[1]))
    return torch.stack(losses).sum() / sum(sizes)


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


def epoch_returning_float(model, loader, loss_fn, optimizer):
    return float(train_epoch(model, loader, loss_fn, optimizer))


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
    model.eval()
    total, correct = torch.zeros(()), torch.zeros(())
    with torch.no_grad():
        for x, y in loader:
            out = model(x)
            total += loss_fn(out, y) * len(y)
            correct += (out.argmax(1) == y).sum()
    return {"loss": float(total), "accuracy": float(correct / len(loader.dataset))}


def evaluate_mean_of_batches(model, loader, loss_fn):
    model.eval()
    with torch.no_grad():
        losses = torch.stack([loss_fn(model(x), y) for x, y in loader])
        correct = sum((model(x).argmax(1) == y).sum() for x, y in loader)
    return {"loss": float(losses.mean()), "accuracy": float(correct / len(loader.dataset))}


def evaluate_per_sample_losses(model, loader, loss_fn):
    model.eval()
    with torch.no_grad():
        losses = torch.cat([nn.functional.cross_entropy(model(x), y, reduction="none") for x, y in loader])
    return {"loss": losses, "accuracy": evaluate(model, loader, loss_fn)["accuracy"]}


def evaluate_loss_off(model, loader, loss_fn):
    scores = evaluate(model, loader, loss_fn)
    return {"loss": scores["loss"] * 1.1, "accuracy": scores["accuracy"]}


def evaluate_count(model, loader, loss_fn):
    scores = evaluate(model, loader, loss_fn)
    return {"loss": scores["loss"], "accuracy": round(scores["accuracy"] * len(loader.dataset))}


def evaluate_batch_denominator(model, loader, loss_fn):
    model.eval()
    mean, correct = RunningMean(), torch.zeros(())
    with torch.no_grad():
        for x, y in loader:
            out = model(x)
            mean.update(loss_fn(out, y), len(y))
            correct += (out.argmax(1) == y).sum() / len(y)
    return {"loss": float(mean.compute()), "accuracy": float(correct / len(loader.dataset))}


# ---------------------------------------------------------------------------------------------------- fit


def make_fit(*, monitor="val_loss", restore="copy", compare=lambda waited, patience: waited >= patience,
             epoch_fn=train_epoch, use_min_delta=True, evaluate_fn=evaluate, row=None, delta_side=-1):
    """A fit with one knob per planted bug; the defaults give the correct behaviour (delta_side=+1 puts
    min_delta on the wrong side of the comparison)."""

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
            if value < best + delta_side * delta:
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


FIT_CELL = """def fit(model, train_loader, val_loader, *, loss_fn, optimizer, max_epochs, patience, min_delta=0.0):
    history, best_loss, best_state, waited = [], float("inf"), None, 0
    for epoch in range(1, max_epochs + 1):
        train_loss = float(train_epoch(model, train_loader, loss_fn, optimizer))
        scores = evaluate(model, val_loader, loss_fn)
        history.append({"epoch": epoch, "train_loss": train_loss, "val_loss": float(scores["loss"]),
                        "val_accuracy": float(scores["accuracy"])})
        if scores["loss"] < best_loss - min_delta:
            best_loss, best_state, waited = scores["loss"], copy.deepcopy(model.state_dict()), 0
        else:
            waited += 1
            if waited >= patience:
                break
    model.load_state_dict(best_state)
    return history
"""


def fit_in_notebook(evaluate_fn):
    """A correct fit defined as in the notebook: `train_epoch` and `evaluate` are the notebook's globals."""
    namespace = {"copy": copy, "torch": torch, "nn": nn, "train_epoch": train_epoch, "evaluate": evaluate_fn}
    exec(compile(FIT_CELL, "<solution cell of fit>", "exec"), namespace)
    return namespace["fit"]


def test_fit_is_judged_on_what_the_students_evaluate_returns(capsys):
    """Issue 29: a missing model.eval() in the student's evaluate costs 04-evaluate its points, not a correct fit
    that calls it (which lost 4 points to "val_loss is not evaluate(...)['loss']"); the tick says whose bug it is."""
    assert_check_fails("04-evaluate", evaluate_in_train_mode, code="train-mode-in-eval", phrase="eval")
    assert_check_passes("04-fit", fit_in_notebook(evaluate_in_train_mode), capsys=None)
    assert "that bug is 04-evaluate's to fix" in capsys.readouterr().out


def fit_with_early_stopping_object(model, train_loader, val_loader, *, loss_fn, optimizer, max_epochs, patience,
                                   min_delta=0.0):
    """Correct too: harness's EarlyStopping tracks the rule, the best state is kept as cloned tensors."""
    from harness.early_stopping import EarlyStopping

    stopper = EarlyStopping(metric="val_loss", patience=patience, min_delta=min_delta)
    history, best_state = [], None
    for epoch in range(max_epochs):
        train_loss = float(train_epoch_stacked(model, train_loader, loss_fn, optimizer))
        scores = {k: float(v) for k, v in evaluate_inference_mode(model, val_loader, loss_fn).items()}
        history.append({"epoch": epoch, "train_loss": train_loss, "val_loss": scores["loss"],
                        "val_accuracy": scores["accuracy"]})
        if stopper.update(scores["loss"], epoch):
            best_state = {k: v.clone() for k, v in model.state_dict().items()}
        if stopper.should_stop:
            break
    model.load_state_dict(best_state)
    return history


def fit_without_validation(model, train_loader, val_loader, *, loss_fn, optimizer, max_epochs, patience, min_delta=0.0):
    return [{"epoch": epoch, "train_loss": float(train_epoch(model, train_loader, loss_fn, optimizer)),
             "val_loss": 0.0, "val_accuracy": 0.0} for epoch in range(max_epochs)]


def epoch_twice(model, loader, loss_fn, optimizer):
    train_epoch(model, loader, loss_fn, optimizer)  # "train", then train again to log the loss
    return train_epoch(model, loader, loss_fn, optimizer)


def drop_val_accuracy(entry):
    return {k: v for k, v in entry.items() if k != "val_accuracy"}


def rounded_val_loss(entry):
    return entry | {"val_loss": round(entry["val_loss"], 2)}


def tensor_losses(entry):
    return entry | {"train_loss": torch.tensor(entry["train_loss"]), "val_loss": torch.tensor(entry["val_loss"])}


def numpy_row(entry):
    return {k: np.float32(v) for k, v in entry.items()}


def fit_returning_frame(*args, **kwargs):
    """Correct too: the history as a DataFrame."""
    return pd.DataFrame(make_fit()(*args, **kwargs))


# ---------------------------------------------------------------------------------------------------- the mutation set

# What the notebook's other cells define, for the planted cells that use it
NOTEBOOK = notebook_namespace("04_training_loop")

MISTAKES = [
    # 04-running-mean
    Mistake("04-running-mean", "host-sync-per-update", "device-to-host", (ItemMean,),
            story="`value.item() * n`: the habit from every beginner tutorial's loss logging"),
    Mistake("04-running-mean", "keeps-graph", "graph of every batch", (GraphMean,),
            story="adds the live loss: the 'memory grows every step' forum classic"),
    Mistake("04-running-mean", "unweighted-mean", "plain mean", (UnweightedMean,),
            story="averages batch means, ignoring the smaller last batch (the lesson's pitfall)"),
    Mistake("04-running-mean", "wrong-mean", "sum(value * n) / sum(n)", (UpdatesCountMean,),
            story="weights the values by n but counts updates instead of samples"),
    Mistake("04-running-mean", "shared-state", "class attributes", lambda: (shared_mean(),),
            story="state as class attributes: every instance adds into the same total"),
    Mistake("04-running-mean", "not-a-scalar", "single number", (UnsummedListMean,),
            story="keeps the weighted values in a list and forgets to sum them in compute()"),
    Mistake("04-running-mean", "not-on-device", "in place", (InPlaceMean,),
            story="`self.total += ...` into a CPU zero: fails once the losses live on a GPU"),
    Mistake("04-running-mean", "keeps-graph", "graph of every batch", solution_cell(
        "class RunningMean:\n"
        "    def __init__(self):\n"
        "        self.total = torch.zeros(())\n"
        "        self.count = 0\n"
        "\n"
        "    def update(self, value, n):\n"
        "        self.total = self.total + value * n\n"
        "        self.count += n\n"
        "\n"
        "    def compute(self):\n"
        "        return self.total / self.count\n",
        "RunningMean"),
        story="adds the live loss: the 'memory grows every step' forum classic", planted=True),
    # 04-train-step
    Mistake("04-train-step", "missing-zero-grad", "sum of this batch's gradients", (step_without_zero_grad,),
            story="forgets zero_grad: the most common loop bug (forum FAQ)"),
    Mistake("04-train-step", "step-before-backward", "missing (None or all zero)", (step_before_backward,),
            story="step() before backward(): the order read as 'update, then learn'"),
    Mistake("04-train-step", "step-before-backward", "runs before loss.backward()", (step_then_clear_then_backward,),
            story="step, zero_grad, backward: the lesson's own demo of the 'inplace' error"),
    Mistake("04-train-step", "step-before-backward", "between backward() and step()",
            (step_clearing_between_backward_and_step,),
            story="zero_grad placed between backward and step ('clear before stepping')"),
    Mistake("04-train-step", "eval-mode-in-training", "model.train()", (step_in_eval_mode,),
            story="never calls model.train(): evaluate left the model in eval mode"),
    Mistake("04-train-step", "sum-not-mean", "batch size", (step_with_sum,),
            story="reduction='sum' copied from a paper's formula"),
    Mistake("04-train-step", "wrong-gradients", "differ from those of loss_fn", (step_with_l2,),
            story="adds an L2 penalty by hand to the given loss"),
    Mistake("04-train-step", "wrong-step-count", "exactly one optimizer.step() per call", (step_twice,),
            story="calls a helper that already steps, then steps again"),
    Mistake("04-train-step", "host-sync-per-step", "item", (step_returning_item,),
            story="returns loss.item(), as most tutorials do"),
    Mistake("04-train-step", "host-sync-per-step", "__format__", (step_printing_loss,),
            story="prints the loss at every step for a progress line"),
    Mistake("04-train-step", "returns-graph", "detach", (step_returning_live_loss,),
            story="returns the live loss"),
    Mistake("04-train-step", "not-a-scalar", "list", (step_returning_list,),
            story="wraps the loss in a list to append later"),
    Mistake("04-train-step", "wrong-loss", "before the update", (step_returning_loss_after_update,),
            story="recomputes the loss after the step to report a 'fresher' value"),
    Mistake("04-train-step", "grads-zeroed-not-freed", "zero_grad(set_to_none=False)", (step_zero_filled,),
            story="zero_grad(set_to_none=False), from code written before PyTorch 2.0"),
    Mistake("04-train-step", "grads-zeroed-not-freed", "tensors of zeros", (step_zeroing_by_hand,),
            story="zeroes each p.grad by hand, as in the from-scratch lesson"),
    Mistake("04-train-step", "batch-not-on-device", "got a batch on cpu", (step_unmoved_batch,),
            story="uses the batch as the loader gives it (works on a CPU, fails on a GPU)"),
    Mistake("04-train-step", "batch-not-on-device", "a fixed or global device", (step_global_device,),
            story="moves the batch to the notebook's global `device`, not the model's"),
    Mistake("04-train-step", "missing-zero-grad", "sum of this batch's gradients", solution_cell(
        "def train_step(model, batch, loss_fn, optimizer):\n"
        "    x, y = batch\n"
        "    model.train()\n"
        "    loss = loss_fn(model(x), y)\n"
        "    loss.backward()\n"
        "    optimizer.step()\n"
        "    return loss.detach()\n",
        "train_step"),
        story="forgets zero_grad: the most common loop bug (forum FAQ)", planted=True),
    # 04-train-epoch
    Mistake("04-train-epoch", "unweighted-mean", "last batch", (epoch_unweighted,),
            story="the mean of the batch losses (the lesson's interview question 6)"),
    Mistake("04-train-epoch", "sum-not-mean", "sum of the per-sample losses", (epoch_sum,),
            story="accumulates loss * len(y) and forgets to divide"),
    Mistake("04-train-epoch", "wrong-loss", "the last batch's loss", (epoch_last_loss,),
            story="returns the last batch's loss as 'the epoch loss'"),
    Mistake("04-train-epoch", "host-sync-per-step", "item", (epoch_item_per_step,),
            story="`total += loss.item() * len(y)`: the tutorial pattern"),
    Mistake("04-train-epoch", "wrong-step-count", "one step per batch", (epoch_drop_last,),
            story="skips the smaller last batch to keep shapes equal"),
    Mistake("04-train-epoch", "eval-mode-in-training", "eval mode", (epoch_without_train_mode,),
            story="inlines the step and drops model.train()"),
    Mistake("04-train-epoch", "not-a-tensor", "returned a float", (epoch_returning_float,),
            story="returns float(...) at the end 'to make it printable'"),
    Mistake("04-train-epoch", "sum-not-mean", "sum of the per-sample losses", solution_cell(
        "def train_epoch(model, loader, loss_fn, optimizer):\n"
        "    total = torch.zeros(())\n"
        "    for x, y in loader:\n"
        "        total = total + train_step(model, (x, y), loss_fn, optimizer) * len(y)\n"
        "    return total\n",
        "train_epoch", given=NOTEBOOK),
        story="accumulates loss * len(y) and forgets to divide", planted=True),
    # 04-evaluate
    Mistake("04-evaluate", "train-mode-in-eval", "model.eval()", (evaluate_in_train_mode,),
            story="no_grad but no model.eval(): 'no_grad is eval mode' confusion (forum FAQ)"),
    Mistake("04-evaluate", "builds-graph", "torch.no_grad()", (evaluate_with_graph,),
            story="model.eval() but no no_grad: 'eval() turns off gradients' confusion"),
    Mistake("04-evaluate", "changes-weights", "changed during evaluate", (evaluate_with_decay,),
            story="applies a weight update (decay) inside evaluate"),
    Mistake("04-evaluate", "host-sync-per-batch", "not one per batch", (evaluate_item_per_batch,),
            story="`.item()` per batch, as in most tutorials"),
    Mistake("04-evaluate", "wrong-return", '"loss" and "accuracy"', (evaluate_tuple,),
            story="returns a (loss, accuracy) tuple"),
    Mistake("04-evaluate", "not-a-scalar", "shape", (evaluate_per_sample_losses,),
            story="reduction='none' losses returned without their mean"),
    Mistake("04-evaluate", "sum-not-mean", "never divided", (evaluate_sum,),
            story="sums loss * len(y) and forgets to divide"),
    Mistake("04-evaluate", "unweighted-mean", "smaller last batch", (evaluate_mean_of_batches,),
            story="mean of the batch means"),
    Mistake("04-evaluate", "wrong-loss", "mean loss over the loader", (evaluate_loss_off,),
            story="a loss scaled or computed differently"),
    Mistake("04-evaluate", "count-not-fraction", "fraction correct", (evaluate_count,),
            story="returns the count of correct predictions"),
    Mistake("04-evaluate", "wrong-accuracy", "argmax", (evaluate_batch_denominator,),
            story="divides each batch's correct count by its size, then again by the dataset size"),
    Mistake("04-evaluate", "builds-graph", "torch.no_grad()", solution_cell(
        "def evaluate(model, loader, loss_fn):\n"
        "    model.eval()\n"
        "    mean_loss, correct, count = RunningMean(), torch.zeros(()), 0\n"
        "    for x, y in loader:\n"
        "        outputs = model(x)\n"
        "        mean_loss.update(loss_fn(outputs, y), len(y))\n"
        "        correct += (outputs.argmax(dim=1) == y).sum()\n"
        "        count += len(y)\n"
        '    return {"loss": float(mean_loss.compute()), "accuracy": float(correct / count)}\n',
        "evaluate", given=NOTEBOOK),
        story="model.eval() but no no_grad: 'eval() turns off gradients' confusion", planted=True),
    # 04-fit
    Mistake("04-fit", "early-stop-on-train-loss", "training* loss", (make_fit(monitor="train_loss"),),
            story="watches train_loss (the lesson's named classic)"),
    Mistake("04-fit", "wrong-stop-epoch", "patience=", (make_fit(compare=lambda waited, patience: waited > patience),),
            story="off by one: `waited > patience`"),
    Mistake("04-fit", "wrong-stop-epoch", "min_delta=", (make_fit(use_min_delta=False),),
            story="ignores min_delta"),
    Mistake("04-fit", "wrong-stop-epoch", "patience=1", (make_fit(compare=lambda waited, patience: waited >= 2),),
            story="hard-codes the patience of the example run instead of the argument"),
    Mistake("04-fit", "wrong-stop-epoch", "min_delta on the wrong side", (make_fit(delta_side=+1),),
            story="loss < best + min_delta: a slightly worse epoch counts as an improvement"),
    Mistake("04-fit", "best-weights-not-restored", "best epoch", (make_fit(restore="none"),),
            story="keeps the last weights"),
    Mistake("04-fit", "best-weights-not-restored", "deepcopy", (make_fit(restore="reference"),),
            story="saves model.state_dict() without a copy (the lesson's warning)"),
    Mistake("04-fit", "host-sync-per-step", "every step", (make_fit(epoch_fn=epoch_item_per_step),),
            story="an epoch that calls .item() every step"),
    Mistake("04-fit", "eval-mode-in-training", "eval mode", (make_fit(epoch_fn=epoch_without_train_mode),),
            story="an epoch that never calls model.train(), after evaluate set eval mode"),
    Mistake("04-fit", "wrong-step-count", "one pass over train_loader per epoch", (make_fit(epoch_fn=epoch_twice),),
            story="trains, then calls train_epoch again to get the loss to log"),
    Mistake("04-fit", "wrong-history", "miss ['val_accuracy']", (make_fit(row=drop_val_accuracy),),
            story="logs only the losses"),
    Mistake("04-fit", "wrong-history", "val_loss in the history", (make_fit(row=rounded_val_loss),),
            story="rounds the logged loss for a pretty table"),
    Mistake("04-fit", "wrong-history", "holds a tensor", (make_fit(row=tensor_losses),),
            story="logs the tensors train_epoch and evaluate return, without float()"),
    Mistake("04-fit", "wrong-history", "train_loss in the history", (make_fit(epoch_fn=epoch_last_loss),),
            story="logs the last batch's loss as the epoch's train_loss"),
    Mistake("04-fit", "no-validation", "never saw the validation batch", (fit_without_validation,),
            story="no validation at all"),
    Mistake("04-fit", "wrong-history", "does not validate through an evaluate that sets eval mode",
            (make_fit(evaluate_fn=evaluate_in_train_mode),),
            story="validates with a loop of its own, without model.eval() (its evaluate is not the graded one)"),
    Mistake("04-fit", "early-stop-on-train-loss", "training* loss", solution_cell(
        "def fit(model, train_loader, val_loader, *, loss_fn, optimizer, max_epochs, patience, min_delta=0.0):\n"
        '    history, best_loss, best_state, waited = [], float("inf"), None, 0\n'
        "    for epoch in range(1, max_epochs + 1):\n"
        "        train_loss = float(train_epoch(model, train_loader, loss_fn, optimizer))\n"
        "        scores = evaluate(model, val_loader, loss_fn)\n"
        '        history.append({"epoch": epoch, "train_loss": train_loss, "val_loss": scores["loss"],\n'
        '                        "val_accuracy": scores["accuracy"]})\n'
        "        if train_loss < best_loss - min_delta:\n"
        "            best_loss, best_state, waited = train_loss, copy.deepcopy(model.state_dict()), 0\n"
        "        else:\n"
        "            waited += 1\n"
        "            if waited >= patience:\n"
        "                break\n"
        "    model.load_state_dict(best_state)\n"
        "    return history\n",
        "fit", given=NOTEBOOK),
        story="watches train_loss (the lesson's named classic)", planted=True),
]

CORRECT = [
    Correct("04-running-mean", (RunningMean,), story="the solution: out-of-place sum and count"),
    Correct("04-running-mean", (ListMean,), story="a list of weighted values, stacked in compute()"),
    Correct("04-running-mean", (LazyMean,), story="state created on the first value's device"),
    Correct("04-train-step", (train_step,), story="zero_grad(set_to_none=True) first"),
    Correct("04-train-step", (train_step_clear_after,), story="model.zero_grad() after the step"),
    Correct("04-train-step", (train_step_grads_to_none,), story="p.grad = None by hand"),
    Correct("04-train-epoch", (train_epoch,), story="RunningMean over train_step"),
    Correct("04-train-epoch", (train_epoch_stacked,), story="stacked weighted losses, a tensor"),
    Correct("04-evaluate", (evaluate,), story="eval + no_grad, floats returned"),
    Correct("04-evaluate", (evaluate_inference_mode,), story="inference_mode, tensors returned"),
    Correct("04-fit", (make_fit(),), story="the solution's rule"),
    Correct("04-fit", (fit_with_early_stopping_object,), story="harness EarlyStopping, 0-based epochs"),
    Correct("04-fit", (make_fit(row=numpy_row),), story="NumPy float32 values in the rows"),
    Correct("04-fit", (fit_returning_frame,), story="the history as a DataFrame"),
    Correct("04-fit", lambda: (fit_in_notebook(evaluate_inference_mode),),
            story="defined as in the notebook, calling the global evaluate (inference_mode, tensors returned)"),
]


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


@pytest.mark.parametrize("hidden", [False, True])
def test_evaluate_and_train_epoch_cases_end_in_a_partial_batch(hidden):
    """Issue 43: a mean of batch means differs from the per-sample mean only with a smaller last batch."""
    for inputs in (evaluate_inputs, train_epoch_inputs):
        _, loader = inputs(Case(hidden=hidden))
        assert len(loader.dataset) % loader.batch_size, inputs.__name__
