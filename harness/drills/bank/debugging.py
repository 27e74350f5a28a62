"""Drills on debugging a training run (lesson 12): bugs found by their symptoms, hooks that clean up after
themselves, anomaly mode, dead units, non-finite activations, and the loss at initialisation."""

from __future__ import annotations

import math
import random

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

from harness.contract.case import Case
from harness.contract.instruments import HostSyncCounter
from harness.drills.core import Drill, add
from harness.drills.support import explain, no_harness_shortcut, seeded_init


# ------------------------------------------------------------------------------------------------ shared helpers
def _hooks(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


class _AllSteps:
    """Records every optimizer.step() of any optimizer (the answer creates its own): the parameters and their
    gradients just before the step, in the optimizer's order."""

    def __enter__(self) -> _AllSteps:
        self.records: list[dict] = []
        self._handle = register_optimizer_step_pre_hook(self._record)
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.remove()

    def _record(self, optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        self.records.append({"params": [p.detach().clone() for p in params],
                             "grads": [None if p.grad is None else p.grad.detach().clone() for p in params]})


# ---------------------------------------------------------------- a model that cannot overfit one batch
def one_batch(case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    """One batch of 32 inputs of 20 features and labels in [0, 5), to overfit."""
    generator = torch.Generator().manual_seed(case.seeded(12))
    return torch.randn(32, 20, generator=generator), torch.randint(0, 5, (32,), generator=generator)


def _probe_overfit(answer: dict, *, case: Case) -> dict:
    torch.manual_seed(case.seeded(0))
    model = answer["make_model"](20, 5)
    x, y = one_batch(case)
    with torch.no_grad():
        first = model(x)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model.train()
    for _ in range(150):  # the sanity check itself, on the candidate's model (the judge only reads the logits)
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        last = model(x)
    return {"first": first, "last": last}


OVERFIT_STARTER = '''from torch import nn


def make_model(features, classes):
    """Symptom: trained on a single batch of 32 examples, the loss stops near 1.0 and never goes lower."""
    return nn.Sequential(nn.Linear(features, 64), nn.ReLU(), nn.Linear(64, classes), nn.Softmax(dim=1))
'''

add(
    Drill(
        id="debugging-cannot-overfit",
        title="Bug hunt: a model that cannot overfit one batch",
        kind="bughunt",
        topics=("debugging", "loop", "modules"),
        difficulty=1,
        prompt="make_model's output goes to F.cross_entropy. The sanity check 'overfit one batch' fails: on 32 "
        "examples the loss floors far above zero. Fix make_model so the model can memorise the batch.",
        entry="make_model",
        starter=OVERFIT_STARTER,
        hints=("What does F.cross_entropy expect as its input, and what does the last layer give it?",
               "cross_entropy applies log_softmax itself: a Softmax before it squashes the logits into [0, 1]."),
        probe=_probe_overfit,
    )
)


# ---------------------------------------------------------------- hooks removed even on error
class _Boom(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("a bug further down the model")


def means_inputs(case: Case) -> tuple[nn.Module, torch.Tensor]:
    """A seeded ReLU MLP with a nested block, and a batch of 10 inputs, for the activation means drill."""
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 8), nn.ReLU()), nn.Linear(8, 2))
    generator = torch.Generator().manual_seed(case.seeded(1))
    return seeded_init(model, case.seeded(0)), torch.randn(10, 6, generator=generator)


def _probe_relu_means(answer: dict, *, case: Case) -> dict:
    model, x = means_inputs(case)
    got = answer["relu_means"](model, x)
    broken = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), _Boom())
    propagated = False
    try:
        answer["relu_means"](broken, x)
    except RuntimeError:
        propagated = True
    return {"means": got, "hooks": _hooks(model), "hooks_on_error": _hooks(broken), "propagated": propagated}


MEANS_STARTER = '''import torch
from torch import nn


def relu_means(model, x):
    """{name: mean output} of every nn.ReLU in model on one forward pass. Symptom: after calling it on a model
    whose forward raised, every later forward of that model is slower and the dict keeps growing."""
    means = {}
    handles = [m.register_forward_hook(lambda mod, args, out, name=name: means.__setitem__(name, out.mean().item()))
               for name, m in model.named_modules() if isinstance(m, nn.ReLU)]
    with torch.no_grad():
        model(x)
    for handle in handles:
        handle.remove()
    return means
'''


add(
    Drill(
        id="debugging-hooks-cleanup",
        title="Bug hunt: hooks that outlive an exception",
        kind="bughunt",
        topics=("debugging", "autograd", "modules"),
        difficulty=2,
        prompt="relu_means collects the mean output of every ReLU with forward hooks. It works, until the "
        "model's forward raises: then its hooks stay on the model for good. Make it remove its hooks "
        "whatever happens (and let the exception propagate). (A self-check: the hooks left on a model are "
        "counted inside your answer's own process, so its pass does not count in a mock interview.)",
        entry="relu_means",
        starter=MEANS_STARTER,
        hints=("Which statements run when model(x) raises?",
               "Put the forward in try: and the removal loop in finally:."),
        probe=_probe_relu_means,
        self_check=True,
    )
)


# ---------------------------------------------------------------- a loss that explodes after a while
EXPLODE_LR = 0.1


def explode_inputs(case: Case) -> tuple[nn.Module, list[tuple[torch.Tensor, torch.Tensor]]]:
    """A seeded Tanh MLP and six batches of 16, for the exploding-loss drill."""
    model = seeded_init(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3)), case.seeded(0))
    generator = torch.Generator().manual_seed(case.seeded(3))
    return model, [(torch.randn(16, 8, generator=generator), torch.randint(0, 3, (16,), generator=generator))
                   for _ in range(6)]


def _probe_train(answer: dict, *, case: Case) -> dict:
    model, batches = explode_inputs(case)
    with _AllSteps() as steps:
        answer["train"](model, batches, EXPLODE_LR)
    return {"steps": steps.records, "final": [p.detach() for p in model.parameters()]}


TRAIN_STARTER = '''import torch
import torch.nn.functional as F


def train(model, batches, lr):
    """Symptom: the loss falls for a few hundred steps, then climbs and explodes."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    optimizer.zero_grad()
    for x, y in batches:
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
'''

add(
    Drill(
        id="debugging-exploding-late",
        title="Bug hunt: a loss that explodes after a while",
        kind="bughunt",
        topics=("debugging", "loop"),
        difficulty=1,
        prompt="This loop trains well at first, then the loss climbs and explodes, whatever the learning rate. "
        "Find the bug by its symptom and fix it.",
        entry="train",
        starter=TRAIN_STARTER,
        hints=("What is in .grad at the tenth backward?",
               "backward adds into .grad: clear it at every step, before backward."),
        probe=_probe_train,
    )
)


# ---------------------------------------------------------------- the loss at initialisation
def _init_loss_experiment() -> None:
    torch.manual_seed(0)
    x, y = torch.randn(512, 20), torch.randint(0, 10, (512,))
    for scale in (1.0, 30.0):
        model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10))
        with torch.no_grad():
            model[2].weight.mul_(scale)
            loss = F.cross_entropy(model(x), y)
        print(f"last layer x{scale:g}: loss at init {float(loss):.2f} (ln 10 = {math.log(10):.2f})")


add(
    explain(
        id="debugging-init-loss",
        title="A loss of 23 at step 0",
        topics=("debugging", "loop"),
        difficulty=1,
        question="A 10-class classifier reports a cross-entropy of 23.0 at its very first step. What is the most "
        "likely explanation?",
        hints=("What does a nearly uniform softmax give as cross-entropy?",
               "-ln(1/C) = ln(C): anything far above it means large, confident, wrong logits."),
        experiment=_init_loss_experiment,
    )
)


# ---------------------------------------------------------------- anomaly mode names the op that made a nan
class _NanNet(nn.Module):
    """Linear -> an op whose backward makes a nan from finite values -> Linear."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind, self.inner, self.outer = kind, nn.Linear(4, 6), nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inner(x)
        mask = torch.ones(len(x), 1)
        mask[len(x) // 2] = 0.0
        h = h * mask  # one row of exact zeros
        zeros = torch.zeros_like(h)
        if self.kind == "pow":
            h = torch.sqrt(h ** 2)  # sqrt'(0) = inf, times 2h = 0: nan in the backward of ** 2
        elif self.kind == "sqrt":
            h = torch.where(h > 0, torch.sqrt(h), zeros)  # the masked branch still gets 0 / nan
        elif self.kind == "log":
            h = torch.where(h != 0, torch.log(h.abs()), zeros)
        else:
            h = torch.where(h.abs() < 1, torch.acos(h), zeros)
        return self.outer(h)


_NAN_KINDS = ("pow", "sqrt", "log", "acos")


def nan_inputs(case: Case) -> list[tuple[nn.Module, torch.Tensor, torch.Tensor]]:
    """Two (model, inputs, labels) of different kinds of NaN source (pow, sqrt, log or acos), drawn by the case."""
    generator = torch.Generator().manual_seed(case.seeded(30))
    first = int(torch.randint(0, len(_NAN_KINDS), (), generator=generator))
    second = (first + 1 + int(torch.randint(0, len(_NAN_KINDS) - 1, (), generator=generator))) % len(_NAN_KINDS)
    inputs = []
    for index, kind in enumerate((_NAN_KINDS[first], _NAN_KINDS[second])):
        model = seeded_init(_NanNet(kind), case.seeded(31 + index), scale=3.0)
        inputs.append((model, torch.randn(12, 4, generator=generator) * 2,
                       torch.randint(0, 3, (12,), generator=generator)))
    return inputs


def _probe_nan_op(answer: dict, *, case: Case) -> dict:
    no_harness_shortcut(answer)
    names, left_on = [], []
    for model, x, y in nan_inputs(case):
        names.append(answer["nan_backward_op"](model, x, y))
        left_on.append(torch.is_anomaly_enabled())
        torch.autograd.set_detect_anomaly(False)
    return {"names": names, "left_on": left_on}


_NAN_STARTER = '''import torch
import torch.nn.functional as F


def nan_backward_op(model, x, y):
    """The name of the backward function (for example 'MulBackward0') that first returned a nan while
    backpropagating F.cross_entropy(model(x), y). Symptom: the loss is finite, the gradients are nan."""
    raise NotImplementedError
'''


add(
    Drill(
        id="debugging-detect-anomaly",
        self_check=True,
        title="Find the op whose backward made a nan",
        kind="write",
        topics=("debugging", "autograd"),
        difficulty=2,
        prompt="The loss of a model is finite but its gradients are nan. Write nan_backward_op(model, x, y): run "
        "the backward of F.cross_entropy(model(x), y) under torch.autograd anomaly detection and return the name of "
        "the backward function that first returned nan (e.g. 'MulBackward0'), None if none did. Leave anomaly "
        "detection as you found it (off).",
        entry="nan_backward_op",
        starter=_NAN_STARTER,
        hints=("Under torch.autograd.detect_anomaly(), a backward function that returns nan raises a RuntimeError. "
               "What does its message say?",
               "Catch it: the message reads \"Function 'SqrtBackward0' returned nan values in its 0th output.\"; "
               "use the context manager so the mode is switched off again."),
        probe=_probe_nan_op,
    )
)


# ---------------------------------------------------------------- the first non-finite activation
class _Exp(nn.Module):
    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return torch.exp(h)


class _Tower(nn.Module):
    """A body, an exp that overflows on large activations, a norm and a head, under names and in a definition
    order drawn from the case (the head always first): named_modules() order is never run order, and no list of
    names learnt from one case answers another."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__()
        self.names = [rng.choice(pool) for pool in _TOWER_NAMES]
        hidden = [layer for _ in range(rng.randint(1, 2)) for layer in (nn.ReLU(), nn.Linear(8, 8))]
        modules = [nn.Sequential(nn.Linear(4, 8), *hidden), _Exp(), nn.LayerNorm(8)]
        order = [0, 1, 2]
        rng.shuffle(order)
        self.add_module(self.names[3], nn.Linear(8, 3))
        for k in order:
            self.add_module(self.names[k], modules[k])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        body, sharpen, norm, head = (getattr(self, name) for name in self.names)
        return head(norm(sharpen(body(x))))


# Names for the body, the exp, the norm and the head, one drawn from each pool per case
_TOWER_NAMES = (("body", "trunk", "stem", "encoder"), ("sharpen", "gate", "excite", "boost"),
                ("norm", "ln", "post_norm", "scale"), ("head", "out", "classifier", "proj"))


def tower_inputs(case: Case) -> tuple[nn.Module, list[torch.Tensor]]:
    """A seeded tower of named blocks, and three inputs: small, huge, and one holding an inf."""
    model = seeded_init(_Tower(random.Random(case.seeded(42))), case.seeded(40))
    generator = torch.Generator().manual_seed(case.seeded(41))
    x = torch.randn(6, 4, generator=generator)
    with_inf = x.clone()
    with_inf[int(torch.randint(0, 6, (), generator=generator)), int(torch.randint(0, 4, (), generator=generator))] = (
        float("inf"))
    return model, [x * 0.1, x * 1e4, with_inf]


def _probe_first_nonfinite(answer: dict, *, case: Case) -> dict:
    no_harness_shortcut(answer)
    model, inputs = tower_inputs(case)
    names = [answer["first_nonfinite"](model, x) for x in inputs]
    broken = nn.Sequential(nn.Linear(4, 8), _Boom())
    try:
        answer["first_nonfinite"](broken, inputs[0])
    except RuntimeError:
        pass
    return {"names": names, "hooks": _hooks(model), "hooks_on_error": _hooks(broken)}


_NONFINITE_STARTER = '''import torch


def first_nonfinite(model, x):
    """The name (as in model.named_modules()) of the first leaf module, in the order the forward runs them,
    whose output holds an inf or a nan on model(x); None when every output is finite."""
    raise NotImplementedError
'''


add(
    Drill(
        id="debugging-first-nonfinite",
        title="Find the first layer whose output is not finite",
        kind="write",
        topics=("debugging", "modules"),
        difficulty=2,
        prompt="The loss is nan. Write first_nonfinite(model, x): with forward hooks on every leaf module, run "
        "model(x) once and return the name (as in model.named_modules()) of the first module, in the order the "
        "forward runs them, whose output holds an inf or a nan; None when all are finite. Remove your hooks "
        "before returning, even if the forward raises.",
        entry="first_nonfinite",
        starter=_NONFINITE_STARTER,
        hints=("A forward hook runs right after its module's forward, so the hooks fire in run order.",
               "In each hook append the name when not torch.isfinite(out).all(); return the first; remove the "
               "handles in finally:."),
        probe=_probe_first_nonfinite,
    )
)


# ---------------------------------------------------------------- dead ReLUs
def dead_inputs(case: Case) -> tuple[nn.Module, torch.Tensor]:
    """A seeded two-block ReLU MLP with about 30% of each block's units dead (bias -20), and 24 inputs."""
    model = nn.Sequential(nn.Sequential(nn.Linear(6, 16), nn.ReLU()), nn.Sequential(nn.Linear(16, 12), nn.ReLU()),
                          nn.Linear(12, 3))
    seeded_init(model, case.seeded(50))
    generator = torch.Generator().manual_seed(case.seeded(51))
    with torch.no_grad():  # a too-large learning rate pushed some biases far below zero: those units never fire
        for block in (model[0], model[1]):
            dead = torch.rand(block[0].out_features, generator=generator) < 0.3
            block[0].bias[dead] = -20.0
    return model, torch.randn(24, 6, generator=generator)


def _probe_dead(answer: dict, *, case: Case) -> dict:
    no_harness_shortcut(answer)
    model, x = dead_inputs(case)
    return {"fractions": answer["dead_relu_fraction"](model, x), "hooks": _hooks(model)}


_DEAD_STARTER = '''import torch
from torch import nn


def dead_relu_fraction(model, x):
    """{name in model.named_modules(): share of the ReLU's units whose output is 0 for every example of x}."""
    raise NotImplementedError
'''


add(
    Drill(
        id="debugging-dead-relus",
        title="Count the dead ReLU units",
        kind="write",
        topics=("debugging", "modules"),
        difficulty=2,
        prompt="After a few steps at a too-large learning rate the loss stalls. Write dead_relu_fraction(model, x): "
        "for every nn.ReLU of the model (keyed by its name in named_modules()), the share of its units whose "
        "output is 0 for every example of the batch x (dead units: no gradient reaches them). Use forward hooks "
        "and remove them.",
        entry="dead_relu_fraction",
        starter=_DEAD_STARTER,
        hints=("A unit is one column of the ReLU's (batch, units) output. When is it dead on this batch?",
               "(out == 0).all(dim=0) marks the dead units; .float().mean() is their share."),
        probe=_probe_dead,
    )
)


# ---------------------------------------------------------------- a training script with three bugs
SCRIPT_LR, SCRIPT_EPOCHS, SCRIPT_BATCH = 0.1, 2, 8


def script_inputs(case: Case) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """The training script's seeded MLP, inputs with an offset, a scale and a constant column, and labels."""
    generator = torch.Generator().manual_seed(case.seeded(60))
    n = int(torch.randint(20, 31, (), generator=generator))
    x = torch.randn(n, 5, generator=generator) * 3 + 10
    x[:, 2] = 1.0  # a constant feature (a column of ones the export added): its standard deviation is 0
    y = (x[:, [0, 1, 3]] - 10).argmax(1)  # labels the features do predict
    model = seeded_init(nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 3)), case.seeded(61))
    return model, x, y


def _probe_training_script(answer: dict, *, case: Case) -> dict:
    model, x, y = script_inputs(case)
    generator = torch.Generator().manual_seed(case.seeded(62))
    with _AllSteps() as steps:
        answer["train"](model, x, y, SCRIPT_EPOCHS, SCRIPT_BATCH, SCRIPT_LR, generator)
    return {"steps": steps.records, "final": [p.detach() for p in model.parameters()]}


SCRIPT_STARTER = '''import torch
import torch.nn.functional as F


def train(model, x, y, epochs, batch_size, lr, generator):
    """Standardise the features, then train with SGD on shuffled mini-batches.

    Symptoms: the loss is nan from the first step. A colleague who "fixed" that reports that the loss then
    decreases a little but the accuracy stays at chance, and a third says the loss blows up after a while.
    """
    mean, std = x.mean(0), x.std(0)
    x = (x - mean) / std
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    model.train()
    optimizer.zero_grad(set_to_none=True)
    for epoch in range(epochs):
        xs = x[torch.randperm(len(x), generator=generator)]
        ys = y[torch.randperm(len(y), generator=generator)]
        for start in range(0, len(x), batch_size):
            xb, yb = xs[start:start + batch_size], ys[start:start + batch_size]
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            optimizer.step()
    return model
'''


add(
    Drill(
        id="debugging-train-script", nonfinite=('steps/*', 'final/*'),
        title="Bug hunt: a training script with three bugs",
        kind="bughunt",
        topics=("debugging", "loop", "data"),
        difficulty=3,
        prompt="This training script has three bugs, each with its own symptom (see the docstring): a nan, a silent "
        "data bug, and a loss that grows. Fix all three; keep the standardisation, one torch.randperm(len(x), "
        "generator=generator) per epoch, SGD and the mini-batch order. The check reports the first bug it observes.",
        entry="train",
        starter=SCRIPT_STARTER,
        hints=("Print x.std(0) once. Then ask: after shuffling, is ys[i] still the label of xs[i]? Then: what is in "
               ".grad at the second step?",
               "Clamp the standard deviation (x.std(0).clamp_min(1e-6)); index x and y with the same permutation; "
               "call optimizer.zero_grad(set_to_none=True) inside the batch loop."),
        probe=_probe_training_script,
    )
)


# ---------------------------------------------------------------- gradient norm per layer, one sync
def norms_inputs(case: Case) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """A deep sigmoid MLP with one frozen layer, a batch of 16 inputs and labels, for the per-layer norms drill."""
    layers: list[nn.Module] = []
    for _ in range(5):
        layers += [nn.Linear(12, 12), nn.Sigmoid()]  # a deep sigmoid stack: the first layers' gradients vanish
    model = nn.Sequential(*layers, nn.Linear(12, 4))
    seeded_init(model, case.seeded(70), scale=2.0)
    model[2].requires_grad_(False)  # a frozen layer: no gradient at all
    generator = torch.Generator().manual_seed(case.seeded(71))
    return model, torch.randn(16, 12, generator=generator), torch.randint(0, 4, (16,), generator=generator)


def _probe_grad_norms(answer: dict, *, case: Case) -> dict:
    no_harness_shortcut(answer)
    model, x, y = norms_inputs(case)
    F.cross_entropy(model(x), y).backward()
    with HostSyncCounter() as syncs:
        norms = answer["grad_norms"](model)
    return {"norms": norms, "syncs": syncs.count}


_NORMS_STARTER = '''import torch


def grad_norms(model):
    """{parameter name: L2 norm of its .grad as a float} for every parameter that has a gradient, after backward.
    Logged at every step: bring the values to the host in one sync."""
    raise NotImplementedError
'''


add(
    Drill(
        id="debugging-grad-norms",
        title="Gradient norm per layer, in one sync",
        kind="write",
        topics=("debugging", "autograd", "performance"),
        difficulty=2,
        prompt="A deep network barely learns; you suspect vanishing gradients. Write grad_norms(model), called after "
        "backward: {parameter name: L2 norm of its .grad, as a Python float} for every parameter that has a "
        "gradient (leave out those whose .grad is None). It is logged at every step: make exactly one host sync. "
        "The sync count is a self-check: it is measured inside your answer's own process, so it can fail the "
        "drill, and a pass does not count in a mock interview.",
        self_check=True,
        entry="grad_norms",
        starter=_NORMS_STARTER,
        hints=("torch.linalg.vector_norm(p.grad) is a 0-d tensor on the device. How do you bring many of them to "
               "Python at once?",
               "Stack the norms into one tensor and call .tolist() once; skip p.grad is None."),
        probe=_probe_grad_norms,
    )
)


# ---------------------------------------------------------------- what the overfit-one-batch test says
def _overfit_experiment() -> None:
    generator = torch.Generator().manual_seed(0)
    x, y = torch.randn(16, 10, generator=generator), torch.randint(0, 5, (16,), generator=generator)
    for label, last in (("healthy (logits out)", nn.Identity()), ("bug: Softmax before cross_entropy", nn.Softmax(1))):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 5), last)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        for _ in range(200):
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
        print(f"{label}: loss {float(loss.detach()):.4f} after 200 steps on one batch of 16 (ln 5 = {math.log(5):.2f})")
    print("a healthy model and loop drive the loss of one batch to about 0; one that cannot has a bug to find first.")


add(
    explain(
        id="debugging-overfit-one-batch",
        title="The overfit-one-batch test fails",
        topics=("debugging", "loop"),
        difficulty=1,
        question="Before a long run you train a 5-class classifier for 200 steps on one fixed batch of 16 examples. "
        "The loss stops at 1.2 and stays there. What does this tell you?",
        hints=("How hard is it to memorise 16 examples with a few thousand parameters?",
               "A healthy model and loop drive one batch's loss to about 0; if not, debug before the long run."),
        experiment=_overfit_experiment,
    )
)


# ---------------------------------------------------------------- initialise the output bias to the class priors
def prior_inputs(case: Case) -> tuple[nn.Linear, torch.Tensor, int]:
    """An output layer, imbalanced labels (every class at least once) and the number of classes."""
    generator = torch.Generator().manual_seed(case.seeded(80))
    classes = int(torch.randint(3, 7, (), generator=generator))
    weights = torch.rand(classes, generator=generator) ** 3 + 0.02  # imbalanced: some classes are rare
    labels = torch.multinomial(weights / weights.sum(), 200, replacement=True, generator=generator)
    labels[:classes] = torch.arange(classes)  # every class appears at least once
    return seeded_init(nn.Linear(8, classes), case.seeded(81)), labels, classes


def _probe_prior(answer: dict, *, case: Case) -> dict:
    no_harness_shortcut(answer)
    layer, labels, classes = prior_inputs(case)
    bias = layer.bias
    answer["init_output_bias_"](layer, labels, classes)
    return {"bias": layer.bias, "weight": layer.weight, "same_bias": layer.bias is bias,
            "requires_grad": bool(getattr(layer.bias, "requires_grad", False))}


_PRIOR_STARTER = '''import torch


def init_output_bias_(layer, labels, classes):
    """Set the output layer's bias so that, with small weights, the model predicts the class frequencies of
    `labels` at init. Symptom: on an imbalanced dataset the first hundred steps only learn the class balance
    (a 'hockey stick' loss curve)."""
    raise NotImplementedError
'''


add(
    Drill(
        id="debugging-init-output-bias",
        self_check=True,
        title="Start the loss at the entropy of the labels",
        kind="write",
        topics=("debugging", "modules"),
        difficulty=2,
        prompt="On an imbalanced dataset the loss starts high and the first steps only learn the class balance. "
        "Write init_output_bias_(layer, labels, classes): set the bias of the output nn.Linear in place so that "
        "softmax(bias) equals the frequency of each class in labels (every class appears); keep the same Parameter "
        "(an optimizer may already hold it) and leave the weight alone.",
        entry="init_output_bias_",
        starter=_PRIOR_STARTER,
        hints=("Which bias b gives softmax(b) = p? And how do you change a parameter in place without autograd "
               "complaining?",
               "b = log(p), p = bincount(labels, minlength=classes) / len(labels); inside torch.no_grad(), "
               "layer.bias.copy_(b)."),
        probe=_probe_prior,
    )
)
