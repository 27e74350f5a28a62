"""Drills on debugging a training run (lesson 12): bugs found by their symptoms, hooks that clean up after
themselves, and the loss at initialisation.

The bank's topics are fixed in `harness.drills.core.TOPICS`, which has no "debugging" topic: these drills are
filed under the topics of the code they debug (loop, autograd).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from harness.checks.core import fail
from harness.drills.core import Drill, add
from harness.drills.support import multiple_choice


# ---------------------------------------------------------------- a model that cannot overfit one batch
def _one_batch() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(12)
    return torch.randn(32, 20, generator=generator), torch.randint(0, 5, (32,), generator=generator)


def _check_overfit(ns: dict) -> str:
    torch.manual_seed(0)
    model = ns["make_model"](20, 5)
    x, y = _one_batch()
    with torch.no_grad():
        out = model(x)
    if out.shape != (32, 5):
        fail("wrong-shape", observed=f"outputs of shape {tuple(out.shape)}", expected="(32, 5): one logit per class",
             cause="the layers do not map 20 features to 5 classes", where="make_model")
    if bool((out >= 0).all() and (out <= 1).all()):
        fail("probabilities", observed=f"every output in [0, 1] (row sums {out.sum(1)[:3].tolist()})",
             expected="raw logits (any real numbers): F.cross_entropy applies log_softmax itself",
             cause="a Softmax or Sigmoid layer at the end of the model", where="the last layer of make_model")
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model.train()
    for _ in range(150):
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    final = float(loss.detach())
    if final > 0.05:
        fail("cannot-overfit", observed=f"loss {final:.3f} after 150 Adam steps on one batch of 32",
             expected="below 0.05: a healthy model memorises one batch",
             cause="something bounds the logits or cuts the gradient (a squashing last layer, a detach)",
             where="the layers of make_model and its forward")
    return f"the model overfits one batch to loss {final:.2e}: it outputs logits"


_OVERFIT_STARTER = '''from torch import nn


def make_model(features, classes):
    """Symptom: trained on a single batch of 32 examples, the loss stops near 1.0 and never goes lower."""
    return nn.Sequential(nn.Linear(features, 64), nn.ReLU(), nn.Linear(64, classes), nn.Softmax(dim=1))
'''

add(
    Drill(
        id="debugging-cannot-overfit",
        title="Bug hunt: a model that cannot overfit one batch",
        kind="bughunt",
        topics=("loop", "modules"),
        difficulty=1,
        prompt="make_model's output goes to F.cross_entropy. The sanity check 'overfit one batch' fails: on 32 "
        "examples the loss floors far above zero. Fix make_model so the model can memorise the batch.",
        entry="make_model",
        starter=_OVERFIT_STARTER,
        solution='''from torch import nn


def make_model(features, classes):
    # F.cross_entropy takes raw logits: no Softmax at the end
    return nn.Sequential(nn.Linear(features, 64), nn.ReLU(), nn.Linear(64, classes))
''',
        hints=("What does F.cross_entropy expect as its input, and what does the last layer give it?",
               "cross_entropy applies log_softmax itself: a Softmax before it squashes the logits into [0, 1]."),
        check=_check_overfit,
        wrong_answers=(_OVERFIT_STARTER.replace("nn.Softmax(dim=1)", "nn.Sigmoid()"),),
    )
)


# ---------------------------------------------------------------- hooks removed even on error
class _Boom(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("a bug further down the model")


def _hooks(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) for m in model.modules())


def _check_relu_means(ns: dict) -> str:
    relu_means = ns["relu_means"]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    x = torch.randn(10, 6, generator=torch.Generator().manual_seed(1))
    got = relu_means(model, x)
    with torch.no_grad():
        first = model[1](model[0](x))
        second = model[3](model[2](first))
    want = {"1": float(first.mean()), "3": float(second.mean())}
    if not isinstance(got, dict) or set(got) != set(want) or not all(
            math.isclose(float(got[k]), v, rel_tol=1e-5, abs_tol=1e-7) for k, v in want.items()):
        fail("wrong-means", observed=f"{got!r}"[:160], expected=f"{want}",
             cause="not the mean output of each ReLU, keyed by its name in named_modules()",
             where="what your hook stores")
    if _hooks(model):
        fail("hooks-left", observed=f"{_hooks(model)} hooks left on the model", expected="none",
             cause="the handles of register_forward_hook were not removed", where="after the forward pass")
    broken = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), _Boom())
    try:
        relu_means(broken, x)
    except RuntimeError:
        pass
    if _hooks(broken):
        fail("hooks-left-on-error", observed=f"{_hooks(broken)} hooks left after the forward raised",
             expected="none: remove them in a finally block", cause="the removal is skipped by the exception",
             where="try: model(x) finally: remove every handle")
    return "the mean of each ReLU's output, hooks removed also when the forward raises"


_MEANS_STARTER = '''import torch
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
        topics=("autograd", "modules"),
        difficulty=2,
        prompt="relu_means collects the mean output of every ReLU with forward hooks. It works, until the "
        "model's forward raises: then its hooks stay on the model for good. Make it remove its hooks "
        "whatever happens (and let the exception propagate).",
        entry="relu_means",
        starter=_MEANS_STARTER,
        solution='''import torch
from torch import nn


def relu_means(model, x):
    means = {}
    handles = [m.register_forward_hook(lambda mod, args, out, name=name: means.__setitem__(name, out.mean().item()))
               for name, m in model.named_modules() if isinstance(m, nn.ReLU)]
    try:
        with torch.no_grad():
            model(x)
    finally:  # runs on the way out of an exception too
        for handle in handles:
            handle.remove()
    return means
''',
        hints=("Which statements run when model(x) raises?",
               "Put the forward in try: and the removal loop in finally:."),
        check=_check_relu_means,
        wrong_answers=(
            _MEANS_STARTER.replace("    for handle in handles:\n        handle.remove()\n", ""),
            _MEANS_STARTER.replace("name, m in model.named_modules()", "name, m in model.named_children()")
            .replace("isinstance(m, nn.ReLU)", "isinstance(m, nn.Linear)"),
        ),
    )
)


# ---------------------------------------------------------------- a loss that explodes after a while
def _check_train(ns: dict) -> str:
    train = ns["train"]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
    twin = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
    twin.load_state_dict(model.state_dict())
    generator = torch.Generator().manual_seed(3)
    batches = [(torch.randn(16, 8, generator=generator), torch.randint(0, 3, (16,), generator=generator))
               for _ in range(6)]
    train(model, batches, 0.1)
    optimizer = torch.optim.SGD(twin.parameters(), lr=0.1)
    for x, y in batches:
        optimizer.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(twin(x), y).backward()
        optimizer.step()
    gap = max(float((a - b).detach().abs().max()) for a, b in zip(model.parameters(), twin.parameters(), strict=False))
    if gap > 1e-5:
        fail("wrong-updates", observed=f"parameters differ from a correct SGD loop by up to {gap:.3g}",
             expected="each step uses that batch's gradient alone",
             cause="the gradients are not cleared before each backward (they add up, so the steps grow), or they "
             "are cleared between backward and step (no update)", where="where optimizer.zero_grad() sits")
    return "six SGD steps, each on its own batch's gradient"


_TRAIN_STARTER = '''import torch
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
        topics=("loop",),
        difficulty=1,
        prompt="This loop trains well at first, then the loss climbs and explodes, whatever the learning rate. "
        "Find the bug by its symptom and fix it.",
        entry="train",
        starter=_TRAIN_STARTER,
        solution='''import torch
import torch.nn.functional as F


def train(model, batches, lr):
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    model.train()
    for x, y in batches:
        optimizer.zero_grad(set_to_none=True)  # each step's gradient is its own
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
''',
        hints=("What is in .grad at the tenth backward?",
               "backward adds into .grad: clear it at every step, before backward."),
        check=_check_train,
        wrong_answers=(_TRAIN_STARTER.replace(
            "        F.cross_entropy(model(x), y).backward()\n",
            "        F.cross_entropy(model(x), y).backward()\n        optimizer.zero_grad()\n"),),
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
            loss = nn.functional.cross_entropy(model(x), y)
        print(f"last layer x{scale:g}: loss at init {float(loss):.2f} (ln 10 = {math.log(10):.2f})")


add(
    multiple_choice(
        id="debugging-init-loss",
        title="A loss of 23 at step 0",
        topics=("loop",),
        difficulty=1,
        prompt="A 10-class classifier reports a cross-entropy of 23.0 at its very first step. The most likely "
        "explanation?\n  a) normal: the loss always starts high\n  b) the logits are far too large at init "
        "(a badly scaled last layer or unnormalised inputs), so the model is confidently wrong; expect about "
        "ln(10) = 2.3\n  c) the learning rate is too low\n  d) the dataset is too small\n",
        correct="b",
        explanation="a uniform prediction over 10 classes costs ln(10) = 2.3: much more means large logits",
        hints=("What does a nearly uniform softmax give as cross-entropy?",
               "-ln(1/C) = ln(C): anything far above it means large, confident, wrong logits."),
        wrong=("a", "c"),
        experiment=_init_loss_experiment,
    )
)
