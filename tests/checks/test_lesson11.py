"""Lesson 11's checks against the drill bank: each of the bank's planted wrong answers fails the notebook's check
too (with a teaching message), and the mutation set (MISTAKES, CORRECT; the planted bugs are each drill's first
wrong answer in its solution cell) covers every requirement of every exercise."""

import pytest

from harness.checks import CheckFailed, check
from harness.checks.testing import DRAWN_CASE, Correct, Mistake, SolutionCell, solution_cell
from harness.contract import wire
from harness.contract.protocol import decide, observe
from harness.drills import get_drill
from harness.drills.lesson import NOTEBOOK_DRILLS


def _passed(task_id: str, namespace: dict) -> dict:
    """What the notebook's test cell passes to check() once the solution cell filled `namespace`."""
    if get_drill(dict(NOTEBOOK_DRILLS)[task_id]).kind == "explain":
        name = next((n for n in namespace if n.startswith("answer")), "answer")
        return {"answer": namespace.get(name)}
    return namespace


def _namespace(task_id: str, source: str) -> dict:
    """What the notebook's test cell passes to check() after running `source` as the solution cell."""
    namespace: dict = {}
    exec(compile(source, f"<{task_id}>", "exec"), namespace)  # noqa: S102 (the drill bank's own answers)
    return _passed(task_id, namespace)


def _planted(task_id: str, source: str) -> SolutionCell:
    """`source` as the notebook's solution cell of `task_id`: the planted bug the pipeline test grades there."""
    return solution_cell(source, passes=lambda namespace: (_passed(task_id, namespace),))


WRONG = [(task, drill, index) for task, drill in NOTEBOOK_DRILLS
         for index in range(len(get_drill(drill).wrong_answers))]


@pytest.mark.parametrize("run", ["visible", "hidden", "drawn"])
@pytest.mark.parametrize(("task_id", "drill_id", "index"), WRONG, ids=[f"{t}-wrong{i}" for t, _, i in WRONG])
def test_the_banks_wrong_answer_fails_the_notebook_check(task_id, drill_id, index, run):
    drill = get_drill(drill_id)
    source = drill.wrong_answers[index][0]
    with pytest.raises(CheckFailed) as failure:
        if run == "drawn":  # a hidden case as the grader draws one
            decide(task_id, observe(task_id, (_namespace(task_id, source),), DRAWN_CASE), DRAWN_CASE)
        else:
            check(task_id, _namespace(task_id, source), hidden=run == "hidden")
    message = str(failure.value)  # a raised answer is named by its line and error, not by a likely cause
    assert "Observed:" in message and ("Likely cause:" in message or failure.value.code == "raised"), message


@pytest.mark.parametrize(("task_id", "drill_id"), NOTEBOOK_DRILLS, ids=[t for t, _ in NOTEBOOK_DRILLS])
def test_starter_fails(task_id, drill_id):
    with pytest.raises(CheckFailed):
        check(task_id, _namespace(task_id, get_drill(drill_id).starter))


def _solution_with(drill_id: str, old: str, new: str) -> str:
    """The drill's reference solution with `old` replaced by `new` (which must occur)."""
    solution = get_drill(drill_id).solution
    assert old in solution, old
    return solution.replace(old, new)


def _answer(task_id: str, source: str):
    """What the test cell passes to check() once `source` ran as the solution cell, built when the test runs."""
    return lambda: (_namespace(task_id, source),)


def _wrong(drill_id: str, index: int) -> str:
    return get_drill(drill_id).wrong_answers[index][0]


STEP, MLP, EVAL, COSINE = "loop-train-step", "modules-plain-list", "modules-why-eval", "schedulers-warmup-cosine"
AMP, METRICS, RESUME = "amp-train-step", "performance-epoch-metrics", "checkpointing-exact-resume"
AUTOCAST = '    with torch.autocast("cpu", dtype=torch.bfloat16):\n        loss = loss_fn(model(x), y)\n'

MISTAKES = [
    # 11-train-step
    Mistake("11-train-step", "missing-entry", "defines no `train_step`",
            _answer("11-train-step", _solution_with(STEP, "def train_step(", "def training_step(")),
            story="names the function after the framework habit (training_step), not the drill's name"),
    Mistake("11-train-step", "step-count", "0 optimizer steps for 3 calls",
            _answer("11-train-step", _solution_with(STEP, "    optimizer.step()\n", "")),
            story="forgets optimizer.step(): the loss is computed, nothing learns"),
    Mistake("11-train-step", "update-outside-step", "by hand",
            _answer("11-train-step", _solution_with(STEP, "    optimizer.step()\n", "    optimizer.step()\n"
                                                    "    with torch.no_grad():\n        for p in model.parameters():\n"
                                                    "            p.mul_(0.9)\n")),
            story="adds weight decay by hand after the step"),
    Mistake("11-train-step", "missing-zero-grad", "gradients accumulate in .grad",
            _planted("11-train-step", _wrong(STEP, 0)), story="forgets zero_grad: the most common loop bug",
            planted=True),
    Mistake("11-train-step", "step-before-backward", "step() ran before loss.backward()",
            _answer("11-train-step", _wrong(STEP, 1)), story="calls step() before backward()"),
    Mistake("11-train-step", "host-sync", "called .item()",
            _answer("11-train-step", _solution_with(STEP, "return loss.detach()", "return loss.item()")),
            story="returns loss.item() for logging, a host sync every step"),
    Mistake("11-train-step", "not-a-tensor", "no return statement",
            _answer("11-train-step", _solution_with(STEP, "    return loss.detach()\n", "")),
            story="forgets to return the loss"),
    Mistake("11-train-step", "loss-not-detached", "requires grad",
            _answer("11-train-step", _solution_with(STEP, "return loss.detach()", "return loss")),
            story="returns the loss itself, graph attached"),
    Mistake("11-train-step", "step-count", "more than once per call",
            _answer("11-train-step", _solution_with(STEP, "    optimizer.step()\n",
                                                    "    optimizer.step()\n    optimizer.step()\n")),
            story="a stray second optimizer.step() left from an edit"),
    Mistake("11-train-step", "wrong-loss", "recomputed after optimizer.step()",
            _answer("11-train-step", _solution_with(STEP, "return loss.detach()",
                                                    "return loss_fn(model(x), y).detach()")),
            story="recomputes the loss for logging after the step"),
    Mistake("11-train-step", "not-train-mode", "eval mode",
            _answer("11-train-step", _solution_with(STEP, "    model.train()\n", "")),
            story="relies on the mode the model is in: after an evaluation, dropout stays off"),
    # 11-plain-list
    Mistake("11-plain-list", "missing-entry", "defines no `MLP`",
            _answer("11-plain-list", _solution_with(MLP, "class MLP(", "class Net(")), story="renames the class"),
    Mistake("11-plain-list", "unregistered-layers", "plain Python list",
            _answer("11-plain-list", get_drill(MLP).starter), story="the bug itself: layers in a Python list"),
    Mistake("11-plain-list", "unregistered-layers", "holds", _planted("11-plain-list", _wrong(MLP, 0)),
            story="a Sequential that keeps only the first hidden layer", planted=True),
    Mistake("11-plain-list", "unregistered-layers", "nn.Module cannot see",
            _answer("11-plain-list", _solution_with(MLP, "nn.ModuleList([nn.Linear(a, b) for a, b in "
                                                    "zip(sizes[:-2], sizes[1:-1])])",
                                                    "{str(i): nn.Linear(a, b) for i, (a, b) in "
                                                    "enumerate(zip(sizes[:-2], sizes[1:-1]))}.values()")),
            story="a plain dict of layers instead of nn.ModuleDict"),
    Mistake("11-plain-list", "wrong-shape", "has shape",
            _answer("11-plain-list", _solution_with(MLP, "return self.out(x)", "return x")),
            story="the rewritten forward forgets the output layer"),
    Mistake("11-plain-list", "wrong-value", "chained as Linear -> ReLU",
            _answer("11-plain-list", _solution_with(MLP, "x = torch.relu(layer(x))", "x = layer(x)")),
            story="drops the ReLU while rewriting the loop"),
    Mistake("11-plain-list", "not-a-tensor", "model(x) is list",
            _answer("11-plain-list", _solution_with(MLP, "return self.out(x)", "return self.out(x).tolist()")),
            story="returns a list for printing"),
    # 11-why-eval
    Mistake("11-why-eval", "wrong-choice", "you chose 'a'", _planted("11-why-eval", 'answer_why_eval = "a"\n'),
            story="confuses eval() with no_grad()", planted=True),
    Mistake("11-why-eval", "wrong-choice", "you chose 'c'", _answer("11-why-eval", 'answer = "c"'),
            story="thinks eval() freezes the parameters"),
    Mistake("11-why-eval", "wrong-choice", "you chose 'd'", _answer("11-why-eval", 'answer = "d"'),
            story="thinks eval() only matters on a GPU"),
    Mistake("11-why-eval", "no-choice", "answer = None", _answer("11-why-eval", "answer = None"),
            story="leaves the starter's answer"),
    Mistake("11-why-eval", "no-choice", "one letter", _answer("11-why-eval", 'answer = "b) dropout off"'),
            story="copies the whole choice instead of its letter"),
    Mistake("11-why-eval", "no-choice", "not that option's text",
            _answer("11-why-eval", 'answer = "(b) it freezes the parameters, so that optimizer.step() skips every '
                    'one of them"'), story="copies option (c)'s text after the letter it meant to choose"),
    # 11-warmup-cosine
    Mistake("11-warmup-cosine", "missing-entry", "defines no `warmup_cosine`",
            _answer("11-warmup-cosine", _solution_with(COSINE, "def warmup_cosine(", "def lr_lambda(")),
            story="names it after LambdaLR's argument"),
    Mistake("11-warmup-cosine", "wrong-warmup", "the first step gets a learning rate of 0",
            _planted("11-warmup-cosine", _wrong(COSINE, 0)),
            story="step / warmup: the first step gets a zero learning rate", planted=True),
    Mistake("11-warmup-cosine", "not-clamped", "not clamped to 1", _answer("11-warmup-cosine", _wrong(COSINE, 1)),
            story="no clamp: the cosine climbs back up after total"),
    Mistake("11-warmup-cosine", "wrong-decay", "the 0.5 of the cosine is missing",
            _answer("11-warmup-cosine", _solution_with(COSINE, "0.5 * (1 + ", "(1 + ")),
            story="forgets the 0.5 of the cosine: it starts at 2"),
    Mistake("11-warmup-cosine", "raised", "ZeroDivisionError",
            _answer("11-warmup-cosine", _solution_with(COSINE, "if step < warmup:", "if step <= warmup:")),
            story="off by one at the end of the warmup (which divides by zero when warmup is 0)"),
    Mistake("11-warmup-cosine", "raised", "ZeroDivisionError",
            _answer("11-warmup-cosine", _solution_with(COSINE, "max(1, total - warmup)", "(total - warmup)")),
            story="no guard when warmup == total"),
    # 11-amp-step
    Mistake("11-amp-step", "missing-entry", "defines no `amp_step`",
            _answer("11-amp-step", _solution_with(AMP, "def amp_step(", "def train_step_amp(")), story="renames it"),
    Mistake("11-amp-step", "not-train-mode", "eval mode",
            _answer("11-amp-step", _solution_with(AMP, "    model.train()\n", "")),
            story="relies on the mode the model is in: after an evaluation, dropout stays off"),
    Mistake("11-amp-step", "no-autocast", "without autocast",
            _answer("11-amp-step", _solution_with(AMP, AUTOCAST, "    loss = loss_fn(model(x), y)\n")),
            story="a GradScaler without autocast: believes the scaler makes it mixed precision"),
    Mistake("11-amp-step", "backward-inside-autocast", "indented inside", _answer("11-amp-step", _wrong(AMP, 2)),
            story="backward indented inside the autocast block"),
    Mistake("11-amp-step", "stale-gradients", "the previous step left in .grad", _answer("11-amp-step", _wrong(AMP, 1)),
            story="forgets zero_grad in the AMP step: the previous step's gradients join this one's"),
    Mistake("11-amp-step", "missing-update", "scale never adapts", _planted("11-amp-step", _wrong(AMP, 0)),
            story="forgets scaler.update()", planted=True),
    Mistake("11-amp-step", "missing-unscale", "no scaler.unscale_(optimizer) before clipping",
            _answer("11-amp-step", _wrong(AMP, 3)),
            story="clips without unscale_"),
    Mistake("11-amp-step", "scaler-order", "in the wrong order",
            _answer("11-amp-step", _solution_with(AMP, "    scaler.step(optimizer)\n    scaler.update()\n",
                                                  "    scaler.update()\n    scaler.step(optimizer)\n")),
            story="updates the scale before stepping"),
    Mistake("11-amp-step", "optimizer-step-direct", "called instead of scaler.step(optimizer)",
            _answer("11-amp-step", _solution_with(AMP, "scaler.step(optimizer)", "optimizer.step()")),
            story="steps the optimizer directly, as without AMP"),
    Mistake("11-amp-step", "not-clipped", "clip_grad_norm_ is missing",
            _answer("11-amp-step", _solution_with(AMP, "    torch.nn.utils.clip_grad_norm_(model.parameters(), "
                                                  "max_norm)\n", "")), story="forgets the clipping"),
    Mistake("11-amp-step", "clip-before-unscale", "clip_grad_norm_ ran on scaled gradients",
            _answer("11-amp-step", _solution_with(AMP, "    scaler.unscale_(optimizer)\n"
                                                  "    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n",
                                                  "    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n"
                                                  "    scaler.unscale_(optimizer)\n")),
            story="clips, then unscales"),
    Mistake("11-amp-step", "wrong-loss", "amp_step returned float",
            _answer("11-amp-step", _solution_with(AMP, "return loss.detach()", "return loss.item()")),
            story="returns loss.item() for logging"),
    Mistake("11-amp-step", "clipped-by-value", "clip_grad_value_ caps each element",
            _answer("11-amp-step", _solution_with(AMP, "clip_grad_norm_(model.parameters(), max_norm)",
                                                  "clip_grad_value_(model.parameters(), max_norm)")),
            story="clip_grad_value_ taken for clip_grad_norm_"),
    Mistake("11-amp-step", "wrong-value", "the scaled loss",
            _answer("11-amp-step", _solution_with(AMP, "    scaler.scale(loss).backward()\n",
                                                  "    loss = scaler.scale(loss)\n    loss.backward()\n")),
            story="keeps the scaled loss in `loss` and returns it"),
    # 11-epoch-metrics
    Mistake("11-epoch-metrics", "missing-entry", "defines no `epoch_metrics`",
            _answer("11-epoch-metrics", _solution_with(METRICS, "def epoch_metrics(", "def evaluate(")),
            story="renames it"),
    Mistake("11-epoch-metrics", "sync-per-step", "host syncs for 3 batches",
            _planted("11-epoch-metrics", _wrong(METRICS, 0)), story="the bug itself: .item() per batch",
            planted=True),
    Mistake("11-epoch-metrics", "sync-per-step", "inside the loop",
            _answer("11-epoch-metrics", _solution_with(METRICS, "total_loss += loss_fn(out, y) * len(y)",
                                                       "total_loss += float(loss_fn(out, y)) * len(y)")),
            story="float() per batch, a sync by another name"),
    Mistake("11-epoch-metrics", "wrong-value", "mean of batch means",
            _answer("11-epoch-metrics", "import torch\n\n\ndef epoch_metrics(model, batches, loss_fn):\n"
                    "    losses, correct, count = [], 0, 0\n    with torch.no_grad():\n        for x, y in batches:\n"
                    "            out = model(x)\n            losses.append(loss_fn(out, y))\n"
                    "            correct += (out.argmax(1) == y).sum()\n            count += len(y)\n"
                    "    return torch.stack(losses).mean().item(), (correct / count).item()\n"),
            story="averages the batch losses: the short last batch weighs as much as a full one"),
    Mistake("11-epoch-metrics", "wrong-value", "two numbers",
            _answer("11-epoch-metrics", "import torch\n\n\ndef epoch_metrics(model, batches, loss_fn):\n"
                    "    return 'loss', 'accuracy'\n"), story="returns placeholders"),
    Mistake("11-epoch-metrics", "wrong-value", "the accuracy is in percent",
            _answer("11-epoch-metrics", _solution_with(METRICS, "(correct / count).item()",
                                                       "100 * (correct / count).item()")),
            story="reports the accuracy in percent"),
    Mistake("11-epoch-metrics", "wrong-value", "summed over the samples",
            _answer("11-epoch-metrics", _solution_with(METRICS, "(total_loss / count).item()", "total_loss.item()")),
            story="returns the running sum of the loss, forgetting to divide"),
    # 11-exact-resume
    Mistake("11-exact-resume", "missing-entry", "defines no `load_checkpoint`",
            _answer("11-exact-resume", _solution_with(RESUME, "def load_checkpoint(", "def load(")),
            story="renames the loader"),
    Mistake("11-exact-resume", "missing-optimizer-state", "Adam's moments",
            _planted("11-exact-resume", _wrong(RESUME, 0)),
            story="saves the weights and forgets the optimizer", planted=True),
    Mistake("11-exact-resume", "missing-scheduler-state", "schedule restarts",
            _answer("11-exact-resume", _wrong(RESUME, 1)), story="forgets the scheduler"),
    Mistake("11-exact-resume", "missing-rng-state", "draws other data",
            _answer("11-exact-resume", _wrong(RESUME, 2)), story="forgets the RNG state"),
    Mistake("11-exact-resume", "unsafe-load", "weights_only=False",
            _answer("11-exact-resume", _solution_with(RESUME, "weights_only=True", "weights_only=False")),
            story="loads with weights_only=False, as older tutorials did"),
    Mistake("11-exact-resume", "wrong-epoch", "load_checkpoint returned",
            _answer("11-exact-resume", _solution_with(RESUME, '    return checkpoint["epoch"]\n', "")),
            story="load_checkpoint restores but returns nothing"),
    Mistake("11-exact-resume", "not-weights-only-loadable", "weights_only=True",
            _answer("11-exact-resume", _solution_with(RESUME, '"model": model.state_dict()', '"model": model')),
            story="saves the whole module"),
    Mistake("11-exact-resume", "unsafe-load", "weights_only=False",
            _answer("11-exact-resume", _solution_with(RESUME, '"model": model.state_dict()', '"model": model')
                    .replace("weights_only=True", "weights_only=False").replace(
                        'model.load_state_dict(checkpoint["model"])',
                        'model.load_state_dict(checkpoint["model"].state_dict())')),
            story="saves the whole module and loads with weights_only=False to make it work"),
    Mistake("11-exact-resume", "weights-not-restored", "still has its fresh weights",
            _answer("11-exact-resume", _solution_with(RESUME, '    model.load_state_dict(checkpoint["model"])\n', "")),
            story="restores the optimizer and the scheduler, forgets the model"),
]

CORRECT = [
    *[Correct(task, _answer(task, get_drill(drill).solution), story="the drill's reference solution")
      for task, drill in NOTEBOOK_DRILLS],
    Correct("11-train-step", _answer("11-train-step", _solution_with(
        STEP, "    optimizer.zero_grad(set_to_none=True)\n", "").replace(
        "    optimizer.step()\n", "    optimizer.step()\n    optimizer.zero_grad()\n")), story="zero_grad after step"),
    Correct("11-train-step", _answer("11-train-step", "def train_step(model, batch, loss_fn, optimizer):\n"
                                     "    inputs, targets = batch\n    model.train(mode=True)\n"
                                     "    for p in model.parameters():\n        p.grad = None\n"
                                     "    out = model(inputs)\n    loss = loss_fn(out, targets)\n"
                                     "    loss.backward()\n    optimizer.step()\n    return loss.detach().clone()\n"),
            story="grads set to None by hand, train(mode=True), a detached clone"),
    Correct("11-train-step", _answer("11-train-step", "import torch\n\n\n"
                                     "def train_step(model, batch, loss_fn, optimizer):\n    model.train()\n"
                                     "    model.zero_grad()\n    with torch.enable_grad():\n"
                                     "        loss = loss_fn(model(batch[0]), batch[1])\n"
                                     "    loss.backward()\n    optimizer.step()\n"
                                     "    return loss.detach()\n"),
            story="model.zero_grad(), the batch indexed, enable_grad around the forward"),
    Correct("11-plain-list", _answer("11-plain-list", "from torch import nn\n\n\nclass MLP(nn.Module):\n"
                                     "    def __init__(self, sizes):\n        super().__init__()\n        layers = []\n"
                                     "        for a, b in zip(sizes[:-1], sizes[1:]):\n"
                                     "            layers += [nn.Linear(a, b), nn.ReLU()]\n"
                                     "        self.net = nn.Sequential(*layers[:-1])\n\n"
                                     "    def forward(self, x):\n        return self.net(x)\n"),
            story="one Sequential"),
    Correct("11-why-eval", _answer("11-why-eval", 'answer = "B"'), story="the letter in capitals"),
    Correct("11-why-eval", _answer("11-why-eval", 'answer = "(b)"'), story="the letter as the notebook prints it"),
    Correct("11-why-eval", _answer("11-why-eval", 'answer = "- (b) dropout stops dropping; batch norm uses its '
                                   'running statistics"'), story="the option's whole line, copied from the list"),
    Correct("11-why-eval", _answer("11-why-eval", 'answer = "Dropout stops dropping; batch norm uses its running '
                                   'statistics."'), story="the option's text without its letter"),
    Correct("11-warmup-cosine", _answer("11-warmup-cosine", "import math\n\n\ndef warmup_cosine(step, warmup, total):\n"
                                        "    if step < warmup:\n        return (step + 1) / warmup\n"
                                        "    progress = min(max(step - warmup, 0) / max(total - warmup, 1), 1.0)\n"
                                        "    return (1 + math.cos(math.pi * progress)) / 2\n"), story="rewritten"),
    Correct("11-plain-list", _answer("11-plain-list", "import torch\nfrom torch import nn\n\n\n"
                                     "class MLP(nn.Module):\n    def __init__(self, sizes):\n"
                                     "        super().__init__()\n"
                                     "        self.hidden = nn.ModuleDict({f'fc{i}': nn.Linear(a, b) for i, (a, b) in "
                                     "enumerate(zip(sizes[:-2], sizes[1:-1]))})\n"
                                     "        self.out = nn.Linear(sizes[-2], sizes[-1])\n\n"
                                     "    def forward(self, x):\n        for layer in self.hidden.values():\n"
                                     "            x = torch.relu(layer(x))\n        return self.out(x)\n"),
            story="nn.ModuleDict keyed by name"),
    Correct("11-plain-list", _answer("11-plain-list", "import torch\nfrom torch import nn\n\n\n"
                                     "class MLP(nn.Module):\n    def __init__(self, sizes):\n"
                                     "        super().__init__()\n        self.depth = len(sizes) - 2\n"
                                     "        for i, (a, b) in enumerate(zip(sizes[:-2], sizes[1:-1])):\n"
                                     "            self.add_module(f'hidden{i}', nn.Linear(a, b))\n"
                                     "        self.out = nn.Linear(sizes[-2], sizes[-1])\n\n"
                                     "    def forward(self, x):\n        for i in range(self.depth):\n"
                                     "            x = torch.relu(getattr(self, f'hidden{i}')(x))\n"
                                     "        return self.out(x)\n"),
            story="add_module in a loop, getattr in forward"),
    Correct("11-warmup-cosine", _answer("11-warmup-cosine", "import numpy as np\n\n\n"
                                        "def warmup_cosine(step, warmup, total):\n"
                                        "    if step < warmup:\n        return (step + 1) / warmup\n"
                                        "    p = np.clip((step - warmup) / max(total - warmup, 1), 0.0, 1.0)\n"
                                        "    return float((1 + np.cos(np.pi * p)) / 2)\n"), story="numpy, np.clip"),
    Correct("11-warmup-cosine", _answer("11-warmup-cosine", "import math\n\n\n"
                                        "def warmup_cosine(step, warmup, total):\n"
                                        "    if step > total:\n        return 0.0\n"
                                        "    warm = lambda s: (s + 1) / warmup\n"
                                        "    decay = lambda s: 0.5 * (1 + math.cos(math.pi * (s - warmup) / "
                                        "max(1, total - warmup)))\n"
                                        "    return warm(step) if step < warmup else decay(step)\n"),
            story="an early return after total, two lambdas"),
    Correct("11-amp-step", _answer("11-amp-step", "import torch\n\n\n"
                                   "def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm):\n"
                                   "    model.train(True)\n    optimizer.zero_grad()\n    x, y = batch\n"
                                   "    with torch.amp.autocast('cpu', dtype=torch.bfloat16):\n"
                                   "        out = model(x)\n        loss = loss_fn(out, y)\n"
                                   "    scaler.scale(loss).backward()\n    scaler.unscale_(optimizer)\n"
                                   "    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=max_norm)\n"
                                   "    scaler.step(optimizer)\n    scaler.update()\n    return loss.detach()\n"),
            story="torch.amp.autocast, zero_grad's default, train(True)"),
    Correct("11-amp-step", _answer("11-amp-step", "import torch\nfrom torch import autocast\n"
                                   "from torch.nn.utils import clip_grad_norm_\n\n\n"
                                   "def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm):\n"
                                   "    model.train()\n    params = list(model.parameters())\n"
                                   "    for p in params:\n        p.grad = None\n"
                                   "    with autocast(device_type='cpu', dtype=torch.bfloat16):\n"
                                   "        loss = loss_fn(model(batch[0]), batch[1])\n"
                                   "    scaled = scaler.scale(loss)\n    scaled.backward()\n"
                                   "    scaler.unscale_(optimizer)\n"
                                   "    clip_grad_norm_(params, max_norm, norm_type=2.0)\n"
                                   "    scaler.step(optimizer)\n    scaler.update()\n    return loss.detach()\n"),
            story="grads set to None by hand, names imported, the scaled loss kept in a variable"),
    Correct("11-amp-step", _answer("11-amp-step", _solution_with(AMP, 'torch.autocast("cpu", dtype=torch.bfloat16)',
                                                                 'torch.autocast(device_type="cpu")')),
            story="autocast's CPU default dtype is bfloat16"),
    Correct("11-epoch-metrics", _answer("11-epoch-metrics", "import torch\n\n\n"
                                        "def epoch_metrics(model, batches, loss_fn):\n"
                                        "    with torch.no_grad():\n"
                                        "        outs = [(model(x), y) for x, y in batches]\n"
                                        "        n = sum(len(y) for _, y in outs)\n"
                                        "        loss = sum(loss_fn(o, y) * len(y) for o, y in outs) / n\n"
                                        "        acc = sum((o.argmax(1) == y).sum() for o, y in outs) / n\n"
                                        "    return loss, acc\n"), story="returns one-element tensors"),
    Correct("11-epoch-metrics", _answer("11-epoch-metrics", "import torch\n\n\n"
                                        "def epoch_metrics(model, batches, loss_fn):\n"
                                        "    losses, hits, n = [], [], 0\n    with torch.no_grad():\n"
                                        "        for x, y in batches:\n            out = model(x)\n"
                                        "            losses.append(loss_fn(out, y) * len(y))\n"
                                        "            hits.append((out.argmax(1) == y).sum())\n"
                                        "            n += len(y)\n"
                                        "    totals = torch.stack([torch.stack(losses).sum(), "
                                        "torch.stack(hits).sum().float()])\n"
                                        "    loss, acc = (totals / n).tolist()\n    return loss, acc\n"),
            story="lists of tensors stacked, one .tolist() at the end"),
    Correct("11-epoch-metrics", _answer("11-epoch-metrics", "import torch\n\n\n"
                                        "def epoch_metrics(model, batches, loss_fn):\n"
                                        "    totals, count = torch.zeros(2), 0\n"
                                        "    with torch.inference_mode():\n        for x, y in batches:\n"
                                        "            out = model(x)\n"
                                        "            totals += torch.stack([loss_fn(out, y).mul(len(y)), "
                                        "out.argmax(dim=-1).eq(y).sum().float()])\n"
                                        "            count += y.shape[0]\n"
                                        "    return (totals / count).tolist()\n"),
            story="one running tensor of two sums, returned as a list"),
    Correct("11-exact-resume", _answer("11-exact-resume", "import torch\n\n\n"
                                       "def save_checkpoint(path, model, optimizer, scheduler, epoch):\n"
                                       "    torch.save(dict(model=model.state_dict(), optim=optimizer.state_dict(), "
                                       "sched=scheduler.state_dict(), epoch=epoch, "
                                       "rng_state=torch.random.get_rng_state()), path)\n\n\n"
                                       "def load_checkpoint(path, model, optimizer, scheduler):\n"
                                       "    state = torch.load(path, map_location='cpu', weights_only=True)\n"
                                       "    model.load_state_dict(state['model'])\n"
                                       "    optimizer.load_state_dict(state['optim'])\n"
                                       "    scheduler.load_state_dict(state['sched'])\n"
                                       "    torch.random.set_rng_state(state['rng_state'])\n"
                                       "    return state['epoch']\n"),
            story="dict(...) with other keys, map_location, torch.random's RNG functions"),
    Correct("11-exact-resume", _answer("11-exact-resume", "import os\n\nimport torch\n\n\n"
                                       "def save_checkpoint(path, model, optimizer, scheduler, epoch):\n"
                                       "    state = {'epoch': epoch, 'rng': torch.get_rng_state()}\n"
                                       "    for name, part in (('model', model), ('optimizer', optimizer), "
                                       "('scheduler', scheduler)):\n"
                                       "        state[name] = part.state_dict()\n"
                                       "    tmp = f'{path}.tmp'\n    torch.save(state, tmp)\n"
                                       "    os.replace(tmp, path)\n\n\n"
                                       "def load_checkpoint(path, model, optimizer, scheduler):\n"
                                       "    state = torch.load(path, weights_only=True)\n"
                                       "    for name, part in (('model', model), ('optimizer', optimizer), "
                                       "('scheduler', scheduler)):\n"
                                       "        part.load_state_dict(state[name])\n"
                                       "    torch.set_rng_state(state['rng'])\n    return int(state['epoch'])\n"),
            story="an atomic write (a temporary file, then os.replace), state dicts in a loop"),
    Correct("11-exact-resume", _answer("11-exact-resume", _solution_with(
        RESUME, '"rng": torch.get_rng_state(),', '"rng": torch.random.get_rng_state(), "extra": [1, 2.0, "x"],')),
        story="extra plain values in the checkpoint"),
]


def test_pass_messages_count_syncs_in_the_singular_too(capsys):
    one_sync = _solution_with(METRICS, "return (total_loss / count).item(), (correct / count).item()",
                              "return torch.stack([total_loss / count, correct / count]).tolist()")
    check("11-epoch-metrics", _namespace("11-epoch-metrics", one_sync))
    assert "1 host sync per epoch" in capsys.readouterr().out


def _forged(task_id: str, change) -> bytes:
    """The observation of the reference solution on the drawn case, changed by `change(seen)`, as wire bytes."""
    seen = wire.decode(observe(task_id, (_namespace(task_id, get_drill(dict(NOTEBOOK_DRILLS)[task_id]).solution),),
                               DRAWN_CASE))
    change(seen)
    return wire.encode(seen)


@pytest.mark.parametrize("task_id", [t for t, _ in NOTEBOOK_DRILLS])
def test_judge_never_passes_an_empty_observation(task_id):
    with pytest.raises((CheckFailed, wire.WireError)):
        decide(task_id, wire.encode({"__case__": DRAWN_CASE.digest()}), DRAWN_CASE)


@pytest.mark.parametrize(
    ("task_id", "change", "code"),
    [
        ("11-train-step", lambda seen: seen["steps"].pop(), "step-count"),
        ("11-train-step", lambda seen: seen["steps"][1]["grads"].pop(), None),
        ("11-train-step", lambda seen: seen.update(training=[False] * len(seen["training"])), "not-train-mode"),
        ("11-plain-list", lambda seen: seen["results"][2].update(out=seen["results"][2]["out"].detach() * 1.5),
         "wrong-value"),
        ("11-amp-step", lambda seen: seen.update(loss=seen["loss"] * 1.01), "wrong-value"),
        ("11-amp-step", lambda seen: seen.update(inf_weight=seen["inf_weight"] + 1), "inf-step-applied"),
        ("11-epoch-metrics", lambda seen: seen["results"][0].update(loss=seen["results"][0]["loss"] + 0.1),
         "wrong-value"),
        ("11-exact-resume", lambda seen: seen["params"][0].add_(1e-3), "resume-diverges"),
        ("11-warmup-cosine", lambda seen: seen.update(values=seen["values"][:-1]), None),
    ],
)
def test_judge_recomputes_instead_of_trusting_the_probe(task_id, change, code):
    data = _forged(task_id, change)
    with pytest.raises(Exception) as failure:
        decide(task_id, data, DRAWN_CASE)
    if code is not None:
        assert isinstance(failure.value, CheckFailed) and failure.value.code == code, str(failure.value)
