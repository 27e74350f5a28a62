"""Lesson 07 held-out entries (written from the exercise text only)."""

from entry import Entry

PRELUDE = '''
import math
import torch
from torch import nn
from torch.optim import lr_scheduler
from harness.checks import check, hint
from harness.env import select_device
device = select_device()


def evaluate(model, loader, loss_fn=nn.CrossEntropyLoss()):
    device = next(model.parameters()).device
    model.eval()
    total_loss, correct, count = torch.zeros((), device=device), torch.zeros((), device=device), 0
    with torch.no_grad():
        for inputs, targets in loader:
            inputs, targets = inputs.to(device), targets.to(device)
            outputs = model(inputs)
            total_loss += loss_fn(outputs, targets) * len(targets)
            correct += (outputs.argmax(1) == targets).sum()
            count += len(targets)
    return float(total_loss / count), float(correct / count)


def train_one_epoch(model, loader, loss_fn, optimizer):
    device = next(model.parameters()).device
    model.train()
    total, count = 0.0, 0
    for inputs, targets in loader:
        inputs, targets = inputs.to(device), targets.to(device)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        total, count = total + float(loss) * len(targets), count + len(targets)
    return total / count
'''

LOOP = '''
    device = next(model.parameters()).device
    for _ in range(epochs):
        model.train()
        for inputs, targets in loader:
            inputs, targets = inputs.to(device), targets.to(device)
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(inputs), targets).backward()
'''

WC = "def warmup_cosine(step, warmup_steps, total_steps):\n"
PS = "def train_per_step(model, loader, loss_fn, optimizer, scheduler, epochs):"
PE = "def train_per_epoch(model, loader, loss_fn, optimizer, scheduler, epochs):"
PL = "def train_with_plateau(model, train_loader, val_loader, loss_fn, optimizer, scheduler, epochs):\n"
AS = "def amp_step(model, inputs, targets, loss_fn, optimizer, scaler, scheduler):\n"

ENTRIES = [
    Entry("07-warmup-cosine", "mistake", "warmup factor step / warmup_steps",
          "off-by-one: the first step gets lr 0 and the peak comes one step late (s/W instead of (s+1)/W)", WC + '''
    if step < warmup_steps:
        return step / warmup_steps
    p = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return 0.5 * (1 + math.cos(math.pi * p))
''', ("warmup_cosine",)),
    Entry("07-warmup-cosine", "mistake", "no clamp of the progress",
          "without min(1, ...) the cosine comes back up after total_steps", WC + '''
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    p = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return 0.5 * (1 + math.cos(math.pi * p))
''', ("warmup_cosine",)),
    Entry("07-warmup-cosine", "mistake", "divided by total - warmup without a guard",
          "ZeroDivisionError when total_steps == warmup_steps (no max(1, ...))", WC + '''
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    p = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
    return 0.5 * (1 + math.cos(math.pi * p))
''', ("warmup_cosine",)),
    Entry("07-warmup-cosine", "mistake", "used torch.cos on a tensor",
          "returns a 0-dim tensor instead of a Python float", WC + '''
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    p = torch.tensor(min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps)))
    return 0.5 * (1 + torch.cos(math.pi * p))
''', ("warmup_cosine",)),
    Entry("07-warmup-cosine", "mistake", "warmup condition with <=",
          "boundary: at step == warmup_steps the ramp gives (W+1)/W > 1 instead of the cosine's 1", WC + '''
    if step <= warmup_steps and warmup_steps > 0:
        return (step + 1) / warmup_steps
    p = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return 0.5 * (1 + math.cos(math.pi * p))
''', ("warmup_cosine",)),
    Entry("07-per-step", "mistake", "scheduler before optimizer",
          "scheduler.step() is called before optimizer.step(): the schedule runs one step ahead",
          PS + LOOP + '''
            scheduler.step()
            optimizer.step()
''', ("train_per_step",)),
    Entry("07-per-step", "mistake", "model.train() left out",
          "the model is never put in train mode (it arrives in eval mode)", PS + '''
    device = next(model.parameters()).device
    for _ in range(epochs):
        for inputs, targets in loader:
            inputs, targets = inputs.to(device), targets.to(device)
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(inputs), targets).backward()
            optimizer.step()
            scheduler.step()
''', ("train_per_step",)),
    Entry("07-per-step", "mistake", "per-step scheduler stepped once per epoch",
          "scheduler.step() is outside the batch loop: a per-step schedule stepped per epoch",
          PS + LOOP + '''
            optimizer.step()
        scheduler.step()
''', ("train_per_step",)),
    Entry("07-per-epoch", "mistake", "scheduler stepped per batch",
          "an epoch-sized StepLR stepped once per batch: decays len(loader) times too fast",
          PE + LOOP + '''
            optimizer.step()
            scheduler.step()
''', ("train_per_epoch",)),
    Entry("07-per-epoch", "mistake", "scheduler stepped at the start of each epoch",
          "scheduler.step() before the batch loop: each epoch uses the next epoch's lr (one epoch early)", PE + '''
    device = next(model.parameters()).device
    for _ in range(epochs):
        scheduler.step()
        model.train()
        for inputs, targets in loader:
            inputs, targets = inputs.to(device), targets.to(device)
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(inputs), targets).backward()
            optimizer.step()
''', ("train_per_epoch",)),
    Entry("07-plateau", "mistake", "plateau on the training loss",
          "scheduler.step gets the training loss instead of the validation loss", PL + '''
    losses = []
    for _ in range(epochs):
        train_loss = train_one_epoch(model, train_loader, loss_fn, optimizer)
        val_loss, _ = evaluate(model, val_loader, loss_fn)
        scheduler.step(train_loss)
        losses.append(val_loss)
    return losses
''', ("train_with_plateau",)),
    Entry("07-plateau", "mistake", "passed the accuracy",
          "the validation accuracy (higher is better) is fed to a mode='min' scheduler", PL + '''
    losses = []
    for _ in range(epochs):
        train_one_epoch(model, train_loader, loss_fn, optimizer)
        val_loss, val_acc = evaluate(model, val_loader, loss_fn)
        scheduler.step(val_acc)
        losses.append(val_loss)
    return losses
''', ("train_with_plateau",)),
    Entry("07-plateau", "mistake", "validated before training each epoch",
          "the scheduler gets the validation loss measured before this epoch's training (stale by one epoch)", PL + '''
    losses = []
    for _ in range(epochs):
        val_loss, _ = evaluate(model, val_loader, loss_fn)
        scheduler.step(val_loss)
        train_one_epoch(model, train_loader, loss_fn, optimizer)
        losses.append(evaluate(model, val_loader, loss_fn)[0])
    return losses
''', ("train_with_plateau",)),
    Entry("07-plateau", "mistake", "skipped the scheduler on the first epoch",
          "scheduler.step is not called on the first epoch (if epoch > 0)", PL + '''
    losses = []
    for epoch in range(epochs):
        train_one_epoch(model, train_loader, loss_fn, optimizer)
        val_loss, _ = evaluate(model, val_loader, loss_fn)
        if epoch > 0:
            scheduler.step(val_loss)
        losses.append(val_loss)
    return losses
''', ("train_with_plateau",)),
    Entry("07-amp-skip", "mistake", "stepped = scale unchanged",
          "treats any scale change as a skip: a step where the scale grew is reported as skipped", AS + '''
    loss = loss_fn(model(inputs), targets)
    scaler.scale(loss).backward()
    before = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    stepped = scaler.get_scale() == before
    if stepped:
        scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return stepped
''', ("amp_step",)),
    Entry("07-amp-skip", "mistake", "always stepped the scheduler",
          "scheduler.step() even when the optimizer step was skipped", AS + '''
    loss = loss_fn(model(inputs), targets)
    scaler.scale(loss).backward()
    before = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return scaler.get_scale() >= before
''', ("amp_step",)),
    Entry("07-amp-skip", "mistake", "forgot to clear the gradients",
          "no zero_grad: gradients accumulate across calls", AS + '''
    loss = loss_fn(model(inputs), targets)
    scaler.scale(loss).backward()
    before = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    stepped = scaler.get_scale() >= before
    if stepped:
        scheduler.step()
    return stepped
''', ("amp_step",)),
    Entry("07-one-cycle", "mistake", "sized in samples",
          "total_steps = epochs * len(loader.dataset): samples instead of batches", '''
def make_one_cycle(optimizer, loader, epochs, max_lr):
    return lr_scheduler.OneCycleLR(optimizer, max_lr=max_lr, total_steps=epochs * len(loader.dataset))
''', ("make_one_cycle",)),
    Entry("07-one-cycle", "mistake", "full batches only",
          "len(dataset) // batch_size drops the partial last batch: the schedule raises before the last step", '''
def make_one_cycle(optimizer, loader, epochs, max_lr):
    steps = len(loader.dataset) // loader.batch_size
    return lr_scheduler.OneCycleLR(optimizer, max_lr=max_lr, total_steps=epochs * steps)
''', ("make_one_cycle",)),
    Entry("07-one-cycle", "mistake", "one extra step for safety",
          "total_steps one larger than the run: the schedule does not end with the run", '''
def make_one_cycle(optimizer, loader, epochs, max_lr):
    return lr_scheduler.OneCycleLR(optimizer, max_lr=max_lr, total_steps=epochs * len(loader) + 1)
''', ("make_one_cycle",)),
    Entry("07-one-cycle", "correct", "epochs and steps_per_epoch keywords", "", '''
def make_one_cycle(optimizer, loader, epochs, max_lr):
    return lr_scheduler.OneCycleLR(optimizer, max_lr, epochs=epochs, steps_per_epoch=len(loader))
''', ("make_one_cycle",)),
    Entry("07-warmup-cosine", "correct", "min() ramp and clamped progress written with max/min", "", WC + '''
    if warmup_steps > 0 and step < warmup_steps:
        return float(step + 1) / float(warmup_steps)
    span = max(total_steps - warmup_steps, 1)
    return (1.0 + math.cos(math.pi * max(0.0, min(step - warmup_steps, span) / span))) / 2.0
''', ("warmup_cosine",)),
    Entry("07-amp-skip", "correct", "unscale_ and test the gradients for inf/nan", "", AS + '''
    scaler.scale(loss_fn(model(inputs), targets)).backward()
    scaler.unscale_(optimizer)
    finite = all(bool(torch.isfinite(p.grad).all()) for g in optimizer.param_groups for p in g["params"]
                 if p.grad is not None)
    scaler.step(optimizer)
    scaler.update()
    if finite:
        scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return finite
''', ("amp_step",)),
    Entry("07-plateau", "correct", "inline validation with summed loss", "", PL + '''
    out = []
    for _ in range(epochs):
        train_one_epoch(model, train_loader, loss_fn, optimizer)
        model.eval()
        with torch.no_grad():
            s = n = 0
            for x, y in val_loader:
                x, y = x.to(next(model.parameters()).device), y.to(next(model.parameters()).device)
                s += float(loss_fn(model(x), y)) * len(y)
                n += len(y)
        scheduler.step(s / n)
        out.append(s / n)
    return out
''', ("train_with_plateau",)),
]
