"""Lesson 11's checks against the drill bank: each reference solution passes, each plausible wrong answer fails
with the code the drill's own check gives it, and the notebook's planted bugs fail with their codes."""

import importlib.util
from pathlib import Path

import pytest

from harness.checks import CheckFailed, check, wire
from harness.checks.core import decide, observe
from harness.checks.lesson11 import NOTEBOOK_DRILLS
from harness.checks.testing import DRAWN_CASE, assert_check_fails, assert_check_passes
from harness.drills import get_drill, run_check

PLANTED_FILE = Path(__file__).resolve().parents[1] / "planted" / "11_interview_drills.py"


def _namespace(task_id: str, source: str) -> dict:
    """What the notebook's test cell passes to check() after running `source` as the solution cell."""
    namespace: dict = {}
    exec(compile(source, f"<{task_id}>", "exec"), namespace)  # noqa: S102 (the drill bank's own answers)
    if get_drill(dict(NOTEBOOK_DRILLS)[task_id]).kind == "explain":
        name = next((n for n in namespace if n.startswith("answer")), "answer")
        return {"answer": namespace.get(name)}
    return namespace


def _drill_code(drill, source: str) -> str:
    """The failure code the drill bank's own check gives `source`."""
    with pytest.raises(CheckFailed) as failure:
        run_check(drill, source)
    return failure.value.code


@pytest.mark.parametrize(("task_id", "drill_id"), NOTEBOOK_DRILLS, ids=[t for t, _ in NOTEBOOK_DRILLS])
def test_reference_solution_passes(task_id, drill_id, capsys):
    assert_check_passes(task_id, _namespace(task_id, get_drill(drill_id).solution), capsys=capsys)


WRONG = [(task, drill, index) for task, drill in NOTEBOOK_DRILLS
         for index in range(len(get_drill(drill).wrong_answers))]


@pytest.mark.parametrize("run", ["visible", "hidden", "drawn"])
@pytest.mark.parametrize(("task_id", "drill_id", "index"), WRONG, ids=[f"{t}-wrong{i}" for t, _, i in WRONG])
def test_wrong_answer_fails_with_the_drills_code(task_id, drill_id, index, run):
    drill = get_drill(drill_id)
    source = drill.wrong_answers[index]
    with pytest.raises(CheckFailed) as failure:
        if run == "drawn":  # a hidden case as the grader draws one
            decide(task_id, observe(task_id, (_namespace(task_id, source),), DRAWN_CASE), DRAWN_CASE)
        else:
            check(task_id, _namespace(task_id, source), hidden=run == "hidden")
    assert failure.value.code == _drill_code(drill, source), str(failure.value)
    assert "Observed:" in str(failure.value) and "Likely cause:" in str(failure.value)


@pytest.mark.parametrize(("task_id", "drill_id"), NOTEBOOK_DRILLS, ids=[t for t, _ in NOTEBOOK_DRILLS])
def test_starter_fails(task_id, drill_id):
    with pytest.raises(CheckFailed):
        check(task_id, _namespace(task_id, get_drill(drill_id).starter))


def test_planted_bugs_fail_with_their_codes():
    spec = importlib.util.spec_from_file_location("planted_11_interview_drills", PLANTED_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for task_id, (source, code) in module.PLANTED.items():
        with pytest.raises(CheckFailed) as failure:
            check(task_id, _namespace(task_id, source))
        assert failure.value.code == code, (task_id, str(failure.value))


@pytest.mark.parametrize("task_id", [t for t, _ in NOTEBOOK_DRILLS if t != "11-why-eval"])
def test_missing_entry_is_named(task_id):
    with pytest.raises(CheckFailed) as failure:
        check(task_id, {})
    assert failure.value.code == "missing-entry" and "defines no" in str(failure.value)


def _solution_with(drill_id: str, old: str, new: str) -> str:
    """The drill's reference solution with `old` replaced by `new` (which must occur)."""
    solution = get_drill(drill_id).solution
    assert old in solution, old
    return solution.replace(old, new)


CORRECT_VARIANTS = [
    ("11-train-step", _solution_with("loop-train-step", "    optimizer.zero_grad(set_to_none=True)\n", "").replace(
        "    optimizer.step()\n", "    optimizer.step()\n    optimizer.zero_grad()\n")),
    ("11-plain-list", "from torch import nn\n\n\nclass MLP(nn.Module):\n    def __init__(self, sizes):\n"
     "        super().__init__()\n        layers = []\n        for a, b in zip(sizes[:-1], sizes[1:]):\n"
     "            layers += [nn.Linear(a, b), nn.ReLU()]\n        self.net = nn.Sequential(*layers[:-1])\n\n"
     "    def forward(self, x):\n        return self.net(x)\n"),
    ("11-warmup-cosine", "import math\n\n\ndef warmup_cosine(step, warmup, total):\n    if step < warmup:\n"
     "        return (step + 1) / warmup\n    progress = min(max(step - warmup, 0) / max(total - warmup, 1), 1.0)\n"
     "    return (1 + math.cos(math.pi * progress)) / 2\n"),
    ("11-amp-step", _solution_with("amp-train-step", 'torch.autocast("cpu", dtype=torch.bfloat16)',
                                   'torch.autocast(device_type="cpu")')),
    ("11-epoch-metrics", "import torch\n\n\ndef epoch_metrics(model, batches, loss_fn):\n    with torch.no_grad():\n"
     "        outs = [(model(x), y) for x, y in batches]\n        n = sum(len(y) for _, y in outs)\n"
     "        loss = sum(loss_fn(o, y) * len(y) for o, y in outs) / n\n"
     "        acc = sum((o.argmax(1) == y).sum() for o, y in outs) / n\n    return loss, acc\n"),
    ("11-exact-resume", _solution_with("checkpointing-exact-resume", '"rng": torch.get_rng_state(),',
                                       '"rng": torch.random.get_rng_state(), "extra": [1, 2.0, "x"],')),
]


@pytest.mark.parametrize(("task_id", "source"), CORRECT_VARIANTS, ids=[t for t, _ in CORRECT_VARIANTS])
def test_other_correct_answers_pass(task_id, source):
    assert_check_passes(task_id, _namespace(task_id, source))


PLANTED_NEW_CODES = [
    ("11-train-step", _solution_with("loop-train-step", "    optimizer.step()\n",
                                     "    optimizer.step()\n    with torch.no_grad():\n"
                                     "        for p in model.parameters():\n            p.mul_(0.9)\n"),
     "update-outside-step", "by hand"),
    ("11-plain-list", _solution_with("modules-plain-list", "x = torch.relu(layer(x))", "x = layer(x)"),
     "wrong-output", "chained with ReLU"),
    ("11-warmup-cosine", _solution_with("schedulers-warmup-cosine", "max(1, total - warmup)", "(total - warmup)"),
     "raised", "total - warmup, which is 0"),
    ("11-amp-step", _solution_with("amp-train-step",
                                   "    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n", ""),
     "wrong-update", "not clipped"),
    ("11-amp-step", _solution_with("amp-train-step", "    scaler.unscale_(optimizer)\n"
                                   "    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n",
                                   "    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n"
                                   "    scaler.unscale_(optimizer)\n"), "wrong-update", "before scaler.unscale_"),
    ("11-epoch-metrics", "import torch\n\n\ndef epoch_metrics(model, batches, loss_fn):\n"
     "    return 'loss', 'accuracy'\n", "wrong-value", "two numbers"),
    ("11-epoch-metrics", get_drill("performance-epoch-metrics").solution.replace(
        "(correct / count).item()", "100 * (correct / count).item()"), "wrong-value", "check the sums"),
    ("11-exact-resume", _solution_with("checkpointing-exact-resume", '    return checkpoint["epoch"]\n', ""),
     "wrong-epoch", "epoch"),
    ("11-exact-resume", _solution_with("checkpointing-exact-resume", '"model": model.state_dict()', '"model": model'),
     "not-weights-only-loadable", "weights_only=True"),
    ("11-exact-resume", _solution_with("checkpointing-exact-resume", '"model": model.state_dict()', '"model": model')
     .replace("weights_only=True", "weights_only=False").replace(
         'model.load_state_dict(checkpoint["model"])', 'model.load_state_dict(checkpoint["model"].state_dict())'),
     "not-weights-only-loadable", "the checkpoint file is not loadable"),
]


@pytest.mark.parametrize(("task_id", "source", "code", "phrase"), PLANTED_NEW_CODES,
                         ids=[f"{t}-{c}" for t, _, c, _ in PLANTED_NEW_CODES])
def test_planted_bug_fails_with_its_code(task_id, source, code, phrase):
    assert_check_fails(task_id, _namespace(task_id, source), code=code, phrase=phrase)


def _forged(task_id: str, change) -> bytes:
    """The observation of the reference solution on the drawn case, changed by `change(seen)`, as wire bytes."""
    seen = wire.decode(observe(task_id, (_namespace(task_id, get_drill(dict(NOTEBOOK_DRILLS)[task_id]).solution),),
                               DRAWN_CASE))
    change(seen)
    return wire.encode(seen)


@pytest.mark.parametrize("task_id", [t for t, _ in NOTEBOOK_DRILLS])
def test_judge_never_passes_an_empty_observation(task_id):
    with pytest.raises(Exception):
        decide(task_id, wire.encode({"__case__": DRAWN_CASE.digest()}), DRAWN_CASE)


@pytest.mark.parametrize(
    ("task_id", "change", "code"),
    [
        ("11-train-step", lambda seen: seen["runs"][1].pop(), "step-count"),
        ("11-train-step", lambda seen: seen["runs"][0][1]["grads"].pop(), None),
        ("11-plain-list", lambda seen: seen["results"][2].update(output=seen["results"][2]["output"].detach() * 1.5),
         "wrong-output"),
        ("11-amp-step", lambda seen: seen.update(params=[p * 1.01 for p in seen["params"]]), "wrong-update"),
        ("11-amp-step", lambda seen: seen.update(inf_weight=seen["inf_weight"] + 1), "inf-step-applied"),
        ("11-epoch-metrics", lambda seen: seen["results"][0].update(loss=seen["results"][0]["loss"] + 0.1),
         "wrong-value"),
        ("11-exact-resume", lambda seen: seen["params"][0].add_(1e-3), "missing-rng-state"),
        ("11-warmup-cosine", lambda seen: seen.update(values=seen["values"][:-1]), None),
    ],
)
def test_judge_recomputes_instead_of_trusting_the_probe(task_id, change, code):
    data = _forged(task_id, change)
    with pytest.raises(Exception) as failure:
        decide(task_id, data, DRAWN_CASE)
    if code is not None:
        assert isinstance(failure.value, CheckFailed) and failure.value.code == code, str(failure.value)
