"""Lesson 04 held-out entries (written from the exercise text only)."""

from entry import Entry

PRELUDE = '''
import copy
import torch
from torch import nn
from harness.checks import check, hint
from harness.env import select_device
torch.set_num_threads(1)
device = select_device()


def train_step(model, batch, loss_fn, optimizer):
    device = next(model.parameters()).device
    x, y = (t.to(device) for t in batch)
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.detach()


class RunningMean:
    def __init__(self):
        self.total = torch.zeros(())
        self.count = 0

    def update(self, value, n):
        self.total = self.total + value.detach() * n
        self.count += n

    def compute(self):
        return self.total / self.count


def train_epoch(model, loader, loss_fn, optimizer):
    mean_loss = RunningMean()
    for x, y in loader:
        mean_loss.update(train_step(model, (x, y), loss_fn, optimizer), len(y))
    return mean_loss.compute()


def evaluate(model, loader, loss_fn):
    device = next(model.parameters()).device
    model.eval()
    mean_loss, correct, count = RunningMean(), torch.zeros((), device=device), 0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            outputs = model(x)
            mean_loss.update(loss_fn(outputs, y), len(y))
            correct += (outputs.argmax(dim=1) == y).sum()
            count += len(y)
    return {"loss": float(mean_loss.compute()), "accuracy": float(correct / count)}
'''

FIT_HEAD = '''
def fit(model, train_loader, val_loader, *, loss_fn, optimizer, max_epochs, patience, min_delta=0.0):
    history = []
    best_loss, best_state, waited = float("inf"), None, 0
    for epoch in range(1, max_epochs + 1):
        train_loss = train_epoch(model, train_loader, loss_fn, optimizer)
        scores = evaluate(model, val_loader, loss_fn)
        history.append({"epoch": epoch, "train_loss": float(train_loss), "val_loss": scores["loss"],
                        "val_accuracy": scores["accuracy"]})
'''

ENTRIES = [
    Entry("04-train-step", "mistake", "cleared gradients right after backward, just before step",
          "zero_grad sits between backward() and step(): step sees no gradients, the weights never move",
          '''
def train_step(model, batch, loss_fn, optimizer):
    device = next(model.parameters()).device
    x, y = (t.to(device) for t in batch)
    model.train()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.zero_grad(set_to_none=True)
    optimizer.step()
    return loss.detach()
''', ("train_step",)),
    Entry("04-train-step", "mistake", "trusted the model to already be in train mode",
          "model.train() never called: a model coming from evaluate trains in eval mode",
          '''
def train_step(model, batch, loss_fn, optimizer):
    device = next(model.parameters()).device
    x, y = (t.to(device) for t in batch)
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.detach()
''', ("train_step",)),
    Entry("04-train-step", "mistake", "returned loss.item() to print it",
          "returns a Python float via .item(): a host sync every step, not a detached tensor",
          '''
def train_step(model, batch, loss_fn, optimizer):
    device = next(model.parameters()).device
    x, y = (t.to(device) for t in batch)
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()
''', ("train_step",)),
    Entry("04-train-step", "mistake", "zero_grad(set_to_none=False) out of habit",
          "gradients filled with zeros instead of freed (set_to_none=False)",
          '''
def train_step(model, batch, loss_fn, optimizer):
    device = next(model.parameters()).device
    x, y = (t.to(device) for t in batch)
    model.train()
    optimizer.zero_grad(set_to_none=False)
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.detach()
''', ("train_step",)),
    Entry("04-train-step", "mistake", "used the global device from the first cell",
          "moves x, y to the notebook's global `device` instead of the model's parameters' device",
          '''
def train_step(model, batch, loss_fn, optimizer):
    x, y = batch[0].to(device), batch[1].to(device)
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.detach()
''', ("train_step",)),
    Entry("04-running-mean", "mistake", "averaged the batch means",
          "each update counted once, not weighted by n: a mean of batch means over-weights the small last batch",
          '''
class RunningMean:
    def __init__(self):
        self.total = torch.zeros(())
        self.count = 0

    def update(self, value, n):
        self.total = self.total + value.detach()
        self.count += 1

    def compute(self):
        return self.total / self.count
''', ("RunningMean",)),
    Entry("04-running-mean", "mistake", "kept the values in a class-level list",
          "state is a class attribute list shared by every instance: a second RunningMean sees the first's values",
          '''
class RunningMean:
    values = []

    def update(self, value, n):
        self.values.append((value.detach() * n, n))

    def compute(self):
        return sum(v for v, _ in self.values) / sum(n for _, n in self.values)
''', ("RunningMean",)),
    Entry("04-running-mean", "mistake", "forgot detach",
          "stores value without detach(): the running total keeps every batch's graph alive",
          '''
class RunningMean:
    def __init__(self):
        self.total = torch.zeros(())
        self.count = 0

    def update(self, value, n):
        self.total = self.total + value * n
        self.count += n

    def compute(self):
        return self.total / self.count
''', ("RunningMean",)),
    Entry("04-running-mean", "mistake", "accumulated with .item() to keep it simple",
          "update calls .item(): a host sync per update, and compute returns a float, not a tensor",
          '''
class RunningMean:
    def __init__(self):
        self.total = 0.0
        self.count = 0

    def update(self, value, n):
        self.total += value.item() * n
        self.count += n

    def compute(self):
        return self.total / self.count
''', ("RunningMean",)),
    Entry("04-train-epoch", "mistake", "returned the last batch's loss",
          "returns only the last step's loss, not the epoch's sample-weighted mean",
          '''
def train_epoch(model, loader, loss_fn, optimizer):
    for x, y in loader:
        loss = train_step(model, (x, y), loss_fn, optimizer)
    return loss
''', ("train_epoch",)),
    Entry("04-train-epoch", "mistake", "stacked the batch losses and took their mean",
          "mean of batch means: the smaller last batch is over-weighted",
          '''
def train_epoch(model, loader, loss_fn, optimizer):
    losses = [train_step(model, batch, loss_fn, optimizer) for batch in loader]
    return torch.stack(losses).mean()
''', ("train_epoch",)),
    Entry("04-train-epoch", "mistake", "skipped the last incomplete batch",
          "stops before the smaller last batch (drops it): not one step per batch",
          '''
def train_epoch(model, loader, loss_fn, optimizer):
    mean_loss = RunningMean()
    size = None
    for x, y in loader:
        size = size or len(y)
        if len(y) < size:
            break
        mean_loss.update(train_step(model, (x, y), loss_fn, optimizer), len(y))
    return mean_loss.compute()
''', ("train_epoch",)),
    Entry("04-evaluate", "mistake", "forgot model.eval()",
          "evaluates in train mode: dropout active and BatchNorm's running statistics updated from validation data",
          '''
def evaluate(model, loader, loss_fn):
    mean_loss, correct, count = RunningMean(), torch.zeros(()), 0
    with torch.no_grad():
        for x, y in loader:
            outputs = model(x)
            mean_loss.update(loss_fn(outputs, y), len(y))
            correct += (outputs.argmax(dim=1) == y).sum()
            count += len(y)
    return {"loss": float(mean_loss.compute()), "accuracy": float(correct / count)}
''', ("evaluate",)),
    Entry("04-evaluate", "mistake", "averaged per-batch losses",
          "mean of per-batch mean losses: the partial last batch is over-weighted",
          '''
def evaluate(model, loader, loss_fn):
    model.eval()
    losses, correct, count = [], torch.zeros(()), 0
    with torch.no_grad():
        for x, y in loader:
            outputs = model(x)
            losses.append(loss_fn(outputs, y))
            correct += (outputs.argmax(dim=1) == y).sum()
            count += len(y)
    return {"loss": float(torch.stack(losses).mean()), "accuracy": float(correct / count)}
''', ("evaluate",)),
    Entry("04-evaluate", "mistake", "no torch.no_grad",
          "builds a graph for every evaluation batch",
          '''
def evaluate(model, loader, loss_fn):
    model.eval()
    mean_loss, correct, count = RunningMean(), torch.zeros(()), 0
    for x, y in loader:
        outputs = model(x)
        mean_loss.update(loss_fn(outputs, y), len(y))
        correct += (outputs.argmax(dim=1) == y).sum()
        count += len(y)
    return {"loss": float(mean_loss.compute()), "accuracy": float(correct / count)}
''', ("evaluate",)),
    Entry("04-evaluate", "mistake", "accuracy summed with .item() each batch",
          "a host sync per batch (.item() inside the loop)",
          '''
def evaluate(model, loader, loss_fn):
    model.eval()
    mean_loss, correct, count = RunningMean(), 0, 0
    with torch.no_grad():
        for x, y in loader:
            outputs = model(x)
            mean_loss.update(loss_fn(outputs, y), len(y))
            correct += (outputs.argmax(dim=1) == y).sum().item()
            count += len(y)
    return {"loss": float(mean_loss.compute()), "accuracy": correct / count}
''', ("evaluate",)),
    Entry("04-fit", "mistake", "kept best weights with a bare state_dict()",
          "best_state = model.state_dict() holds live references: the restored weights are the last epoch's",
          FIT_HEAD + '''
        if scores["loss"] < best_loss - min_delta:
            best_loss, waited, best_state = scores["loss"], 0, model.state_dict()
        else:
            waited += 1
            if waited >= patience:
                break
    model.load_state_dict(best_state)
    return history
''', ("fit",)),
    Entry("04-fit", "mistake", "counted a tie as an improvement",
          "uses <= : a validation loss equal to best - min_delta resets the counter",
          FIT_HEAD + '''
        if scores["loss"] <= best_loss - min_delta:
            best_loss, waited, best_state = scores["loss"], 0, copy.deepcopy(model.state_dict())
        else:
            waited += 1
            if waited >= patience:
                break
    model.load_state_dict(best_state)
    return history
''', ("fit",)),
    Entry("04-fit", "mistake", "stopped one epoch late",
          "off-by-one: stops after patience + 1 epochs without improvement (> instead of >=)",
          FIT_HEAD + '''
        if scores["loss"] < best_loss - min_delta:
            best_loss, waited, best_state = scores["loss"], 0, copy.deepcopy(model.state_dict())
        else:
            waited += 1
            if waited > patience:
                break
    model.load_state_dict(best_state)
    return history
''', ("fit",)),
    Entry("04-fit", "mistake", "early stopping on the training loss",
          "the rule watches train_loss instead of the validation loss",
          FIT_HEAD + '''
        if float(train_loss) < best_loss - min_delta:
            best_loss, waited, best_state = float(train_loss), 0, copy.deepcopy(model.state_dict())
        else:
            waited += 1
            if waited >= patience:
                break
    model.load_state_dict(best_state)
    return history
''', ("fit",)),
    Entry("04-fit", "mistake", "never restored the best weights",
          "the best state is saved but not loaded back at the end: the model keeps the last epoch's weights",
          FIT_HEAD + '''
        if scores["loss"] < best_loss - min_delta:
            best_loss, waited, best_state = scores["loss"], 0, copy.deepcopy(model.state_dict())
        else:
            waited += 1
            if waited >= patience:
                break
    return history
''', ("fit",)),
    Entry("04-fit", "mistake", "min_delta added on the wrong side",
          "improvement tested as loss < best + min_delta: a worse epoch within min_delta counts as better",
          FIT_HEAD + '''
        if scores["loss"] < best_loss + min_delta:
            best_loss, waited, best_state = scores["loss"], 0, copy.deepcopy(model.state_dict())
        else:
            waited += 1
            if waited >= patience:
                break
    model.load_state_dict(best_state)
    return history
''', ("fit",)),
    Entry("04-train-step", "correct", "grads cleared by hand (p.grad = None) and train(True)", "",
          '''
def train_step(model, batch, loss_fn, optimizer):
    params = list(model.parameters())
    x, y = [t.to(params[0].device) for t in batch]
    model.train(True)
    for group in optimizer.param_groups:
        for p in group["params"]:
            p.grad = None
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.detach()
''', ("train_step",)),
    Entry("04-evaluate", "correct", "inference_mode, summed losses times batch size", "",
          '''
def evaluate(model, loader, loss_fn):
    device = next(model.parameters()).device
    was = model.eval()
    total, correct, count = torch.zeros((), device=device), torch.zeros((), device=device), 0
    with torch.inference_mode():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            out = model(x)
            total += loss_fn(out, y) * y.shape[0]
            correct += out.argmax(-1).eq(y).sum()
            count += y.shape[0]
    loss, acc = (torch.stack([total, correct]) / count).tolist()
    return {"loss": loss, "accuracy": acc}
''', ("evaluate",)),
    Entry("04-fit", "correct", "tracks the best epoch index instead of a counter", "",
          '''
def fit(model, train_loader, val_loader, *, loss_fn, optimizer, max_epochs, patience, min_delta=0.0):
    history, best_epoch, best_loss, best_state = [], 0, float("inf"), None
    for epoch in range(1, max_epochs + 1):
        train_loss = float(train_epoch(model, train_loader, loss_fn, optimizer))
        s = evaluate(model, val_loader, loss_fn)
        history.append(dict(epoch=epoch, train_loss=train_loss, val_loss=s["loss"], val_accuracy=s["accuracy"]))
        if best_loss - s["loss"] > min_delta:
            best_epoch, best_loss = epoch, s["loss"]
            best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        elif epoch - best_epoch >= patience:
            break
    model.load_state_dict(best_state)
    return history
''', ("fit",)),
]
