"""Planted bugs in 04_training_loop: each replaces one solution cell; the pipeline test expects that exercise alone
to fail.

The exercises build on each other (train_epoch calls train_step, fit calls train_epoch and evaluate), so each
bug is one that the later exercises' checks do not depend on: the checks of later tasks judge what they observe.
"""

PLANTED = {
    # The classic: gradients of step 2 are the sum of steps 1 and 2.
    "04-train-step": (
        '''def train_step(model, batch, loss_fn, optimizer):
    x, y = batch
    model.train()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.detach()
''',
        "missing-zero-grad",
    ),
    # Adds the live loss: the running total drags the graph of every batch along.
    "04-running-mean": (
        '''class RunningMean:
    def __init__(self):
        self.total = torch.zeros(())
        self.count = 0

    def update(self, value, n):
        self.total = self.total + value * n
        self.count += n

    def compute(self):
        return self.total / self.count
''',
        "keeps-graph",
    ),
    # A sum where a mean was meant: the epoch loss grows with the dataset size.
    "04-train-epoch": (
        '''def train_epoch(model, loader, loss_fn, optimizer):
    total = torch.zeros(())
    for x, y in loader:
        total = total + train_step(model, (x, y), loss_fn, optimizer) * len(y)
    return total
''',
        "sum-not-mean",
    ),
    # Evaluation that builds a graph: eval mode is set, torch.no_grad() is missing.
    "04-evaluate": (
        '''def evaluate(model, loader, loss_fn):
    model.eval()
    mean_loss, correct, count = RunningMean(), torch.zeros(()), 0
    for x, y in loader:
        outputs = model(x)
        mean_loss.update(loss_fn(outputs, y), len(y))
        correct += (outputs.argmax(dim=1) == y).sum()
        count += len(y)
    return {"loss": float(mean_loss.compute()), "accuracy": float(correct / count)}
''',
        "builds-graph",
    ),
    # Early stopping on the training loss, which keeps falling while the model overfits.
    "04-fit": (
        '''def fit(model, train_loader, val_loader, *, loss_fn, optimizer, max_epochs, patience, min_delta=0.0):
    history, best_loss, best_state, waited = [], float("inf"), None, 0
    for epoch in range(1, max_epochs + 1):
        train_loss = float(train_epoch(model, train_loader, loss_fn, optimizer))
        scores = evaluate(model, val_loader, loss_fn)
        history.append({"epoch": epoch, "train_loss": train_loss, "val_loss": scores["loss"],
                        "val_accuracy": scores["accuracy"]})
        if train_loss < best_loss - min_delta:
            best_loss, best_state, waited = train_loss, copy.deepcopy(model.state_dict()), 0
        else:
            waited += 1
            if waited >= patience:
                break
    model.load_state_dict(best_state)
    return history
''',
        "early-stop-on-train-loss",
    ),
}
